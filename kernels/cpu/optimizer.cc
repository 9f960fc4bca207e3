// AdamWUpdate and SgdUpdate (kernels/cpu/optimizer.h). Built with -ffp-contract=off and
// -fno-math-errno (CMakeLists.txt): every rounding is the one the code spells.
#include "kernels/cpu/optimizer.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace foundry {

// The update loops are the bulk of a step's non-matmul time on big models: with FMA in hardware
// (x86-64-v3) the loop vectorizes; otherwise std::fma is a library call. Both clones compute the
// same correctly rounded operations (fma, sqrt and division are exact-rounded in IEEE 754, and the
// arithmetic is spelled so that no a * b + c is left for the compiler to contract), so the bits do
// not depend on the CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FOUNDRY_FMA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FOUNDRY_FMA_CLONES
#endif

namespace {
// 1 when `x` is Inf or NaN (exponent bits all ones); branch-free so the update loops vectorize.
inline uint32_t NonFinite(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return static_cast<uint32_t>((b & 0x7F800000u) == 0x7F800000u);
}
}  // namespace

float AdamWDecay(const OptimizerOptions& o) {
  if (o.kind != OptimizerKind::kDecoupledAdamW)
    return static_cast<float>(1.0 - o.lr * o.weight_decay);
  if (o.weight_decay == 0) return 1.0f;
  // decay_factor = (lr / initial_lr) if initial_lr else 1.0; param.mul_(1 - decay_factor * wd)
  const double initial_lr = o.initial_lr != 0 ? o.initial_lr : o.lr;
  const double decay_factor = o.lr / initial_lr;
  return static_cast<float>(1.0 - decay_factor * o.weight_decay);
}

FOUNDRY_FMA_CLONES
bool AdamWUpdate(const OptimizerOptions& o, int64_t step, float* param, const float* grad, float* m,
                 float* v, int64_t n) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  const float decay = AdamWDecay(o);
  const float beta1 = static_cast<float>(o.beta1);
  const float one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  const float beta2 = static_cast<float>(o.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  const float neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(o.eps);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    float p = param[i] * decay;
    m[i] = std::fma(g, one_minus_beta1, m[i] * beta1);
    v[i] = std::fma(one_minus_beta2 * g, g, v[i] * beta2);
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
    param[i] = p + (neg_step_size * m[i]) / denom;
    bad |= NonFinite(param[i]);
  }
  return bad == 0;
}

FOUNDRY_FMA_CLONES
bool SgdUpdate(const OptimizerOptions& o, bool first_step, float* param, const float* grad,
               float* momentum_buf, int64_t n) {
  const float wd = static_cast<float>(o.weight_decay);
  const float momentum = static_cast<float>(o.momentum);
  const float neg_lr = static_cast<float>(-o.lr);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i];
    if (o.weight_decay != 0) d = std::fma(param[i], wd, d);
    if (o.momentum != 0) {
      // buf.mul_(momentum).add_(d, alpha=1): PyTorch's add_ is fmadd(d, alpha, buf); written
      // as an fma so no compiler contracts buf * momentum + d into one rounding.
      momentum_buf[i] = first_step ? d : std::fma(d, 1.0f, momentum_buf[i] * momentum);
      d = momentum_buf[i];
    }
    param[i] = std::fma(d, neg_lr, param[i]);
    bad |= NonFinite(param[i]);
  }
  return bad == 0;
}

}  // namespace foundry
