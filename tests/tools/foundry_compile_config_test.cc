// End-to-end: `foundry-compile MODEL --config TRAIN.yaml` with the shipped llm-foundry-format
// configs (configs/*.yaml): the token input's dimensions, precision and checkpointing come from
// the file, its model keys are checked against the export, the keys foundry does not read are
// listed once, and the command line wins over the file with a warning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/loaded_plan.h"
#include "tests/support/exec.h"
#include "tests/support/sanitizer.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kSource = FOUNDRY_SOURCE_DIR;
const std::string kTiny = kSource + "/models/fixtures/mpt_tiny/model.onnx";
const std::string kTinyConfig = kSource + "/configs/mpt-tiny.yaml";

class FoundryCompileConfigTest : public ScratchDirTest {};

TEST_F(FoundryCompileConfigTest, TheTinyConfigGivesDimsPrecisionAndCheckpointing) {
  ExecResult r = Exec(kCompile, {kTiny, "--config", kTinyConfig, "-o", "out/tiny"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "foundry-compile: note: " + kTinyConfig +
                       ": keys foundry does not read (ignored): run_name, tokenizer, "
                       "progress_bar, log_to_console, callbacks, model.init_device, "
                       "model.attn_config.attn_impl, model.attn_config.alibi, "
                       "train_loader.num_workers, eval_loader.num_workers\n");
  // activation_checkpointing: true without a target: every block.
  EXPECT_NE(r.out.find("checkpointing: 2 instances of block\n"), std::string::npos) << r.out;
  auto plan = LoadPlan(Path("out/tiny"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->plan.dims, (std::map<std::string, int64_t>{{"batch", 4}, {"seq", 16}}));
  // global_train_batch_size 8 / device_train_microbatch_size 4: two microbatches per step.
  EXPECT_EQ(plan->plan.grad_accumulation, 2);
}

TEST_F(FoundryCompileConfigTest, TheCommandLineWinsWithAWarning) {
  ExecResult r = Exec(kCompile,
                      {kTiny, "--config", kTinyConfig, "--dim", "seq=8", "--precision", "amp_bf16",
                       "--ckpt", "grouped_query_attention", "--dry-run"},
                      dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("foundry-compile: warning: --precision amp_bf16 overrides " + kTinyConfig +
                       "'s precision: fp32\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("foundry-compile: warning: --ckpt overrides " + kTinyConfig +
                       "'s activation checkpointing\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("foundry-compile: warning: --dim seq=8 overrides " + kTinyConfig +
                       "'s max_seq_len 16\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("checkpointing: 2 instances of grouped_query_attention\n"),
            std::string::npos)
      << r.out;
}

TEST_F(FoundryCompileConfigTest, AYamlForAnotherModelIsRefused) {
  // mpt-125m.yaml describes a 768-wide model; the tiny export is 64 wide.
  ExecResult r =
      Exec(kCompile,
           {kTiny, "--config", kSource + "/configs/mpt-125m.yaml", "--dim", "seq=16", "--dry-run"},
           dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("foundry-compile: error: --config " + kSource +
                       "/configs/mpt-125m.yaml: model.d_model is 768 but the export's token "
                       "embedding 'transformer.wte.weight' is 256 x 64: the YAML and the export "
                       "describe different models (export the model the YAML configures, or fix "
                       "the YAML)\n"),
            std::string::npos)
      << r.err;
  // The heads are checked on the compiled graph (fused attention).
  fs::create_directories(Path("c"));
  std::ifstream in(kTinyConfig);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("n_heads: 4"), 10, "n_heads: 8");
  std::ofstream(Path("c/heads.yaml")) << text;
  r = Exec(kCompile, {kTiny, "--config", "c/heads.yaml", "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("foundry-compile: error: --config c/heads.yaml: model.n_heads is 8 but the "
                       "export's attention (transformer.blocks.0.attn) has 4 query heads and 4 "
                       "key/value heads"),
            std::string::npos)
      << r.err;
}

TEST_F(FoundryCompileConfigTest, ConflictsAndBadFiles) {
  ExecResult r = Exec(
      kCompile, {kTiny, "--config", kTinyConfig, "--ckpt-config", kTinyConfig, "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --config and --ckpt-config both give the checkpointing; "
            "drop --ckpt-config (--config reads the same keys)\n");
  r = Exec(kCompile, {kTiny, "--config", "missing.yaml", "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --config missing.yaml: cannot read the file: No such file or "
            "directory\n");
  // The config is an input: -o may not overwrite it.
  fs::copy_file(kTinyConfig, Path("t.plan"));
  r = Exec(kCompile, {kTiny, "--config", "t.plan", "-o", "t"}, dir_);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("the --config file, an input of this command"), std::string::npos) << r.err;
}

// model.loss_fn picks the loss's backward (passes/loss_backward.h); --loss-fn wins over it.
TEST_F(FoundryCompileConfigTest, LossFnFromTheConfigOrTheCommandLine) {
  std::ofstream(Path("torch.yaml")) << "model:\n  loss_fn: torch_crossentropy\n";
  ExecResult r = Exec(
      kCompile,
      {kTiny, "--config", "torch.yaml", "--dim", "batch=2", "--dim", "seq=16", "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("loss_backward: 1 cross-entropy backward as torch_crossentropy"),
            std::string::npos)
      << r.out;
  r = Exec(kCompile,
           {kTiny, "--config", "torch.yaml", "--loss-fn", "fused_crossentropy", "--dim", "batch=2",
            "--dim", "seq=16", "--dry-run"},
           dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("loss_backward"), std::string::npos) << r.out;
  r = Exec(kCompile, {kTiny, "--loss-fn", "focal", "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --loss-fn 'focal': give fused_crossentropy or "
            "torch_crossentropy\n");
  r = Exec(kCompile, {kTiny, "--autocast-weight-copies", "kept", "--dry-run"}, dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --autocast-weight-copies 'kept': give saved or recast\n");
  // An FSDP run saves autocast's copies by default; one process casts again.
  r = Exec(kCompile,
           {kTiny, "--precision", "amp_bf16", "--fsdp-mixed-precision", "FULL", "--world-size", "2",
            "--dim", "batch=2", "--dim", "seq=16", "--dry-run"},
           dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("autocast-recast: 0 parameter casts repeated for the recompute"),
            std::string::npos)
      << r.out;
  r = Exec(kCompile,
           {kTiny, "--precision", "amp_bf16", "--dim", "batch=2", "--dim", "seq=16", "--dry-run"},
           dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("parameter casts repeated for the backward"), std::string::npos) << r.out;
}

// llm-foundry's own sizes on the shipped exports: MPT-125M (no checkpointing, amp_bf16,
// microbatch 16 x 2048) and MPT-7B (every block checkpointed, microbatch 8 x 2048).
TEST_F(FoundryCompileConfigTest, TheUpstreamSizedConfigsCompileTheShippedExports) {
  FOUNDRY_SKIP_UNDER_SANITIZERS();  // the plans of 16 x 2048 and 8 x 2048 steps: minutes there
  ExecResult r = Exec(kCompile,
                      {kSource + "/models/exports/mpt_125m.onnx", "--config",
                       kSource + "/configs/mpt-125m.yaml", "--dry-run"},
                      dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("batch=16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seq=2048"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  autocast: "), std::string::npos) << r.out;  // precision: amp_bf16
  r = Exec(kCompile,
           {kSource + "/models/exports/mpt_7b.onnx", "--config", kSource + "/configs/mpt-7b.yaml",
            "--dry-run"},
           dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("batch=8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpointing: 32 instances of block\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace foundry
