#include "kernels/cpu/kernel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "kernels/cpu/collective.h"
#include "kernels/cpu/parallel.h"

namespace foundry {

const CpuKernelTable& CpuKernels() {
  static const CpuKernelTable table = [] {
    CpuKernelTable t;
    RegisterElementwiseKernels(t);
    RegisterShapeOpKernels(t);
    RegisterMathKernels(t);
    RegisterAttentionKernels(t);
    RegisterAccumulateKernels(t);
    RegisterCollectiveKernels(t);
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
    RegisterCollectiveWorkspaces(t);
    return t;
  }();
  return table;
}

// --- bfloat16 by staging (kernel.h) ---

bool TakesBf16AsIs(const Node& node) {
  if (!node.domain.empty()) return false;
  static const char* const kOps[] = {"Cast",    "CastLike", "Constant", "Shape",     "Size",
                                     "Reshape", "Flatten",  "Squeeze",  "Unsqueeze", "Transpose",
                                     "Expand",  "Tile",     "Concat",   "Split",     "Slice",
                                     "Gather",  "Identity"};
  for (const char* op : kOps)
    if (node.op_type == op) return true;
  return false;
}

int64_t Bf16StagingBytes(int64_t numel) {
  return (numel * static_cast<int64_t>(sizeof(float)) + 255) / 256 * 256;
}

namespace {

// The f32 copy of one bfloat16 operand: its bytes in the workspace; -1 when its shape is unknown.
int64_t StagedBytes(const OperandType& t) {
  if (t.dtype != DType::kBFloat16) return 0;
  if (!t.shape) return -1;
  const int64_t n = NumElements(*t.shape);
  return n < 0 ? -1 : Bf16StagingBytes(n);
}

bool StagesBf16(const Node& node, std::span<const OperandType> in,
                std::span<const OperandType> out) {
  if (TakesBf16AsIs(node)) return false;
  auto bf16 = [](const OperandType& t) { return t.dtype == DType::kBFloat16; };
  return std::any_of(in.begin(), in.end(), bf16) || std::any_of(out.begin(), out.end(), bf16);
}

std::vector<OperandType> Widened(std::span<const OperandType> types) {
  std::vector<OperandType> w(types.begin(), types.end());
  for (OperandType& t : w)
    if (t.dtype == DType::kBFloat16) t.dtype = DType::kFloat32;
  return w;
}

int64_t KernelWorkspaceOf(const CpuWorkspaceTable& rows, const Node& node,
                          std::span<const OperandType> in, std::span<const OperandType> out) {
  const CpuWorkspaceFn* fn = rows.Find(node.domain, node.op_type);
  return fn ? (*fn)(node, in, out) : 0;
}

}  // namespace

int64_t StagedWorkspaceBytes(const CpuWorkspaceTable& rows, const Node& node,
                             std::span<const OperandType> in, std::span<const OperandType> out) {
  if (!StagesBf16(node, in, out)) return KernelWorkspaceOf(rows, node, in, out);
  int64_t staged = 0;
  for (const auto* side : {&in, &out})
    for (const OperandType& t : *side) {
      const int64_t b = StagedBytes(t);
      if (b < 0) return 0;  // not plannable; the run-time check reports the shortfall
      staged += b;
    }
  const std::vector<OperandType> win = Widened(in), wout = Widened(out);
  return staged + KernelWorkspaceOf(rows, node, win, wout);
}

namespace {

// Ops whose CPU kernels take bfloat16 operands themselves: the matrix products, by tiles widened in
// their own bounded workspace (kernels/cpu/math.cc), instead of whole widened operands; the
// collectives, whose bfloat16 reduction rounds what it sends (kernels/cpu/collective.cc); the
// embedding gradient, which sums in f32 row by row (kernels/cpu/shape_ops.cc).
bool HandlesBf16Itself(const Node& node) {
  if (IsCollectiveOp(node)) return true;
  if (node.domain.empty()) return node.op_type == "MatMul" || node.op_type == "Gemm";
  return node.domain == "com.microsoft" &&
         (node.op_type == "FusedMatMul" || node.op_type == "GatherGrad");
}

// Ops whose every output element is a function of the input elements at the same index alone,
// by their CPU kernels (kernels/cpu/elementwise.cc), whatever their attributes: they can stage
// bfloat16 in chunks (kernel.h, kBf16StagingChunk) once their operands share one element count.
// Not Dropout / DropoutGrad (Philox streams keyed by the element index), nor Clip (its bounds are
// one-element inputs), nor Identity / Cast (they take bfloat16 as it is).
bool IsPointwiseOp(const Node& node) {
  // clang-format off
  static const char* const kOnnx[] = {
      "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Sum", "Min", "Max", "Mean",
      "Neg", "Abs", "Sign", "Relu", "Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Tanh", "Sigmoid",
      "Sin", "Cos", "Floor", "Ceil", "Round", "Softplus", "Gelu", "Where",
      "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf"};
  static const char* const kMicrosoft[] = {
      "Gelu", "FastGelu", "QuickGelu", "GeluGrad", "FastGeluGrad", "QuickGeluGrad",
      "ReluGrad", "SigmoidGrad", "TanhGrad"};
  // clang-format on
  std::span<const char* const> ops;
  if (node.domain.empty())
    ops = kOnnx;
  else if (node.domain == "com.microsoft")
    ops = kMicrosoft;
  for (const char* op : ops)
    if (node.op_type == op) return true;
  return false;
}

// The element count every operand of the node shares (output 0's), or -1 when an operand is
// omitted, its shape unknown, or its count differs (broadcasting).
int64_t SharedNumel(std::span<const OperandType> in, std::span<const OperandType> out) {
  if (out.empty() || !out[0].shape) return -1;
  const int64_t n = NumElements(*out[0].shape);
  if (n < 0) return -1;
  for (const auto* side : {&in, &out})
    for (const OperandType& t : *side)
      if (!t.shape || NumElements(*t.shape) != n) return -1;
  return n;
}

// Whether the node stages bfloat16 in chunks: a pointwise op with a bfloat16 operand, on operands
// of one element count. Decided from the types alone, the same way at plan and at run time.
bool StagesInChunks(const Node& node, std::span<const OperandType> in,
                    std::span<const OperandType> out) {
  return IsPointwiseOp(node) && StagesBf16(node, in, out) && SharedNumel(in, out) >= 0;
}

// A chunked node's workspace: one chunk's f32 copy of every bfloat16 operand, inputs then outputs
// in order, then the kernel's own figure on the chunk's 1-D widened types.
int64_t ChunkedStagingBytes(const Node& node, std::span<const OperandType> in,
                            std::span<const OperandType> out) {
  const int64_t chunk = std::min(SharedNumel(in, out), kBf16StagingChunk);
  const Shape chunk_shape = {chunk};
  int64_t staged = 0;
  auto on_chunk = [&](std::span<const OperandType> types) {
    std::vector<OperandType> c(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      const bool bf16 = types[i].dtype == DType::kBFloat16;
      if (bf16) staged += Bf16StagingBytes(chunk);
      c[i] = OperandType{bf16 ? DType::kFloat32 : types[i].dtype, &chunk_shape};
    }
    return c;
  };
  const std::vector<OperandType> cin = on_chunk(in), cout = on_chunk(out);
  return staged + KernelWorkspaceOf(CpuWorkspaces(), node, cin, cout);
}

int64_t WorkspaceOf(const Node& node, std::span<const OperandType> in,
                    std::span<const OperandType> out) {
  if (HandlesBf16Itself(node)) return KernelWorkspaceOf(CpuWorkspaces(), node, in, out);
  if (StagesInChunks(node, in, out)) return ChunkedStagingBytes(node, in, out);
  return StagedWorkspaceBytes(CpuWorkspaces(), node, in, out);
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
  return WorkspaceOf(node, OperandTypesOf(graph, node.inputs), OperandTypesOf(graph, node.outputs));
}

int64_t CpuWorkspaceBytesFor(const Node& node, std::span<const Tensor* const> inputs,
                             std::span<Tensor* const> outputs) {
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

namespace {

// Runs `fn` on f32 copies of the node's bfloat16 operands, carved from the front of the workspace
// (WorkspaceOf planned them), then rounds the f32 outputs to bfloat16 once each.
Status RunStaged(CpuKernelFn fn, const Node& node, std::span<const Tensor* const> inputs,
                 std::span<Tensor* const> outputs, const KernelContext& ctx) {
  std::byte* next = ctx.workspace.data();
  auto stage = [&](const Tensor& t) {
    Tensor w = Tensor::View(DType::kFloat32, t.shape(), next);
    next += Bf16StagingBytes(t.numel());
    return w;
  };
  std::vector<Tensor> staged_in, staged_out;
  staged_in.reserve(inputs.size());
  staged_out.reserve(outputs.size());
  std::vector<const Tensor*> in(inputs.begin(), inputs.end());
  std::vector<Tensor*> out(outputs.begin(), outputs.end());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i] || inputs[i]->dtype() != DType::kBFloat16) continue;
    staged_in.push_back(stage(*inputs[i]));
    const uint16_t* src = inputs[i]->data<uint16_t>();
    float* dst = staged_in.back().data<float>();
    ParallelFor(inputs[i]->numel(), kElementGrain,
                [&](int64_t b, int64_t e) { Bf16ToFloat(src + b, dst + b, e - b); });
    in[i] = &staged_in.back();
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || outputs[i]->dtype() != DType::kBFloat16) continue;
    staged_out.push_back(stage(*outputs[i]));
    if (PoisonKernelOutputs()) FillPoison(staged_out.back());
    out[i] = &staged_out.back();
  }
  KernelContext inner = ctx;
  const size_t used = static_cast<size_t>(next - ctx.workspace.data());
  inner.workspace = ctx.workspace.subspan(std::min(used, ctx.workspace.size()));
  RETURN_IF_ERROR(fn(node, in, out, inner));
  for (size_t i = 0, k = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || outputs[i]->dtype() != DType::kBFloat16) continue;
    const float* src = staged_out[k++].data<float>();
    uint16_t* dst = outputs[i]->data<uint16_t>();
    ParallelFor(outputs[i]->numel(), kElementGrain,
                [&](int64_t b, int64_t e) { FloatToBf16(src + b, dst + b, e - b); });
  }
  return Status::Ok();
}

// RunStaged chunk by chunk, for a node StagesInChunks accepts (the caller checked it on these
// tensors): for each run of at most kBf16StagingChunk consecutive elements, the bfloat16 inputs'
// elements are widened into the workspace, the kernel runs on 1-D views of the chunk (the other
// operands viewed in place, at the same offset) and the chunk's bfloat16 outputs are rounded.
// Each chunk reads all its inputs before its outputs are written, and later chunks touch only
// later elements, so an output that shares an input's buffer (in place) stays correct; a pointwise
// kernel gives each element the bits it gives it in a whole run.
Status RunChunkedStaged(CpuKernelFn fn, const Node& node, std::span<const Tensor* const> inputs,
                        std::span<Tensor* const> outputs, const KernelContext& ctx) {
  const int64_t n = outputs[0]->numel();
  const int64_t chunk = std::min(n, kBf16StagingChunk);
  std::byte* next = ctx.workspace.data();
  auto carve = [&](const Tensor* t) -> float* {
    if (!t || t->dtype() != DType::kBFloat16) return nullptr;
    float* copy = reinterpret_cast<float*>(next);
    next += Bf16StagingBytes(chunk);
    return copy;
  };
  std::vector<float*> in_copy(inputs.size()), out_copy(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) in_copy[i] = carve(inputs[i]);
  for (size_t i = 0; i < outputs.size(); ++i) out_copy[i] = carve(outputs[i]);
  KernelContext inner = ctx;
  const size_t used = static_cast<size_t>(next - ctx.workspace.data());
  inner.workspace = ctx.workspace.subspan(std::min(used, ctx.workspace.size()));
  std::vector<Tensor> in_view(inputs.size()), out_view(outputs.size());
  std::vector<const Tensor*> in(inputs.size());
  std::vector<Tensor*> out(outputs.size());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t m = std::min(chunk, n - begin);
    const Shape shape = {m};
    // The chunk of a tensor kept in its own type: a view at the chunk's offset.
    auto at = [&](const Tensor& t) {
      std::byte* base = static_cast<std::byte*>(const_cast<void*>(t.raw()));
      return Tensor::View(t.dtype(), shape, base + begin * DTypeSize(t.dtype()));
    };
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (in_copy[i]) {
        const uint16_t* src = inputs[i]->data<uint16_t>() + begin;
        float* dst = in_copy[i];
        ParallelFor(m, kElementGrain,
                    [&](int64_t b, int64_t e) { Bf16ToFloat(src + b, dst + b, e - b); });
        in_view[i] = Tensor::View(DType::kFloat32, shape, dst);
      } else {
        in_view[i] = at(*inputs[i]);
      }
      in[i] = &in_view[i];
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (out_copy[i]) {
        out_view[i] = Tensor::View(DType::kFloat32, shape, out_copy[i]);
        if (PoisonKernelOutputs()) FillPoison(out_view[i]);
      } else {
        out_view[i] = at(*outputs[i]);
      }
      out[i] = &out_view[i];
    }
    RETURN_IF_ERROR(fn(node, in, out, inner));
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!out_copy[i]) continue;
      const float* src = out_copy[i];
      uint16_t* dst = outputs[i]->data<uint16_t>() + begin;
      ParallelFor(m, kElementGrain,
                  [&](int64_t b, int64_t e) { FloatToBf16(src + b, dst + b, e - b); });
    }
  }
  return Status::Ok();
}

bool HasBf16(std::span<const Tensor* const> inputs, std::span<Tensor* const> outputs) {
  for (const Tensor* t : inputs)
    if (t && t->dtype() == DType::kBFloat16) return true;
  for (const Tensor* t : outputs)
    if (t && t->dtype() == DType::kBFloat16) return true;
  return false;
}

}  // namespace

Status RunResolvedCpuKernel(CpuKernelFn fn, const Node& node, std::span<const Tensor* const> inputs,
                            std::span<Tensor* const> outputs, const KernelContext& ctx) {
  // foundry::AccumulateGradient reads its output while it accumulates (kernels/cpu/accumulate.cc),
  // and so do the gradient collectives, which accumulate themselves (kernels/cpu/collective.cc).
  const bool reads_output =
      ctx.grad_accumulate && node.domain == "foundry" &&
      (node.op_type == "AccumulateGradient" || node.op_type == "ReduceScatterGradient" ||
       node.op_type == "AllReduceGradient");
  if (PoisonKernelOutputs() && !reads_output)
    for (Tensor* t : outputs) {
      if (!t) continue;
      // A view or in-place output holds an input's bytes (pointer comparison: the planner
      // aliases whole buffers, never parts).
      bool aliased = t->nbytes() != 0 &&
                     std::any_of(inputs.begin(), inputs.end(),
                                 [&](const Tensor* in) { return in && in->raw() == t->raw(); });
      if (!aliased) FillPoison(*t);
    }
  if (HasBf16(inputs, outputs) && !TakesBf16AsIs(node) && !HandlesBf16Itself(node)) {
    if (IsPointwiseOp(node) &&
        StagesInChunks(node, OperandTypesOf(inputs), OperandTypesOf(outputs)))
      return RunChunkedStaged(fn, node, inputs, outputs, ctx);
    return RunStaged(fn, node, inputs, outputs, ctx);
  }
  return fn(node, inputs, outputs, ctx);
}

}  // namespace foundry
