#include "kernels/cpu/kernel.h"

namespace foundry {

void RegisterElementwiseKernels(CpuKernelTable& table) {}

}  // namespace foundry
