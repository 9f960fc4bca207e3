// The CUDA backend's op table: the GPU twin of kernels/cpu/kernel.h. One function per
// (domain, op_type), registered by the family file (elementwise.cu, shape_ops.cu, math.cu,
// attention.cu) that holds its kernels. Plain C++: host code (the backend, the tests) includes it
// without nvcc.
//
// Contract (the CPU one, on device memory):
//  - inputs and outputs are tensors whose data pointers are DEVICE memory (Tensor::View of the
//    arena or of a planned region); shapes and dtypes are the graph's. Never read them on the host.
//  - outputs arrive allocated; kernels write every element (`=`, never `+=` into a caller's
//  buffer);
//    an output may share its pointer with input 0 of a view op or a schema in-place input, as on
//    the CPU.
//  - everything is enqueued on ctx.stream; no synchronization, no host round trip, no allocation:
//    scratch beyond the outputs comes from ctx.base.workspace, declared by the op's workspace row
//    (CudaWorkspaces) and planned in the arena.
//  - deterministic: the same inputs give the same bits on every run; no floating-point atomics.
//  - every CUDA / cuBLAS call is checked; a failure is an error naming the node.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/op_table.h"
#include "kernels/cpu/kernel.h"

namespace foundry {

struct CudaKernelContext {
  KernelContext base;      // seed, node_key, training, workspace (device memory)
  void* stream = nullptr;  // cudaStream_t
  void* cublas = nullptr;  // cublasHandle_t, bound to `stream`
  bool tf32 = false;       // allow TF32 tensor cores in cuBLAS (--tf32); off = exact fp32
};

using CudaKernelFn = Status (*)(const Node& node, std::span<const Tensor* const> inputs,
                                std::span<Tensor* const> outputs, const CudaKernelContext& ctx);
using CudaKernelTable = OpTable<CudaKernelFn>;
const CudaKernelTable& CudaKernels();

// Workspace rows, as on the CPU (same OperandType / figure signature): bytes of device scratch
// the op's CUDA kernel needs, from its operands' types. Ops without a row need none.
using CudaWorkspaceTable = OpTable<CpuWorkspaceFn>;
const CudaWorkspaceTable& CudaWorkspaces();
int64_t CudaWorkspaceBytes(const Graph& graph, const Node& node);
int64_t CudaWorkspaceBytesFor(const Node& node, std::span<const Tensor* const> inputs,
                              std::span<Tensor* const> outputs);

// bfloat16, as on the CPU (kernels/cpu/kernel.h, "bfloat16"): a node with bfloat16
// operands runs its f32 kernel on f32 copies ("staging": each bfloat16 input widened by a
// conversion kernel into the front of the node's workspace, each bfloat16 output rounded to
// nearest even once from its f32 copy there, with base/bfloat16.h's conversions), the copies
// counted in CudaWorkspaceBytes exactly as CpuWorkspaceBytes counts them. The ops that take
// bfloat16 as it is are the CPU's (TakesBf16AsIs: the element-moving kernels work on element
// bytes). The matrix products with bfloat16 A and B take them directly: cuBLAS's bf16 GEMM at
// CUBLAS_COMPUTE_32F (products exact, sums in f32), the output bf16 or f32, rounded once; no
// staging bytes. The collectives take bfloat16 themselves, as on the CPU
// (kernels/cuda/collective.cu).
//
// Whether `node` with these operand types runs without staging on CUDA: TakesBf16AsIs, a
// collective (IsCollectiveOp, kernels/cpu/collective.h), or a MatMul / com.microsoft FusedMatMul /
// Gemm whose A and B are bfloat16, whose output is bfloat16 or f32 and whose Gemm C (if any) is
// the output's type or bfloat16 (widened exactly).
bool CudaTakesBf16Directly(const Node& node, std::span<const OperandType> inputs,
                           std::span<const OperandType> outputs);

// Bytes of cuBLAS workspace every matrix product gets (cublasSetWorkspace); planned in the arena
// as part of each matmul node's workspace, so cuBLAS never allocates behind the plan's back.
inline constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;

// Looks up and runs the kernel (an error naming the node when there is none or the workspace is
// short). Errors from the kernel name the node and the CUDA / cuBLAS call that failed.
Status RunCudaKernel(const Node& node, std::span<const Tensor* const> inputs,
                     std::span<Tensor* const> outputs, const CudaKernelContext& ctx);

// The ops of `graph` that have no CUDA kernel, as "domain::Op" ("" domain bare), sorted, unique.
std::vector<std::string> MissingCudaKernels(const Graph& graph);

// Registration entry points, one per family file.
void RegisterCudaElementwiseKernels(CudaKernelTable& table);
void RegisterCudaShapeOpKernels(CudaKernelTable& table);
void RegisterCudaMathKernels(CudaKernelTable& table);
void RegisterCudaAttentionKernels(CudaKernelTable& table);
void RegisterCudaAccumulateKernels(CudaKernelTable& table);
void RegisterCudaMathWorkspaces(CudaWorkspaceTable& table);
void RegisterCudaShapeOpWorkspaces(CudaWorkspaceTable& table);
void RegisterCudaElementwiseWorkspaces(CudaWorkspaceTable& table);
void RegisterCudaAttentionWorkspaces(CudaWorkspaceTable& table);
void RegisterCudaCollectiveKernels(CudaKernelTable& table);
void RegisterCudaCollectiveWorkspaces(CudaWorkspaceTable& table);

}  // namespace foundry
