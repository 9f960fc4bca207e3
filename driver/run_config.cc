#include "driver/run_config.h"

#include <algorithm>
#include <cstdint>
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

// What one optimizer step is worth in samples and tokens and, with --data, in epochs.
Status CountStepUnits(Mapping& m) {
  const int64_t global_batch = m.batch * m.accumulation * m.world;
  m.units.samples_per_step = global_batch;
  m.units.tokens_per_step = global_batch * m.seq;
  if (!m.r.data.empty() && m.batch > 0) {
    auto dtype = ParseTokenDType(m.r.data_dtype);
    auto file = TokenFile::Open(m.r.data, dtype.ok() ? *dtype : TokenDType::kAuto);
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

// The YAML's eval_loader reads a dataset foundry does not; --eval-data names the file.
Status MapEval(const Mapping& m) {
  const TrainConfig& c = m.c;
  if (!m.r.eval_data) {
    if (c.eval_interval)
      m.Note("eval_interval " + c.eval_interval->text +
             " is read when --eval-data FILE names the held-out tokens");
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
  RETURN_IF_ERROR(CountStepUnits(m));
  RETURN_IF_ERROR(MapDuration(m));
  MapOptimizer(m);
  RETURN_IF_ERROR(MapSchedule(m));
  RETURN_IF_ERROR(MapSeedAndLogInterval(m));
  RETURN_IF_ERROR(MapEval(m));
  return MapSaving(m);
}

}  // namespace foundry
