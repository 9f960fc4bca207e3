// What the CUDA runtime sees on this machine. Plain C++ header so host code can ask without nvcc.
#pragma once

#include <string>

namespace foundry {

// Number of CUDA devices usable now; 0 when there is no GPU or no driver (never an error).
int CudaDeviceCount();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for device `index`, or the CUDA error saying why there is none.
std::string CudaDeviceDescription(int index);

}  // namespace foundry
