// The training loop behind foundry-run (driver/train.h runs it): take a compiled plan, bind
// weights, feed a batch, run the training graph (forward, loss, backward) on the planned executor
// (runtime/executor.h: one arena, nothing allocated per step), apply the optimizer, save and
// resume. Every device operation goes through the Backend interface (runtime/backend.h): the
// trainer does not know which device it drives.
//
// The plan must carry a memory layout for the backend (foundry-compile plans one for every backend
// the build has; a plan built in memory runs PlanMemory itself first).
//
// Storage (each byte once, counted by class in base/memory_accounting.h):
//  - parameters: the ParameterStore's tensors (class parameter, runtime/parameter_store.h), MOVED
//    out of the loaded graph (an imported initializer is not held twice); the executor reads them
//    in place (on a device: their device copies);
//  - optimizer slots: allocated at Create (class optimizer_state): AdamW m and v, SGD momentum m;
//  - inputs, the loss and the gradients: the executor's storage. The batch is written into the
//    input storage in place, the optimizer reads the gradients in place, the loss and the dumps
//    are read from the output storage (nothing is copied out);
//  - constants: the loaded graph's data (class constant).
//
// A step:
//  1. The batch: --feed tensors (fixed for every step), else windows of a token file (--data,
//     runtime/data.h TokenFile), else synthetic tokens. Window k holds seq + 1 tokens; row b of
//     step s reads window `position + b` (position = windows consumed so far, wrapping around the
//     file). The labels, by TrainerOptions::labels (runtime/data.h LabelRule); kAuto by the plan:
//       loss_in_model = true  (the model shifts labels itself, HF / llm-foundry):
//                              input_ids = labels = window[0:seq]            ("same")
//       loss_in_model = false (foundry appended an unshifted loss):
//                              input_ids = window[0:seq], labels = window[1:seq+1]  ("shifted")
//  2. The executor runs the training graph -> loss and one gradient per parameter, bitwise equal
//     to Interpret on the same bindings (tested on every fixture).
//     Dropout draws from Philox keyed by StepSeed(seed, step), so a resumed run redraws the masks.
//  3. A non-finite loss or gradient stops the run: the step is replayed with Interpret and its
//     finite check to name the first node that produced the value. The replay is diagnostics after
//     a failure: unplanned, it allocates every value on its own.
//  4. The gradients' global norm is measured and, with clip_norm, the gradients clipped by it
//     (Backend::ClipGradNorm, torch.nn.utils.clip_grad_norm_); --dump-grads writes them after.
//  5. The optimizer updates every parameter in place, elementwise, in fp32 (Backend::
//     ApplyOptimizer: kernels/cpu/optimizer.h's AdamWUpdate and SgdUpdate, bit for bit), with the
//     step's lr from the schedule (runtime/lr_schedule.h).
//
// Gradient accumulation (a plan compiled with --grad-accum K, K > 1; passes/grad_accumulate.h):
// a step is K microbatches, each the compiled batch; microbatch k reads the windows from
// `position + k * batch` (a step consumes K * batch windows), draws its dropout from
// MicrobatchSeed(seed, step, k), and its gradients add into the gradient storage scaled by
// s_k = n_k / N, where n_k counts microbatch k's loss tokens (labels other than the loss's
// ignore_index; labels[:, 1:] when the model shifts them itself, as llm-foundry's
// get_num_tokens_in_batch counts them) and N = sum n_k: Composer's accumulate_train_batch_on_tokens
// (llm-foundry's default), which multiplies each microbatch loss by n_k / N before its backward.
// The step's loss is sum_k s_k * loss_k (in f32, as Composer's total). The finite check and the
// optimizer update run once, after the last microbatch. A step with N = 0 is an error.
//
// Data parallel (a plan with a "sharding" section, compiled with --world-size N;
// TrainerOptions::comm its N ranks; runtime/trainer_shard.cc). Rank r's microbatch k of a step is
// the global microbatch j = k*N + r: it reads the windows from position + j*batch (a step
// consumes N*K*batch windows) and draws its dropout from MicrobatchSeed(seed, step, j); the
// microbatches' loss-token counts are exchanged and s_j = n_j / N_tot formed as above (also when
// K = 1); the step's loss is sum_j s_j * loss_j, added in j order after the ranks exchange their
// terms. The gradient collectives in the graph add the ranks' scaled partials in rank order
// (kernels/cpu/collective.cc), so losses and weights are bitwise the one-process run's with
// --grad-accum N*K over the same windows. SHARD_GRAD_OP and FULL_SHARD parameters (and their
// optimizer slots and gradients) are the rank's shard, f32 [c], c = ceil(numel / N), flat(P)[r*c,
// (r+1)*c) zero-padded; they start from the full initial value (the plan's init file, else
// InitParameter of the full shape, else --init-from) sliced. The finite check and the gradient
// norm take every rank's part; a non-finite step is reported without the Interpret replay (it
// cannot run collectives). A save is the same for any N: every rank gathers the full parameters
// and slots, rank 0 writes them (unpadded, full shapes), the others write nothing (JoinSave);
// a sharded save has no model.onnx (the sharded training graph cannot carry full weights): its
// parameters are model.safetensors. Resume reads either kind on any N and slices.
//
// Resume contract: N steps, Save, Resume, M steps is bitwise identical (losses and weights) to
// N + M steps in one run. Everything a step reads is saved: parameters, optimizer slots, the step
// count (bias correction, dropout seeds), the data position, the seeds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/output_set.h"
#include "base/status.h"
#include "base/tensor.h"
#include "compiler/memory_plan.h"
#include "kernels/cpu/communicator.h"
#include "runtime/backend.h"
#include "runtime/data.h"
#include "runtime/executor.h"
#include "runtime/loaded_plan.h"
#include "runtime/optimizer.h"
#include "runtime/param_init.h"
#include "runtime/parameter_store.h"
#include "runtime/safetensors.h"
#include "runtime/lr_schedule.h"
#include "runtime/train_state.h"

namespace foundry {

struct InterpretOptions;

struct TrainerOptions {
  OptimizerOptions optimizer;
  uint64_t seed = 0;               // dropout masks and synthetic tokens
  uint64_t init_seed = 0;          // parameters without data
  std::vector<std::string> feeds;  // NAME=FILE.pb
  std::string data_path;           // token file; "" = synthetic tokens (unless fed)
  // kAuto: an llm.c header if the file has one, else uint16 (runtime/data.h TokenFile).
  TokenDType data_dtype = TokenDType::kAuto;
  // How --data's MDS folder is read (shuffle, drop_last, token_encoding_type: runtime/data.h).
  MdsReadOptions mds;
  // After the first Step() of this trainer: every gradient as DIR/<param>_grad.pb, every graph
  // output as DIR/<output>.pb.
  std::string dump_grads_dir;
  std::string dump_outputs_dir;
  // "cpu" (the reference) or "cuda": where the step runs. On cuda the parameters, gradients,
  // optimizer slots and the arena live in device memory; the host keeps a copy of the parameters
  // and slots that is brought up to date on demand (parameters(), Save).
  std::string device = "cpu";
  bool tf32 = false;  // cuda only: TF32 tensor cores in the matrix products
  // A safetensors file whose tensors replace every parameter's initial values, matched by their
  // PyTorch names (runtime/safetensors.h: LoadSafetensorsInto); "" = the plan's own.
  std::string init_from;
  // The lr schedule (runtime/lr_schedule.h): step k updates with ScheduledLr(schedule,
  // optimizer.lr, k, total), where total is `total_steps` (Composer's max_duration in steps), or,
  // when it is 0, what SetTotalSteps gave (foundry-run: the last step of the run).
  ScheduleOptions schedule;
  int64_t total_steps = 0;
  // > 0: torch.nn.utils.clip_grad_norm_(max_norm=clip_norm) on the gradients before each update
  // (Composer's gradient_clipping, clipping_type norm); 0: no clipping.
  double clip_norm = 0;
  // The gradients' global norm every step (StepReport::grad_norm) without clipping too. One more
  // pass over the gradients: 0.03-0.08 ms of a 0.6-1.1 ms mpt_tiny step (4-7 %), so it is asked
  // for; clipping measures it anyway.
  bool grad_norm = false;
  // Microbatches per optimizer step (see "Gradient accumulation" above): 0 = the plan's
  // (foundry-compile --grad-accum); anything else must equal it.
  int64_t accumulation_steps = 0;
  // How labels are formed from token windows (--labels); kAuto: the plan's rule (step 1 above).
  LabelRule labels = LabelRule::kAuto;
  // Data-parallel training (a plan compiled with --world-size N; see "Data parallel" above): the
  // N ranks this process is one of (kernels/cpu/communicator.h; foundry-run under mpirun: MPI).
  // Required, of size N, for such a plan; a plan for one process refuses one of size > 1.
  Communicator* comm = nullptr;
  // The same ranks over host memory, for the trainer's own exchanges (token counts, loss terms,
  // gradient norms, the saves' gathers): needed when `comm` moves device memory (NCCL); null:
  // `comm` itself (MPI).
  Communicator* host_comm = nullptr;
};

struct StepReport {
  int64_t step = 0;  // 1-based, counted over resumes
  float loss = 0;
  double seconds = 0;
  double tokens_per_second = 0;
  // Where the seconds went: the batch written into the inputs, the graph (forward, loss,
  // backward), the finite check of loss and gradients, the optimizer update.
  double batch_seconds = 0, graph_seconds = 0, check_seconds = 0, optimizer_seconds = 0;
  double lr = 0;  // the lr this step's update used (the schedule's)
  // The gradients' global 2-norm (f32) before clipping, when measured (grad_norm or clip_norm).
  std::optional<float> grad_norm;
  double norm_seconds = 0;  // measuring (and clipping) it
  int64_t microbatches = 1;  // runs of the graph this step (the accumulation steps)
};

// The dropout seed of microbatch k (0-based) of step `step`: StepSeed(seed, step) for k = 0 (a
// step without accumulation draws as before), StepSeed(StepSeed(seed, step), k) for the others.
uint64_t MicrobatchSeed(uint64_t seed, int64_t step, int64_t k);

// The loss tokens of a microbatch's labels (i64 or i32, the last axis the sequence): labels other
// than `ignore_index` (every label when none), over labels[..., 1:] when `shifted` (the model
// shifts them itself: llm-foundry's get_num_tokens_in_batch, B * (S - 1) minus the ignored ones),
// over all of them otherwise (foundry's appended loss reads them as they are).
StatusOr<int64_t> CountLossTokens(const Tensor& labels, bool shifted,
                                  std::optional<int64_t> ignore_index);

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(LoadedPlan plan, const TrainerOptions& options);

  // Continues the run saved in `dir` (by Save): its parameters, optimizer slots, step count and
  // data position. Seeds, hyper-parameters and the data source are this trainer's options; build
  // them from ReadTrainState(dir) to continue the run exactly. The data position must leave room
  // for the token windows of at least one more step.
  Status Resume(const std::string& dir);

  // A step that fails leaves the trainer unusable: Step() and Save() then return errors. A step
  // fails when the loss or a gradient is not finite, or when the optimizer update makes a
  // parameter non-finite (the error names the step and the parameter).
  StatusOr<StepReport> Step();

  // Whether Save(dir) may write there: `dir` is missing, empty, or an earlier save (it has a
  // state.json); it is not a file, not the --resume directory, and holds no input of this run
  // (plan, graph, --feed or --data files).
  Status CheckSaveTarget(const std::string& dir) const;

  // Error if `path` (about to be written for `option`, e.g. "--report-json") is one of the run's
  // input files (plan, graph, --feed, --data, the --resume directory's files).
  Status CheckNotAnInput(const std::string& path, const std::string& option,
                         const std::string& advice = "choose another folder") const;

  // DIR/model.onnx (the training graph, trained parameters as initializers),
  // DIR/model.safetensors (the same parameters under their PyTorch names, runtime/safetensors.h),
  // DIR/optimizer/<param>.m.pb and .v.pb, DIR/state.json. Written into a temp folder, then swapped
  // in, so DIR is always either the old save or the new one.
  Status Save(const std::string& dir) const;
  // A rank other than 0 of a data-parallel run, where rank 0 calls Save (or SaveInto, then
  // commits, then Communicator::Barrier): its part of the save's gathers, then the barrier
  // after which the save is in place; it writes nothing.
  Status JoinSave() const;
  // This process's rank and the world size (0 and 1 without a communicator).
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  // The same save written into `folder` (empty, made by the caller: an OutputSet's staged
  // folder for --save, committed with the run's other outputs).
  Status SaveInto(const std::string& folder) const;

  // The files the first step of this trainer dumps (--dump-grads, --dump-outputs): path and the
  // option that asked for it.
  std::vector<std::pair<std::string, std::string>> DumpTargets() const;
  // Where the dumps go: staged in `outputs` (which must have them declared), so that they appear
  // only when the caller commits the run's outputs, after its last step; nullptr (the default):
  // written at once, when the first step succeeds.
  void StageDumpsIn(OutputSet* outputs) { dump_outputs_ = outputs; }
  // Every file the run reads (plan, graph and its data, --feed and --data files, the files of the
  // --resume save), and the --resume save's folder ("" without one).
  const std::vector<std::string>& input_files() const { return input_files_; }
  const std::string& resume_dir() const { return resume_dir_; }

  // The schedule's total when options().total_steps is 0 (> 0, checked against the schedule as
  // Composer checks t_max against max_duration).
  Status SetTotalSteps(int64_t total);
  // The total the schedule uses (0: none set).
  int64_t total_steps() const { return total_steps_; }

  int64_t step() const { return step_; }
  int64_t accumulation_steps() const { return accumulation_; }
  int64_t batch() const { return data_.batch; }
  int64_t seq() const { return data_.seq; }
  int64_t vocab() const { return data_.vocab; }
  int64_t num_parameter_elements() const;  // of the whole model (not a rank's shards)
  const LoadedPlan& plan() const { return plan_; }
  const TrainerOptions& options() const { return options_; }
  // "synthetic tokens (seed 0)", "--data FILE (uint16, 1000 tokens)", "--feed"
  std::string DataDescription() const { return data_.Describe(options_.seed); }
  // The current parameter values (a copy) / one of them.
  std::map<std::string, Tensor> parameters() const;
  const Tensor& parameter(const std::string& name) const;
  // A graph output (the loss, a gradient) of the last step, in the executor's storage (no copy).
  const Tensor& output(const std::string& name) const;
  // The memory plan the executor runs, and the executor (its storage, its layout).
  const MemoryPlan& memory_plan() const { return executor_->plan(); }
  const Executor& executor() const { return *executor_; }
  // Per-node times of the graph (Executor::set_profile).
  void set_profile(bool on) { executor_->set_profile(on); }
  // Optimizer slots: AdamW exp_avg (m) and exp_avg_sq (v); SGD with momentum m only.
  const std::map<std::string, Tensor>& slot_m() const;
  const std::map<std::string, Tensor>& slot_v() const;
  // A graph output of the last step copied to the host (any backend).
  StatusOr<Tensor> OutputOnHost(const std::string& name) const;
  // The backend the steps run on, and its memory figures.
  Backend& backend() const { return *backend_; }
  // The parameters' backend tensors, which the executor reads in place (runtime/evaluator.h
  // binds its graph to them too).
  std::map<std::string, Tensor*> backend_parameters() const { return store_->BackendParameters(); }
  // Where the batches come from: the token file's format, how labels are formed
  // (DescribeLabels, LabelsWarning).
  const DataSource& data_source() const { return data_; }

 private:
  // A tensor a step writes to a file once it has succeeded.
  struct Dump {
    std::string path;
    Tensor tensor;  // on the host: a view on a host-memory backend, else a copy
    std::string name;
  };

  Trainer() = default;
  // Create's steps, in order.
  void RecordInputFiles();
  StatusOr<std::map<std::string, Tensor>> TakeParameters();
  Status CheckGraphData();
  StatusOr<std::map<std::string, Tensor>> ReadFeeds();
  Status CheckBackendCanRun() const;
  Status CreateExecutor(std::map<std::string, Tensor>& fed);
  Status ResolveAccumulation();
  // Step's steps, in order.
  Status CheckCanStep() const;
  Status BuildBatch();
  // With accumulation: every microbatch's windows read, and the scales s_k = n_k / N.
  Status PrepareMicrobatches(int64_t step);
  Status BuildMicrobatch(int64_t k);
  StatusOr<int64_t> MicrobatchLossTokens();
  // The losses of a step's microbatches but the last, as their graph runs left them.
  struct MicrobatchLosses {
    float sum = 0;  // sum_k s_k * loss_k, in f32 as Composer adds it
    bool finite = true;
    std::vector<float> terms;  // more than one rank: this rank's s_k * loss_k, exchanged
  };
  Status RunMicrobatches(int64_t step, InterpretOptions& io, StepReport& r,
                         MicrobatchLosses& losses);
  Status ExchangeStepLosses(int64_t step, const StepCheck& last, float last_scale,
                            MicrobatchLosses& losses);
  Status NonFiniteStepError(int64_t step, InterpretOptions io);
  Status NonFiniteError(int64_t step, const InterpretOptions& base) const;
  StatusOr<std::vector<Dump>> PrepareDumps() const;
  Status ApplyOptimizer(int64_t step);
  Status WriteDumps(const std::vector<Dump>& dumps) const;

  Status WriteSave(const std::string& tmp) const;
  // WriteSave's and Resume's steps (runtime/trainer_save.cc).
  Status WriteWeights(const std::string& tmp, const std::map<std::string, Tensor>& params) const;
  StatusOr<std::string> StateJson() const;
  Status CheckResumable(const std::string& dir, const TrainState& s) const;
  StatusOr<std::map<std::string, Tensor>> ReadSavedWeights(const std::string& dir) const;

  LoadedPlan plan_;
  TrainerOptions options_;
  Backend* backend_ = nullptr;
  // The parameters and optimizer slots, updated in place by the optimizer; the executor holds
  // views of their backend tensors, so they never move (a resume copies into them).
  std::unique_ptr<ParameterStore> store_;
  DataSource data_;
  std::unique_ptr<Executor> executor_;
  // Per step: the gradients (plan.parameters order), the optimizer's operands, the backend's
  // read-back memory, the token windows, and where the host writes the batch (the token and
  // labels inputs themselves on a host-memory backend, else host copies).
  std::vector<const Tensor*> gradients_;
  // The same gradients, written in place by clipping, and the backend's scratch for their norm.
  std::vector<Tensor*> clipped_gradients_;
  Region norm_scratch_;
  int64_t total_steps_ = 0;
  std::vector<ParameterUpdate> updates_;
  Region status_;
  std::vector<int64_t> windows_;
  Tensor staged_ids_, staged_labels_;
  int64_t step_ = 0;
  int64_t data_position_ = 0;
  int64_t steps_this_run_ = 0;
  bool failed_ = false;
  std::string resume_dir_;
  OutputSet* dump_outputs_ = nullptr;
  // Gradient accumulation: microbatches per step, each one's windows and scale.
  int64_t accumulation_ = 1;
  std::vector<std::vector<int64_t>> micro_windows_;
  std::vector<float> micro_scales_;
  std::optional<int64_t> ignore_index_;  // the loss op's, when it has one
  // Every file the run reads: never overwritten by a dump or a save.
  std::vector<std::string> input_files_;

  // Data parallel (runtime/trainer_shard.cc).
  Status ResolveWorld();
  const ShardedParameter* ShardOf(const std::string& name) const;
  StatusOr<Tensor> FullInitialValue(const std::string& name, const ShardedParameter& sp);
  Tensor SliceShard(const Tensor& full, const ShardedParameter& sp) const;
  StatusOr<Tensor> GatherFull(const std::string& name, const Tensor& shard) const;
  Status ExchangeCounts(std::vector<int64_t>& counts) const;
  Status ExchangeStepTerms(std::vector<float>& terms, bool& finite) const;
  StatusOr<float> ShardedGradNorm();
  // The parameters and slots as a save writes them: full shapes, gathered from every rank.
  struct SavedState {
    std::map<std::string, Tensor> params, m, v;
  };
  StatusOr<SavedState> GatherState() const;
  Communicator* comm_ = nullptr;       // the collective ops' (KernelContext::comm)
  Communicator* host_comm_ = nullptr;  // the trainer's own exchanges, of host memory
  int rank_ = 0, world_ = 1;
  bool sharded_ = false;                      // SHARD_GRAD_OP, FULL_SHARD: parameters are shards
  std::optional<SafetensorsFile> init_file_;  // the plan's sharding init, while Create reads it
};

}  // namespace foundry
