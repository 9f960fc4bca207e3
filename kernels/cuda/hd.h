// kernels/cuda/hd.h
#pragma once
// Functions usable on the host (g++) and in CUDA kernels (nvcc): the per-element math and
// index arithmetic of the kernels, tested on the host against the CPU kernels. The macro lives
// in base/ so that base/bfloat16.h's conversions are the device's too.
#include "base/hd.h"
