// The optimizer options as foundry-run takes them: range checks and names.
#include "runtime/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(OptimizerTest, OptionsInRange) {
  EXPECT_TRUE(CheckOptimizerOptions(OptimizerOptions{}).ok());
  const double nan = std::nan(""), inf = INFINITY;
  auto message = [](auto set) {
    OptimizerOptions o;
    set(o);
    return CheckOptimizerOptions(o).message();
  };
  EXPECT_EQ(message([&](auto& o) { o.lr = nan; }),
            "--lr nan: the learning rate must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.lr = inf; }),
            "--lr inf: the learning rate must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.lr = 0; }),
            "--lr 0: the learning rate must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.beta1 = 1; }), "--beta1 1: must be in [0, 1)");
  EXPECT_EQ(message([&](auto& o) { o.beta1 = nan; }), "--beta1 nan: must be in [0, 1)");
  EXPECT_EQ(message([&](auto& o) { o.beta2 = -1e-9; }), "--beta2 -1e-09: must be in [0, 1)");
  EXPECT_EQ(message([&](auto& o) { o.eps = 0; }), "--eps 0: must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.eps = inf; }), "--eps inf: must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.weight_decay = nan; }),
            "--weight-decay nan: must be a finite number >= 0");
  EXPECT_EQ(message([&](auto& o) { o.momentum = 1; }), "--momentum 1: must be in [0, 1)");
  // The edges that are allowed.
  EXPECT_EQ(message([&](auto& o) {
              o.beta1 = 0;
              o.weight_decay = 0;
              o.momentum = 0;
            }),
            "");
}

TEST(OptimizerTest, ParsesNames) {
  EXPECT_EQ(*ParseOptimizerName("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(*ParseOptimizerName("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(ParseOptimizerName("adam").status().message(),
            "unknown optimizer 'adam' (choose sgd, adamw or decoupled_adamw)");
}

}  // namespace
}  // namespace foundry
