#include "compiler/phase.h"

#include <gtest/gtest.h>

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(PhaseTest, NamesRoundTripAndUnknownMarksAreNoPhase) {
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kRecompute, Phase::kOptimizer})
    EXPECT_EQ(ParsePhase(PhaseName(p)), p);
  Node n;
  EXPECT_EQ(PhaseOf(n), std::nullopt);
  SetPhase(n, Phase::kRecompute);
  EXPECT_EQ(n.marks.at("phase"), "recompute");
  EXPECT_EQ(PhaseOf(n), Phase::kRecompute);
  n.marks["phase"] = "Forward";
  EXPECT_EQ(PhaseOf(n), std::nullopt);
}

}  // namespace
}  // namespace foundry
