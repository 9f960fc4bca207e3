// kernels/cuda/hd.h
#pragma once
// Functions usable on the host (g++) and in CUDA kernels (nvcc): the per-element math and
// index arithmetic of the kernels, tested on the host against the CPU kernels.
#ifdef __CUDACC__
#define FOUNDRY_HD __host__ __device__
#else
#define FOUNDRY_HD
#endif
