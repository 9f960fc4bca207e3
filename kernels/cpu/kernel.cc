#include "kernels/cpu/kernel.h"

#include "compiler/op_schema.h"

namespace foundry {

void CpuKernelTable::Add(std::string_view domain, std::string_view op_type, CpuKernelFn fn) {
  rows_.push_back(Row{CanonicalDomain(domain), std::string(op_type), fn});
}

CpuKernelFn CpuKernelTable::Find(std::string_view domain, std::string_view op_type) const {
  std::string d = CanonicalDomain(domain);
  for (const auto& row : rows_)
    if (row.op_type == op_type && row.domain == d) return row.fn;
  return nullptr;
}

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
  CpuKernelFn fn = CpuKernels().Find(node.domain, node.op_type);
  if (!fn)
    return Error(node.Describe() + ": the cpu backend has no kernel for " + node.op_type);
  return fn(node, inputs, outputs, ctx);
}

}  // namespace foundry
