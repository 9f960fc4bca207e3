// Elementwise CUDA kernels (the GPU twin of kernels/cpu/elementwise.cc). Being written.
#include "kernels/cuda/common.cuh"

namespace foundry {
void RegisterCudaElementwiseKernels(CudaKernelTable&) {}
void RegisterCudaElementwiseWorkspaces(CudaWorkspaceTable&) {}
}  // namespace foundry
