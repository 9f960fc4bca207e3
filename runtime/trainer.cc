// Trainer::Create and Trainer::Step (runtime/trainer.h); Save and Resume are in trainer_save.cc.
#include "runtime/trainer.h"

#include <chrono>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "compiler/tensor_proto.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/interpreter.h"
#include "runtime/messages.h"
#include "runtime/safetensors.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace fs = std::filesystem;

namespace {

using TensorMap = std::map<std::string, Tensor>;

StatusOr<Backend*> ChooseBackend(const TrainerOptions& options) {
  if (options.device == "cpu") return &GetCpuBackend();
  if (options.device != "cuda")
    return Error("unknown device '" + options.device + "' (choose cpu or cuda)");
  ASSIGN_OR_RETURN(CudaBackend * cuda, GetCudaBackend());
  cuda->set_tf32(options.tf32);
  return cuda;
}

std::string PlanBackends(const MemoryPlan& plan) {
  std::vector<std::string> names;
  for (const auto& l : plan.layouts) names.push_back(l.backend);
  return JoinNames(names);
}

using StepClock = std::chrono::steady_clock;

double SecondsSince(StepClock::time_point t) {
  return std::chrono::duration<double>(StepClock::now() - t).count();
}

// The accessors below return references; a device that fails to copy back is past saving.
void PullOrThrow(Status st) {
  if (!st.ok()) throw std::runtime_error(st.message());
}

}  // namespace

// ---- Create --------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(LoadedPlan plan, const TrainerOptions& options) {
  RETURN_IF_ERROR(CheckOptimizerOptions(options.optimizer));
  RETURN_IF_ERROR(CheckScheduleOptions(options.schedule, options.total_steps));
  RETURN_IF_ERROR(CheckClipNorm(options.clip_norm));
  std::unique_ptr<Trainer> t(new Trainer());
  t->total_steps_ = options.total_steps;
  ASSIGN_OR_RETURN(t->backend_, ChooseBackend(options));
  t->plan_ = std::move(plan);
  t->options_ = options;
  t->RecordInputFiles();
  RETURN_IF_ERROR(t->ResolveWorld());
  ASSIGN_OR_RETURN(TensorMap params, t->TakeParameters());
  if (!options.init_from.empty())
    RETURN_IF_ERROR(VerifyFileIfInCheckpoint(options.init_from).Prepend("--init-from: "));
  if (!options.init_from.empty())
    RETURN_IF_ERROR(
        LoadSafetensorsInto(options.init_from, t->plan_.graph, t->plan_.plan.parameters, params));
  // Sharded parameters were taken whole: now each rank keeps its shard.
  for (auto& [name, param] : params)
    if (const ShardedParameter* sp = t->ShardOf(name)) {
      ScopedMemoryClass scope(MemoryClass::kParameter);
      param = t->SliceShard(param, *sp);
      param.SetMemoryClass(MemoryClass::kParameter);
    }
  t->init_file_.reset();
  RETURN_IF_ERROR(t->CheckGraphData());
  ASSIGN_OR_RETURN(TensorMap fed, t->ReadFeeds());
  std::set<std::string> fed_names;
  for (const auto& [name, tensor] : fed) fed_names.insert(name);
  ASSIGN_OR_RETURN(
      t->data_, ChooseDataSource(t->plan_.graph, t->plan_.plan.inputs, fed_names, options.data_path,
                                 options.data_dtype, t->plan_.plan.loss_in_model, options.labels,
                                 options.mds));
  // A fed token input gets --data's token check: Gather would read -1 as the last row. (The
  // last --feed of a name is the one fed.)
  for (auto spec = options.feeds.rbegin(); spec != options.feeds.rend(); ++spec)
    if (!t->data_.tokens_input.empty() &&
        spec->substr(0, spec->find('=')) == t->data_.tokens_input) {
      RETURN_IF_ERROR(CheckFedTokens(*spec, fed.at(t->data_.tokens_input), t->data_.vocab));
      break;
    }
  RETURN_IF_ERROR(t->CheckBackendCanRun());
  ASSIGN_OR_RETURN(t->store_, ParameterStore::Create(*t->backend_, t->plan_.plan.parameters,
                                                     std::move(params), options.optimizer));
  RETURN_IF_ERROR(t->CreateExecutor(fed));
  RETURN_IF_ERROR(t->ResolveAccumulation());
  // An MDS epoch is whole global batches with drop_last: every rank reads the same order.
  RETURN_IF_ERROR(SetMdsEpoch(t->data_, t->data_.batch * t->accumulation_ * t->world_));
  return t;
}

uint64_t MicrobatchSeed(uint64_t seed, int64_t step, int64_t k) {
  const uint64_t s = StepSeed(seed, step);
  return k == 0 ? s : StepSeed(s, k);
}

// The run's microbatches per step against the plan's: a plan compiled without --grad-accum has
// no accumulators and would overwrite its gradients with each microbatch.
Status Trainer::ResolveAccumulation() {
  const int64_t planned = plan_.plan.grad_accumulation;
  const int64_t asked = options_.accumulation_steps == 0 ? planned : options_.accumulation_steps;
  const std::string k = std::to_string(asked);
  if (asked < 1)
    return Error("gradient accumulation: " + k + " microbatches per step; give 1 or more");
  if (asked > 1 && planned == 1)
    return Error("gradient accumulation over " + k + " microbatches: '" + plan_.plan_path +
                 "' was compiled without it; compile it with foundry-compile --grad-accum " + k);
  if (asked != planned)
    return Error("gradient accumulation over " + k + " microbatches: '" + plan_.plan_path +
                 "' was compiled with --grad-accum " + std::to_string(planned) + "; run it with " +
                 std::to_string(planned) + " or recompile it with --grad-accum " + k);
  if (planned > 1 && plan_.plan.memory.gradients_in_arena)
    return Error("'" + plan_.plan_path + "' is a damaged foundry plan (it records " +
                 "grad_accumulation " + k + " with its gradients in the arena, where they would " +
                 "not persist across microbatches); recompile it with foundry-compile");
  const UseDef use = BuildUseDef(plan_.graph);
  for (const auto& name : plan_.plan.parameters) {
    const std::string& grad = plan_.plan.gradients.at(name);
    const int producer = use.Producer(grad);
    const Node* writer =
        producer >= 0 ? &plan_.graph.nodes[static_cast<size_t>(producer)] : nullptr;
    // Data parallel: the gradient collectives accumulate themselves (docs/design.md §10).
    const bool accumulated = writer && writer->domain == "foundry" &&
                             (writer->op_type == "AccumulateGradient" ||
                              (world_ > 1 && (writer->op_type == "ReduceScatterGradient" ||
                                              writer->op_type == "AllReduceGradient")));
    if (planned > 1 && !accumulated)
      return Error("'" + plan_.plan_path + "' is a damaged foundry plan (it records " +
                   "grad_accumulation " + k + " but no foundry::AccumulateGradient writes '" +
                   grad + "'); recompile it with foundry-compile MODEL.onnx -o PREFIX");
  }
  accumulation_ = asked;
  for (const Node& n : plan_.graph.nodes)
    if (n.domain.empty() &&
        (n.op_type == "SoftmaxCrossEntropyLoss" || n.op_type == "NegativeLogLikelihoodLoss")) {
      if (n.HasAttr("ignore_index")) ignore_index_ = n.GetInt("ignore_index", -100);
      break;
    }
  micro_windows_.assign(static_cast<size_t>(accumulation_), {});
  micro_scales_.assign(static_cast<size_t>(accumulation_), 1.0f);
  return Status::Ok();
}

void Trainer::RecordInputFiles() {
  fs::path graph_path = plan_.plan.graph_file;
  if (graph_path.is_relative()) graph_path = fs::path(plan_.plan_path).parent_path() / graph_path;
  input_files_ = {plan_.plan_path, graph_path.string(), graph_path.string() + ".data"};
  for (const auto& spec : options_.feeds)
    if (size_t eq = spec.find('='); eq != std::string::npos)
      input_files_.push_back(spec.substr(eq + 1));
  if (!options_.data_path.empty()) input_files_.push_back(options_.data_path);
  if (!options_.init_from.empty()) input_files_.push_back(options_.init_from);
}

// Parameters: the graph's data, or the seeded initialisation. The graph's tensor is moved out
// (copied only when another graph shares it), so the weights are held once.
StatusOr<std::map<std::string, Tensor>> Trainer::TakeParameters() {
  std::map<std::string, Tensor> params;
  for (const auto& name : plan_.plan.parameters) {
    Value* v = plan_.graph.FindValue(name);
    if (v->dtype != DType::kFloat32)
      return Error("parameter '" + name + "' is " + std::string(DTypeName(v->dtype)) +
                   "; the trainer updates f32 parameters only");
    if (!v->ShapeKnown())
      return Error("parameter '" + name + "' has no concrete shape (" + v->TypeString() + ")");
    ScopedMemoryClass scope(MemoryClass::kParameter);
    Tensor& param = params[name];
    if (const ShardedParameter* sp = ShardOf(name)) {
      // A shard in the graph (no data): the full value, sliced once --init-from had its say.
      ASSIGN_OR_RETURN(param, FullInitialValue(name, *sp));
    } else if (!v->data)
      param = InitParameter(name, v->shape, options_.init_seed);
    else if (v->data.use_count() == 1)
      param = std::move(const_cast<Tensor&>(*v->data));  // the graph's only reference
    else
      param = *v->data;
    param.SetMemoryClass(MemoryClass::kParameter);
    v->data = nullptr;
    // Before any update: a weight that is not finite is a buffer (an attention mask's -inf), and
    // training it is the mistake, not the learning rate.
    if (!AllFinite(param))
      return Error("parameter '" + name +
                   "' holds non-finite values before any step (a buffer such as a -inf attention "
                   "mask?); buffers are not trained: compile with --freeze '" +
                   name + "'");
  }
  return params;
}

// A value a node produces is computed by that node every step, in the arena. An in-memory graph
// may still carry its data (autodiff's Constant nodes share their tensor with the value); the
// graph a plan file loads never does (only initializers carry data in ONNX), so drop it here and
// both run and count alike. Every other initializer must be a constant with data.
Status Trainer::CheckGraphData() {
  Graph& g = plan_.graph;
  for (const Node& n : g.nodes)
    for (const auto& out : n.outputs)
      if (Value* v = out.empty() ? nullptr : g.FindValue(out); v && v->data) v->data = nullptr;
  const std::vector<std::string>& p = plan_.plan.parameters;
  std::set<std::string> trained(p.begin(), p.end());
  for (const auto& init : g.initializers) {
    const Value* v = g.FindValue(init);
    if (v && !v->data && !trained.count(init))
      return Error("initializer '" + init +
                   "' has no data and is not a trained parameter; "
                   "export the model with its buffers");
  }
  return Status::Ok();
}

StatusOr<std::map<std::string, Tensor>> Trainer::ReadFeeds() {
  std::map<std::string, Tensor> fed;
  for (const auto& spec : options_.feeds) {
    ASSIGN_OR_RETURN(Feed f, ReadFeed(spec));
    RETURN_IF_ERROR(CheckFeed(f, plan_.graph, plan_.plan.inputs));
    fed[f.name] = std::move(f.tensor);
  }
  return fed;
}

// Before any backend memory is taken: an op the backend has no kernel for, or a plan with no
// layout for it, is one line at once.
Status Trainer::CheckBackendCanRun() const {
  const std::string backend(backend_->name());
  if (std::vector<std::string> missing = backend_->MissingKernels(plan_.graph); !missing.empty())
    return Error("the " + backend + " backend has no kernel for " + JoinNames(missing) + " (in '" +
                 plan_.plan_path + "'); run it with --device cpu");
  // bf16 kernels: the cpu backend's and the cuda backend's (kernels/cuda/kernel.h, "bfloat16").
  if (backend != "cpu" && backend != "cuda")
    for (const auto& [name, v] : plan_.graph.values())
      if (v.dtype == DType::kBFloat16)
        return Error("'" + plan_.plan_path + "' computes in bf16 (foundry-compile --precision " +
                     "amp_bf16; '" + name + "' is " + v.TypeString() + ") and the " + backend +
                     " backend has no bf16 kernels yet; run it with --device cpu");
  const MemoryPlan& memory = plan_.plan.memory;
  if (!memory.Layout(backend))
    return Error("'" + plan_.plan_path + "' has no memory layout for the " + backend +
                 " backend (planned for: " + PlanBackends(memory) +
                 "); compile it with foundry-compile, which plans one for every backend (a plan "
                 "built in memory: run PlanMemory on it first)");
  return Status::Ok();
}

// The executor: the arena, inputs and outputs, allocated once; the step's read-back memory, the
// optimizer's operands and the batch's host side. Fed inputs are written now and never again.
Status Trainer::CreateExecutor(std::map<std::string, Tensor>& fed) {
  const Plan& p = plan_.plan;
  ASSIGN_OR_RETURN(status_,
                   backend_->AllocateStepStatus(static_cast<int64_t>(p.parameters.size())));
  ASSIGN_OR_RETURN(executor_,
                   Executor::Create(plan_.graph, p.memory, *backend_, store_->BackendParameters()));
  for (auto& [name, tensor] : fed) {
    Tensor* in = executor_->input(name);
    if (!in) return Error("--feed: '" + name + "' is not an input of the graph");
    RETURN_IF_ERROR(backend_->CopyIn(tensor, *in));
  }
  std::vector<std::string> gradient_names;
  for (const auto& name : p.parameters) {
    gradient_names.push_back(p.gradients.at(name));
    gradients_.push_back(&output(gradient_names.back()));
  }
  ASSIGN_OR_RETURN(updates_, store_->Updates(gradients_, gradient_names));
  // The executor's output storage: the trainer's to scale in place, as clip_grad_norm_ does.
  for (const Tensor* g : gradients_) clipped_gradients_.push_back(const_cast<Tensor*>(g));
  ASSIGN_OR_RETURN(norm_scratch_, backend_->AllocateGradNormScratch(gradients_));
  if (data_.token_batches())
    staged_ids_ = backend_->HostStaging(*executor_->input(data_.tokens_input));
  if (data_.labels_from_windows())
    staged_labels_ = backend_->HostStaging(*executor_->input(data_.labels_input));
  return Status::Ok();
}

// ---- accessors -----------------------------------------------------------------------------

int64_t Trainer::num_parameter_elements() const {
  int64_t n = 0;
  for (const auto& name : plan_.plan.parameters) {
    const ShardedParameter* sp = ShardOf(name);  // a shard: the whole parameter's count
    if (!sp) {
      n += store_->host_params().at(name).numel();
      continue;
    }
    int64_t numel = 1;
    for (int64_t d : sp->shape) numel *= d;
    n += numel;
  }
  return n;
}

const std::map<std::string, Tensor>& Trainer::slot_m() const {
  PullOrThrow(store_->Pull());
  return store_->host_m();
}

const std::map<std::string, Tensor>& Trainer::slot_v() const {
  PullOrThrow(store_->Pull());
  return store_->host_v();
}

StatusOr<Tensor> Trainer::OutputOnHost(const std::string& name) const {
  const Tensor* t = executor_->value(name);
  if (!t) return Error("no graph output '" + name + "'");
  Tensor host(t->dtype(), t->shape());
  RETURN_IF_ERROR(backend_->CopyOut(*t, host));
  return host;
}

std::map<std::string, Tensor> Trainer::parameters() const {
  PullOrThrow(store_->Pull());
  std::map<std::string, Tensor> out;
  for (const auto& name : plan_.plan.parameters) out[name] = store_->host_params().at(name);
  return out;
}

const Tensor& Trainer::parameter(const std::string& name) const {
  PullOrThrow(store_->Pull());
  return store_->host_params().at(name);
}

const Tensor& Trainer::output(const std::string& name) const {
  const Tensor* t = executor_->value(name);
  if (!t) throw std::out_of_range("no graph output '" + name + "'");
  return *t;
}

// ---- Step ----------------------------------------------------------------------------------

// The forward and backward of the step's microbatches (one batch without accumulation or ranks);
// the loss of each but the last read and checked as it goes (the last's comes with the step's
// finite check).
Status Trainer::RunMicrobatches(int64_t step, InterpretOptions& io, StepReport& r,
                                MicrobatchLosses& losses) {
  const std::string prefix = "step " + std::to_string(step) + ": ";
  const auto start = StepClock::now();
  if (accumulation_ == 1 && world_ == 1) {
    RETURN_IF_ERROR(BuildBatch());
    r.batch_seconds = SecondsSince(start);
    auto t = StepClock::now();
    RETURN_IF_ERROR(executor_->Run(io.ctx).Prepend(prefix));
    r.graph_seconds = SecondsSince(t);
    return Status::Ok();
  }
  RETURN_IF_ERROR(PrepareMicrobatches(step));
  r.batch_seconds = SecondsSince(start);
  for (int64_t k = 0; k < accumulation_; ++k) {
    auto t = StepClock::now();
    RETURN_IF_ERROR(BuildMicrobatch(k));
    r.batch_seconds += SecondsSince(t);
    // Rank r's microbatch k is the global microbatch k * N + r (k without ranks).
    io.ctx.seed = MicrobatchSeed(options_.seed, step, k * world_ + rank_);
    io.ctx.grad_scale = micro_scales_[static_cast<size_t>(k)];
    io.ctx.grad_accumulate = k > 0;
    t = StepClock::now();
    RETURN_IF_ERROR(executor_->Run(io.ctx).Prepend(prefix));
    r.graph_seconds += SecondsSince(t);
    if (k + 1 == accumulation_) break;  // the last microbatch's loss comes with the finite check
    t = StepClock::now();
    StatusOr<StepCheck> part = backend_->CheckStep(output(plan_.plan.loss), {}, status_);
    if (!part.ok()) return part.status().Prepend(prefix);
    r.check_seconds += SecondsSince(t);
    losses.finite = losses.finite && part->finite;
    losses.sum += part->loss * io.ctx.grad_scale;
    if (world_ > 1) losses.terms.push_back(part->loss * io.ctx.grad_scale);
  }
  return Status::Ok();
}

// More than one rank: every rank's terms in global microbatch order, and whether every rank is
// finite. The replay that names the node runs no collectives, so a world reports the step
// without it.
Status Trainer::ExchangeStepLosses(int64_t step, const StepCheck& last, float last_scale,
                                   MicrobatchLosses& losses) {
  const std::string prefix = "step " + std::to_string(step) + ": ";
  losses.terms.push_back(last.loss * last_scale);
  bool finite = last.finite && losses.finite;
  RETURN_IF_ERROR(ExchangeStepTerms(losses.terms, finite).Prepend(prefix));
  if (!finite) {
    failed_ = true;
    return Error(prefix + "a loss or gradient is not finite on some rank (with " +
                 std::to_string(world_) +
                 " ranks the step is not replayed to name the node that produced it); lower "
                 "--lr, or check the inputs and weights");
  }
  return Status::Ok();
}

// A step whose loss or gradients are not finite: with accumulation, each microbatch replayed on
// its own inputs, the first node that produced the value named.
Status Trainer::NonFiniteStepError(int64_t step, InterpretOptions io) {
  const int64_t K = accumulation_;
  if (K == 1) return NonFiniteError(step, io);
  const std::string prefix = "step " + std::to_string(step) + ": ";
  Status last = Status::Ok();
  for (int64_t k = 0; k < K; ++k) {
    RETURN_IF_ERROR(BuildMicrobatch(k));
    io.ctx.seed = MicrobatchSeed(options_.seed, step, k);
    io.ctx.grad_scale = micro_scales_[static_cast<size_t>(k)];
    last = NonFiniteError(step, io);
    if (last.message().find(" first produced by ") != std::string::npos)
      return Error("step " + std::to_string(step) + ", microbatch " + std::to_string(k + 1) +
                   " of " + std::to_string(K) + ": " + last.message().substr(prefix.size()));
  }
  return last;
}

StatusOr<StepReport> Trainer::Step() {
  RETURN_IF_ERROR(CheckCanStep());
  StepReport r;
  const auto start = StepClock::now();
  const int64_t step = step_ + 1;
  const std::string prefix = "step " + std::to_string(step) + ": ";
  const int64_t K = accumulation_;
  InterpretOptions io;
  io.ctx.seed = StepSeed(options_.seed, step);
  io.ctx.training = true;
  io.ctx.comm = comm_;
  MicrobatchLosses losses;
  RETURN_IF_ERROR(RunMicrobatches(step, io, r, losses));
  auto t = StepClock::now();
  StatusOr<StepCheck> check = backend_->CheckStep(output(plan_.plan.loss), gradients_, status_);
  if (!check.ok()) return check.status().Prepend(prefix);
  if (world_ > 1) RETURN_IF_ERROR(ExchangeStepLosses(step, *check, io.ctx.grad_scale, losses));
  r.check_seconds += SecondsSince(t);
  if (!check->finite || !losses.finite) {
    failed_ = true;
    return NonFiniteStepError(step, io);
  }
  // The norm, and clipping: before the dumps, so --dump-grads holds what the optimizer uses.
  if (options_.grad_norm || options_.clip_norm > 0) {
    t = StepClock::now();
    StatusOr<float> norm =
        sharded_ ? ShardedGradNorm()
                 : backend_->ClipGradNorm(clipped_gradients_, options_.clip_norm, norm_scratch_);
    if (!norm.ok()) return norm.status().Prepend(prefix);
    r.grad_norm = *norm;
    r.norm_seconds = SecondsSince(t);
  }
  float loss = K == 1 ? check->loss : losses.sum + check->loss * io.ctx.grad_scale;
  if (world_ > 1) {
    loss = 0;  // sum_j s_j * loss_j in j order, as one process with --grad-accum N*K adds them
    for (float term : losses.terms) loss += term;
  }
  // Dumps: every target is checked before any is written.
  ASSIGN_OR_RETURN(std::vector<Dump> dumps, PrepareDumps());
  // From here on the parameters are being changed in place: any error ends the trainer.
  failed_ = true;
  t = StepClock::now();
  r.lr = ScheduledLr(options_.schedule, options_.optimizer.lr, step, total_steps_);
  RETURN_IF_ERROR(ApplyOptimizer(step));
  r.optimizer_seconds = SecondsSince(t);
  // The dumps last, so a failed step writes nothing.
  RETURN_IF_ERROR(WriteDumps(dumps));
  failed_ = false;
  step_ = step;
  data_position_ += K * world_ * data_.batch;
  ++steps_this_run_;

  r.step = step;
  r.loss = loss;
  r.microbatches = K;
  r.seconds = SecondsSince(start);
  r.tokens_per_second =
      r.seconds > 0 ? static_cast<double>(K * data_.batch * data_.seq) / r.seconds : 0;
  return r;
}

Status Trainer::SetTotalSteps(int64_t total) {
  if (total <= 0)
    return Error("the schedule's total steps must be > 0, not " + std::to_string(total));
  RETURN_IF_ERROR(CheckScheduleOptions(options_.schedule, total));
  total_steps_ = total;
  return Status::Ok();
}

// Every microbatch's token windows, read before the first runs (N needs them all), and its share
// s_k = n_k / N of the step's loss tokens (Composer: microbatch_size / current_batch_size, a
// Python float the f32 loss is multiplied by, so s_k is that quotient rounded to f32).
Status Trainer::PrepareMicrobatches(int64_t step) {
  const int64_t K = accumulation_;
  std::vector<int64_t> counts(static_cast<size_t>(K), 1);
  const bool labelled = !data_.labels_input.empty();
  for (int64_t k = 0; k < K; ++k) {
    // Rank r's microbatch k reads the windows of global microbatch j = k * N + r.
    if (data_.token_batches())
      RETURN_IF_ERROR(ReadStepWindows(data_, options_.seed,
                                      data_position_ + (k * world_ + rank_) * data_.batch,
                                      micro_windows_[static_cast<size_t>(k)]));
    if (!labelled) continue;  // no labels to count: the microbatches weigh the same
    if (k > 0 && !data_.labels_from_windows()) {
      counts[static_cast<size_t>(k)] = counts[0];  // fed labels: the same every microbatch
      continue;
    }
    RETURN_IF_ERROR(BuildMicrobatch(k));
    ASSIGN_OR_RETURN(counts[static_cast<size_t>(k)], MicrobatchLossTokens());
  }
  if (world_ > 1)
    RETURN_IF_ERROR(ExchangeCounts(counts).Prepend("step " + std::to_string(step) + ": "));
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  if (total == 0)
    return Error("step " + std::to_string(step) + ": every label of its " +
                 std::to_string(K * world_) + " microbatches is the loss's ignore_index " +
                 std::to_string(ignore_index_.value_or(0)) +
                 "; there are no tokens to average the loss over");
  for (int64_t k = 0; k < K; ++k)
    micro_scales_[static_cast<size_t>(k)] =
        static_cast<float>(static_cast<double>(counts[static_cast<size_t>(k * world_ + rank_)]) /
                           static_cast<double>(total));
  return Status::Ok();
}

// Microbatch k's windows into the token (and labels) inputs; fed inputs stay as they are.
Status Trainer::BuildMicrobatch(int64_t k) {
  if (!data_.token_batches()) return Status::Ok();
  Tensor* labels = data_.labels_from_windows() ? &staged_labels_ : nullptr;
  WriteTokenBatch(micro_windows_[static_cast<size_t>(k)], data_.batch, data_.seq,
                  data_.shift_labels, staged_ids_, labels);
  RETURN_IF_ERROR(backend_->CopyIn(staged_ids_, *executor_->input(data_.tokens_input)));
  if (labels) RETURN_IF_ERROR(backend_->CopyIn(*labels, *executor_->input(data_.labels_input)));
  return Status::Ok();
}

// The labels just written (their host side), or the fed ones (read back once from a device).
StatusOr<int64_t> Trainer::MicrobatchLossTokens() {
  Tensor labels;
  if (data_.labels_from_windows()) {
    labels = Tensor::View(staged_labels_.dtype(), staged_labels_.shape(), staged_labels_.raw());
  } else {
    ASSIGN_OR_RETURN(labels, backend_->ReadableOnHost(*executor_->value(data_.labels_input)));
  }
  auto n = CountLossTokens(labels, plan_.plan.loss_in_model, ignore_index_);
  if (!n.ok()) return n.status().Prepend("labels '" + data_.labels_input + "': ");
  return n;
}

StatusOr<int64_t> CountLossTokens(const Tensor& labels, bool shifted,
                                  std::optional<int64_t> ignore_index) {
  if (labels.dtype() != DType::kInt32 && labels.dtype() != DType::kInt64)
    return Error("the labels are " + std::string(DTypeName(labels.dtype())) +
                 "; loss tokens are counted in i64 or i32 labels");
  const int64_t n = labels.numel();
  const int64_t row = labels.shape().empty() ? 1 : labels.shape().back();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (shifted && i % row == 0) continue;
    const int64_t label =
        labels.dtype() == DType::kInt32 ? labels.data<int32_t>()[i] : labels.data<int64_t>()[i];
    if (!ignore_index || label != *ignore_index) ++count;
  }
  return count;
}

Status Trainer::CheckCanStep() const {
  if (failed_) return Error("an earlier step failed; the trainer cannot go on");
  if (options_.schedule.kind != ScheduleKind::kConstant && options_.schedule.t_max == 0 &&
      total_steps_ == 0)
    return Error("the " + std::string(ScheduleName(options_.schedule.kind)) +
                 " schedule needs the run's total steps (--max-steps)");
  if (step_ == INT64_MAX) return Error("step " + std::to_string(step_) + " is the last one");
  // Window indices (position + b) * (seq + 1) + t must fit int64 (SyntheticWindow, ReadWindow).
  if (data_.batch > 0 &&
      data_position_ > INT64_MAX / (data_.seq + 1) - accumulation_ * world_ * data_.batch)
    return Error("step " + std::to_string(step_ + 1) + ": the data position " +
                 std::to_string(data_position_) + " is past the last window foundry can address");
  return Status::Ok();
}

// The token windows written on the host side of the token (and labels) input, then copied in
// (on a host-memory backend they were written in place: the copy moves nothing).
Status Trainer::BuildBatch() {
  if (!data_.token_batches()) return Status::Ok();
  RETURN_IF_ERROR(ReadStepWindows(data_, options_.seed, data_position_, windows_));
  Tensor* labels = data_.labels_from_windows() ? &staged_labels_ : nullptr;
  WriteTokenBatch(windows_, data_.batch, data_.seq, data_.shift_labels, staged_ids_, labels);
  RETURN_IF_ERROR(backend_->CopyIn(staged_ids_, *executor_->input(data_.tokens_input)));
  if (labels) RETURN_IF_ERROR(backend_->CopyIn(*labels, *executor_->input(data_.labels_input)));
  return Status::Ok();
}

// The step is replayed with Interpret and its finite check on the step's own bindings: the
// parameters (not updated yet) and the batch still in the input storage; views of them on a
// host-memory backend, host copies from a device.
Status Trainer::NonFiniteError(int64_t step, const InterpretOptions& base) const {
  InterpretOptions io = base;
  io.check_finite = true;
  RETURN_IF_ERROR(store_->Pull());
  std::map<std::string, Tensor> bindings;
  for (const auto& [name, t] : store_->host_params())
    bindings[name] = Tensor::View(t.dtype(), t.shape(), const_cast<void*>(t.raw()));
  for (const auto& name : plan_.graph.inputs) {
    ASSIGN_OR_RETURN(bindings[name], backend_->ReadableOnHost(*executor_->value(name)));
  }
  auto replay = Interpret(plan_.graph, bindings, io);
  const std::string at_step = "step " + std::to_string(step) + ": ";
  if (replay.ok()) {
    // Every node produced finite values: a non-finite weight was fed in.
    for (const auto& name : plan_.plan.parameters)
      if (!AllFinite(store_->host_params().at(name)))
        return Error(at_step + "parameter '" + name + "' holds a non-finite value");
    return Error(at_step + "non-finite loss or gradient");
  }
  // The interpreter says "<node> produced a non-finite value in '<v>'".
  const std::string& msg = replay.status().message();
  const std::string marker = " produced a non-finite value in ";
  size_t at = msg.rfind(marker);
  if (at == std::string::npos) return Error(at_step + msg);
  return Error(at_step + "non-finite value first produced by " + msg.substr(0, at) + " (in " +
               msg.substr(at + marker.size()) + "); lower --lr, or check the inputs and weights");
}

// The first step's --dump-grads and --dump-outputs targets, checked, with their tensors on the
// host (read before the update: a device copy; on the host, the storage itself).
StatusOr<std::vector<Trainer::Dump>> Trainer::PrepareDumps() const {
  std::vector<Dump> dumps;
  if (steps_this_run_ != 0) return dumps;
  auto add = [&](const std::string& option, const std::string& dir, const std::string& value,
                 const std::string& name) -> Status {
    ASSIGN_OR_RETURN(Tensor host, backend_->ReadableOnHost(output(value)));
    dumps.push_back(
        {(fs::path(dir) / (FileNameForValue(name) + ".pb")).string(), std::move(host), name});
    return CheckNotAnInput(dumps.back().path, option);
  };
  if (!options_.dump_grads_dir.empty())
    for (const auto& name : plan_.plan.parameters)
      RETURN_IF_ERROR(add("--dump-grads", options_.dump_grads_dir, plan_.plan.gradients.at(name),
                          name + "_grad"));
  if (!options_.dump_outputs_dir.empty())
    for (const auto& out : plan_.graph.outputs)
      RETURN_IF_ERROR(add("--dump-outputs", options_.dump_outputs_dir, out, out));
  return dumps;
}

// Finite gradients can still give non-finite weights (an lr that overflows fp32, a weight at the
// edge of the range). The update is in place, so the trainer is done for; nothing of it may be
// saved.
Status Trainer::ApplyOptimizer(int64_t step) {
  store_->MarkStale();
  // The step's lr; DecoupledAdamW scales its decay by lr / initial_lr (Composer's group
  // ['initial_lr'], the lr the schedule multiplies).
  OptimizerOptions o = options_.optimizer;
  o.lr = ScheduledLr(options_.schedule, options_.optimizer.lr, step, total_steps_);
  o.initial_lr = options_.optimizer.lr;
  StatusOr<std::optional<size_t>> non_finite = backend_->ApplyOptimizer(o, step, updates_, status_);
  if (!non_finite.ok()) return non_finite.status().Prepend("step " + std::to_string(step) + ": ");
  if (!*non_finite) return Status::Ok();
  return Error("step " + std::to_string(step) + ": the optimizer update made parameter '" +
               store_->names().at(**non_finite) + "' non-finite (lr " + Num(o.lr) +
               "); lower --lr, or check the weights");
}

std::vector<std::pair<std::string, std::string>> Trainer::DumpTargets() const {
  std::vector<std::pair<std::string, std::string>> targets;
  if (!options_.dump_grads_dir.empty())
    for (const auto& name : plan_.plan.parameters)
      targets.emplace_back(
          (fs::path(options_.dump_grads_dir) / (FileNameForValue(name + "_grad") + ".pb")).string(),
          "--dump-grads");
  if (!options_.dump_outputs_dir.empty())
    for (const auto& out : plan_.graph.outputs)
      targets.emplace_back(
          (fs::path(options_.dump_outputs_dir) / (FileNameForValue(out) + ".pb")).string(),
          "--dump-outputs");
  return targets;
}

Status Trainer::WriteDumps(const std::vector<Dump>& dumps) const {
  if (steps_this_run_ != 0) return Status::Ok();
  if (dump_outputs_) {
    for (const Dump& d : dumps) {
      ASSIGN_OR_RETURN(std::string staged, dump_outputs_->Stage(d.path));
      RETURN_IF_ERROR(WriteTensorFile(staged, d.tensor, d.name));
    }
    return Status::Ok();
  }
  auto make_dir = [&](const std::string& option, const std::string& dir) -> Status {
    if (dir.empty()) return Status::Ok();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      return Error(option + " " + dir + ": cannot create the folder: " +
                   (ec ? ec.message() : std::string("a file is in the way")));
    return Status::Ok();
  };
  RETURN_IF_ERROR(make_dir("--dump-grads", options_.dump_grads_dir));
  RETURN_IF_ERROR(make_dir("--dump-outputs", options_.dump_outputs_dir));
  for (const Dump& d : dumps) RETURN_IF_ERROR(WriteTensorFile(d.path, d.tensor, d.name));
  return Status::Ok();
}

}  // namespace foundry
