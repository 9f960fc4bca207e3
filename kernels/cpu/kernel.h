// The CPU reference backend's op table: one function per (domain, op_type) that computes a node's
// outputs from its inputs. Outputs arrive allocated, with the dtype and shape that shape inference
// gave them; kernels write every element (`=`, never `+=` into a caller's buffer). Kernels are
// deterministic: the same inputs give the same bits on every run.
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

struct KernelContext {
  uint64_t seed = 0;      // run seed for random ops (Dropout)
  uint64_t node_key = 0;  // stable per-node key; recompute clones reuse their original's key
  bool training = true;
  // Scratch for this node, at least CpuWorkspaceBytes(graph, node) bytes, aligned to 256 bytes
  // (planned in the arena, live during this node only). Kernels never allocate: what they need
  // beyond their outputs they take from here.
  std::span<std::byte> workspace;
};

using CpuKernelFn = Status (*)(const Node& node, std::span<const Tensor* const> inputs,
                               std::span<Tensor* const> outputs, const KernelContext& ctx);

using CpuKernelTable = OpTable<CpuKernelFn>;

const CpuKernelTable& CpuKernels();

// Scratch bytes the CPU kernel of `node` needs (0 for most ops), from the node's concrete types in
// `graph`: the CPU backend's WorkspaceFn (passes/memory_plan.h). Declared per op next to its
// kernel, so a kernel and its figure change together.
int64_t CpuWorkspaceBytes(const Graph& graph, const Node& node);

// Runs one node on the CPU: looks up the kernel and calls it. Omitted inputs are null; outputs
// must be preallocated by the caller. Errors name the node.
Status RunCpuKernel(const Node& node, std::span<const Tensor* const> inputs,
                    std::span<Tensor* const> outputs, const KernelContext& ctx);

// The contract above, made checkable: when on, RunCpuKernel fills every output with poison before
// the kernel runs (NaN for floating-point dtypes, 0xA5 bytes otherwise), so an element a kernel
// leaves unwritten, or a `+=` into the output, gives a wrong result instead of a lucky zero. Every
// test binary turns it on (tests/support/test_main.cc); off by default, so the CLIs keep zeroed
// buffers. Process-wide; set it before any kernel runs.
void SetPoisonKernelOutputs(bool on);
bool PoisonKernelOutputs();
void FillPoison(Tensor& t);

// Registration entry points, one per op family file under kernels/cpu/.
void RegisterElementwiseKernels(CpuKernelTable& table);
void RegisterShapeOpKernels(CpuKernelTable& table);
void RegisterMathKernels(CpuKernelTable& table);

}  // namespace foundry
