// The finite-difference helper itself (tests/support/grad_check.h) must be able to fail: a NaN or
// Inf anywhere in the analytic or the numeric gradient is a mismatch, never a silent pass.
#include "tests/support/grad_check.h"

#include <gtest/gtest.h>

#include <limits>

#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(GradCheckTest, NonFiniteValuesAreAlwaysAMismatch) {
  GradCheckOptions o;
  EXPECT_EQ(GradientErrorRatio(1.0, 1.0, o), 0.0);
  // 0.01 off on a numeric gradient of 1: allowed is 2e-3 + 1e-2 * 1 = 0.012.
  EXPECT_NEAR(GradientErrorRatio(1.01, 1.0, o), 0.01 / 0.012, 1e-12);
  for (auto [a, n] : {std::pair{kNan, 1.0},
                      {1.0, kNan},
                      {kNan, kNan},
                      {kInf, 1.0},
                      {1.0, kInf},
                      {kInf, kInf},
                      {-kInf, -kInf}}) {
    SCOPED_TRACE(std::to_string(a) + " vs " + std::to_string(n));
    EXPECT_GT(GradientErrorRatio(a, n, o), 1.0);
  }
}

// End to end: a NaN or Inf in an input makes the forward (and so the numeric gradient) non-finite
// at the perturbed element; the check must report it instead of passing.
TEST(GradCheckTest, NanOrInfInputFailsTheCheck) {
  Node mul = MakeNode("Mul", {"a", "b"});
  Tensor a = RandomTensor({2, 3}, 1), b = RandomTensor({2, 3}, 2);
  ASSERT_TRUE(CheckGradients(mul, {{"a", a}, {"b", b}}).ok());
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    Tensor poisoned = a;
    poisoned.data<float>()[4] = bad;
    Status st = CheckGradients(mul, {{"a", poisoned}, {"b", b}});
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("Mul: d/d"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace foundry
