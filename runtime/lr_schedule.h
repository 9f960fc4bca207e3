// Learning-rate schedules as Composer computes them (composer/optim/scheduler.py), for
// llm-foundry's `scheduler:` section: the lr of an optimizer step is base_lr * alpha(t), where
// alpha is the scheduler's multiplier and t Composer's timestamp in batches (= optimizer steps).
//
// The multipliers (W = t_warmup, T = t_max, both in steps; Composer's __call__ line by line):
//   t < W (warmup, LinearScheduler(alpha_i=0, alpha_f=peak, t_max=W)):
//       0.0 + min(1.0, t / W) * (peak - 0.0)        peak = alpha_i (linear, constant), 1.0 (cosine)
//   else, with frac = min(1.0, (t - W) / (T - W)) when T > W, else 0.0:
//     cosine_with_warmup:        alpha_f + (1 - alpha_f) * (1 + cos(frac * pi)) / 2
//     linear_decay_with_warmup:  alpha_i + frac * (alpha_f - alpha_i)
//     constant_with_warmup:      alpha_i + frac * (alpha_i - alpha_i)   (Composer's `alpha`)
//   constant (no scheduler): 1.
// Divisions of integers are Python's true division (a correctly rounded double), cos is libm's.
//
// Which t a step uses. Composer's trainer (since v0.10, composer/trainer/trainer.py _train_loop)
// calls scheduler.step() after each batch but BEFORE it advances state.timestamp, and the LambdaLR
// that wraps the scheduler sets the lr once when it is built, at timestamp 0. So the batch at
// timestamp b (the optimizer step k = b + 1) trains with alpha(max(b - 1, 0)):
//   step 1 -> alpha(0), step 2 -> alpha(0), step 3 -> alpha(1), ..., step k -> alpha(k - 2).
// Under warmup the first two steps have lr 0 (Composer's DecoupledAdamW then moves no weight but
// still advances its moments). A resumed Composer run continues the same sequence (the optimizer's
// lr and the LambdaLR state are in its checkpoint), and so does this pure function of the step.
//
// scale_warmup and Composer's scale_schedule_ratio are not supported (a ratio of 1: scale_warmup
// then changes nothing). Time units (ba, tok, ep, dur) are converted to steps by the caller.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace foundry {

enum class ScheduleKind {
  kConstant,  // no scheduler: the lr is the optimizer's lr at every step
  kCosineWithWarmup,
  kLinearDecayWithWarmup,
  kConstantWithWarmup,
};

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kConstant;
  int64_t t_warmup = 0;  // steps of linear warmup from 0 (0: none)
  int64_t t_max = 0;     // steps of the schedule; 0 = the run's total steps (Composer's "1dur")
  // Composer's defaults: LinearWithWarmupScheduler(alpha_i=1.0, alpha_f=0.0),
  // CosineAnnealingWithWarmupScheduler(alpha_f=0.0), ConstantWithWarmupScheduler(alpha=1.0), whose
  // `alpha` is alpha_i here (alpha_f is not read).
  double alpha_i = 1.0;
  double alpha_f = 0.0;
};

std::string_view ScheduleName(ScheduleKind kind);  // "constant", "cosine_with_warmup", ...
// Composer's scheduler names as llm-foundry's YAML spells them, and "constant" (none).
StatusOr<ScheduleKind> ParseScheduleName(std::string_view name);

// Each value in range, or an error naming the foundry-run option: t_warmup, t_max >= 0, alpha_i
// and alpha_f finite. With `total_steps` > 0 (the run's max_duration in steps), a t_max below it
// is refused as Composer refuses it ("t_max must be greater than or equal to max_duration").
Status CheckScheduleOptions(const ScheduleOptions& o, int64_t total_steps);

// --clip-norm: finite and >= 0 (0: no clipping), or an error naming the option.
Status CheckClipNorm(double clip_norm);

// Composer's timestamp (batches trained before) whose multiplier sets the lr of optimizer step
// `step` (1-based): max(step - 2, 0), see above.
int64_t ScheduleTimestamp(int64_t step);

// alpha(t): the scheduler's multiplier at timestamp t >= 0; `total_steps` is used when
// o.t_max == 0.
double ScheduleMultiplier(const ScheduleOptions& o, int64_t t, int64_t total_steps);

// The lr of optimizer step `step` (1-based): base_lr * alpha(ScheduleTimestamp(step)), the
// product LambdaLR computes.
double ScheduledLr(const ScheduleOptions& o, double base_lr, int64_t step, int64_t total_steps);

}  // namespace foundry
