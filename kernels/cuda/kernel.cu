#include <algorithm>
#include <set>
#include <vector>

#include "base/bfloat16.h"
#include "kernels/cpu/collective.h"
#include "kernels/cuda/common.cuh"

namespace foundry {

const CudaKernelTable& CudaKernels() {
  static const CudaKernelTable table = [] {
    CudaKernelTable t;
    RegisterCudaElementwiseKernels(t);
    RegisterCudaShapeOpKernels(t);
    RegisterCudaMathKernels(t);
    RegisterCudaAttentionKernels(t);
    RegisterCudaAccumulateKernels(t);
    RegisterCudaCollectiveKernels(t);
    return t;
  }();
  return table;
}

const CudaWorkspaceTable& CudaWorkspaces() {
  static const CudaWorkspaceTable table = [] {
    CudaWorkspaceTable t;
    RegisterCudaElementwiseWorkspaces(t);
    RegisterCudaShapeOpWorkspaces(t);
    RegisterCudaMathWorkspaces(t);
    RegisterCudaAttentionWorkspaces(t);
    RegisterCudaCollectiveWorkspaces(t);
    return t;
  }();
  return table;
}

bool CudaTakesBf16Directly(const Node& node, std::span<const OperandType> in,
                           std::span<const OperandType> out) {
  if (TakesBf16AsIs(node) || IsCollectiveOp(node)) return true;
  const bool product =
      (node.domain.empty() && (node.op_type == "MatMul" || node.op_type == "Gemm")) ||
      (node.domain == "com.microsoft" && node.op_type == "FusedMatMul");
  if (!product || in.size() < 2 || out.size() != 1) return false;
  if (in[0].dtype != DType::kBFloat16 || in[1].dtype != DType::kBFloat16) return false;
  const DType y = out[0].dtype;
  if (y != DType::kBFloat16 && y != DType::kFloat32) return false;
  if (in.size() > 2 && node.op_type == "Gemm" && in[2].dtype != DType::kUndefined &&
      in[2].dtype != y && in[2].dtype != DType::kBFloat16)
    return false;
  return in.size() <= 3;
}

namespace {

int64_t WorkspaceOf(const Node& node, std::span<const OperandType> in,
                    std::span<const OperandType> out) {
  if (CudaTakesBf16Directly(node, in, out)) {
    const CpuWorkspaceFn* fn = CudaWorkspaces().Find(node.domain, node.op_type);
    return fn ? (*fn)(node, in, out) : 0;
  }
  return StagedWorkspaceBytes(CudaWorkspaces(), node, in, out);
}

bool HasBf16(std::span<const Tensor* const> inputs, std::span<Tensor* const> outputs) {
  for (const Tensor* t : inputs)
    if (t && t->dtype() == DType::kBFloat16) return true;
  for (const Tensor* t : outputs)
    if (t && t->dtype() == DType::kBFloat16) return true;
  return false;
}

// The staging conversions: base/bfloat16.h's per-element functions, one thread per element.
__global__ void WidenBf16Kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    dst[i] = Bf16ToFloat(src[i]);
}
__global__ void RoundBf16Kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    dst[i] = FloatToBf16(src[i]);
}

// Runs `fn` on f32 copies of the node's bfloat16 operands, carved from the front of the workspace
// (StagedWorkspaceBytes planned them), then rounds the f32 outputs to bfloat16 once each; all on
// the node's stream. A bfloat16 constant input is not handed to the kernel as a host constant
// (its type is no longer the operand's): the kernel reads the device copy, as it does for a
// value computed at run time.
Status RunStaged(CudaKernelFn fn, const Node& node, std::span<const Tensor* const> inputs,
                 std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  cudaStream_t stream = cuda::StreamOf(ctx);
  std::byte* next = ctx.base.workspace.data();
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
  std::vector<const Tensor*> constants(ctx.base.constant_inputs.begin(),
                                       ctx.base.constant_inputs.end());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i] || inputs[i]->dtype() != DType::kBFloat16) continue;
    staged_in.push_back(stage(*inputs[i]));
    const int64_t n = inputs[i]->numel();
    if (n > 0) {
      WidenBf16Kernel<<<cuda::BlocksFor(n), cuda::kThreads, 0, stream>>>(
          staged_in.back().data<float>(), inputs[i]->data<uint16_t>(), n);
      FOUNDRY_CUDA_LAUNCHED(node, "WidenBf16Kernel");
    }
    in[i] = &staged_in.back();
    if (i < constants.size()) constants[i] = nullptr;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || outputs[i]->dtype() != DType::kBFloat16) continue;
    staged_out.push_back(stage(*outputs[i]));
    out[i] = &staged_out.back();
  }
  CudaKernelContext inner = ctx;
  const size_t used = static_cast<size_t>(next - ctx.base.workspace.data());
  inner.base.workspace = ctx.base.workspace.subspan(std::min(used, ctx.base.workspace.size()));
  inner.base.constant_inputs = constants;
  RETURN_IF_ERROR(fn(node, in, out, inner));
  for (size_t i = 0, k = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || outputs[i]->dtype() != DType::kBFloat16) continue;
    const int64_t n = outputs[i]->numel();
    const float* src = staged_out[k++].data<float>();
    if (n == 0) continue;
    RoundBf16Kernel<<<cuda::BlocksFor(n), cuda::kThreads, 0, stream>>>(outputs[i]->data<uint16_t>(),
                                                                       src, n);
    FOUNDRY_CUDA_LAUNCHED(node, "RoundBf16Kernel");
  }
  return Status::Ok();
}

}  // namespace

int64_t CudaWorkspaceBytes(const Graph& graph, const Node& node) {
  return WorkspaceOf(node, OperandTypesOf(graph, node.inputs), OperandTypesOf(graph, node.outputs));
}

int64_t CudaWorkspaceBytesFor(const Node& node, std::span<const Tensor* const> inputs,
                              std::span<Tensor* const> outputs) {
  return WorkspaceOf(node, OperandTypesOf(inputs), OperandTypesOf(outputs));
}

Status RunCudaKernel(const Node& node, std::span<const Tensor* const> inputs,
                     std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  const CudaKernelFn* fn = CudaKernels().Find(node.domain, node.op_type);
  if (!fn) return Error(node.Describe() + ": the cuda backend has no kernel for " + node.op_type);
  const std::vector<OperandType> in_types = OperandTypesOf(inputs);
  const std::vector<OperandType> out_types = OperandTypesOf(outputs);
  const int64_t need = WorkspaceOf(node, in_types, out_types);
  if (static_cast<int64_t>(ctx.base.workspace.size()) < need)
    return Error(node.Describe() + ": the cuda kernel needs " + std::to_string(need) +
                 " bytes of workspace but was given " + std::to_string(ctx.base.workspace.size()) +
                 " (plan the node's workspace with CudaWorkspaceBytes)");
  if (HasBf16(inputs, outputs) && !CudaTakesBf16Directly(node, in_types, out_types))
    return RunStaged(*fn, node, inputs, outputs, ctx);
  return (*fn)(node, inputs, outputs, ctx);
}

std::vector<std::string> MissingCudaKernels(const Graph& graph) {
  std::set<std::string> missing;
  for (const Node& n : graph.nodes)
    if (!CudaKernels().Find(n.domain, n.op_type))
      missing.insert((n.domain.empty() || n.domain == "ai.onnx" ? "" : n.domain + "::") +
                     n.op_type);
  return {missing.begin(), missing.end()};
}

namespace cuda {

const char* CublasStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "unknown cuBLAS status";
  }
}

StatusOr<Strides> BroadcastStrides(const Node& node, const Shape& in, const Shape& out) {
  Strides s;
  if (out.size() > static_cast<size_t>(kMaxRank))
    return Error(node.Describe() + ": the cuda kernels take tensors of rank <= " +
                 std::to_string(kMaxRank) + ", this output has rank " + std::to_string(out.size()));
  if (in.size() > out.size())
    return Error(node.Describe() + ": an input of rank " + std::to_string(in.size()) +
                 " does not broadcast to an output of rank " + std::to_string(out.size()));
  s.rank = static_cast<int>(out.size());
  const size_t lead = out.size() - in.size();
  int64_t stride = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    s.out_dims[d] = out[d] > 0 ? out[d] : 1;
    if (static_cast<size_t>(d) < lead) {
      s.in_strides[d] = 0;
      continue;
    }
    int64_t dim = in[d - lead];
    if (dim != out[d] && dim != 1)
      return Error(node.Describe() + ": an input of shape " + ShapeToString(in) +
                   " does not broadcast to the output shape " + ShapeToString(out));
    s.in_strides[d] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return s;
}

}  // namespace cuda
}  // namespace foundry
