// Device helpers of the training loop (runtime/trainer.cc on the CUDA backend): the per-step
// finite check runs on the device and leaves one int per checked tensor, read back with the loss.
// Plain C++ header.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace foundry::cuda {

// Sets *flag = 1 (a plain store; never cleared here) when any of the n floats at `data` (device
// memory) is a NaN or an infinity. Enqueued on `stream`; `what` names the tensor in errors.
Status FlagNonFinite(const float* data, int64_t n, int* flag, void* stream, const char* what);

}  // namespace foundry::cuda
