#include "runtime/cuda_backend.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/kernel.h"
#include "kernels/cuda/device.h"
#include "runtime/messages.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/grad_norm.h"
#include "kernels/cuda/kernel.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/train_step.h"
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

bool CudaSyncRequested(const char* value) { return value && std::strcmp(value, "1") == 0; }

Status CudaNodeFault(const Node& node, const Status& cuda_error) {
  return cuda_error.Prepend("cuda: node '" + node.name + "' (" + node.op_type + "): ");
}

#ifdef FOUNDRY_HAVE_CUDA

namespace {

// The step status's words (cuda_backend.h): the loss bits, the gradients' flag, the update flags.
constexpr int64_t kStatusHead = 2;

Status CheckDeviceCopy(const Tensor& from, const Tensor& to, const char* direction) {
  if (from.dtype() != to.dtype() || from.shape() != to.shape())
    return Error(std::string("cuda backend: cannot copy ") + direction +
                 TypeOf(from.dtype(), from.shape()) + " into " + TypeOf(to.dtype(), to.shape()));
  return Status::Ok();
}

Status CheckStatusWords(const Region& status, int64_t words) {
  if (status.bytes() < 4 * words)
    return Error("cuda backend: the step status holds " + std::to_string(status.bytes()) +
                 " bytes, the step needs " + std::to_string(4 * words) +
                 "; allocate it with AllocateStepStatus for this many parameters");
  return Status::Ok();
}

}  // namespace

CudaBackend::~CudaBackend() {
  cuda::StreamAndBlas s{stream_, cublas_};
  cuda::DestroyStreamAndBlas(s);
}

int64_t CudaBackend::WorkspaceBytes(const Graph& graph, const Node& node) const {
  return CudaWorkspaceBytes(graph, node);
}

std::vector<std::string> CudaBackend::MissingKernels(const Graph& graph) const {
  return MissingCudaKernels(graph);
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
  RETURN_IF_ERROR(RunCudaKernel(node, inputs, outputs, c));
  if (!sync_) return Status::Ok();
  Status st = cuda::Synchronize(stream_, "");
  return st.ok() ? st : CudaNodeFault(node, st);
}

Status CudaBackend::CopyIn(const Tensor& host, Tensor& device) {
  RETURN_IF_ERROR(CheckDeviceCopy(host, device, "in "));
  return cuda::CopyToDevice(device.raw(), host.raw(), static_cast<int64_t>(host.nbytes()), stream_,
                            "cuda backend: copy to the device");
}

Status CudaBackend::CopyOut(const Tensor& device, Tensor& host) {
  RETURN_IF_ERROR(CheckDeviceCopy(device, host, "out "));
  return cuda::CopyToHost(host.raw(), device.raw(), static_cast<int64_t>(device.nbytes()), stream_,
                          "cuda backend: copy from the device");
}

Status CudaBackend::Copy(const Tensor& from, Tensor& to) {
  RETURN_IF_ERROR(CheckDeviceCopy(from, to, ""));
  return cuda::DeviceCopy(to.raw(), from.raw(), static_cast<int64_t>(from.nbytes()), stream_,
                          "cuda backend: copy on the device");
}

Status CudaBackend::Zero(Tensor& device) {
  return cuda::DeviceMemset(device.raw(), 0, static_cast<int64_t>(device.nbytes()), stream_,
                            "cuda backend: zeroing device memory");
}

StatusOr<Region> CudaBackend::AllocateStepStatus(int64_t num_parameters) {
  return Allocate(4 * (kStatusHead + num_parameters), MemoryClass::kOther, "the step status");
}

StatusOr<StepCheck> CudaBackend::CheckStep(const Tensor& loss,
                                           std::span<const Tensor* const> gradients,
                                           Region& status) {
  if (loss.dtype() != DType::kFloat32 || loss.numel() != 1)
    return Error("cuda backend: the loss is " + TypeOf(loss.dtype(), loss.shape()) +
                 "; the cuda trainer reads an f32 scalar");
  RETURN_IF_ERROR(CheckStatusWords(status, kStatusHead));
  int* words = reinterpret_cast<int*>(status.data());
  Tensor head = Tensor::View(DType::kInt32, {kStatusHead}, words);
  RETURN_IF_ERROR(Zero(head));
  Tensor loss_bits = Tensor::View(DType::kFloat32, loss.shape(), words);
  RETURN_IF_ERROR(Copy(loss, loss_bits));
  RETURN_IF_ERROR(cuda::FlagNonFinite(loss.data<float>(), 1, words + 1, stream_, "the loss"));
  for (const Tensor* g : gradients) {
    if (g->dtype() != DType::kFloat32)
      return Error("cuda backend: a gradient is " + TypeOf(g->dtype(), g->shape()) +
                   "; the trainer updates f32 parameters only");
    RETURN_IF_ERROR(
        cuda::FlagNonFinite(g->data<float>(), g->numel(), words + 1, stream_, "a gradient"));
  }
  // The one read-back of the step before the update: the loss bits and the flag together.
  int host[kStatusHead] = {0, 0};
  RETURN_IF_ERROR(cuda::CopyToHost(host, words, sizeof host, stream_, "the loss"));
  StepCheck c;
  std::memcpy(&c.loss, &host[0], 4);
  c.finite = host[1] == 0;
  return c;
}

StatusOr<std::optional<size_t>> CudaBackend::ApplyOptimizer(
    const OptimizerOptions& o, int64_t step, std::span<const ParameterUpdate> updates,
    Region& status) {
  const auto n = static_cast<int64_t>(updates.size());
  RETURN_IF_ERROR(CheckStatusWords(status, kStatusHead + n));
  int* flags = reinterpret_cast<int*>(status.data()) + kStatusHead;
  Tensor flag_words = Tensor::View(DType::kInt32, {n}, flags);
  RETURN_IF_ERROR(Zero(flag_words));
  for (int64_t i = 0; i < n; ++i) {
    const ParameterUpdate& u = updates[static_cast<size_t>(i)];
    float* param = u.param->data<float>();
    const float* grad = u.grad->data<float>();
    if (IsAdam(o.kind)) {
      RETURN_IF_ERROR(CudaAdamWUpdate(o, step, param, grad, u.m->data<float>(), u.v->data<float>(),
                                      u.param->numel(), flags + i, stream_));
    } else {
      float* buf = o.momentum != 0 ? u.m->data<float>() : nullptr;
      RETURN_IF_ERROR(
          CudaSgdUpdate(o, step == 1, param, grad, buf, u.param->numel(), flags + i, stream_));
    }
  }
  // The end of the step: the updates have run when the flags are back.
  std::vector<int> host(updates.size(), 0);
  RETURN_IF_ERROR(cuda::CopyToHost(host.data(), flags, 4 * n, stream_, "the optimizer flags"));
  for (size_t i = 0; i < host.size(); ++i)
    if (host[i]) return std::optional<size_t>(i);
  return std::optional<size_t>();
}

StatusOr<Region> CudaBackend::AllocateGradNormScratch(std::span<const Tensor* const> gradients) {
  std::vector<int64_t> sizes;
  for (const Tensor* g : gradients) sizes.push_back(g->numel());
  return Allocate(CudaGradNormScratchBytes(sizes), MemoryClass::kOther,
                  "the gradient norm scratch");
}

StatusOr<float> CudaBackend::ClipGradNorm(std::span<Tensor* const> gradients, double max_norm,
                                          Region& scratch) {
  std::vector<float*> grads;
  std::vector<int64_t> sizes;
  for (Tensor* g : gradients) {
    if (g->dtype() != DType::kFloat32)
      return Error("cuda backend: a gradient is " + TypeOf(g->dtype(), g->shape()) +
                   "; the gradient norm reads f32 gradients only");
    grads.push_back(g->data<float>());
    sizes.push_back(g->numel());
  }
  ASSIGN_OR_RETURN(const float* norm,
                   CudaGradNorm(grads, sizes, max_norm, scratch.data(), scratch.bytes(), stream_));
  float host = 0;
  RETURN_IF_ERROR(cuda::CopyToHost(&host, norm, sizeof host, stream_, "the gradient norm"));
  return host;
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

StatusOr<std::byte*> CudaBackend::AllocateBytes(int64_t bytes, MemoryClass c) {
  void* p = nullptr;
  // cudaMalloc returns 256-byte aligned memory (kArenaAlignment). A zero-byte region still gets a
  // distinct pointer, as on the CPU. The zero-fill is on the work stream, before any use.
  RETURN_IF_ERROR(cuda::DeviceAlloc(bytes > 0 ? bytes : 1, &p, stream_, ""));
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
  backend->sync_ = CudaSyncRequested(std::getenv("FOUNDRY_CUDA_SYNC"));
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
std::vector<std::string> CudaBackend::MissingKernels(const Graph&) const { return {}; }
Status CudaBackend::Run(const Node&, std::span<const Tensor* const>, std::span<Tensor* const>,
                        std::span<std::byte>, const KernelContext&) {
  return NotBuilt();
}
Status CudaBackend::CopyIn(const Tensor&, Tensor&) { return NotBuilt(); }
Status CudaBackend::CopyOut(const Tensor&, Tensor&) { return NotBuilt(); }
Status CudaBackend::Copy(const Tensor&, Tensor&) { return NotBuilt(); }
Status CudaBackend::Zero(Tensor&) { return NotBuilt(); }
StatusOr<Region> CudaBackend::AllocateStepStatus(int64_t) { return NotBuilt(); }
StatusOr<StepCheck> CudaBackend::CheckStep(const Tensor&, std::span<const Tensor* const>, Region&) {
  return NotBuilt();
}
StatusOr<std::optional<size_t>> CudaBackend::ApplyOptimizer(const OptimizerOptions&, int64_t,
                                                            std::span<const ParameterUpdate>,
                                                            Region&) {
  return NotBuilt();
}
StatusOr<Region> CudaBackend::AllocateGradNormScratch(std::span<const Tensor* const>) {
  return NotBuilt();
}
StatusOr<float> CudaBackend::ClipGradNorm(std::span<Tensor* const>, double, Region&) {
  return NotBuilt();
}
MemorySnapshot CudaBackend::Bytes() const { return bytes_; }
void CudaBackend::ResetPeaks() {}
StatusOr<std::byte*> CudaBackend::AllocateBytes(int64_t, MemoryClass) { return NotBuilt(); }
void CudaBackend::FreeBytes(std::byte*, int64_t, MemoryClass) {}

StatusOr<CudaBackend*> GetCudaBackend() {
  return Error(
      "--device cuda: this foundry was built without the CUDA backend (no nvcc at configure "
      "time); use --device cpu");
}

#endif

}  // namespace foundry
