#include "kernels/cpu/kernel.h"

namespace foundry {

void RegisterShapeOpKernels(CpuKernelTable& table) {}

}  // namespace foundry
