#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/train_step.h"

namespace foundry::cuda {
namespace {

__global__ void FlagNonFiniteKernel(const float* data, int64_t n, int* flag) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    if (!isfinite(data[i])) *flag = 1;  // every writer stores the same value: no race on the result
}

}  // namespace

Status FlagNonFinite(const float* data, int64_t n, int* flag, void* stream, const char* what) {
  if (n <= 0) return Status::Ok();
  FlagNonFiniteKernel<<<BlocksFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(data, n,
                                                                                        flag);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Error(std::string("finite check of '") + what + "': " + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace foundry::cuda
