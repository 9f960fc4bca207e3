// Shared by the CUDA kernel family files (nvcc only): checked calls that turn a CUDA / cuBLAS
// failure into an error naming the node, launch geometry, and broadcast indexing.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cuda/kernel.h"

namespace foundry::cuda {

inline cudaStream_t StreamOf(const CudaKernelContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}
inline cublasHandle_t CublasOf(const CudaKernelContext& ctx) {
  return static_cast<cublasHandle_t>(ctx.cublas);
}

// "node 'x' (MatMul): cudaMemcpyAsync failed: invalid argument"
inline Status CudaError(const Node& node, const char* call, cudaError_t err) {
  return Error(node.Describe() + ": " + call + " failed: " + cudaGetErrorString(err));
}
const char* CublasStatusName(cublasStatus_t s);
inline Status CublasError(const Node& node, const char* call, cublasStatus_t s) {
  return Error(node.Describe() + ": " + call + " failed: " + CublasStatusName(s));
}

// Checks a CUDA runtime call inside a kernel function that has `node` in scope.
#define FOUNDRY_CUDA_CHECK(node, expr)                                                             \
  do {                                                                                             \
    cudaError_t foundry_err_ = (expr);                                                             \
    if (foundry_err_ != cudaSuccess) return ::foundry::cuda::CudaError(node, #expr, foundry_err_); \
  } while (0)
#define FOUNDRY_CUBLAS_CHECK(node, expr)                             \
  do {                                                               \
    cublasStatus_t foundry_st_ = (expr);                             \
    if (foundry_st_ != CUBLAS_STATUS_SUCCESS)                        \
      return ::foundry::cuda::CublasError(node, #expr, foundry_st_); \
  } while (0)
// After a <<<...>>> launch: a launch error (bad geometry, no kernel image for this GPU) names the
// node and the kernel.
#define FOUNDRY_CUDA_LAUNCHED(node, kernel_name)                                       \
  do {                                                                                 \
    cudaError_t foundry_err_ = cudaGetLastError();                                     \
    if (foundry_err_ != cudaSuccess)                                                   \
      return ::foundry::cuda::CudaError(node, "launching " kernel_name, foundry_err_); \
  } while (0)

inline constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned BlocksFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return static_cast<unsigned>(b);
}

// Broadcasting (numpy rules) of an operand to an output shape of rank <= kMaxRank: the operand's
// element strides per output dimension (0 where it broadcasts). Passed to kernels by value.
inline constexpr int kMaxRank = 8;
struct Strides {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
};
// An error (naming the node) when the output rank exceeds kMaxRank or the shapes do not broadcast.
StatusOr<Strides> BroadcastStrides(const Node& node, const Shape& in, const Shape& out);

__host__ __device__ inline int64_t BroadcastOffset(const Strides& s, int64_t out_index) {
  int64_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    int64_t dim = s.out_dims[d];
    int64_t i = out_index % dim;
    out_index /= dim;
    off += i * s.in_strides[d];
  }
  return off;
}

}  // namespace foundry::cuda
