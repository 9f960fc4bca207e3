// Math CUDA kernels (the GPU twin of kernels/cpu/math.cc). Being written.
#include "kernels/cuda/common.cuh"

namespace foundry {
void RegisterCudaMathKernels(CudaKernelTable&) {}
void RegisterCudaMathWorkspaces(CudaWorkspaceTable&) {}
}  // namespace foundry
