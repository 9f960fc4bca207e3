// The gradient norm and clipping on the device: kernels/cpu/grad_norm.h's order and roundings
// (blocks of kNormBlock elements, kNormLanes lanes, tree sums in double; f32 norms and clip
// coefficient as torch.nn.utils.clip_grad_norm_ rounds them), so the CPU and the device give the
// same bits. Plain C++ header; kernels in grad_norm.cu.
//
// Per call, on `stream`, with no host round trip until the caller reads the norm back:
//   1. per tensor, one 256-thread block per kNormBlock elements writes the block's partial;
//   2. per tensor, one block adds its partials into the tensor's sum of squares;
//   3. one thread turns the sums into the f32 total norm and the clip coefficient;
//   4. with max_norm > 0, per tensor, g *= coef (read on the device; skipped where it is 1).
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace foundry {

// Device scratch bytes CudaGradNorm needs for tensors of these element counts.
int64_t CudaGradNormScratchBytes(std::span<const int64_t> sizes);

// grads[i] (device memory, sizes[i] floats); `scratch` device memory of at least
// CudaGradNormScratchBytes(sizes) bytes. *total_norm_device (a float inside the scratch, returned
// by the call) holds the f32 total norm once the stream has run the work; read it back after.
StatusOr<const float*> CudaGradNorm(std::span<float* const> grads, std::span<const int64_t> sizes,
                                    double max_norm, void* scratch, int64_t scratch_bytes,
                                    void* stream);

}  // namespace foundry
