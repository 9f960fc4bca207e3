#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/device.h"

namespace foundry {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string CudaDeviceDescription(int index) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

namespace cuda {
namespace {

Status Check(cudaError_t err, const char* call, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Error((what.empty() ? "" : what + ": ") + call + " failed: " + cudaGetErrorString(err));
}

Status CheckBlas(cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Error(std::string("the cuda backend: ") + call + " failed (status " +
               std::to_string(static_cast<int>(st)) + ")");
}

}  // namespace

Status DeviceAlloc(int64_t bytes, void** out, void* stream, const std::string& what) {
  *out = nullptr;
  if (bytes <= 0) return Status::Ok();
  RETURN_IF_ERROR(Check(cudaMalloc(out, static_cast<size_t>(bytes)), "cudaMalloc", what));
  // On the work stream, not the legacy default one: a non-blocking stream is not ordered after
  // the default stream, so a plain cudaMemset could land after the first writes.
  Status s =
      Check(cudaMemsetAsync(*out, 0, static_cast<size_t>(bytes), static_cast<cudaStream_t>(stream)),
            "cudaMemsetAsync", what);
  if (!s.ok()) {
    cudaFree(*out);
    *out = nullptr;
  }
  return s;
}

void DeviceFree(void* p) {
  if (p) cudaFree(p);
}

Status DeviceMemset(void* p, int value, int64_t bytes, void* stream, const std::string& what) {
  if (bytes <= 0) return Status::Ok();
  return Check(
      cudaMemsetAsync(p, value, static_cast<size_t>(bytes), static_cast<cudaStream_t>(stream)),
      "cudaMemsetAsync", what);
}

namespace {
Status Copy(void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind, void* stream,
            const std::string& what) {
  if (bytes <= 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  RETURN_IF_ERROR(Check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, s),
                        "cudaMemcpyAsync", what));
  return Check(cudaStreamSynchronize(s), "cudaStreamSynchronize", what);
}
}  // namespace

Status CopyToDevice(void* dst, const void* src, int64_t bytes, void* stream,
                    const std::string& what) {
  return Copy(dst, src, bytes, cudaMemcpyHostToDevice, stream, what);
}
Status CopyToHost(void* dst, const void* src, int64_t bytes, void* stream,
                  const std::string& what) {
  return Copy(dst, src, bytes, cudaMemcpyDeviceToHost, stream, what);
}
Status DeviceCopy(void* dst, const void* src, int64_t bytes, void* stream,
                  const std::string& what) {
  if (bytes <= 0) return Status::Ok();
  return Check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                               static_cast<cudaStream_t>(stream)),
               "cudaMemcpyAsync", what);
}
Status Synchronize(void* stream, const std::string& what) {
  return Check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize",
               what);
}

StatusOr<StreamAndBlas> CreateStreamAndBlas() {
  StreamAndBlas r;
  cudaStream_t s = nullptr;
  RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate",
                        "the cuda backend"));
  cublasHandle_t h = nullptr;
  auto bind = [&]() -> Status {
    RETURN_IF_ERROR(CheckBlas(cublasCreate(&h), "cublasCreate"));
    RETURN_IF_ERROR(CheckBlas(cublasSetStream(h, s), "cublasSetStream"));
    // Exact fp32 by default: no TF32 unless a kernel asks for it per call (--tf32).
    return CheckBlas(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  };
  if (Status st = bind(); !st.ok()) {
    if (h) cublasDestroy(h);
    cudaStreamDestroy(s);
    return st;
  }
  r.stream = s;
  r.cublas = h;
  return r;
}

void DestroyStreamAndBlas(StreamAndBlas& s) {
  if (s.cublas) cublasDestroy(static_cast<cublasHandle_t>(s.cublas));
  if (s.stream) cudaStreamDestroy(static_cast<cudaStream_t>(s.stream));
  s = {};
}

Status DeviceMemory(int64_t* free_bytes, int64_t* total_bytes) {
  size_t f = 0, t = 0;
  RETURN_IF_ERROR(Check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo", "the cuda backend"));
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
  return Status::Ok();
}

}  // namespace cuda
}  // namespace foundry
