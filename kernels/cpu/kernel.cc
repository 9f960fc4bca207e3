#include "kernels/cpu/kernel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {

const CpuKernelTable& CpuKernels() {
  static const CpuKernelTable table = [] {
    CpuKernelTable t;
    RegisterElementwiseKernels(t);
    RegisterShapeOpKernels(t);
    RegisterMathKernels(t);
    RegisterAttentionKernels(t);
    return t;
  }();
  return table;
}

namespace {
std::atomic<bool> poison_outputs{false};
std::atomic<int> cpu_threads{1};
}  // namespace

void SetCpuThreads(int n) { cpu_threads = n < 1 ? 1 : n; }
int CpuThreads() { return cpu_threads; }

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

const CpuWorkspaceTable& CpuWorkspaces() {
  static const CpuWorkspaceTable table = [] {
    CpuWorkspaceTable t;
    RegisterMathWorkspaces(t);
    RegisterShapeOpWorkspaces(t);
    RegisterAttentionWorkspaces(t);
    return t;
  }();
  return table;
}

namespace {

int64_t WorkspaceOf(const Node& node, std::span<const OperandType> in,
                    std::span<const OperandType> out) {
  const CpuWorkspaceFn* fn = CpuWorkspaces().Find(node.domain, node.op_type);
  return fn ? (*fn)(node, in, out) : 0;
}

template <class T>
std::vector<OperandType> TensorTypes(std::span<T* const> tensors) {
  std::vector<OperandType> types(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i]) types[i] = OperandType{tensors[i]->dtype(), &tensors[i]->shape()};
  return types;
}

}  // namespace

std::vector<OperandType> OperandTypesOf(std::span<const Tensor* const> tensors) {
  return TensorTypes(tensors);
}
std::vector<OperandType> OperandTypesOf(std::span<Tensor* const> tensors) {
  return TensorTypes(tensors);
}

std::vector<OperandType> OperandTypesOf(const Graph& graph, const std::vector<std::string>& names) {
  std::vector<OperandType> types(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const Value* v = names[i].empty() ? nullptr : graph.FindValue(names[i]);
    if (v) types[i] = OperandType{v->dtype, v->ShapeKnown() ? &v->shape : nullptr};
  }
  return types;
}

int64_t CpuWorkspaceBytes(const Graph& graph, const Node& node) {
  if (!CpuWorkspaces().Find(node.domain, node.op_type)) return 0;
  return WorkspaceOf(node, OperandTypesOf(graph, node.inputs), OperandTypesOf(graph, node.outputs));
}

int64_t CpuWorkspaceBytesFor(const Node& node, std::span<const Tensor* const> inputs,
                             std::span<Tensor* const> outputs) {
  if (!CpuWorkspaces().Find(node.domain, node.op_type)) return 0;
  return WorkspaceOf(node, OperandTypesOf(inputs), OperandTypesOf(outputs));
}

Status RunCpuKernel(const Node& node, std::span<const Tensor* const> inputs,
                    std::span<Tensor* const> outputs, const KernelContext& ctx) {
  const CpuKernelFn* fn = CpuKernels().Find(node.domain, node.op_type);
  if (!fn) return Error(node.Describe() + ": the cpu backend has no kernel for " + node.op_type);
  const int64_t need = CpuWorkspaceBytesFor(node, inputs, outputs);
  if (static_cast<int64_t>(ctx.workspace.size()) < need)
    return Error(node.Describe() + ": the cpu kernel needs " + std::to_string(need) +
                 " bytes of workspace but was given " + std::to_string(ctx.workspace.size()) +
                 " (plan the node's workspace with CpuWorkspaceBytes)");
  return RunResolvedCpuKernel(*fn, node, inputs, outputs, ctx);
}

Status RunResolvedCpuKernel(CpuKernelFn fn, const Node& node, std::span<const Tensor* const> inputs,
                            std::span<Tensor* const> outputs, const KernelContext& ctx) {
  if (PoisonKernelOutputs())
    for (Tensor* t : outputs) {
      if (!t) continue;
      // A view or in-place output holds an input's bytes (pointer comparison: the planner
      // aliases whole buffers, never parts).
      bool aliased = t->nbytes() != 0 &&
                     std::any_of(inputs.begin(), inputs.end(),
                                 [&](const Tensor* in) { return in && in->raw() == t->raw(); });
      if (!aliased) FillPoison(*t);
    }
  return fn(node, inputs, outputs, ctx);
}

}  // namespace foundry
