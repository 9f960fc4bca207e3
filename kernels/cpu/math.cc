#include "kernels/cpu/kernel.h"

namespace foundry {

void RegisterMathKernels(CpuKernelTable& table) {}

}  // namespace foundry
