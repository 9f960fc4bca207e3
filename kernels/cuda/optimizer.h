// The optimizer updates on the device: AdamW and SGD over fp32 arrays in device memory, bitwise
// equal to kernels/cpu/optimizer.h's AdamWUpdate / SgdUpdate (same operations in the same order,
// every product and sum rounded where the CPU rounds it). Plain C++ (no CUDA header): the
// per-element updates below are FOUNDRY_HD functions that the kernels (kernels/cuda/optimizer.cu)
// and the host test (tests/kernels/cuda/optimizer_host_test.cc, against the CPU updates) both run.
//
// The hyper-parameters arrive as kernels/cpu/optimizer.h's OptimizerOptions, the struct the CPU
// updates take.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "base/status.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cpu/rounded.h"
#include "kernels/cuda/hd.h"

namespace foundry {

// One AdamW step (`step` counts this update, 1 = first) over n elements. All pointers are device
// memory; *nonfinite_flag (a device int, null: not checked) is set to 1 with a plain store when an
// updated parameter is Inf or NaN; the caller zeroes it before and reads it back with the loss.
// Enqueued on `stream` (a cudaStream_t); a launch error is returned.
Status CudaAdamWUpdate(const OptimizerOptions& o, int64_t step, float* param, const float* grad,
                       float* m, float* v, int64_t n, int* nonfinite_flag, void* stream);
// One SGD step; `momentum_buf` unused (may be null) when momentum is 0.
Status CudaSgdUpdate(const OptimizerOptions& o, bool first_step, float* param, const float* grad,
                     float* momentum_buf, int64_t n, int* nonfinite_flag, void* stream);

namespace opt {

FOUNDRY_HD inline bool NonFinite(float x) { return !(fabsf(x) <= FLT_MAX); }

// AdamW's (and DecoupledAdamW's) f32 constants for one step, rounded from doubles exactly as
// AdamWUpdate rounds them.
struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bias_correction2_sqrt,
      eps;
};
inline AdamWScalars AdamWScalarsFor(const OptimizerOptions& o, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  AdamWScalars s;
  s.decay = AdamWDecay(o);
  s.beta1 = static_cast<float>(o.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(o.eps);
  return s;
}

// One element of AdamWUpdate:
//   p = p * decay;  m = fma(g, 1-b1, m * b1);  v = fma((1-b2) * g, g, v * b2)
//   p = p + (neg_step_size * m) / (sqrt(v) / sqrt(bc2) + eps)
// Returns whether the updated parameter is non-finite.
FOUNDRY_HD inline bool AdamWElement(const AdamWScalars& s, float& param, float grad, float& m,
                                    float& v) {
  const float p = rn::Mul(param, s.decay);
  m = rn::Fma(grad, s.one_minus_beta1, rn::Mul(m, s.beta1));
  v = rn::Fma(rn::Mul(s.one_minus_beta2, grad), grad, rn::Mul(v, s.beta2));
  const float denom = rn::Add(rn::Div(rn::Sqrt(v), s.bias_correction2_sqrt), s.eps);
  param = rn::Add(p, rn::Div(rn::Mul(s.neg_step_size, m), denom));
  return NonFinite(param);
}

struct SgdScalars {
  bool decay_on, momentum_on;
  float weight_decay, momentum, neg_lr;
};
inline SgdScalars SgdScalarsFor(const OptimizerOptions& o) {
  return SgdScalars{o.weight_decay != 0, o.momentum != 0, static_cast<float>(o.weight_decay),
                    static_cast<float>(o.momentum), static_cast<float>(-o.lr)};
}

// One element of SgdUpdate: d = fma(p, wd, g) with decay; with momentum buf = first ? d :
// fma(d, 1, buf * momentum) and d = buf; p = fma(d, -lr, p). `buf` is untouched without momentum.
FOUNDRY_HD inline bool SgdElement(const SgdScalars& s, bool first_step, float& param, float grad,
                                  float* buf) {
  float d = grad;
  if (s.decay_on) d = rn::Fma(param, s.weight_decay, d);
  if (s.momentum_on) {
    *buf = first_step ? d : rn::Fma(d, 1.0f, rn::Mul(*buf, s.momentum));
    d = *buf;
  }
  param = rn::Fma(d, s.neg_lr, param);
  return NonFinite(param);
}

}  // namespace opt
}  // namespace foundry
