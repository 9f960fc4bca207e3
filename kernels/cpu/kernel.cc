#include "kernels/cpu/kernel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

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

namespace {
std::atomic<bool> poison_outputs{false};
}  // namespace

void SetPoisonKernelOutputs(bool on) { poison_outputs = on; }
bool PoisonKernelOutputs() { return poison_outputs; }

void FillPoison(Tensor& t) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32:
      std::fill_n(t.data<float>(), n, std::numeric_limits<float>::quiet_NaN());
      return;
    case DType::kFloat64:
      std::fill_n(t.data<double>(), n, std::numeric_limits<double>::quiet_NaN());
      return;
    case DType::kFloat16:
      std::fill_n(t.data<uint16_t>(), n, uint16_t{0x7E00});  // quiet NaN
      return;
    case DType::kBFloat16:
      std::fill_n(t.data<uint16_t>(), n, uint16_t{0x7FC0});  // quiet NaN
      return;
    default:
      if (t.nbytes()) std::memset(t.raw(), 0xA5, t.nbytes());
  }
}

Status RunCpuKernel(const Node& node, std::span<const Tensor* const> inputs,
                    std::span<Tensor* const> outputs, const KernelContext& ctx) {
  const CpuKernelFn* fn = CpuKernels().Find(node.domain, node.op_type);
  if (!fn) return Error(node.Describe() + ": the cpu backend has no kernel for " + node.op_type);
  if (PoisonKernelOutputs())
    for (Tensor* t : outputs)
      if (t) FillPoison(*t);
  return (*fn)(node, inputs, outputs, ctx);
}

}  // namespace foundry

namespace foundry {

// No CPU kernel takes scratch from the workspace yet; the kernels that keep heap scratch move to
// it op by op (issue 9), each declaring its figure here.
int64_t CpuWorkspaceBytes(const Graph&, const Node&) { return 0; }

}  // namespace foundry
