// The lr schedules (runtime/lr_schedule.h): names, checks and their messages, and values worked by
// hand. The 1,000-step comparison with Composer's formulas and torch's LambdaLR /
// CosineAnnealingLR is tests/runtime/lr_schedule_reference_test.py (through foundry-run
// --print-schedule).
#include "runtime/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(ScheduleTest, NamesRoundTrip) {
  for (ScheduleKind k : {ScheduleKind::kConstant, ScheduleKind::kCosineWithWarmup,
                         ScheduleKind::kLinearDecayWithWarmup, ScheduleKind::kConstantWithWarmup})
    EXPECT_EQ(*ParseScheduleName(ScheduleName(k)), k);
  EXPECT_EQ(ParseScheduleName("cosine").status().message(),
            "unknown scheduler 'cosine' (choose constant, cosine_with_warmup, "
            "linear_decay_with_warmup or constant_with_warmup)");
}

TEST(ScheduleTest, ChecksNameTheOption) {
  ScheduleOptions o;
  o.kind = ScheduleKind::kCosineWithWarmup;
  o.t_warmup = -1;
  EXPECT_EQ(CheckScheduleOptions(o, 0).message(), "--warmup-steps -1: must be >= 0");
  o.t_warmup = 0;
  o.t_max = -5;
  EXPECT_EQ(CheckScheduleOptions(o, 0).message(),
            "--decay-steps -5: must be >= 0 (0: the run's total steps)");
  o.t_max = 0;
  o.alpha_f = NAN;
  EXPECT_EQ(CheckScheduleOptions(o, 0).message(), "--alpha-f nan: must be finite");
  o.alpha_f = 0;
  o.alpha_i = INFINITY;
  EXPECT_EQ(CheckScheduleOptions(o, 0).message(), "--alpha-i inf: must be finite");
  o.alpha_i = 1;
  // Composer: "t_max ... must be greater than or equal to max_duration".
  o.t_max = 50;
  EXPECT_EQ(CheckScheduleOptions(o, 100).message(),
            "--decay-steps 50: shorter than the run's 100 steps (--max-steps); Composer refuses a "
            "t_max below max_duration: give at least 100, or leave it out (the whole run)");
  EXPECT_TRUE(CheckScheduleOptions(o, 50).ok());
  EXPECT_TRUE(CheckScheduleOptions(o, 0).ok());
  EXPECT_EQ(CheckClipNorm(-1).message(),
            "--clip-norm -1: must be a finite number >= 0 (0: no clipping)");
  EXPECT_EQ(CheckClipNorm(NAN).message(),
            "--clip-norm nan: must be a finite number >= 0 (0: no clipping)");
  EXPECT_TRUE(CheckClipNorm(0).ok());
  EXPECT_TRUE(CheckClipNorm(1.0).ok());
}

// Composer's trainer steps the LambdaLR before it advances the timestamp: step k trains with the
// multiplier at timestamp max(k - 2, 0).
TEST(ScheduleTest, StepKUsesComposersTimestamp) {
  EXPECT_EQ(ScheduleTimestamp(1), 0);
  EXPECT_EQ(ScheduleTimestamp(2), 0);
  EXPECT_EQ(ScheduleTimestamp(3), 1);
  EXPECT_EQ(ScheduleTimestamp(1000), 998);
}

TEST(ScheduleTest, CosineWithWarmupByHand) {
  ScheduleOptions o;
  o.kind = ScheduleKind::kCosineWithWarmup;
  o.t_warmup = 10;
  o.alpha_f = 0.1;
  // Warmup: t / t_warmup.
  EXPECT_EQ(ScheduleMultiplier(o, 0, 110), 0.0);
  EXPECT_EQ(ScheduleMultiplier(o, 5, 110), 0.5);
  // After: cosine over t_max - t_warmup = 100 steps, from 1 to alpha_f.
  EXPECT_EQ(ScheduleMultiplier(o, 10, 110), 1.0);
  EXPECT_EQ(ScheduleMultiplier(o, 60, 110), 0.1 + 0.9 * (1 + std::cos(0.5 * std::numbers::pi)) / 2);
  EXPECT_EQ(ScheduleMultiplier(o, 110, 110), 0.1);
  EXPECT_EQ(ScheduleMultiplier(o, 500, 110), 0.1);  // clipped at 1
  // lr = base * alpha: steps 1 and 2 at lr 0, step 7 (timestamp 5) at half.
  EXPECT_EQ(ScheduledLr(o, 6e-4, 1, 110), 0.0);
  EXPECT_EQ(ScheduledLr(o, 6e-4, 2, 110), 0.0);
  EXPECT_EQ(ScheduledLr(o, 6e-4, 7, 110), 6e-4 * 0.5);
  // An explicit t_max wins over the total.
  o.t_max = 210;
  EXPECT_EQ(ScheduleMultiplier(o, 110, 110),
            0.1 + 0.9 * (1 + std::cos(0.5 * std::numbers::pi)) / 2);
}

TEST(ScheduleTest, LinearAndConstantWithWarmupByHand) {
  ScheduleOptions o;
  o.kind = ScheduleKind::kLinearDecayWithWarmup;
  o.t_warmup = 4;
  o.alpha_i = 2.0;
  o.alpha_f = 0.0;
  EXPECT_EQ(ScheduleMultiplier(o, 1, 104), 0.5);  // warmup to alpha_i: 1/4 * 2
  EXPECT_EQ(ScheduleMultiplier(o, 4, 104), 2.0);
  EXPECT_EQ(ScheduleMultiplier(o, 54, 104), 1.0);
  EXPECT_EQ(ScheduleMultiplier(o, 104, 104), 0.0);
  o.kind = ScheduleKind::kConstantWithWarmup;
  o.alpha_i = 0.25;
  EXPECT_EQ(ScheduleMultiplier(o, 2, 104), 0.125);
  EXPECT_EQ(ScheduleMultiplier(o, 4, 104), 0.25);
  EXPECT_EQ(ScheduleMultiplier(o, 1000, 104), 0.25);
}

// t_warmup = 0: no warmup (the timestamp is never below 0); t_warmup >= t_max: after warmup the
// fraction is 0 (Composer's `if t_max > t_warmup else 0.0`).
TEST(ScheduleTest, EdgeCases) {
  ScheduleOptions o;
  o.kind = ScheduleKind::kCosineWithWarmup;
  EXPECT_EQ(ScheduleMultiplier(o, 0, 100), 1.0);
  EXPECT_EQ(ScheduleMultiplier(o, 100, 100), 0.0);
  o.t_warmup = 100;
  EXPECT_EQ(ScheduleMultiplier(o, 99, 100), 0.99);
  EXPECT_EQ(ScheduleMultiplier(o, 100, 100), 1.0);
  EXPECT_EQ(ScheduleMultiplier(o, 5000, 100), 1.0);
  o.kind = ScheduleKind::kConstant;
  EXPECT_EQ(ScheduledLr(o, 1e-3, 1, 0), 1e-3);
  EXPECT_EQ(ScheduledLr(o, 1e-3, 12345, 0), 1e-3);
}

}  // namespace
}  // namespace foundry
