// foundry::AccumulateGradient on CUDA: the GPU twin of kernels/cpu/accumulate.cc, bit for bit.
//   first microbatch:  g[i] = s * p[i]
//   the others:        g[i] = g[i] + s * p[i]   (reads the gradient storage it writes)
// __fmul_rn / __fadd_rn keep nvcc from fusing the two roundings into one FMA, which the CPU
// kernel does not do either. One thread per element, grid-stride; no atomics.
#include "kernels/cuda/common.cuh"

namespace foundry {
namespace {

__global__ void ScaleKernel(float* g, const float* p, float s, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    g[i] = __fmul_rn(s, p[i]);
}

__global__ void AccumulateKernel(float* g, const float* p, float s, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    g[i] = __fadd_rn(g[i], __fmul_rn(s, p[i]));
}

Status AccumulateGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                                std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  if (partial.dtype() != DType::kFloat32 || grad.dtype() != DType::kFloat32 ||
      partial.numel() != grad.numel())
    return Error(node.Describe() + ": accumulates an f32 partial into an f32 gradient of its size");
  const int64_t n = grad.numel();
  if (n == 0) return Status::Ok();
  const unsigned blocks = cuda::BlocksFor(n);
  if (ctx.base.grad_accumulate)
    AccumulateKernel<<<blocks, cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
        grad.data<float>(), partial.data<float>(), ctx.base.grad_scale, n);
  else
    ScaleKernel<<<blocks, cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
        grad.data<float>(), partial.data<float>(), ctx.base.grad_scale, n);
  FOUNDRY_CUDA_LAUNCHED(node, "AccumulateGradient");
  return Status::Ok();
}

}  // namespace

void RegisterCudaAccumulateKernels(CudaKernelTable& table) {
  table.Add("foundry", "AccumulateGradient", AccumulateGradientKernel);
}

}  // namespace foundry
