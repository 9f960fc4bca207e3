// MapRunConfig (driver/run_config.h): the keys of a training YAML as the foundry-run options they
// stand for, in order, durations in steps of the plan's batch; the plan checked against the YAML;
// the notes, and the first key foundry cannot follow an error after the options before it.
#include "driver/run_config.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "compiler/plan.h"
#include "driver/compile.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

class RunConfigTest : public ScratchDirTest {
 protected:
  // foundry-compile mpt_tiny --dim batch=2 --dim seq=16 -o DIR/m: one step is 2 x 16 tokens.
  void SetUp() override {
    ScratchDirTest::SetUp();
    CompileRequest c;
    c.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
    c.dims = {{"batch", 2}, {"seq", 16}};
    c.output_prefix = Path("m");
    StatusOr<CompileResult> r = Compile(c);
    ASSERT_TRUE(r.ok()) << r.status().message();
    Status st = WriteCompiledOutputs(r->graph, &*r->plan, c.output_prefix);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  // Maps `yaml`; each option set becomes "FLAG=VALUE (KEY)" in `set_`, each note a line in
  // `notes_`.
  Status Map(const std::string& yaml, bool eval_data = false) {
    set_.clear();
    notes_.clear();
    StatusOr<TrainConfig> config = ParseTrainConfigText(yaml, "t.yaml");
    if (!config.ok()) return config.status();
    RunConfigRequest r;
    r.path = "t.yaml";
    r.plan = Path("m");
    r.data_dtype = "auto";
    r.eval_data = eval_data;
    r.set = [&](const ConfigOption& o) {
      std::ostringstream value;
      if (const auto* text = std::get_if<std::string>(&o.value)) value << *text;
      if (const auto* number = std::get_if<double>(&o.value)) value << *number;
      if (std::holds_alternative<bool>(o.value)) value << "on";
      set_.push_back(o.flag + "=" + value.str() + " (" + o.key + ")");
    };
    r.note = [&](const std::string& line) { notes_.push_back(line); };
    return MapRunConfig(*config, r);
  }
  std::vector<std::string> set_, notes_;
};

TEST_F(RunConfigTest, EachKeyBecomesItsOptionInOrder) {
  Status st = Map(
      "max_duration: 320tok\n"  // 320 tokens / (2 x 16) per step = 10 steps
      "optimizer:\n  name: adamw\n  lr: 0.01\n  betas: [0.8, 0.9]\n"
      "scheduler:\n  name: cosine_with_warmup\n  t_warmup: 0.2dur\n  alpha_f: 0.1\n"
      "algorithms:\n  gradient_clipping:\n    clipping_type: norm\n    clipping_threshold: 1.5\n"
      "seed: 3\n"
      "console_log_interval: 5ba\n"
      "eval_interval: 4sp\n"  // 4 samples / 2 per step
      "eval_first: true\n"
      "eval_subset_num_batches: 3\n"
      "save_interval: 5ba\n"
      "save_folder: ck\n"
      "save_num_checkpoints_to_keep: -1\n",
      /*eval_data=*/true);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(set_, (std::vector<std::string>{
                      "--max-steps=10 (max_duration)", "--steps=10 (max_duration)",
                      "--optimizer=adamw (optimizer.name)", "--lr=0.01 (optimizer.lr)",
                      "--beta1=0.8 (optimizer.betas[0])", "--beta2=0.9 (optimizer.betas[1])",
                      "--scheduler=cosine_with_warmup (scheduler.name)",
                      "--warmup-steps=2 (scheduler.t_warmup)",  // 0.2 of 10 steps
                      "--alpha-f=0.1 (scheduler.alpha_f)",
                      "--clip-norm=1.5 (algorithms.gradient_clipping.clipping_threshold)",
                      "--seed=3 (seed)", "--log-interval=5 (console_log_interval)",
                      "--eval-interval=2 (eval_interval)", "--eval-first=on (eval_first)",
                      "--eval-batches=3 (eval_subset_num_batches)",
                      "--save-interval=5 (save_interval)", "--save-folder=ck (save_folder)",
                      "--save-keep=0 (save_num_checkpoints_to_keep)",  // -1: all, foundry's 0
                  }));
  EXPECT_TRUE(notes_.empty());
}

TEST_F(RunConfigTest, KeysReadOnlyWithAnotherAreNotes) {
  Status st = Map("eval_interval: 5ba\nsave_interval: 5ba\n");
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(set_.empty());
  EXPECT_EQ(
      notes_,
      (std::vector<std::string>{
          "t.yaml: eval_interval 5ba is read when --eval-data or eval_loader names the held-out "
          "tokens",
          "t.yaml: save_interval is read with save_folder (as Composer saves); none is set"}));
}

TEST_F(RunConfigTest, ThePlanMustBeTheOneTheYamlCompilesTo) {
  Status st = Map("device_train_microbatch_size: 4\nmax_duration: 3ba\n");
  EXPECT_EQ(st.message(), "--config t.yaml: device_train_microbatch_size is 4 but '" + Path("m") +
                              ".plan' has batch 2; compile the plan with foundry-compile --config "
                              "t.yaml");
  EXPECT_TRUE(set_.empty());
  st = Map("max_seq_len: 32\n");
  EXPECT_EQ(st.message(), "--config t.yaml: max_seq_len is 32 but '" + Path("m") +
                              ".plan' has sequence 16; compile the plan with foundry-compile "
                              "--config t.yaml");
}

TEST_F(RunConfigTest, AKeyFoundryCannotFollowStopsAfterTheOptionsBeforeIt) {
  Status st = Map("max_duration: 4ba\nsave_interval: 2ba\nsave_folder: s3://bucket/ck\n");
  EXPECT_EQ(st.message(),
            "--config t.yaml: save_folder 's3://bucket/ck' is a remote store; foundry writes local "
            "folders: give --save-folder DIR");
  EXPECT_EQ(set_,
            (std::vector<std::string>{"--max-steps=4 (max_duration)", "--steps=4 (max_duration)"}));
  st = Map("max_duration: 1ep\n");  // no --data: an epoch is unknown
  EXPECT_NE(st.message().find("--config t.yaml: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("an epoch is known only from a --data file"), std::string::npos)
      << st.message();
}

// train_loader / eval_loader: their MDS splits as --data / --eval-data, the training split's
// reading keys as options; an epoch is the folder's samples over the global batch.
TEST_F(RunConfigTest, LoadersNameMdsSplitsAndHowTheyAreRead) {
  const std::string root = std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/mds/mpt_tiny";
  const std::string loaders =
      "train_loader:\n  name: text\n  dataset:\n    local: " + root +
      "\n    split: train\n    shuffle: true\n    shuffle_seed: 17\n    max_seq_len: 16\n"
      "    shuffle_block_size: 32\n    predownload: 8\n  drop_last: true\n  num_workers: 8\n"
      "eval_loader:\n  name: text\n  dataset:\n    local: " +
      root +
      "\n    split: val\n    shuffle: false\n  drop_last: false\n"
      "max_duration: 2ep\neval_interval: 5ba\n";
  Status st = Map(loaders);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(set_, (std::vector<std::string>{
                      "--data=" + root + "/train (train_loader.dataset.local)",
                      "--shuffle=on (train_loader.dataset.shuffle)",
                      "--shuffle-seed=17 (train_loader.dataset.shuffle_seed)",
                      "--shuffle-block-size=32 (train_loader.dataset.shuffle_block_size)",
                      "--drop-last=on (train_loader.drop_last)",
                      "--eval-data=" + root + "/val (eval_loader.dataset.local)",
                      "--max-steps=64 (max_duration)",  // 64 samples, 2 a step: 32 an epoch
                      "--steps=64 (max_duration)",
                      "--eval-interval=5 (eval_interval)",
                  }));
  auto config = ParseTrainConfigText(loaders, "t.yaml");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(IgnoredKeysLine(*config),
            "t.yaml: keys foundry does not read (ignored): train_loader.num_workers, "
            "train_loader.dataset.predownload");
}

TEST_F(RunConfigTest, LoaderRefusals) {
  const std::string root = std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/mds/mpt_tiny";
  auto train = [&](const std::string& dataset, const std::string& name = "text") {
    return "train_loader:\n  name: " + name + "\n  dataset:\n" + dataset;
  };
  EXPECT_EQ(Map(train("    local: " + root + "\n    split: test\n")).message(),
            "--config t.yaml: train_loader.dataset: no MDS split at " + root +
                "/test (no index.json there); write it with llm-foundry's convert_dataset_hf.py, "
                "or set local and split");
  EXPECT_EQ(
      Map(train("    local: /nonexistent\n    remote: s3://b/c4\n    split: train\n")).message(),
      "--config t.yaml: train_loader.dataset: remote s3://b/c4 is a remote store; foundry "
      "reads local folders: download the dataset (with streaming, or your store's copy "
      "tool) and set local");
  EXPECT_EQ(Map(train("    local: /x\n    remote: " + root + "\n    split: train\n")).message(),
            "");
  EXPECT_EQ(notes_,
            (std::vector<std::string>{"t.yaml: train_loader.dataset: reading remote " + root +
                                      "/train in place (streaming would copy it "
                                      "to local first)"}));
  EXPECT_EQ(
      Map(train("    local: " + root + "\n    split: train\n    max_seq_len: 32\n")).message(),
      "--config t.yaml: train_loader.dataset.max_seq_len is 32 but the plan's sequence is "
      "16 (llm-foundry cuts samples at it); make them one");
  // foundry-compile reads no data: the file parses, and the loader's problem waits for
  // foundry-run (which does not read the loaders when --data names the data).
  auto finetuning = ParseTrainConfigText(train("    local: x\n", "finetuning"), "t.yaml");
  ASSERT_TRUE(finetuning.ok()) << finetuning.status().message();
  EXPECT_NE(finetuning->train_loader->problem.find("foundry reads llm-foundry's `text` loader"),
            std::string::npos);
  EXPECT_NE(
      Map(train("    local: x\n", "finetuning"))
          .message()
          .find(
              "key 'train_loader.name' is 'finetuning'; foundry reads llm-foundry's `text` loader"),
      std::string::npos);
  EXPECT_NE(Map(train("    streams:\n      a:\n        local: x\n"))
                .message()
                .find("key 'train_loader.dataset.streams' mixes several datasets"),
            std::string::npos);
  EXPECT_NE(Map(train("    local: x\n    eos_token_id: 0\n"))
                .message()
                .find("key 'train_loader.dataset.eos_token_id' changes the samples"),
            std::string::npos);
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
