// The CPU reference backend's op table: one function per (domain, op_type) that computes a node's
// outputs from its inputs. Outputs arrive allocated, with the dtype and shape that shape inference
// gave them; kernels write every element (`=`, never `+=` into a caller's buffer; the one
// exception, foundry::AccumulateGradient, adds into its output when ctx.grad_accumulate says so,
// kernels/cpu/accumulate.cc). Kernels are deterministic: the same inputs give the same bits on
// every run.
//
// bfloat16. Kernels are written for f32/f64 (and integers); a node with a bfloat16 operand runs
// its f32 kernel on f32 copies of those operands ("staging"): each bfloat16 input is widened
// (exact), the kernel computes and accumulates in f32, and each bfloat16 output is rounded to
// nearest even once, which is how PyTorch's CPU kernels treat bfloat16 (compute in float, round
// the result). The copies live at the front of the node's workspace and are counted in
// CpuWorkspaceBytes, so the memory plan holds them. Ops that only move whole elements (Reshape,
// Transpose, Slice, Concat, Gather, ...) and Cast take bfloat16 as it is. The matrix products
// (MatMul, FusedMatMul, Gemm) take it themselves: they widen bounded tiles of their operands in
// their own workspace and accumulate in f32 (kernels/cpu/math.cc), so a product's workspace does
// not grow with its operands. The collectives take it themselves too: a bfloat16 reduction
// rounds what each rank sends (kernels/cpu/collective.cc). Pointwise ops stage in bounded chunks
// (kBf16StagingChunk).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/op_table.h"

namespace foundry {

class Communicator;  // kernels/cpu/communicator.h

struct KernelContext {
  uint64_t seed = 0;      // run seed for random ops (Dropout)
  uint64_t node_key = 0;  // stable per-node key; recompute clones reuse their original's key
  bool training = true;
  // Scratch for this node, at least CpuWorkspaceBytes(graph, node) bytes, aligned to 256 bytes
  // (planned in the arena, live during this node only). Kernels never allocate: what they need
  // beyond their outputs they take from here.
  std::span<std::byte> workspace;
  // Host copies of the node's inputs that are constants (parallel to the inputs; null where an
  // input is computed at run time). The CPU kernels read their inputs directly and ignore this; a
  // device backend's kernels read shape-like arguments (Reshape's shape, Slice's starts) here
  // instead of copying them back from the device. Empty when the caller has none.
  std::span<const Tensor* const> constant_inputs;
  // Gradient accumulation (passes/grad_accumulate.h): foundry::AccumulateGradient writes
  // out = grad_scale * partial when grad_accumulate is false (a step's first microbatch) and
  // out = out + grad_scale * partial when it is true (the others). Every other kernel ignores them.
  float grad_scale = 1.0f;
  bool grad_accumulate = false;
  // Data-parallel training: the ranks the collective ops (foundry::AllGather,
  // ReduceScatterGradient, AllReduceGradient; kernels/cpu/collective.cc) exchange with. Every
  // other kernel ignores it; a collective without one is an error.
  Communicator* comm = nullptr;
};

using CpuKernelFn = Status (*)(const Node& node, std::span<const Tensor* const> inputs,
                               std::span<Tensor* const> outputs, const KernelContext& ctx);

using CpuKernelTable = OpTable<CpuKernelFn>;

const CpuKernelTable& CpuKernels();

// Scratch bytes the CPU kernel of `node` needs (0 for most ops), from the node's concrete types in
// `graph`: the CPU backend's WorkspaceFn (compiler/memory_plan.h). Declared per op next to its
// kernel, so a kernel and its figure change together.
int64_t CpuWorkspaceBytes(const Graph& graph, const Node& node);
// The same figure from the tensors a caller is about to run the node on (null: omitted). Equal to
// CpuWorkspaceBytes when the tensors have the graph's types.
int64_t CpuWorkspaceBytesFor(const Node& node, std::span<const Tensor* const> inputs,
                             std::span<Tensor* const> outputs);

// One operand as a workspace figure sees it: element type and shape; shape null when the operand
// is omitted or its shape is not known.
struct OperandType {
  DType dtype = DType::kUndefined;
  const Shape* shape = nullptr;
};
// A kernel's workspace bytes as a function of its operands' types (never of their values, which a
// compile-time caller does not have). Ops without a row need none.
using CpuWorkspaceFn = int64_t (*)(const Node& node, std::span<const OperandType> inputs,
                                   std::span<const OperandType> outputs);
// A node's operand types as a workspace figure takes them: from the tensors a caller is about to
// run it on (null: omitted), or from the graph's values named `names` ("" or unknown: omitted).
std::vector<OperandType> OperandTypesOf(std::span<const Tensor* const> tensors);
std::vector<OperandType> OperandTypesOf(std::span<Tensor* const> tensors);
std::vector<OperandType> OperandTypesOf(const Graph& graph, const std::vector<std::string>& names);
using CpuWorkspaceTable = OpTable<CpuWorkspaceFn>;
const CpuWorkspaceTable& CpuWorkspaces();

// --- bfloat16 by staging, shared with the CUDA backend (kernels/cuda/kernel.h) ---

// Ops whose kernels move or pick whole elements by their byte size, or read only types and
// shapes: they take bfloat16 operands as they are, on every backend. (Staging them would be exact
// too, only slower.)
bool TakesBf16AsIs(const Node& node);
// Bytes of the f32 copy of `numel` bfloat16 elements in a staging workspace: rounded up to 256,
// so that every copy, and the kernel's own scratch after them, stays 256-byte aligned.
int64_t Bf16StagingBytes(int64_t numel);
// A node's workspace on a backend that runs bfloat16 by staging, `rows` being that backend's
// workspace table: the kernel's own figure when nothing is staged (no bfloat16 operand, or
// TakesBf16AsIs); else the f32 copies of every bfloat16 operand, inputs then outputs in order,
// followed by the kernel's figure on the widened types; 0 when a staged operand's shape is
// unknown (not plannable: the run-time check reports the shortfall).
int64_t StagedWorkspaceBytes(const CpuWorkspaceTable& rows, const Node& node,
                             std::span<const OperandType> inputs,
                             std::span<const OperandType> outputs);

// On the CPU, a pointwise node (each output element a function of the input elements at its own
// index alone: Add, Mul, Gelu, GeluGrad, ... on operands of one element count, so without
// broadcasting; never a random op) stages bfloat16 in chunks instead of whole: consecutive chunks
// of at most this many elements, each widened, computed by the f32 kernel on 1-D views and
// rounded before the next, in one chunk's copies of the staged operands (the workspace no longer
// grows with the operands). The same bits as whole staging. A constant: the chunks depend on the
// shape alone, never on the thread count or the workspace given.
inline constexpr int64_t kBf16StagingChunk = int64_t{1} << 20;

// The workspace viewed as an array of T from byte `offset` (a multiple of alignof(T)). Kernels call
// it only for the bytes their CpuWorkspaceFn declared; RunCpuKernel has checked that they are
// there.
template <class T>
T* WorkspaceArray(const KernelContext& ctx, int64_t offset = 0) {
  static_assert(alignof(T) <= 256, "the workspace is 256-byte aligned");
  return reinterpret_cast<T*>(ctx.workspace.data() + offset);
}

// Runs one node on the CPU: looks up the kernel and calls it. Omitted inputs are null; outputs
// must be preallocated by the caller, and ctx.workspace must hold CpuWorkspaceBytesFor(node, ...)
// bytes (an error naming the node and both sizes otherwise). An output may share its data pointer
// with an input: input 0 of a view op (the kernel then copies nothing), or an input the schema
// lists in in_place_inputs (same shape and dtype as the output). Errors name the node.
Status RunCpuKernel(const Node& node, std::span<const Tensor* const> inputs,
                    std::span<Tensor* const> outputs, const KernelContext& ctx);

// RunCpuKernel after its lookup and workspace check: `fn` is the node's row of CpuKernels(), and
// the caller has made sure ctx.workspace holds what the kernel needs (the planned executor checks
// every node's workspace against the plan once, at Create).
Status RunResolvedCpuKernel(CpuKernelFn fn, const Node& node, std::span<const Tensor* const> inputs,
                            std::span<Tensor* const> outputs, const KernelContext& ctx);

// The contract above, made checkable: when on, RunCpuKernel fills every output with poison before
// the kernel runs (NaN for floating-point dtypes, 0xA5 bytes otherwise), so an element a kernel
// leaves unwritten, or a `+=` into the output, gives a wrong result instead of a lucky zero. An
// output whose data pointer is an input's (a view, in place) is left alone: poisoning it would
// destroy the input. Every
// test binary turns it on (tests/support/test_main.cc); off by default, so the CLIs keep zeroed
// buffers. Process-wide; set it before any kernel runs.
void SetPoisonKernelOutputs(bool on);
bool PoisonKernelOutputs();
void FillPoison(Tensor& t);

// Threads a kernel that splits its work into independent units may use (the fused attention, and
// through kernels/cpu/parallel.h the element-wise, matrix-product, shape, accumulate, collective
// and gradient-norm kernels). Process-wide, default 1. Such a kernel
// declares workspace for CpuThreads() threads and runs on as many as the workspace it is handed
// holds, so a plan made for fewer threads still runs (on fewer); its results do not depend on
// the count (each unit owns its outputs and sums in a fixed order).
void SetCpuThreads(int n);
int CpuThreads();

// Registration entry points, one per op family file under kernels/cpu/.
void RegisterElementwiseKernels(CpuKernelTable& table);
void RegisterShapeOpKernels(CpuKernelTable& table);
void RegisterMathKernels(CpuKernelTable& table);
void RegisterAttentionKernels(CpuKernelTable& table);
void RegisterAccumulateKernels(CpuKernelTable& table);
void RegisterCollectiveKernels(CpuKernelTable& table);
// The workspace figures of the kernels that need scratch, one per family file.
void RegisterMathWorkspaces(CpuWorkspaceTable& table);
void RegisterShapeOpWorkspaces(CpuWorkspaceTable& table);
void RegisterAttentionWorkspaces(CpuWorkspaceTable& table);
void RegisterCollectiveWorkspaces(CpuWorkspaceTable& table);
// The collectives' send, receive and gather buffers (kernels/cpu/collective_workspace.cc says how
// they are sliced); the CUDA workspace table registers the same figure.
int64_t CollectiveWorkspaceBytes(const Node& node, std::span<const OperandType> inputs,
                                 std::span<const OperandType> outputs);

}  // namespace foundry
