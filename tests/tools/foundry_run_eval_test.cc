// End-to-end: foundry-compile writes the eval plan beside the training plan; foundry-run
// --eval-data / --eval-interval / --eval-first / --eval-only report the eval loss and
// perplexity with planned == measured memory; and --emit-ckpt-config --merge-into writes a
// training YAML that --config reads back to the same plan.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "runtime/loaded_plan.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kSource = FOUNDRY_SOURCE_DIR;
const std::string kTiny = kSource + "/models/fixtures/mpt_tiny/model.onnx";
const std::string kTinyConfig = kSource + "/configs/mpt-tiny.yaml";

class FoundryRunEvalTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    ExecResult r = Exec(kCompile, {kTiny, "--dim", "batch=2", "--dim", "seq=16", "-o", "t"}, dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_NE(r.out.find("eval plan (forward only, foundry-run --eval-data): arena "),
              std::string::npos)
        << r.out;
    std::vector<int64_t> train(4000), val(400);
    for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<int64_t>((i * 7 + 3) % 200);
    for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<int64_t>((i * 7 + 5) % 200);
    WriteTokens(Path("train.bin"), train, TokenDType::kUint16);
    WriteTokens(Path("val.bin"), val, TokenDType::kUint16);
  }
};

// Every "eval  step N  loss L  ppl P" line.
std::vector<std::pair<int64_t, double>> EvalLines(const std::string& out) {
  std::vector<std::pair<int64_t, double>> evals;
  std::regex line(R"(eval  step (\d+)  loss ([0-9.]+)  ppl ([0-9.]+)  \((\d+) batches)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it)
    evals.emplace_back(std::stoll((*it)[1]), std::stod((*it)[2]));
  return evals;
}

TEST_F(FoundryRunEvalTest, EvalEveryNStepsWithPlannedEqualToMeasured) {
  ExecResult r = Exec(kRun,
                      {"t", "--data", "train.bin", "--eval-data", "val.bin", "--eval-interval", "2",
                       "--eval-first", "--steps", "5", "--report-json", "r.json"},
                      dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(
      r.out.find(
          "  eval       --eval-data val.bin (no header, uint16, 400 tokens): 11 batches of 2 x "
          "16, every 2 steps and after the last step (in the training arena)\n"),
      std::string::npos)
      << r.out;
  auto evals = EvalLines(r.out);
  ASSERT_EQ(evals.size(), 4u) << r.out;  // before step 1, after 2, 4 and the last (5)
  EXPECT_EQ(evals[0].first, 0);
  EXPECT_EQ(evals[1].first, 2);
  EXPECT_EQ(evals[2].first, 4);
  EXPECT_EQ(evals[3].first, 5);
  EXPECT_NE(r.out.find("  arena "), std::string::npos);
  EXPECT_NE(r.out.find("(equal)"), std::string::npos) << r.out;
  std::smatch total;
  ASSERT_TRUE(std::regex_search(r.out, total, std::regex(R"(  total +(\d+) +(\d+))")));
  EXPECT_EQ(total[1], total[2]) << r.out;
  auto j = nlohmann::json::parse(ReadWholeFile(Path("r.json")));
  ASSERT_EQ(j["evals"].size(), 4u);
  EXPECT_EQ(j["evals"][3]["step"], 5);
  EXPECT_NEAR(j["evals"][3]["perplexity"].get<double>(),
              std::exp(j["evals"][3]["loss"].get<double>()), 1e-9);
  EXPECT_EQ(j["evals"][3]["tokens"], 11 * 2 * 15);  // the model shifts: 15 labels per row
}

TEST_F(FoundryRunEvalTest, EvalOnlyScoresTheSavedWeights) {
  ExecResult train = Exec(
      kRun, {"t", "--data", "train.bin", "--steps", "3", "--eval-data", "val.bin", "--save", "s"},
      dir_);
  ASSERT_EQ(train.code, 0) << train.err;
  ExecResult only =
      Exec(kRun, {"t", "--resume", "s", "--eval-only", "--eval-data", "val.bin"}, dir_);
  ASSERT_EQ(only.code, 0) << only.out << only.err;
  auto a = EvalLines(train.out), b = EvalLines(only.out);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0], b[0]);  // the same weights, the same step, the same loss
  EXPECT_EQ(only.out.find("step 4/"), std::string::npos) << only.out;
}

TEST_F(FoundryRunEvalTest, BadEvalOptions) {
  ExecResult r = Exec(kRun, {"t", "--eval-only"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-run: error: --eval-only, --eval-interval, --eval-batches and --eval-first "
            "need --eval-data FILE\n");
  r = Exec(kRun, {"t", "--eval-data", "val.bin", "--eval-only", "--steps", "2"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "foundry-run: error: --eval-only runs no step; drop --steps\n");
  r = Exec(kRun, {"t", "--eval-data", "val.bin", "--eval-batches", "0"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-run: error: --eval-batches 0: give -1 (every whole batch) or a count\n");
  WriteTokens(Path("short.bin"), {1, 2, 3}, TokenDType::kUint16);
  r = Exec(kRun, {"t", "--eval-data", "short.bin"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-run: error: --eval-data short.bin: 3 tokens is shorter than one window of "
            "seq + 1 = 17 tokens\n");
  WriteTokens(Path("one.bin"), std::vector<int64_t>(20, 1), TokenDType::kUint16);
  r = Exec(kRun, {"t", "--eval-data", "one.bin"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-run: error: --eval-data one.bin: 20 tokens hold no whole batch (2 windows "
            "of 17 tokens); give a longer file\n");
  // The eval file is an input: no output may overwrite it.
  r = Exec(kRun, {"t", "--eval-data", "val.bin", "--report-json", "val.bin"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the --eval-data file, an input of this run"), std::string::npos) << r.err;
}

// The budget's answer merged into the user's YAML reads back (--config) to the same plan.
TEST_F(FoundryRunEvalTest, MergeIntoWritesAYamlThatReadsBackToTheSamePlan) {
  ExecResult r =
      Exec(kCompile,
           {kTiny, "--config", kTinyConfig, "--memory-budget", "2.4MiB", "--device-reserve", "0",
            "--emit-ckpt-config", "merged.yaml", "--merge-into", kTinyConfig, "-o", "budget/p"},
           dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string merged = ReadWholeFile(Path("merged.yaml"));
  // Every comment of the user's file is still there.
  std::ifstream in(kTinyConfig);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("#", 0) == 0) EXPECT_NE(merged.find(line + "\n"), std::string::npos) << line;
  EXPECT_NE(merged.find("  # set by foundry-compile "), std::string::npos) << merged;
  r = Exec(kCompile, {kTiny, "--config", "merged.yaml", "-o", "again/p"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(ReadWholeFile(Path("again/p.train.onnx")), ReadWholeFile(Path("budget/p.train.onnx")));
  auto a = LoadPlan(Path("budget/p")), b = LoadPlan(Path("again/p"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->plan.memory.Layout("cpu")->arena_bytes, b->plan.memory.Layout("cpu")->arena_bytes);
  // Without --merge-into, the file says it is a fragment.
  r = Exec(kCompile,
           {kTiny, "--dim", "batch=2", "--dim", "seq=16", "--ckpt", "mptblock",
            "--emit-ckpt-config", "frag.yaml", "--dry-run"},
           dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(
      ReadWholeFile(Path("frag.yaml")).find("\n# A fragment: merge it into the training YAML"),
      std::string::npos);
  r = Exec(kCompile, {kTiny, "--merge-into", kTinyConfig, "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.err,
      "foundry-compile: error: --merge-into TRAIN.yaml needs --emit-ckpt-config OUT.yaml (the "
      "merged file)\n");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
