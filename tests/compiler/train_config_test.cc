// --config: llm-foundry's training YAML as foundry reads it (compiler/train_config.h). The shipped
// configs/*.yaml are written in llm-foundry's format with every key of its pretrain/mpt-125m.yaml
// and mpt-7b.yaml; each key foundry reads has a test here.
#include "compiler/train_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "compiler/onnx_import.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::string Source(const std::string& rel) { return std::string(FOUNDRY_SOURCE_DIR) + "/" + rel; }

TrainConfig Parsed(const std::string& text) {
  auto c = ParseTrainConfigText(text, "t.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : TrainConfig();
}

std::string ErrorOf(const std::string& text) {
  auto c = ParseTrainConfigText(text, "t.yaml");
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(TrainConfig, ReadsEveryKeyOfTheShippedTinyConfig) {
  auto c = ReadTrainConfig(Source("configs/mpt-tiny.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.name, "mpt_causal_lm");
  EXPECT_EQ(c->model.d_model, 64);
  EXPECT_EQ(c->model.n_heads, 4);
  EXPECT_EQ(c->model.n_layers, 2);
  EXPECT_EQ(c->model.expansion_ratio, 4);
  EXPECT_EQ(c->model.max_seq_len, 16);  // ${variables.max_seq_len}, an int
  EXPECT_EQ(c->model.vocab_size, 256);
  EXPECT_EQ(c->max_seq_len, 16);
  EXPECT_EQ(c->precision, "fp32");
  EXPECT_EQ(c->device_train_microbatch_size, 4);
  EXPECT_EQ(c->global_train_batch_size, 8);
  EXPECT_EQ(c->device_eval_batch_size, 4);
  ASSERT_TRUE(c->optimizer);
  EXPECT_EQ(c->optimizer->name, "decoupled_adamw");
  EXPECT_DOUBLE_EQ(*c->optimizer->lr, 3.0e-3);
  EXPECT_DOUBLE_EQ(*c->optimizer->beta1, 0.9);
  EXPECT_DOUBLE_EQ(*c->optimizer->beta2, 0.95);
  EXPECT_DOUBLE_EQ(*c->optimizer->eps, 1.0e-8);
  EXPECT_DOUBLE_EQ(*c->optimizer->weight_decay, 0.0);
  ASSERT_TRUE(c->scheduler);
  EXPECT_EQ(c->scheduler->name, "cosine_with_warmup");
  EXPECT_EQ(c->scheduler->t_warmup->text, "10ba");
  EXPECT_FALSE(c->scheduler->t_max);
  EXPECT_DOUBLE_EQ(*c->scheduler->alpha_f, 0.1);
  ASSERT_TRUE(c->clipping);
  EXPECT_EQ(c->clipping->type, "norm");
  EXPECT_DOUBLE_EQ(c->clipping->threshold, 1.0);
  EXPECT_EQ(c->max_duration->text, "200ba");
  EXPECT_EQ(c->eval_interval->text, "50ba");
  EXPECT_EQ(c->eval_first, false);
  EXPECT_EQ(c->eval_subset_num_batches, -1);
  EXPECT_EQ(c->save_interval->text, "100ba");
  EXPECT_EQ(c->save_folder, "./out/tiny-checkpoints");
  EXPECT_EQ(c->save_num_checkpoints_to_keep, 1);
  EXPECT_EQ(c->seed, 17u);  // ${variables.global_seed}
  EXPECT_EQ(c->console_log_interval->text, "10ba");
  EXPECT_EQ(c->fsdp.at("sharding_strategy"), "FULL_SHARD");
  EXPECT_EQ(c->fsdp.at("mixed_precision"), "PURE");
  EXPECT_EQ(c->fsdp.at("activation_checkpointing"), "true");
  // activation_checkpointing: true and no target: every block, as llm-foundry.
  ASSERT_TRUE(c->ckpt.enabled);
  ASSERT_EQ(c->ckpt.targets.size(), 1u);
  EXPECT_EQ(c->ckpt.targets[0].name, "block");
  EXPECT_EQ(c->ckpt.targets[0].source, "--config " + Source("configs/mpt-tiny.yaml"));
  // Everything else is listed once, in file order.
  EXPECT_EQ(c->ignored,
            (std::vector<std::string>{"run_name", "tokenizer", "progress_bar", "log_to_console",
                                      "callbacks", "model.init_device",
                                      "model.attn_config.attn_impl", "model.attn_config.alibi",
                                      "train_loader.num_workers", "eval_loader.num_workers"}));
  EXPECT_EQ(IgnoredKeysLine(*c),
            Source("configs/mpt-tiny.yaml") +
                ": keys foundry does not read (ignored): run_name, tokenizer, progress_bar, "
                "log_to_console, callbacks, model.init_device, model.attn_config.attn_impl, "
                "model.attn_config.alibi, train_loader.num_workers, eval_loader.num_workers");
  EXPECT_EQ(*AccumulationSteps(*c), 2);
}

TEST(TrainConfig, ReadsTheShippedUpstreamSizedConfigs) {
  auto c125 = ReadTrainConfig(Source("configs/mpt-125m.yaml"));
  ASSERT_TRUE(c125.ok()) << c125.status().message();
  EXPECT_EQ(c125->model.d_model, 768);
  EXPECT_EQ(c125->max_seq_len, 2048);
  EXPECT_EQ(c125->precision, "amp_bf16");
  EXPECT_FALSE(c125->ckpt.enabled);            // activation_checkpointing: false
  EXPECT_EQ(*AccumulationSteps(*c125), 16);    // 256 / 16
  EXPECT_EQ(*AccumulationSteps(*c125, 8), 2);  // on 8 GPUs, as upstream runs it
  auto c7 = ReadTrainConfig(Source("configs/mpt-7b.yaml"));
  ASSERT_TRUE(c7.ok()) << c7.status().message();
  EXPECT_EQ(c7->model.vocab_size, 50432);
  EXPECT_TRUE(c7->ckpt.enabled);
  EXPECT_EQ(*AccumulationSteps(*c7, 8), 16);  // 1024 / (8 x 8)
  EXPECT_DOUBLE_EQ(*c7->optimizer->lr, 1.2e-4);
  EXPECT_EQ(c7->max_duration->value, 63900);
}

TEST(TrainConfig, Interpolation) {
  auto c = Parsed(
      "variables:\n  n: 12\n  name: run\n  nested: ${variables.n}\n"
      "model:\n  n_layers: ${variables.nested}\n  name: x-${variables.name}-${variables.n}\n");
  EXPECT_EQ(c.model.n_layers, 12);
  EXPECT_EQ(c.model.name, "x-run-12");
  // A string made by interpolation is a string, as in OmegaConf.
  EXPECT_EQ(ErrorOf("variables:\n  n: 12\nmodel:\n  n_layers: a${variables.n}\n"),
            "--config t.yaml: key 'model.n_layers' is 'a12'; expected a positive integer");
  EXPECT_EQ(ErrorOf("model:\n  n_layers: ${variables.missing}\n"),
            "--config t.yaml: key 'model.n_layers' refers to '${variables.missing}', a key the "
            "file does not have");
  EXPECT_EQ(ErrorOf("a: ${b}\nb: ${a}\nseed: ${a}\n"),
            "--config t.yaml: key 'a' has interpolations that refer to each other in a cycle "
            "(${b})");
  EXPECT_EQ(ErrorOf("seed: ${oc.select:a,1}\n"),
            "--config t.yaml: key 'seed' uses the resolver 'oc.select', which foundry does not "
            "have (it resolves ${a.b} and ${oc.env:NAME}); write the value out");
  EXPECT_EQ(ErrorOf("seed: ${.a}\n"),
            "--config t.yaml: key 'seed' uses the relative interpolation '${.a}'; foundry "
            "resolves absolute ones (${variables.name}); write the path from the top of the file");
  ::setenv("FOUNDRY_TEST_SEED", "42", 1);
  EXPECT_EQ(Parsed("seed: ${oc.env:FOUNDRY_TEST_SEED}\n").seed, 42u);
  ::unsetenv("FOUNDRY_TEST_SEED");
  EXPECT_EQ(Parsed("seed: ${oc.env:FOUNDRY_TEST_SEED, 7}\n").seed, 7u);
  EXPECT_EQ(ErrorOf("seed: ${oc.env:FOUNDRY_TEST_SEED}\n"),
            "--config t.yaml: key 'seed' reads the environment variable FOUNDRY_TEST_SEED "
            "(${oc.env:FOUNDRY_TEST_SEED}), which is not set; set it or write the value out");
  // Interpolation is resolved only where foundry reads: an unresolvable one elsewhere is ignored
  // with its key.
  EXPECT_EQ(Parsed("run_name: ${oc.env:NOPE_NOT_SET}\nseed: 1\n").ignored,
            std::vector<std::string>{"run_name"});
}

TEST(TrainConfig, ValuesAreChecked) {
  EXPECT_EQ(ErrorOf("device_train_microbatch_size: auto\n"),
            "--config t.yaml: key 'device_train_microbatch_size' is auto (Composer's search for "
            "the largest microbatch that fits); foundry compiles one microbatch size: give a "
            "number (foundry-compile --memory-budget says what fits)");
  EXPECT_EQ(ErrorOf("global_train_batch_size: 0\n"),
            "--config t.yaml: key 'global_train_batch_size' is '0'; expected a positive integer");
  EXPECT_EQ(ErrorOf("optimizer:\n  name: lion\n"),
            "--config t.yaml: key 'optimizer.name' is 'lion'; foundry has decoupled_adamw "
            "(Composer's) and adamw (PyTorch's)");
  EXPECT_EQ(ErrorOf("optimizer:\n  name: adamw\n  amsgrad: true\n"),
            "--config t.yaml: key 'optimizer.amsgrad' is not an option foundry's optimizers have "
            "(they take lr, betas, eps, weight_decay); remove it");
  EXPECT_EQ(ErrorOf("optimizer:\n  name: adamw\n  betas: [0.9]\n"),
            "--config t.yaml: key 'optimizer.betas' is a list; expected a list of two numbers");
  EXPECT_EQ(ErrorOf("optimizer:\n  name: adamw\n  betas: [0.9, 1.0]\n"),
            "--config t.yaml: key 'optimizer.betas[1]' is '1.0'; expected a number in [0, 1)");
  EXPECT_EQ(ErrorOf("optimizer:\n  name: adamw\n  lr: -1\n"),
            "--config t.yaml: key 'optimizer.lr' is '-1'; expected a learning rate > 0");
  EXPECT_EQ(ErrorOf("scheduler:\n  name: cosine_with_warmup\n"),
            "--config t.yaml: key 'scheduler.t_warmup' is missing (Composer requires it)");
  EXPECT_EQ(ErrorOf("scheduler:\n  name: polynomial\n  t_warmup: 1ba\n"),
            "--config t.yaml: key 'scheduler.name' is 'polynomial'; foundry has "
            "cosine_with_warmup, linear_decay_with_warmup and constant_with_warmup");
  EXPECT_EQ(ErrorOf("scheduler:\n  name: cosine_with_warmup\n  t_warmup: 10\n  power: 2\n"),
            "--config t.yaml: key 'scheduler.power' is not an option of foundry's schedulers "
            "(t_warmup, t_max, alpha, alpha_i, alpha_f, scale_warmup); remove it");
  EXPECT_EQ(ErrorOf("scheduler:\n  name: cosine_with_warmup\n  t_warmup: 10bananas\n"),
            "--config t.yaml: key 'scheduler.t_warmup' is '10bananas'; expected a duration: a "
            "number and a unit (ba, tok, sp, ep, dur), e.g. 100ba");
  EXPECT_EQ(ErrorOf("algorithms:\n  gradient_clipping:\n    clipping_type: adaptive\n"
                    "    clipping_threshold: 0.1\n"),
            "--config t.yaml: key 'algorithms.gradient_clipping.clipping_type' is 'adaptive'; "
            "foundry clips by the global norm only (norm, as torch.nn.utils.clip_grad_norm_); "
            "adaptive and value are not there");
  EXPECT_EQ(ErrorOf("max_duration: 0.5dur\n"),
            "--config t.yaml: key 'max_duration' is 0.5dur; a run's length cannot be a fraction "
            "of itself: write it in ba, tok, sp or ep");
  EXPECT_EQ(ErrorOf("fsdp_config:\n  sharding_strategy: SOMETIMES\n"),
            "--config t.yaml: key 'fsdp_config.sharding_strategy' is 'SOMETIMES'; expected "
            "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
  EXPECT_EQ(ErrorOf("model:\n  loss_fn: focal\n"),
            "--config t.yaml: key 'model.loss_fn' is 'focal'; expected fused_crossentropy or "
            "torch_crossentropy");
  EXPECT_EQ(Parsed("model:\n  loss_fn: torch_crossentropy\n").model.loss_fn, "torch_crossentropy");
  EXPECT_EQ(ErrorOf("- a\n- b\n"),
            "--config t.yaml: the file holds a list; an llm-foundry training YAML is a mapping "
            "(model:, optimizer:, ...)");
  EXPECT_EQ(ErrorOf("seed: 1\nseed: 2\n"),
            "--config t.yaml: line 2: key 'seed' appears twice in one mapping (first at line 1); "
            "OmegaConf, which llm-foundry uses, rejects that: keep one");
  EXPECT_EQ(ErrorOf("seed: [1\n"),
            "--config t.yaml: YAML syntax error at line 2, column 1: end of sequence flow not "
            "found");
  auto uneven = Parsed("global_train_batch_size: 10\ndevice_train_microbatch_size: 4\n");
  EXPECT_EQ(AccumulationSteps(uneven).status().message(),
            "--config t.yaml: global_train_batch_size 10 is not a multiple of 1 process(es) x "
            "device_train_microbatch_size 4; make it one (foundry accumulates whole microbatches)");
  EXPECT_EQ(ReadTrainConfig("/nonexistent/x.yaml").status().message(),
            "--config /nonexistent/x.yaml: cannot read the file: No such file or directory");
}

TEST(TrainConfig, ComposerTimeToSteps) {
  StepUnits u;
  u.tokens_per_step = 256 * 2048;
  u.samples_per_step = 256;
  u.steps_per_epoch = 1000;
  u.max_steps = 4800;
  auto steps = [&](const std::string& text) {
    auto t = ParseComposerTime(text, "k");
    EXPECT_TRUE(t.ok()) << t.status().message();
    auto s = StepsOf(*t, u, "k");
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? *s : -1;
  };
  EXPECT_EQ(steps("100ba"), 100);
  EXPECT_EQ(steps("0ba"), 0);
  EXPECT_EQ(steps("524288tok"), 1);
  EXPECT_EQ(steps("524289tok"), 2);  // Composer stops at the first batch reaching the count
  EXPECT_EQ(steps("2500000000tok"), 4769);
  EXPECT_EQ(steps("512sp"), 2);
  EXPECT_EQ(steps("2ep"), 2000);
  EXPECT_EQ(steps("1"), 1000);  // a bare integer is epochs
  EXPECT_EQ(steps("0.5dur"), 2400);
  EXPECT_EQ(steps("1dur"), 4800);
  EXPECT_EQ(steps("1e3ba"), 1000);
  StepUnits none;
  auto ep = ParseComposerTime("1ep", "max_duration");
  EXPECT_EQ(StepsOf(*ep, none, "max_duration").status().message(),
            "key 'max_duration' is 1ep (epochs): an epoch is known only from a --data file; "
            "give it, or write the duration in ba or tok");
  EXPECT_EQ(ParseComposerTime("1.5ba", "k").status().message(),
            "key 'k' is '1.5ba'; a count of ba is a whole number");
  EXPECT_EQ(ParseComposerTime("-1ba", "k").status().message(),
            "key 'k' is '-1ba'; durations are >= 0");
}

ModelFiles Files(const std::string& rel) {
  auto f = InspectModelFile(Source(rel));
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? *f : ModelFiles();
}

TEST(TrainConfig, BindsTheTokenInputsDimensions) {
  auto c = Parsed("max_seq_len: 16\ndevice_train_microbatch_size: 4\n");
  auto d = BindConfigDims(c, Files("models/fixtures/mpt_tiny/model.onnx"), {});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->dims, (std::map<std::string, int64_t>{{"batch", 4}, {"seq", 16}}));
  EXPECT_TRUE(d->notes.empty());
  // The command line wins, and says so.
  d = BindConfigDims(c, Files("models/fixtures/mpt_tiny/model.onnx"), {{"seq", 8}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dims, (std::map<std::string, int64_t>{{"batch", 4}, {"seq", 8}}));
  EXPECT_EQ(d->notes, std::vector<std::string>{"--dim seq=8 overrides t.yaml's max_seq_len 16"});
  // model.max_seq_len when the top level has none.
  d = BindConfigDims(Parsed("model:\n  max_seq_len: 12\n"),
                     Files("models/fixtures/mpt_tiny/model.onnx"), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dims, (std::map<std::string, int64_t>{{"seq", 12}}));
}

Graph Imported(const std::string& rel) {
  ImportOptions options;
  options.load_weights = false;
  auto g = ImportOnnx(Source(rel), options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph();
}

TEST(TrainConfig, ModelKeysAreCheckedAgainstTheExport) {
  const Graph g = Imported("models/fixtures/mpt_tiny/model.onnx");
  std::vector<std::string> notes;
  EXPECT_TRUE(CheckModelAgainstGraph(
                  Parsed("model:\n  d_model: 64\n  n_layers: 2\n  vocab_size: 256\n"), g, &notes)
                  .ok());
  EXPECT_EQ(CheckModelAgainstGraph(Parsed("model:\n  d_model: 768\n"), g, nullptr).message(),
            "--config t.yaml: model.d_model is 768 but the export's token embedding "
            "'transformer.wte.weight' is 256 x 64: the YAML and the export describe different "
            "models (export the model the YAML configures, or fix the YAML)");
  EXPECT_EQ(CheckModelAgainstGraph(Parsed("model:\n  vocab_size: 50368\n"), g, nullptr).message(),
            "--config t.yaml: model.vocab_size is 50368 but the export's token embedding "
            "'transformer.wte.weight' is 256 x 64: the YAML and the export describe different "
            "models (export the model the YAML configures, or fix the YAML)");
  EXPECT_EQ(CheckModelAgainstGraph(Parsed("model:\n  n_layers: 12\n"), g, nullptr).message(),
            "--config t.yaml: model.n_layers is 12 but the export has 2 blocks in "
            "transformer.blocks: the YAML and the export describe different models (export the "
            "model the YAML configures, or fix the YAML)");
  // Heads are read from the fused attention: not in an imported graph (a note), and checked by
  // foundry-compile on the compiled one (tests/tools/foundry_compile_config_test.cc).
  notes.clear();
  EXPECT_TRUE(CheckModelAgainstGraph(Parsed("model:\n  n_heads: 4\n"), g, &notes).ok());
  EXPECT_EQ(notes, std::vector<std::string>{
                       "--config t.yaml: model.n_heads not checked: no fused attention in the "
                       "plan to read the heads from"});
}

}  // namespace
}  // namespace foundry
