// foundry-run --config TRAIN.yaml (compiler/train_config.h): the keys of llm-foundry's training
// YAML that foundry-run reads, as the foundry-run options they stand for (docs/design.md §11).
//
// MapRunConfig's steps, in the order their options, notes and errors come out:
//   1. the plan: its token batch and sequence, accumulation steps and ranks must be the ones the
//      YAML compiles to (device_train_microbatch_size, max_seq_len, global_train_batch_size);
//   2. train_loader / eval_loader (neither read when --data is given, eval_loader not when
//      --eval-data is): their MDS folders (local/split) as --data / --eval-data, the
//      training split's shuffle, shuffle_seed, shuffle_block_size, drop_last and
//      token_encoding_type as the options of those names; then the --data file's windows (or
//      the MDS folder's samples) per epoch (for `ep` durations);
//   3. max_duration (--max-steps, and --steps from the step a --resume save reached);
//   4. the optimizer; 5. the scheduler and gradient clipping; 6. the seed and the log interval;
//   7. eval (read when --eval-data or eval_loader names held-out tokens); 8. the periodic
//      checkpoints.
// Durations (Composer's ba, tok, sp, ep, dur) become steps with the plan's batch and sequence,
// the accumulation steps and, for epochs, the --data file's windows.
//
// The options come out one at a time through `set`, and the notes through `note`, as each key is
// mapped: a caller that prints them prints them before the error a later key gives. Whether a
// flag given on the command line wins over the file is the caller's rule (it knows what was given).
#pragma once

#include <functional>
#include <string>
#include <variant>

#include "base/status.h"
#include "compiler/train_config.h"

namespace foundry {

// One option the YAML sets: `flag` (a foundry-run option, "--lr"), from the YAML's `key`
// ("optimizer.lr"), to a value: the option's text as it would be typed ("100"), a real number
// (the options that take one), or `true` (a switch, --eval-first).
struct ConfigOption {
  std::string flag;
  std::string key;
  std::variant<std::string, double, bool> value;
};

struct RunConfigRequest {
  std::string path;        // the YAML as given (quoted in notes and errors)
  std::string plan;        // PREFIX of foundry-compile's -o, or PREFIX.plan
  std::string data;        // --data ("": an `ep` duration is an error)
  std::string data_dtype;  // --data-dtype's name (an unknown one reads as auto)
  std::string resume_dir;  // --resume: the steps to run count from its save's step
  bool eval_only = false;  // --eval-only: max_duration sets no --steps
  bool eval_data = false;  // --eval-data given: the eval keys are read (else a note)
  std::function<void(const ConfigOption&)> set;
  std::function<void(const std::string&)> note;  // one line each, without a prefix
};

// Errors are one line, "--config PATH: key ..." for a key foundry cannot follow, or the plan's,
// the data file's or the save's own error.
Status MapRunConfig(const TrainConfig& config, const RunConfigRequest& request);

}  // namespace foundry
