// The optimizer updates on the CPU: AdamW and SGD over fp32 arrays, elementwise, bitwise equal to
// PyTorch's torch.optim.AdamW / SGD single-tensor CPU paths, and Composer's DecoupledAdamW
// (composer/optim/decoupled_weight_decay.py, llm-foundry's `decoupled_adamw`). The device updates
// (kernels/cuda/optimizer.h) are checked bit for bit against these. The options' names, parsing
// and range checks are the runtime's (runtime/optimizer.h).
#pragma once

#include <cstdint>

namespace foundry {

enum class OptimizerKind { kSgd, kAdamW, kDecoupledAdamW };

// AdamW and DecoupledAdamW keep exp_avg (m) and exp_avg_sq (v) and share the update below.
inline bool IsAdam(OptimizerKind kind) {
  return kind == OptimizerKind::kAdamW || kind == OptimizerKind::kDecoupledAdamW;
}

// Hyper-parameters are doubles, as in PyTorch (Python floats); they are rounded to fp32 exactly
// where PyTorch rounds them.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;  // SGD only; 0 = plain SGD (no buffer)
  // DecoupledAdamW only: Composer's group['initial_lr'], the lr before any schedule, which `lr`
  // (this step's scheduled lr) is divided by; 0 = `lr` (no schedule: the factor is lr / lr = 1).
  double initial_lr = 0.0;
};

// The f32 factor a step multiplies every parameter by before the Adam part:
//   AdamW (torch):            f32(1 - lr * wd)
//   DecoupledAdamW (Composer): f32(1 - (lr / initial_lr) * wd), where Composer skips the multiply
//                             when wd == 0 (the factor is then exactly 1: the same bits).
float AdamWDecay(const OptimizerOptions& o);

// One AdamW step over n elements, PyTorch's torch.optim.AdamW (decoupled weight decay, bias
// correction, amsgrad=False) operation for operation; `step` counts this update (1 = first).
// Bitwise equal to torch 1.13's single-tensor CPU path (checked in tests/kernels/cpu):
//   p = p * f32(1 - lr*wd)
//   m = fma(g, f32(1 - b1), m * f32(b1))                       exp_avg.mul_(b1).add_(g, alpha=1-b1)
//   v = fma(f32(1 - b2) * g, g, v * f32(b2))        exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
//   p = p + (f32(-lr / (1 - b1^t)) * m) / (sqrt(v) / f32(sqrt(1 - b2^t)) + f32(eps))
// with the bias corrections computed in double, as Python does.
//
// DecoupledAdamW runs the same update with AdamWDecay's decoupled factor: Composer's step is
// torch 1.13's single-tensor AdamW op for op (mul_/add_, mul_/addcmul_, sqrt()/math.sqrt(bc2)
// .add_(eps), addcdiv_(value=-lr/bc1)) except for that factor.
//
// Both updates return whether every updated parameter element is finite (checked in the same
// pass over memory as the update: on big models the update is memory-bound).
bool AdamWUpdate(const OptimizerOptions& o, int64_t step, float* param, const float* grad, float* m,
                 float* v, int64_t n);

// One SGD step, torch.optim.SGD (dampening 0, no Nesterov): coupled weight decay
// d = fma(p, f32(wd), g) when wd != 0; with momentum, buf = d on the first step, else
// buf = buf * f32(momentum) + d, and d = buf; then p = fma(d, f32(-lr), p).
// `momentum_buf` is unused (may be null) when momentum is 0.
bool SgdUpdate(const OptimizerOptions& o, bool first_step, float* param, const float* grad,
               float* momentum_buf, int64_t n);

}  // namespace foundry
