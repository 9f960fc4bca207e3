// Shape-op CUDA kernels (the GPU twin of kernels/cpu/shape_ops.cc). Being written.
#include "kernels/cuda/common.cuh"

namespace foundry {
void RegisterCudaShapeOpKernels(CudaKernelTable&) {}
void RegisterCudaShapeOpWorkspaces(CudaWorkspaceTable&) {}
}  // namespace foundry
