#include "driver/run_config.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "compiler/plan.h"
#include "driver/train.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/data.h"
#include "runtime/train_state.h"

namespace foundry {
namespace {

// One MapRunConfig call: the file, the request, and what one optimizer step is worth.
struct Mapping {
  const TrainConfig& c;
  const RunConfigRequest& r;
  std::string source;  // "--config PATH: ", before the errors about a key
  StepUnits units;
  int64_t batch = 0, seq = 0, accumulation = 1, world = 1;  // the plan's
  std::string train_dir, eval_dir;  // the loaders' MDS folders ("" when the YAML names none)

  void Set(const std::string& flag, std::string text, const std::string& key) const {
    r.set({flag, key, std::move(text)});
  }
  void SetNumber(const std::string& flag, double value, const std::string& key) const {
    r.set({flag, key, value});
  }
  void Note(const std::string& line) const { r.note(r.path + ": " + line); }
  StatusOr<int64_t> Steps(const ComposerTime& t, const std::string& key) const {
    auto steps = StepsOf(t, units, key);
    if (!steps.ok()) return Error(source + steps.status().message());
    return steps;
  }
};

// The token input's batch and sequence, as the plan bound them, and its accumulation steps and
// ranks, checked against the YAML's.
Status CheckPlan(Mapping& m) {
  const std::string& target = m.r.plan;
  const std::string plan_path =
      target.size() > 5 && target.compare(target.size() - 5, 5, ".plan") == 0 ? target
                                                                              : target + ".plan";
  auto plan = ReadPlan(plan_path);
  if (!plan.ok()) return plan.status();
  for (const auto& [input, axes] : plan->input_dims)
    if (input == "input_ids" || (m.batch == 0 && axes.size() == 2)) {
      if (axes.size() == 2 && plan->dims.count(axes[0]) && plan->dims.count(axes[1])) {
        m.batch = plan->dims.at(axes[0]);
        m.seq = plan->dims.at(axes[1]);
      }
    }
  m.accumulation = plan->grad_accumulation;
  const TrainConfig& c = m.c;
  auto mismatch = [&](const std::string& key, int64_t want, int64_t have, const std::string& what) {
    return Error(m.source + key + " is " + std::to_string(want) + " but '" + plan_path + "' has " +
                 what + " " + std::to_string(have) +
                 "; compile the plan with foundry-compile --config " + m.r.path);
  };
  if (m.batch > 0 && c.device_train_microbatch_size && *c.device_train_microbatch_size != m.batch)
    return mismatch("device_train_microbatch_size", *c.device_train_microbatch_size, m.batch,
                    "batch");
  const std::optional<int64_t> yaml_seq = c.max_seq_len ? c.max_seq_len : c.model.max_seq_len;
  if (m.seq > 0 && yaml_seq && *yaml_seq != m.seq)
    return mismatch("max_seq_len", *yaml_seq, m.seq, "sequence");
  // A plan of several ranks (foundry-compile --world-size N): the global batch is N ranks'.
  m.world = plan->sharding ? plan->sharding->world_size : 1;
  auto accumulation = AccumulationSteps(c, m.world);
  if (!accumulation.ok()) return accumulation.status();
  if (c.global_train_batch_size && *accumulation != m.accumulation)
    return mismatch("global_train_batch_size / device_train_microbatch_size", *accumulation,
                    m.accumulation, "accumulation steps (--grad-accum)");
  if (m.world == 1 && c.fsdp.count("sharding_strategy") &&
      c.fsdp.at("sharding_strategy") != "NO_SHARD")
    m.Note("fsdp_config.sharding_strategy " + c.fsdp.at("sharding_strategy") +
           " is for a multi-process run; this is one process holding every parameter");
  return Status::Ok();
}

// A loader's MDS folder: local/split as llm-foundry names it. A remote that is a local folder
// is read in place when local does not hold the split (streaming would copy it to local first);
// a remote store is refused.
StatusOr<std::string> LoaderFolder(const Mapping& m, const TrainConfig::Loader& l) {
  namespace fs = std::filesystem;
  const std::string at = m.source + l.key + ".dataset: ";
  auto folder = [&](const std::string& root) {
    return l.split ? (fs::path(root) / *l.split).string() : root;
  };
  std::error_code ec;
  if (l.local && fs::is_regular_file(fs::path(folder(*l.local)) / "index.json", ec))
    return folder(*l.local);
  if (l.remote && !l.remote->empty()) {
    if (l.remote->find("://") != std::string::npos)
      return Error(at + "remote " + *l.remote +
                   " is a remote store; foundry reads local folders: download the dataset (with "
                   "streaming, or your store's copy tool) and set local");
    if (fs::is_regular_file(fs::path(folder(*l.remote)) / "index.json", ec)) {
      m.Note(l.key + ".dataset: reading remote " + folder(*l.remote) +
             " in place (streaming would copy it to local first)");
      return folder(*l.remote);
    }
  }
  if (!l.local) return Error(at + "names no local folder; give local (and split)");
  return Error(at + "no MDS split at " + folder(*l.local) + " (no index.json there" +
               (l.split && !fs::is_directory(*l.local, ec) ? "; " + *l.local + " is not a folder"
                                                           : std::string("")) +
               "); write it with llm-foundry's convert_dataset_hf.py, or set local and split");
}

// train_loader / eval_loader: their MDS folders as --data / --eval-data, and how the training
// split is read (shuffle, seed, block, drop_last, token encoding).
Status MapLoaders(Mapping& m) {
  for (const auto* loader : {&m.c.train_loader, &m.c.eval_loader}) {
    if (!*loader) continue;
    const TrainConfig::Loader& l = **loader;
    if (l.max_seq_len && m.seq > 0 && *l.max_seq_len != m.seq)
      return Error(m.source + l.key + ".dataset.max_seq_len is " + std::to_string(*l.max_seq_len) +
                   " but the plan's sequence is " + std::to_string(m.seq) +
                   " (llm-foundry cuts samples at it); make them one");
    const bool train = &l == &*m.c.train_loader;
    // The command line's data wins: --data for both loaders (the YAML's eval split belongs
    // with its training split), --eval-data for eval_loader.
    if (!m.r.data.empty() || (!train && m.r.eval_data)) {
      m.Note(l.key + " is not read: " + (train || !m.r.eval_data ? "--data" : "--eval-data") +
             " names the data");
      continue;
    }
    if (!l.problem.empty()) return Error(l.problem);
    ASSIGN_OR_RETURN(std::string dir, LoaderFolder(m, l));
    (train ? m.train_dir : m.eval_dir) = dir;
    m.Set(train ? "--data" : "--eval-data", dir, l.key + ".dataset.local");
    if (l.token_encoding_type)
      m.Set("--token-encoding-type", *l.token_encoding_type,
            l.key + ".dataset.token_encoding_type");
    if (!train) {
      if (l.shuffle.value_or(false))
        m.Note(
            "eval_loader.dataset.shuffle: foundry evaluates the eval split in index order "
            "(the loss over whole batches is the same set of samples)");
      continue;
    }
    if (l.shuffle.value_or(false)) m.r.set({"--shuffle", l.key + ".dataset.shuffle", true});
    if (l.shuffle_seed)
      m.Set("--shuffle-seed", std::to_string(*l.shuffle_seed), l.key + ".dataset.shuffle_seed");
    if (l.shuffle_block_size)
      m.Set("--shuffle-block-size", std::to_string(*l.shuffle_block_size),
            l.key + ".dataset.shuffle_block_size");
    if (l.drop_last.value_or(false)) m.r.set({"--drop-last", l.key + ".drop_last", true});
  }
  return Status::Ok();
}

// What one optimizer step is worth in samples and tokens and, with --data, in epochs.
Status CountStepUnits(Mapping& m) {
  const int64_t global_batch = m.batch * m.accumulation * m.world;
  m.units.samples_per_step = global_batch;
  m.units.tokens_per_step = global_batch * m.seq;
  const std::string data = m.r.data.empty() ? m.train_dir : m.r.data;
  if (!data.empty() && m.batch > 0 && IsMdsFolder(data)) {
    auto mds = MdsDataset::Open(data, "--data " + data, "int64");
    if (!mds.ok()) return mds.status();
    m.units.steps_per_epoch = (*mds)->num_samples() / global_batch;
  } else if (!data.empty() && m.batch > 0) {
    auto dtype = ParseTokenDType(m.r.data_dtype);
    auto file = TokenFile::Open(data, dtype.ok() ? *dtype : TokenDType::kAuto);
    if (!file.ok()) return file.status();
    m.units.steps_per_epoch = file->num_tokens() / (m.seq + 1) / global_batch;
  }
  return Status::Ok();
}

// max_duration: the schedule's total, and the steps to run to it from the step a --resume save
// reached.
Status MapDuration(Mapping& m) {
  if (!m.c.max_duration) return Status::Ok();
  auto total = m.Steps(*m.c.max_duration, "max_duration");
  if (!total.ok()) return total.status();
  m.units.max_steps = *total;
  m.Set("--max-steps", std::to_string(*total), "max_duration");
  int64_t done = 0;
  if (!m.r.resume_dir.empty()) {
    auto state = ReadVerifiedTrainState(ResumeTarget(m.r.resume_dir));
    if (!state.ok()) return state.status();
    done = state->step;
  }
  if (!m.r.eval_only)
    m.Set("--steps", std::to_string(std::max<int64_t>(0, *total - done)), "max_duration");
  return Status::Ok();
}

void MapOptimizer(const Mapping& m) {
  if (!m.c.optimizer) return;
  const TrainConfig::Optimizer& opt = *m.c.optimizer;
  m.Set("--optimizer", opt.name, "optimizer.name");
  if (opt.lr) m.SetNumber("--lr", *opt.lr, "optimizer.lr");
  if (opt.beta1) m.SetNumber("--beta1", *opt.beta1, "optimizer.betas[0]");
  if (opt.beta2) m.SetNumber("--beta2", *opt.beta2, "optimizer.betas[1]");
  if (opt.eps) m.SetNumber("--eps", *opt.eps, "optimizer.eps");
  if (opt.weight_decay) m.SetNumber("--weight-decay", *opt.weight_decay, "optimizer.weight_decay");
}

// The lr schedule and gradient clipping (runtime/lr_schedule.h), in optimizer steps.
Status MapSchedule(const Mapping& m) {
  if (m.c.scheduler) {
    const TrainConfig::Scheduler& sc = *m.c.scheduler;
    if (sc.scale_warmup.value_or(false))
      return Error(m.source +
                   "scheduler.scale_warmup: true is not supported (foundry has no scale_schedule "
                   "ratio, so it would change nothing in Composer either): remove it");
    m.Set("--scheduler", sc.name, "scheduler.name");
    auto warmup = m.Steps(*sc.t_warmup, "scheduler.t_warmup");
    if (!warmup.ok()) return warmup.status();
    m.Set("--warmup-steps", std::to_string(*warmup), "scheduler.t_warmup");
    if (sc.t_max) {
      auto t_max = m.Steps(*sc.t_max, "scheduler.t_max");
      if (!t_max.ok()) return t_max.status();
      m.Set("--decay-steps", std::to_string(*t_max), "scheduler.t_max");
    }
    if (sc.alpha_i) m.SetNumber("--alpha-i", *sc.alpha_i, "scheduler.alpha_i");
    if (sc.alpha_f) m.SetNumber("--alpha-f", *sc.alpha_f, "scheduler.alpha_f");
  }
  if (m.c.clipping)
    m.SetNumber("--clip-norm", m.c.clipping->threshold,
                "algorithms.gradient_clipping.clipping_threshold");
  return Status::Ok();
}

Status MapSeedAndLogInterval(const Mapping& m) {
  if (m.c.seed) m.Set("--seed", std::to_string(*m.c.seed), "seed");
  if (m.c.console_log_interval) {
    auto n = m.Steps(*m.c.console_log_interval, "console_log_interval");
    if (!n.ok()) return n.status();
    if (*n > 0) m.Set("--log-interval", std::to_string(*n), "console_log_interval");
  }
  return Status::Ok();
}

// The eval keys, read when there is eval data (--eval-data, or the YAML's eval_loader).
Status MapEval(const Mapping& m) {
  const TrainConfig& c = m.c;
  if (!m.r.eval_data && m.eval_dir.empty()) {
    if (c.eval_interval)
      m.Note("eval_interval " + c.eval_interval->text +
             " is read when --eval-data or eval_loader names the held-out tokens");
    return Status::Ok();
  }
  if (c.eval_interval) {
    auto n = m.Steps(*c.eval_interval, "eval_interval");
    if (!n.ok()) return n.status();
    m.Set("--eval-interval", std::to_string(*n), "eval_interval");
  }
  if (c.eval_first.value_or(false)) m.r.set({"--eval-first", "eval_first", true});
  if (c.eval_subset_num_batches)
    m.Set("--eval-batches", std::to_string(*c.eval_subset_num_batches), "eval_subset_num_batches");
  return Status::Ok();
}

// Periodic checkpoints: save_interval with save_folder (as Composer saves), in a local folder.
Status MapSaving(const Mapping& m) {
  const TrainConfig& c = m.c;
  if (!c.save_interval) return Status::Ok();
  if (!c.save_folder) {
    m.Note("save_interval is read with save_folder (as Composer saves); none is set");
    return Status::Ok();
  }
  if (c.save_folder->find('{') != std::string::npos)
    return Error(m.source + "save_folder '" + *c.save_folder +
                 "' has a {placeholder} (Composer fills in {run_name}); foundry does not: write "
                 "the folder out, or give --save-folder");
  if (c.save_folder->find("://") != std::string::npos)
    return Error(m.source + "save_folder '" + *c.save_folder +
                 "' is a remote store; foundry writes local folders: give --save-folder DIR");
  auto n = m.Steps(*c.save_interval, "save_interval");
  if (!n.ok()) return n.status();
  m.Set("--save-interval", std::to_string(*n), "save_interval");
  m.Set("--save-folder", *c.save_folder, "save_folder");
  if (c.save_num_checkpoints_to_keep) {
    const int64_t keep = *c.save_num_checkpoints_to_keep;
    if (keep == 0)
      return Error(m.source +
                   "save_num_checkpoints_to_keep is 0 (Composer keeps no local checkpoint, "
                   "only uploads); foundry saves locally: give -1 (all) or a count");
    m.Set("--save-keep", std::to_string(keep < 0 ? 0 : keep), "save_num_checkpoints_to_keep");
  }
  return Status::Ok();
}

}  // namespace

Status MapRunConfig(const TrainConfig& config, const RunConfigRequest& request) {
  Mapping m{config, request, "--config " + request.path + ": ", {}};
  RETURN_IF_ERROR(CheckPlan(m));
  RETURN_IF_ERROR(MapLoaders(m));
  RETURN_IF_ERROR(CountStepUnits(m));
  RETURN_IF_ERROR(MapDuration(m));
  MapOptimizer(m);
  RETURN_IF_ERROR(MapSchedule(m));
  RETURN_IF_ERROR(MapSeedAndLogInterval(m));
  RETURN_IF_ERROR(MapEval(m));
  return MapSaving(m);
}

}  // namespace foundry
