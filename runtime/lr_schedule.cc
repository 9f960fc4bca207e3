#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

std::string_view ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kConstant:
      return "constant";
    case ScheduleKind::kCosineWithWarmup:
      return "cosine_with_warmup";
    case ScheduleKind::kLinearDecayWithWarmup:
      return "linear_decay_with_warmup";
    case ScheduleKind::kConstantWithWarmup:
      return "constant_with_warmup";
  }
  return "constant";
}

StatusOr<ScheduleKind> ParseScheduleName(std::string_view name) {
  for (ScheduleKind k : {ScheduleKind::kConstant, ScheduleKind::kCosineWithWarmup,
                         ScheduleKind::kLinearDecayWithWarmup, ScheduleKind::kConstantWithWarmup})
    if (name == ScheduleName(k)) return k;
  return Error("unknown scheduler '" + std::string(name) +
               "' (choose constant, cosine_with_warmup, linear_decay_with_warmup or "
               "constant_with_warmup)");
}

Status CheckScheduleOptions(const ScheduleOptions& o, int64_t total_steps) {
  if (o.t_warmup < 0)
    return Error("--warmup-steps " + std::to_string(o.t_warmup) + ": must be >= 0");
  if (o.t_max < 0)
    return Error("--decay-steps " + std::to_string(o.t_max) +
                 ": must be >= 0 (0: the run's total steps)");
  if (!std::isfinite(o.alpha_i)) return Error("--alpha-i " + Num(o.alpha_i) + ": must be finite");
  if (!std::isfinite(o.alpha_f)) return Error("--alpha-f " + Num(o.alpha_f) + ": must be finite");
  // Composer's _raise_if_max_duration_exceeds_t_max (both in batches here).
  if (o.kind != ScheduleKind::kConstant && o.t_max > 0 && total_steps > 0 && o.t_max < total_steps)
    return Error("--decay-steps " + std::to_string(o.t_max) + ": shorter than the run's " +
                 std::to_string(total_steps) +
                 " steps (--max-steps); Composer refuses a t_max below max_duration: give at "
                 "least " +
                 std::to_string(total_steps) + ", or leave it out (the whole run)");
  return Status::Ok();
}

Status CheckClipNorm(double clip_norm) {
  if (!(std::isfinite(clip_norm) && clip_norm >= 0))
    return Error("--clip-norm " + Num(clip_norm) +
                 ": must be a finite number >= 0 (0: no clipping)");
  return Status::Ok();
}

int64_t ScheduleTimestamp(int64_t step) { return step > 2 ? step - 2 : 0; }

double ScheduleMultiplier(const ScheduleOptions& o, int64_t t, int64_t total_steps) {
  if (o.kind == ScheduleKind::kConstant) return 1.0;
  const int64_t w = o.t_warmup;
  const int64_t t_max = o.t_max > 0 ? o.t_max : total_steps;
  if (t < w) {
    // LinearScheduler(alpha_i=0.0, alpha_f=peak, t_max=t_warmup):
    //   alpha_i + min(1.0, t / t_max) * (alpha_f - alpha_i)
    const double peak = o.kind == ScheduleKind::kCosineWithWarmup ? 1.0 : o.alpha_i;
    const double frac = std::min(1.0, static_cast<double>(t) / static_cast<double>(w));
    return 0.0 + frac * (peak - 0.0);
  }
  double frac = t_max > w ? static_cast<double>(t - w) / static_cast<double>(t_max - w) : 0.0;
  frac = std::min(1.0, frac);
  switch (o.kind) {
    case ScheduleKind::kCosineWithWarmup: {
      // _cosine_anneal(x, min_y=alpha_f, max_y=1.0)
      const double x = std::min(std::max(frac, 0.0), 1.0);
      return o.alpha_f + (1.0 - o.alpha_f) * (1 + std::cos(x * std::numbers::pi)) / 2;
    }
    case ScheduleKind::kLinearDecayWithWarmup:
      return o.alpha_i + frac * (o.alpha_f - o.alpha_i);
    case ScheduleKind::kConstantWithWarmup:
      // LinearWithWarmupScheduler(alpha_i=alpha, alpha_f=alpha)
      return o.alpha_i + frac * (o.alpha_i - o.alpha_i);
    case ScheduleKind::kConstant:
      break;
  }
  return 1.0;
}

double ScheduledLr(const ScheduleOptions& o, double base_lr, int64_t step, int64_t total_steps) {
  return base_lr * ScheduleMultiplier(o, ScheduleTimestamp(step), total_steps);
}

}  // namespace foundry
