// End-to-end: `foundry-run PREFIX --config TRAIN.yaml` with the shipped llm-foundry-format
// configs/mpt-tiny.yaml, every key of which foundry-run reads: the optimizer (decoupled_adamw,
// betas, eps, weight decay), the cosine schedule with warmup, gradient clipping, max_duration,
// eval_interval, save_interval / save_folder / save_num_checkpoints_to_keep, seed and
// console_log_interval become the options they stand for; the microbatch, sequence and
// accumulation steps are checked against the plan; a flag given too wins with a warning.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "runtime/lr_schedule.h"
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

class FoundryRunConfigTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    ExecResult r = Exec(kCompile, {kTiny, "--config", kTinyConfig, "-o", "out/tiny"}, dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<int64_t> train(6000), val(600);
    for (size_t i = 0; i < train.size(); ++i)
      train[i] = static_cast<int64_t>((i * 7 + i / 13) % 97);
    for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<int64_t>((i * 7 + i / 11) % 97);
    WriteTokens(Path("train.bin"), train, TokenDType::kUint16);
    WriteTokens(Path("val.bin"), val, TokenDType::kUint16);
  }
};

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST_F(FoundryRunConfigTest, TheYamlDrivesTheWholeRun) {
  ExecResult r = Exec(kRun,
                      {"out/tiny", "--config", kTinyConfig, "--data", "train.bin", "--eval-data",
                       "val.bin", "--metrics", "m.jsonl", "--report-json", "r.json"},
                      dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // Header: the optimizer, the schedule, clipping, accumulation as the YAML says.
  EXPECT_NE(r.out.find("  optimizer  decoupled_adamw  lr 0.003  betas (0.9, 0.95)  eps 1e-08"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("4 x 16 per microbatch, 2 microbatches per step"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cosine_with_warmup"), std::string::npos) << r.out;
  // max_duration 200ba; checkpoints every 100 steps in save_folder, the newest 1 kept.
  auto report = nlohmann::json::parse(ReadWholeFile(Path("r.json")));
  EXPECT_EQ(report["steps"], 200);
  EXPECT_TRUE(fs::is_directory(Path("out/tiny-checkpoints/step200")));
  EXPECT_FALSE(fs::exists(Path("out/tiny-checkpoints/step100")));
  // Each step's lr is Composer's cosine with 10 warmup steps, alpha_f 0.1, over 200 steps.
  ScheduleOptions sc;
  sc.kind = ScheduleKind::kCosineWithWarmup;
  sc.t_warmup = 10;
  sc.alpha_f = 0.1;
  ASSERT_EQ(report["step_lr"].size(), 200u);
  for (int64_t k = 1; k <= 200; ++k)
    EXPECT_EQ(report["step_lr"][k - 1].get<double>(), ScheduledLr(sc, 3.0e-3, k, 200)) << k;
  // Clipping at 1.0: the norm is measured every step.
  EXPECT_EQ(report["step_grad_norm"].size(), 200u);
  // console_log_interval 10ba: metrics at steps 1, 10, 20, ..., 200; eval_interval 50ba: evals
  // at 50, 100, 150, 200.
  std::vector<int64_t> train_steps, eval_steps;
  for (const auto& j : Lines(Path("m.jsonl")))
    (j.contains("eval_loss") ? eval_steps : train_steps).push_back(j["step"].get<int64_t>());
  std::vector<int64_t> want = {1};
  for (int64_t s = 10; s <= 200; s += 10) want.push_back(s);
  EXPECT_EQ(train_steps, want);
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{50, 100, 150, 200}));
  // It learns: the last eval below the first.
  ASSERT_EQ(report["evals"].size(), 4u);
  EXPECT_LT(report["evals"][3]["loss"].get<double>(), report["evals"][0]["loss"].get<double>());
}

// The shipped config names its data: train_loader and eval_loader read the MDS splits under
// ./out/tiny-data (here the fixture's), shuffled with the YAML's seed, drop_last.
TEST_F(FoundryRunConfigTest, TheYamlsLoadersReadMdsSplits) {
  fs::create_directories(Path("out/tiny-data"));
  for (const char* split : {"train", "val"})
    fs::copy(kSource + "/tests/data/mds/mpt_tiny/" + split, Path("out/tiny-data/") + split);
  ExecResult r = Exec(kRun,
                      {"out/tiny", "--config", kTinyConfig, "--max-steps", "20", "--steps", "20",
                       "--report-json", "r.json"},
                      dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("  data       --data ./out/tiny-data/train (MDS, 3 shards, 64 samples, "
                       "column tokens (ndarray:int32), zstd, hashes verified: xxh64; shuffled by "
                       "foundry's own order, seed 17, blocks of 262144; drop_last)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  eval       --eval-data ./out/tiny-data/val (MDS, 1 shard, 16 samples"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("train_loader.num_workers, eval_loader.num_workers"), std::string::npos)
      << r.err;
  auto report = nlohmann::json::parse(ReadWholeFile(Path("r.json")));
  EXPECT_EQ(report["steps"], 20);
  // The folder is read, never written.
  EXPECT_EQ(ReadWholeFile(Path("out/tiny-data/train/index.json")),
            ReadWholeFile(kSource + "/tests/data/mds/mpt_tiny/train/index.json"));
}

TEST_F(FoundryRunConfigTest, AFlagWinsAndThePlanMustMatch) {
  ExecResult r = Exec(
      kRun,
      {"out/tiny", "--config", kTinyConfig, "--data", "train.bin", "--steps", "2", "--lr", "0.01"},
      dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("foundry-run: warning: --lr 0.01 overrides " + kTinyConfig +
                       "'s optimizer.lr (0.003)\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("foundry-run: note: " + kTinyConfig + ": keys foundry does not read"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("  optimizer  decoupled_adamw  lr 0.01"), std::string::npos) << r.out;
  // A plan compiled for another microbatch.
  ASSERT_EQ(Exec(kCompile, {kTiny, "--dim", "batch=2", "--dim", "seq=16", "-o", "b2"}, dir_).code,
            0);
  r = Exec(kRun, {"b2", "--config", kTinyConfig, "--data", "train.bin"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("foundry-run: error: --config " + kTinyConfig +
                       ": device_train_microbatch_size is 4 but 'b2.plan' has batch 2; compile "
                       "the plan with foundry-compile --config " +
                       kTinyConfig + "\n"),
            std::string::npos)
      << r.err;
}

// eval_first, eval_subset_num_batches, seed and a linear schedule's alpha_i / alpha_f, each
// against the flags it stands for.
TEST_F(FoundryRunConfigTest, EvalFirstSubsetSeedAndLinearSchedule) {
  std::ifstream in(kTinyConfig);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("eval_first: false"), 17, "eval_first: true");
  text.replace(text.find("eval_subset_num_batches: -1"), 27, "eval_subset_num_batches: 2");
  text.replace(text.find("global_seed: 17"), 15, "global_seed: 5");
  text.replace(text.find("name: cosine_with_warmup"), 24, "name: linear_decay_with_warmup");
  text.replace(text.find("alpha_f: 0.1"), 12, "alpha_i: 0.5\n  alpha_f: 0.2");
  std::ofstream(Path("t.yaml")) << text;
  const std::vector<std::string> common = {"out/tiny", "--data",  "train.bin", "--eval-data",
                                           "val.bin",  "--steps", "3",         "--report-json"};
  auto args = [&](std::vector<std::string> a, const std::string& report) {
    std::vector<std::string> all = common;
    all.push_back(report);
    all.insert(all.end(), a.begin(), a.end());
    return all;
  };
  ExecResult from_yaml = Exec(kRun, args({"--config", "t.yaml"}, "a.json"), dir_);
  ASSERT_EQ(from_yaml.code, 0) << from_yaml.out << from_yaml.err;
  ExecResult from_flags = Exec(kRun,
                               args({"--optimizer",
                                     "decoupled_adamw",
                                     "--lr",
                                     "0.003",
                                     "--beta2",
                                     "0.95",
                                     "--scheduler",
                                     "linear_decay_with_warmup",
                                     "--warmup-steps",
                                     "10",
                                     "--max-steps",
                                     "200",
                                     "--alpha-i",
                                     "0.5",
                                     "--alpha-f",
                                     "0.2",
                                     "--clip-norm",
                                     "1",
                                     "--seed",
                                     "5",
                                     "--eval-first",
                                     "--eval-batches",
                                     "2"},
                                    "b.json"),
                               dir_);
  ASSERT_EQ(from_flags.code, 0) << from_flags.out << from_flags.err;
  auto a = nlohmann::json::parse(ReadWholeFile(Path("a.json")));
  auto b = nlohmann::json::parse(ReadWholeFile(Path("b.json")));
  EXPECT_EQ(a["losses"], b["losses"]);
  EXPECT_EQ(a["step_lr"], b["step_lr"]);
  EXPECT_EQ(a["evals"], b["evals"]);
  ASSERT_EQ(a["evals"].size(), 2u);  // before the first step (eval_first) and after the last
  EXPECT_EQ(a["evals"][0]["step"], 0);
  EXPECT_EQ(a["evals"][0]["batches"], 2);  // eval_subset_num_batches
  // The seed reaches the run (mpt_tiny has no dropout, so the losses cannot show it): the save
  // records it.
  ExecResult saved = Exec(kRun, args({"--config", "t.yaml", "--save", "s"}, "c.json"), dir_);
  ASSERT_EQ(saved.code, 0) << saved.err;
  auto state = nlohmann::json::parse(ReadWholeFile(Path("s/state.json")));
  EXPECT_EQ(state["seed"], 5);
}

TEST_F(FoundryRunConfigTest, DurationsInTokensAndEpochs) {
  // max_duration in tokens: 2 steps of 2 x 4 x 16 tokens = 256 tokens -> 2 steps; t_warmup in
  // epochs of the --data file.
  std::ifstream in(kTinyConfig);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("max_duration: 200ba"), 19, "max_duration: 200tok");
  text.replace(text.find("t_warmup: 10ba"), 14, "t_warmup: 1ep");
  std::ofstream(Path("t.yaml")) << text;
  ExecResult r = Exec(kRun,
                      {"out/tiny", "--config", "t.yaml", "--data", "train.bin", "--report-json",
                       "r.json", "--print-schedule"},
                      dir_);
  // 200 tokens over 128 per step: 2 steps (Composer stops at the first batch past the count).
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("# cosine_with_warmup, lr 0.003, 2 steps\n", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  // The YAML's training split missing is an error that names it; without any data (no
  // loaders, no --data), an epoch is an error that says so.
  text.replace(text.find("max_duration: 200tok"), 20, "max_duration: 2ep");
  std::ofstream(Path("e.yaml")) << text;
  r = Exec(kRun, {"out/tiny", "--config", "e.yaml"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--config e.yaml: train_loader.dataset: no MDS split at "
                       "./out/tiny-data/train (no index.json there"),
            std::string::npos)
      << r.err;
  text.erase(text.find("train_loader:"), text.find("# Optimization") - text.find("train_loader:"));
  std::ofstream(Path("e.yaml")) << text;
  r = Exec(kRun, {"out/tiny", "--config", "e.yaml"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("max_duration' is 2ep (epochs): an epoch is known only from a --data "
                       "file"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace foundry
