// AdamW and SGD on the device (kernels/cuda/optimizer.h): one thread per element, grid-stride,
// the per-element update of optimizer.h. The non-finite flag is a plain store of 1 by any thread
// that produced an Inf or NaN parameter (every writer stores the same value; no atomics).
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optimizer.h"

namespace foundry {
namespace {

__global__ void AdamWKernel(opt::AdamWScalars s, float* param, const float* grad, float* m,
                            float* v, int64_t n, int* nonfinite_flag) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    float p = param[i], mi = m[i], vi = v[i];
    const bool bad = opt::AdamWElement(s, p, grad[i], mi, vi);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (bad && nonfinite_flag) *nonfinite_flag = 1;
  }
}

__global__ void SgdKernel(opt::SgdScalars s, bool first_step, float* param, const float* grad,
                          float* momentum_buf, int64_t n, int* nonfinite_flag) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    float p = param[i];
    const bool bad =
        opt::SgdElement(s, first_step, p, grad[i], s.momentum_on ? momentum_buf + i : nullptr);
    param[i] = p;
    if (bad && nonfinite_flag) *nonfinite_flag = 1;
  }
}

Status Launched(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Error(std::string("launching the cuda ") + what +
                 " update failed: " + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

Status CudaAdamWUpdate(const OptimizerOptions& o, int64_t step, float* param, const float* grad,
                       float* m, float* v, int64_t n, int* nonfinite_flag, void* stream) {
  if (n <= 0) return Status::Ok();
  AdamWKernel<<<cuda::BlocksFor(n), cuda::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      opt::AdamWScalarsFor(o, step), param, grad, m, v, n, nonfinite_flag);
  return Launched("AdamW");
}

Status CudaSgdUpdate(const OptimizerOptions& o, bool first_step, float* param, const float* grad,
                     float* momentum_buf, int64_t n, int* nonfinite_flag, void* stream) {
  if (n <= 0) return Status::Ok();
  if (o.momentum != 0 && !momentum_buf)
    return Error("the cuda SGD update with momentum needs a momentum buffer");
  SgdKernel<<<cuda::BlocksFor(n), cuda::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      opt::SgdScalarsFor(o), first_step, param, grad, momentum_buf, n, nonfinite_flag);
  return Launched("SGD");
}

}  // namespace foundry
