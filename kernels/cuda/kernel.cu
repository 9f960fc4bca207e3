#include <algorithm>
#include <set>

#include "kernels/cuda/common.cuh"

namespace foundry {

const CudaKernelTable& CudaKernels() {
  static const CudaKernelTable table = [] {
    CudaKernelTable t;
    RegisterCudaElementwiseKernels(t);
    RegisterCudaShapeOpKernels(t);
    RegisterCudaMathKernels(t);
    RegisterCudaAttentionKernels(t);
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
    return t;
  }();
  return table;
}

int64_t CudaWorkspaceBytes(const Graph& graph, const Node& node) {
  const CpuWorkspaceFn* fn = CudaWorkspaces().Find(node.domain, node.op_type);
  if (!fn) return 0;
  return (*fn)(node, OperandTypesOf(graph, node.inputs), OperandTypesOf(graph, node.outputs));
}

int64_t CudaWorkspaceBytesFor(const Node& node, std::span<const Tensor* const> inputs,
                              std::span<Tensor* const> outputs) {
  const CpuWorkspaceFn* fn = CudaWorkspaces().Find(node.domain, node.op_type);
  if (!fn) return 0;
  return (*fn)(node, OperandTypesOf(inputs), OperandTypesOf(outputs));
}

Status RunCudaKernel(const Node& node, std::span<const Tensor* const> inputs,
                     std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  const CudaKernelFn* fn = CudaKernels().Find(node.domain, node.op_type);
  if (!fn) return Error(node.Describe() + ": the cuda backend has no kernel for " + node.op_type);
  const int64_t need = CudaWorkspaceBytesFor(node, inputs, outputs);
  if (static_cast<int64_t>(ctx.base.workspace.size()) < need)
    return Error(node.Describe() + ": the cuda kernel needs " + std::to_string(need) +
                 " bytes of workspace but was given " + std::to_string(ctx.base.workspace.size()) +
                 " (plan the node's workspace with CudaWorkspaceBytes)");
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
