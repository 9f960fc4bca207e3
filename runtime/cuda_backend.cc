#include "runtime/cuda_backend.h"

#include "kernels/cpu/kernel.h"
#include "kernels/cuda/device.h"
#include "runtime/messages.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

std::vector<BackendSpec> CompiledBackendSpecs() {
  std::vector<BackendSpec> specs = {{"cpu", CpuWorkspaceBytes}};
#ifdef FOUNDRY_HAVE_CUDA
  specs.push_back({"cuda", CudaWorkspaceBytes});
#endif
  return specs;
}

#ifdef FOUNDRY_HAVE_CUDA

CudaBackend::~CudaBackend() {
  cuda::StreamAndBlas s{stream_, cublas_};
  cuda::DestroyStreamAndBlas(s);
}

int64_t CudaBackend::WorkspaceBytes(const Graph& graph, const Node& node) const {
  return CudaWorkspaceBytes(graph, node);
}

Status CudaBackend::Run(const Node& node, std::span<const Tensor* const> inputs,
                        std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                        const KernelContext& ctx) {
  CudaKernelContext c;
  c.base = ctx;
  c.base.workspace = workspace;
  c.stream = stream_;
  c.cublas = cublas_;
  c.tf32 = tf32_;
  return RunCudaKernel(node, inputs, outputs, c);
}

namespace {

Status CheckCopy(const Tensor& from, const Tensor& to, const char* direction) {
  if (from.dtype() != to.dtype() || from.shape() != to.shape())
    return Error(std::string("cuda backend: cannot copy ") + direction + " " +
                 TypeOf(from.dtype(), from.shape()) + " into " + TypeOf(to.dtype(), to.shape()));
  return Status::Ok();
}

}  // namespace

Status CudaBackend::CopyIn(const Tensor& host, Tensor& device) {
  RETURN_IF_ERROR(CheckCopy(host, device, "in"));
  return cuda::CopyToDevice(device.raw(), host.raw(), static_cast<int64_t>(host.nbytes()), stream_,
                            "cuda backend: copy to the device");
}

Status CudaBackend::CopyOut(const Tensor& device, Tensor& host) {
  RETURN_IF_ERROR(CheckCopy(device, host, "out"));
  return cuda::CopyToHost(host.raw(), device.raw(), static_cast<int64_t>(device.nbytes()), stream_,
                          "cuda backend: copy from the device");
}

MemorySnapshot CudaBackend::Bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void CudaBackend::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& b : bytes_.by_class) b.peak = b.live;
  bytes_.total.peak = bytes_.total.live;
}

void CudaBackend::Count(MemoryClass c, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryBytes& b = bytes_.by_class[c];
  b.live += delta;
  if (b.live > b.peak) b.peak = b.live;
  bytes_.total.live += delta;
  if (bytes_.total.live > bytes_.total.peak) bytes_.total.peak = bytes_.total.live;
}

std::byte* CudaBackend::AllocateBytes(int64_t bytes, MemoryClass c) {
  void* p = nullptr;
  // cudaMalloc returns 256-byte aligned memory (kArenaAlignment). A zero-byte region still gets a
  // distinct pointer, as on the CPU.
  if (!cuda::DeviceAlloc(bytes > 0 ? bytes : 1, &p, "cuda backend").ok()) return nullptr;
  Count(c, bytes);
  return static_cast<std::byte*>(p);
}

void CudaBackend::FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) {
  cuda::DeviceFree(p);
  Count(c, -bytes);
}

StatusOr<CudaBackend*> GetCudaBackend() {
  static std::mutex mu;
  static CudaBackend* backend = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (backend) return backend;
  if (CudaDeviceCount() == 0)
    return Error("--device cuda: no CUDA device found (" + CudaDeviceDescription(0) +
                 "); use --device cpu");
  ASSIGN_OR_RETURN(cuda::StreamAndBlas sb, cuda::CreateStreamAndBlas());
  backend = new CudaBackend();
  backend->stream_ = sb.stream;
  backend->cublas_ = sb.cublas;
  return backend;
}

#else  // !FOUNDRY_HAVE_CUDA

// Never constructed in this build (GetCudaBackend refuses); defined so the class is complete: the
// sanitizer build's vptr checks reference its type information.
namespace {
Status NotBuilt() { return Error("the CUDA backend is not built"); }
}  // namespace
CudaBackend::~CudaBackend() = default;
int64_t CudaBackend::WorkspaceBytes(const Graph&, const Node&) const { return 0; }
Status CudaBackend::Run(const Node&, std::span<const Tensor* const>, std::span<Tensor* const>,
                        std::span<std::byte>, const KernelContext&) {
  return NotBuilt();
}
Status CudaBackend::CopyIn(const Tensor&, Tensor&) { return NotBuilt(); }
Status CudaBackend::CopyOut(const Tensor&, Tensor&) { return NotBuilt(); }
MemorySnapshot CudaBackend::Bytes() const { return bytes_; }
void CudaBackend::ResetPeaks() {}
std::byte* CudaBackend::AllocateBytes(int64_t, MemoryClass) { return nullptr; }
void CudaBackend::FreeBytes(std::byte*, int64_t, MemoryClass) {}

StatusOr<CudaBackend*> GetCudaBackend() {
  return Error(
      "--device cuda: this foundry was built without the CUDA backend (no nvcc at configure "
      "time); use --device cpu");
}

#endif

}  // namespace foundry
