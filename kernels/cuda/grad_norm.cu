// CudaGradNorm (kernels/cuda/grad_norm.h). Every rounding is spelled (__dadd_rn, __fmul_rn, ...):
// nvcc would otherwise contract a * b + c, which the CPU side (-ffp-contract=off) never does.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cpu/grad_norm.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grad_norm.h"

namespace foundry {
namespace {

static_assert(kNormLanes == 256, "the block kernels run one thread per lane");

// The tree of kernels/cpu/grad_norm.cc's TreeSum over the block's lanes, in shared memory.
__device__ double TreeSum(double* lanes) {
  const int l = threadIdx.x;
  __syncthreads();
  for (int s = kNormLanes / 2; s >= 1; s /= 2) {
    if (l < s) lanes[l] = __dadd_rn(lanes[l], lanes[l + s]);
    __syncthreads();
  }
  return lanes[0];
}

// Stage 1: block b of x[0, n) -> partials[b].
__global__ void BlockSumsKernel(const float* x, int64_t n, double* partials) {
  __shared__ double lanes[kNormLanes];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kNormBlock;
  double acc = 0.0;
  for (int64_t j = 0; j < kNormBlock; j += kNormLanes) {
    const int64_t i = begin + j + threadIdx.x;
    if (i < n) {
      const double v = x[i];
      acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
  }
  lanes[threadIdx.x] = acc;
  const double sum = TreeSum(lanes);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Stage 2: partials[0, blocks) -> *sum.
__global__ void PartialsSumKernel(const double* partials, int64_t blocks, double* sum) {
  __shared__ double lanes[kNormLanes];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < blocks; i += kNormLanes) acc = __dadd_rn(acc, partials[i]);
  lanes[threadIdx.x] = acc;
  const double total = TreeSum(lanes);
  if (threadIdx.x == 0) *sum = total;
}

// Stage 3: ClipScalarsFromSums on one thread. out[0] = total norm, out[1] = clip coefficient.
__global__ void ClipScalarsKernel(const double* sums, int64_t tensors, double max_norm,
                                  float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < tensors; ++i) {
    const double norm = __double2float_rn(__dsqrt_rn(sums[i]));
    sum = __dadd_rn(sum, __dmul_rn(norm, norm));
  }
  const float total = __double2float_rn(__dsqrt_rn(sum));
  float coef = 1.0f;
  if (max_norm > 0) {
    const float shifted = __fadd_rn(total, static_cast<float>(1e-6));
    coef = __fmul_rn(__fdiv_rn(1.0f, shifted), static_cast<float>(max_norm));
    coef = coef > 1.0f ? 1.0f : coef;
  }
  out[0] = total;
  out[1] = coef;
}

// Stage 4: g *= *coef (f32), nothing when it is 1 (the same bits).
__global__ void ScaleKernel(float* g, int64_t n, const float* coef) {
  const float c = *coef;
  if (c == 1.0f) return;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    g[i] = __fmul_rn(g[i], c);
}

Status Launched(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Error(std::string("launching the cuda gradient norm (") + what +
                 ") failed: " + cudaGetErrorString(err));
  return Status::Ok();
}

// Scratch layout: [partials of every tensor, in order][one sum per tensor] (doubles), then the
// two floats of stage 3.
int64_t PartialCount(std::span<const int64_t> sizes) {
  int64_t blocks = 0;
  for (int64_t n : sizes) blocks += NormBlocks(n);
  return blocks;
}

}  // namespace

int64_t CudaGradNormScratchBytes(std::span<const int64_t> sizes) {
  return 8 * (PartialCount(sizes) + static_cast<int64_t>(sizes.size())) + 8;
}

StatusOr<const float*> CudaGradNorm(std::span<float* const> grads, std::span<const int64_t> sizes,
                                    double max_norm, void* scratch, int64_t scratch_bytes,
                                    void* stream_ptr) {
  if (grads.size() != sizes.size())
    return Error("cuda gradient norm: " + std::to_string(grads.size()) + " gradients but " +
                 std::to_string(sizes.size()) + " sizes");
  if (scratch_bytes < CudaGradNormScratchBytes(sizes))
    return Error("cuda gradient norm: the scratch holds " + std::to_string(scratch_bytes) +
                 " bytes, the gradients need " + std::to_string(CudaGradNormScratchBytes(sizes)));
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  double* partials = static_cast<double*>(scratch);
  const int64_t tensors = static_cast<int64_t>(sizes.size());
  double* sums = partials + PartialCount(sizes);
  float* out = reinterpret_cast<float*>(sums + tensors);
  double* p = partials;
  for (int64_t i = 0; i < tensors; ++i) {
    const int64_t n = sizes[static_cast<size_t>(i)];
    const int64_t blocks = NormBlocks(n);
    if (blocks > 0) {
      BlockSumsKernel<<<static_cast<unsigned>(blocks), kNormLanes, 0, stream>>>(
          grads[static_cast<size_t>(i)], n, p);
      RETURN_IF_ERROR(Launched("block sums"));
    }
    PartialsSumKernel<<<1, kNormLanes, 0, stream>>>(p, blocks, sums + i);
    RETURN_IF_ERROR(Launched("partial sums"));
    p += blocks;
  }
  ClipScalarsKernel<<<1, 1, 0, stream>>>(sums, tensors, max_norm, out);
  RETURN_IF_ERROR(Launched("clip coefficient"));
  if (max_norm > 0)
    for (int64_t i = 0; i < tensors; ++i) {
      const int64_t n = sizes[static_cast<size_t>(i)];
      if (n <= 0) continue;
      ScaleKernel<<<cuda::BlocksFor(n), cuda::kThreads, 0, stream>>>(grads[static_cast<size_t>(i)],
                                                                     n, out + 1);
      RETURN_IF_ERROR(Launched("scale"));
    }
  return static_cast<const float*>(out);
}

}  // namespace foundry
