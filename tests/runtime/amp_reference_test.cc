// --precision amp_bf16 against PyTorch's autocast: for every fixture with
// models/fixtures/<name>/amp_reference/ (models/amp_reference.py, PyTorch 2.6 CPU autocast), the
// amp_bf16 plan's first-step loss is within 1e-2 relative of PyTorch autocast's, and each
// parameter's gradient error against the float64 reference, ||g - g64|| / ||g64|| (the norm
// floored at 1e-3 of the fixture's largest: a gradient zero in exact arithmetic), is at most
// twice PyTorch autocast's own error on that parameter (plus 1e-4 of slack for parameters whose
// autocast error is itself at fp32 level: a gradient both frameworks compute in f32). A gradient
// that is zero in exact arithmetic (norm below the floor) is held to staying rounding noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "compiler/tensor_proto.h"
#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

fs::path FixturesDir() { return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures"; }

// ||got - want|| / max(||want||, floor): reference.json's measure (models/amp_reference.py).
double L2RelError(const Tensor& got, const Tensor& want, double floor) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = got.GetAsDouble(i) - want.GetAsDouble(i);
    num += d * d;
    den += want.GetAsDouble(i) * want.GetAsDouble(i);
  }
  if (!std::isfinite(num)) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

std::vector<TrainingFixture> WithReference() {
  std::vector<TrainingFixture> out;
  for (const TrainingFixture& f : TrainingFixtures(FixturesDir()))
    if (fs::exists(f.dir / "amp_reference" / "reference.json")) out.push_back(f);
  return out;
}

TEST(AmpReferenceTest, EveryDropoutFreeFixtureHasOne) {
  // models/amp_reference.py writes one for each fixture without dropout (mpt_tiny_dropout has
  // dropout on): a fixture added without rerunning it is caught here.
  EXPECT_GE(WithReference().size(), TrainingFixtures(FixturesDir()).size() - 1);
}

class AmpReferenceTest : public testing::TestWithParam<TrainingFixture> {};

TEST_P(AmpReferenceTest, LossAndGradientsWithinTwiceAutocastsError) {
  const TrainingFixture& f = GetParam();
  std::ifstream in(f.dir / "amp_reference" / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto plan = CompileFixture(f.dir / "model.onnx", f.feeds, std::vector<std::string>{},
                             Precision::kAmpBf16);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const std::map<std::string, std::string> gradients = plan->plan.gradients;
  TrainerOptions options;
  options.feeds = f.feeds;
  auto trainer = Trainer::Create(std::move(plan).value(), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  auto step = (*trainer)->Step();
  ASSERT_TRUE(step.ok()) << step.status().message();

  const double loss_ac = ref.at("loss_autocast"), loss64 = ref.at("loss_f64");
  EXPECT_LE(std::fabs(step->loss - loss_ac), 1e-2 * std::fabs(loss_ac))
      << "foundry " << step->loss << " vs PyTorch autocast " << loss_ac;
  double worst_ratio = 0;
  std::string worst;
  const nlohmann::json& ac_err = ref.at("grad_error").at("autocast");
  int compared = 0, zero = 0;
  for (const auto& [param, grad] : gradients) {
    const fs::path file = f.dir / "amp_reference" / "grads" / (param + "_grad.pb");
    if (!fs::exists(file)) continue;  // a tied alias PyTorch names by its first name
    auto want = ReadTensorFile(file.string());
    ASSERT_TRUE(want.ok()) << want.status().message();
    const Tensor& got = (*trainer)->output(grad);
    ASSERT_EQ(got.numel(), want->numel()) << param;
    const double floor = ref.at("error_floor").get<double>();
    const double ours = L2RelError(got, *want, floor);
    const double theirs = ac_err.at(param);
    double norm = 0;
    for (int64_t i = 0; i < want->numel(); ++i) norm += want->GetAsDouble(i) * want->GetAsDouble(i);
    if (std::sqrt(norm) < floor) {
      // Zero in exact arithmetic (a key bias, which cancels in the softmax): both frameworks'
      // values are rounding noise, and noise against noise is no ratio. It must stay noise:
      // below 5 % of the floor (5e-5 of the fixture's largest gradient norm).
      EXPECT_LE(ours, 0.05) << param << " (zero gradient): foundry " << ours << ", autocast "
                            << theirs;
      ++zero;
      continue;
    }
    EXPECT_LE(ours, 2 * theirs + 1e-4) << param << ": foundry " << ours << ", autocast " << theirs;
    if (theirs > 0 && ours / theirs > worst_ratio) worst_ratio = ours / theirs, worst = param;
    ++compared;
  }
  EXPECT_GT(compared, 0);
  std::cout << f.dir.filename().string() << ": loss foundry amp_bf16 " << step->loss
            << ", PyTorch autocast " << loss_ac << ", float64 " << loss64 << "; " << compared
            << " gradients compared (and " << zero
            << " zero in exact arithmetic), largest foundry/autocast error ratio " << worst_ratio
            << " (" << worst << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AmpReferenceTest, testing::ValuesIn(WithReference()),
                         [](const auto& info) { return info.param.dir.filename().string(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AmpReferenceTest);

}  // namespace
}  // namespace foundry
