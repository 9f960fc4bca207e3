// `--config FILE.yaml`: an llm-foundry training YAML (scripts/train/yamls/pretrain/mpt-*.yaml),
// read verbatim by both CLIs. foundry-compile takes the model's shape and the step's (the
// microbatch and max_seq_len as the token input's dimensions, precision, the checkpointing target,
// the accumulation steps); foundry-run takes the training loop (optimizer, scheduler, clipping,
// duration, eval, checkpoints, seed, log interval).
//
// Read as OmegaConf reads it, for the keys foundry reads: `${a.b}` is the value at a.b of the
// file (the whole scalar: that value with its type; inside a longer string: its text),
// `${oc.env:NAME}` / `${oc.env:NAME,default}` an environment variable; an interpolation that
// names a missing key, a cycle, or another resolver is an error naming the key that used it. Keys
// foundry does not read are listed once (TrainConfig::ignored), never dropped silently. The file
// is held to what OmegaConf accepts (ckpt_targets.h: one document, no anchors, aliases, merge keys
// or repeated keys).
//
// Durations are Composer's Time strings: `100ba` (batches = optimizer steps), `2000tok`,
// `64sp` (samples), `1ep`, `0.5dur` (a fraction of max_duration); a bare integer is epochs, as
// Composer reads an int max_duration / eval_interval / save_interval.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ckpt_targets.h"
#include "compiler/model_files.h"

namespace foundry {

class Graph;

struct ComposerTime {
  enum class Unit { kBatch, kToken, kSample, kEpoch, kDuration };
  double value = 0;
  Unit unit = Unit::kBatch;
  std::string text;  // as written ("100ba")
};
// "100ba" -> {100, kBatch}. `key` names the key in errors.
StatusOr<ComposerTime> ParseComposerTime(const std::string& text, const std::string& key);

// What one optimizer step is worth in each unit, for converting durations to steps.
struct StepUnits {
  int64_t tokens_per_step = 0;   // global batch x seq (the inputs' tokens)
  int64_t samples_per_step = 0;  // the global batch
  int64_t steps_per_epoch = 0;   // 0: unknown (no data file): `ep` is an error
  int64_t max_steps = 0;         // max_duration in steps; 0: unknown: `dur` is an error
};
// The duration in optimizer steps: ba as is; tok and sp divided by one step's, rounded up (as
// Composer stops at the first batch that reaches a token or sample count); ep times the steps of
// an epoch; dur times max_steps, rounded to nearest. A count that is not whole steps is rounded,
// with a note in `*note` (when given) saying so. Errors: negative, too large, unknown unit base.
StatusOr<int64_t> StepsOf(const ComposerTime& t, const StepUnits& units, const std::string& key,
                          std::string* note = nullptr);

struct TrainConfig {
  std::string path;

  // model: the MPT config (llmfoundry MPTConfig keys); each checked against the export.
  struct Model {
    std::optional<std::string> name;
    std::optional<int64_t> d_model, n_heads, n_layers, expansion_ratio, max_seq_len, vocab_size;
    std::optional<int64_t> kv_n_heads;  // attn_config.kv_n_heads (grouped-query attention)
    std::optional<std::string> loss_fn;  // fused_crossentropy or torch_crossentropy
  } model;
  std::optional<int64_t> max_seq_len;  // top-level max_seq_len (the data's sequence length)
  CkptConfig ckpt;                     // model.activation_checkpointing_target + fsdp flag
  std::optional<std::string> precision;

  std::optional<int64_t> device_train_microbatch_size;  // -> the compiled batch dimension
  std::optional<int64_t> global_train_batch_size;       // -> accumulation steps per optimizer step
  std::optional<int64_t> device_eval_batch_size;        // -> the eval plan's batch dimension

  struct Optimizer {
    std::string name;  // decoupled_adamw, adamw
    std::optional<double> lr, beta1, beta2, eps, weight_decay;
  };
  std::optional<Optimizer> optimizer;

  struct Scheduler {
    std::string name;  // cosine_with_warmup, linear_decay_with_warmup, constant_with_warmup
    std::optional<ComposerTime> t_warmup, t_max;
    std::optional<double> alpha_i, alpha_f;
    std::optional<bool> scale_warmup;
  };
  std::optional<Scheduler> scheduler;

  struct Clipping {
    std::string type;  // norm (the only one foundry has)
    double threshold = 0;
  };
  std::optional<Clipping> clipping;  // algorithms.gradient_clipping

  std::optional<ComposerTime> max_duration, eval_interval, save_interval, console_log_interval;
  std::optional<bool> eval_first;
  std::optional<int64_t> eval_subset_num_batches;  // -1: the whole eval set
  std::optional<std::string> save_folder;
  std::optional<int64_t> save_num_checkpoints_to_keep;

  // train_loader / eval_loader: llm-foundry's `text` loader over an MDS dataset (runtime/mds.h),
  // its dataset keys as written. `ignored` lists the keys of the loader and its dataset that
  // change nothing foundry does (num_workers, pin_memory, predownload, ...), dotted.
  struct Loader {
    std::string key;   // "train_loader"
    std::string name;  // "text"
    std::optional<std::string> local, remote, split, token_encoding_type;
    std::optional<int64_t> max_seq_len, shuffle_block_size;
    std::optional<bool> shuffle, drop_last;
    std::optional<uint64_t> shuffle_seed;
    std::vector<std::string> ignored;
    std::string problem;  // why foundry cannot read it ("" when it can): foundry-run's error
  };
  std::optional<Loader> train_loader, eval_loader;
  std::optional<uint64_t> seed;

  // fsdp_config's scalar keys as written (sharding_strategy, mixed_precision, ...): read now,
  // used by multi-process runs. A mixed_precision mapping is kept as the one-line form
  // ParseFsdpMixedPrecision reads ("param_dtype=bf16,reduce_dtype=fp32").
  std::map<std::string, std::string> fsdp;
  bool has_fsdp_config = false;  // the file has an fsdp_config section (llm-foundry runs FSDP)

  // Keys present in the file that foundry does not read, dotted ("tokenizer",
  // "model.init_device", "algorithms.low_precision_layernorm"), in file order.
  std::vector<std::string> ignored;
  std::vector<std::string> warnings;  // one line each
};

// The file is read whole (a regular file of at most kMaxCkptConfigBytes). Each key's value is
// checked for its type and range; errors are one line "--config PATH: key 'a.b': ...".
StatusOr<TrainConfig> ReadTrainConfig(const std::string& path);
StatusOr<TrainConfig> ParseTrainConfigText(const std::string& text, const std::string& path);

// "ignored keys (foundry does not read them): tokenizer, train_loader, ..." or "" when none.
std::string IgnoredKeysLine(const TrainConfig& config);

// Accumulation steps per optimizer step on `world_size` processes: global_train_batch_size /
// (world_size x device_train_microbatch_size), which must divide evenly (1 when the file gives
// neither).
StatusOr<int64_t> AccumulationSteps(const TrainConfig& config, int64_t world_size = 1);

// The token input's dimensions from the file: axis 0 = device_train_microbatch_size, axis 1 =
// max_seq_len (top-level, else model.max_seq_len), bound by the names the export gives those axes.
// The token input is `input_ids`, else the model's only rank-2 input. A dimension `given` already
// binds keeps its value (a note says the command line overrides the file); an axis the export
// fixed must have the file's size. Errors name the key and what the export has.
struct ConfigDims {
  std::map<std::string, int64_t> dims;  // `given` plus the file's
  std::vector<std::string> notes;
};
StatusOr<ConfigDims> BindConfigDims(const TrainConfig& config, const ModelFiles& files,
                                    const std::map<std::string, int64_t>& given);

// The model keys against the imported graph: vocab_size and d_model against the token
// embedding, n_layers against the blocks of the module tree, max_seq_len against a learned
// position table, n_heads / kv_n_heads against the fused attention's query and key heads. A
// mismatch is an error naming both; a key the graph cannot answer is a note in `*notes`.
Status CheckModelAgainstGraph(const TrainConfig& config, const Graph& graph,
                              std::vector<std::string>* notes);

}  // namespace foundry
