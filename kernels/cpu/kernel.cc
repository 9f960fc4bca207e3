#include "kernels/cpu/kernel.h"

#include "compiler/op_schema.h"

namespace foundry {

const CpuKernelTable& CpuKernels() {
  static const CpuKernelTable table = [] {
    CpuKernelTable t;
    RegisterElementwiseKernels(t);
    RegisterShapeOpKernels(t);
    RegisterMathKernels(t);
    return t;
  }();
  return table;
}

Status RunCpuKernel(const Node& node, std::span<const Tensor* const> inputs,
                    std::span<Tensor* const> outputs, const KernelContext& ctx) {
  const CpuKernelFn* fn = CpuKernels().Find(node.domain, node.op_type);
  if (!fn) return Error(node.Describe() + ": the cpu backend has no kernel for " + node.op_type);
  return (*fn)(node, inputs, outputs, ctx);
}

}  // namespace foundry
