// Correctly rounded arithmetic that no compiler contracts, for the per-element functions that the
// CPU and CUDA kernels share (FOUNDRY_HD): nvcc fuses a * b + c into one fma by default, which the
// CPU build (no FMA instructions; -ffp-contract=off where FMA is available) never does. Spelling a
// product that feeds a sum as Mul then Add keeps both roundings on the device (__fmul_rn and
// __fadd_rn, which nvcc never fuses); on the host these are the plain operators. Fma is the one
// fused operation, where the CPU code calls std::fma itself.
#pragma once

#include <cmath>

#include "base/hd.h"

namespace foundry::rn {

#ifdef __CUDA_ARCH__
#define FOUNDRY_RN(host, device) return device
#else
#define FOUNDRY_RN(host, device) return host
#endif

FOUNDRY_HD inline float Mul(float a, float b) { FOUNDRY_RN(a * b, __fmul_rn(a, b)); }
FOUNDRY_HD inline double Mul(double a, double b) { FOUNDRY_RN(a * b, __dmul_rn(a, b)); }
FOUNDRY_HD inline float Add(float a, float b) { FOUNDRY_RN(a + b, __fadd_rn(a, b)); }
FOUNDRY_HD inline double Add(double a, double b) { FOUNDRY_RN(a + b, __dadd_rn(a, b)); }
FOUNDRY_HD inline float Sub(float a, float b) { FOUNDRY_RN(a - b, __fsub_rn(a, b)); }
FOUNDRY_HD inline double Sub(double a, double b) { FOUNDRY_RN(a - b, __dsub_rn(a, b)); }
FOUNDRY_HD inline float Div(float a, float b) { FOUNDRY_RN(a / b, __fdiv_rn(a, b)); }
FOUNDRY_HD inline float Sqrt(float a) { FOUNDRY_RN(std::sqrt(a), __fsqrt_rn(a)); }
FOUNDRY_HD inline float Fma(float a, float b, float c) {
  FOUNDRY_RN(std::fma(a, b, c), __fmaf_rn(a, b, c));
}

#undef FOUNDRY_RN

}  // namespace foundry::rn
