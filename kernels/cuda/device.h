// What the CUDA runtime sees on this machine, and host-side access to device memory and streams,
// for code compiled without nvcc (the CUDA backend, the tests). Plain C++ header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace foundry {

// Number of CUDA devices usable now; 0 when there is no GPU or no driver (never an error).
int CudaDeviceCount();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for device `index`, or the CUDA error saying why there is none.
std::string CudaDeviceDescription(int index);

// Every call below is checked; an error names `what` (when not empty) and the CUDA / cuBLAS error:
// "<what>: cudaMalloc failed: out of memory".
namespace cuda {

// cudaMalloc of `bytes`, zero-filled by a cudaMemsetAsync on `stream` (a cudaStream_t): the work
// that first touches the memory must run on that stream (or be ordered after it), which every
// user of the backend's memory does. Null `*out` for 0 bytes.
Status DeviceAlloc(int64_t bytes, void** out, void* stream, const std::string& what);
void DeviceFree(void* p);  // null is fine; errors at free are ignored (teardown)
Status DeviceMemset(void* p, int value, int64_t bytes, void* stream, const std::string& what);

// Copies on `stream`, then waits for it (the host buffer is usable on return).
Status CopyToDevice(void* dst, const void* src, int64_t bytes, void* stream,
                    const std::string& what);
Status CopyToHost(void* dst, const void* src, int64_t bytes, void* stream, const std::string& what);
Status DeviceCopy(void* dst, const void* src, int64_t bytes, void* stream, const std::string& what);
Status Synchronize(void* stream, const std::string& what);

// One stream and one cuBLAS handle bound to it; cuBLAS's workspace is set per call from the plan.
struct StreamAndBlas {
  void* stream = nullptr;
  void* cublas = nullptr;
};
StatusOr<StreamAndBlas> CreateStreamAndBlas();
void DestroyStreamAndBlas(StreamAndBlas& s);

// Bytes the device reports free and total (cudaMemGetInfo).
Status DeviceMemory(int64_t* free_bytes, int64_t* total_bytes);

}  // namespace cuda
}  // namespace foundry
