#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/device.h"

namespace foundry {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string CudaDeviceDescription(int index) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace foundry
