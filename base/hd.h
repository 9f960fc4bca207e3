// FOUNDRY_HD marks functions usable on the host (g++) and in CUDA kernels (nvcc): per-element math
// and index arithmetic shared by the CPU kernels, the CUDA kernels and the host tests that replay
// the device code against the CPU. Empty outside nvcc.
#pragma once

#ifndef FOUNDRY_HD
#ifdef __CUDACC__
#define FOUNDRY_HD __host__ __device__
#else
#define FOUNDRY_HD
#endif
#endif
