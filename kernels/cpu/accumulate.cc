// foundry::AccumulateGradient on the CPU (compiler/ops/accumulate.cc): one microbatch's gradient
// added into the step's gradient storage, scaled by its share of the step's loss tokens.
//   first microbatch:  g[i] = s * p[i]          (`=`: the storage's old bits are never read)
//   the others:        g[i] = g[i] + s * p[i]   (`+=` into the output: the one kernel that does)
// Two roundings per element, product then sum, never fused (no FMA: the build contracts nothing),
// so the CUDA kernel (kernels/cuda/accumulate.cu: __fmul_rn, __fadd_rn) gives the same bits.
// Elementwise: chunks by kElementGrain, so the bits do not depend on the thread count.
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"

namespace foundry {

namespace {

Status AccumulateGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                                std::span<Tensor* const> outputs, const KernelContext& ctx) {
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  if (partial.dtype() != DType::kFloat32 || grad.dtype() != DType::kFloat32 ||
      partial.numel() != grad.numel())
    return Error(node.Describe() + ": accumulates an f32 partial into an f32 gradient of its size");
  const float* p = partial.data<float>();
  float* g = grad.data<float>();
  const float s = ctx.grad_scale;
  if (ctx.grad_accumulate)
    ParallelFor(grad.numel(), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float scaled = s * p[i];
        g[i] = g[i] + scaled;
      }
    });
  else
    ParallelFor(grad.numel(), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) g[i] = s * p[i];
    });
  return Status::Ok();
}

}  // namespace

void RegisterAccumulateKernels(CpuKernelTable& table) {
  table.Add("foundry", "AccumulateGradient", AccumulateGradientKernel);
}

}  // namespace foundry
