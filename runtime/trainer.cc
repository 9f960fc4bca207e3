#include "runtime/trainer.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <set>
#include <sstream>
#include <tuple>

#include "base/file_util.h"
#include "base/hash.h"
#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/tensor_proto.h"
#include "kernels/cpu/philox.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernel.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/train_step.h"
#endif
#include "passes/memory_plan.h"  // the in-memory plan fallback (goes with the runtime issue work)
#include "runtime/interpreter.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace fs = std::filesystem;

namespace {

// The plan input that an embedding Gather (float initializer data, axis 0) takes as indices,
// and that embedding's row count.
void FindTokenInput(const Graph& g, const std::vector<std::string>& inputs, std::string* input,
                    int64_t* vocab) {
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "Gather" || n.inputs.size() < 2) continue;
    if (n.GetInt("axis", 0) != 0) continue;
    if (std::find(inputs.begin(), inputs.end(), n.inputs[1]) == inputs.end()) continue;
    const Value* table = g.FindValue(n.inputs[0]);
    if (!table || !g.IsInitializer(n.inputs[0]) || !IsFloat(table->dtype) ||
        table->shape.size() != 2)
      continue;
    *input = n.inputs[1];
    *vocab = table->shape[0];
    return;
  }
}

// The memory plan to run: the plan file's (LoadPlan checked it against the graph; the executor
// checks its layout against this backend's kernels). A plan built in memory without one (tests,
// tools that compile and train in one process) is planned here, as foundry-compile would.
StatusOr<MemoryPlan> MemoryPlanFor(const LoadedPlan& lp, const Backend& backend) {
  if (!lp.plan.memory.layouts.empty()) return lp.plan.memory;
  auto plan = PlanMemory(lp.graph, {backend.Spec()});
  if (!plan.ok())
    return plan.status().Prepend("cannot plan the memory of '" + lp.plan_path + "': ");
  return plan;
}

}  // namespace

// ---- trainer -------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(LoadedPlan plan, const TrainerOptions& options) {
  RETURN_IF_ERROR(CheckOptimizerOptions(options.optimizer));
  std::unique_ptr<Trainer> t(new Trainer());
  if (options.device == "cpu") {
    t->backend_ = &GetCpuBackend();
  } else if (options.device == "cuda") {
    ASSIGN_OR_RETURN(CudaBackend * cuda, GetCudaBackend());
    cuda->set_tf32(options.tf32);
    t->backend_ = cuda;
  } else {
    return Error("unknown device '" + options.device + "' (choose cpu or cuda)");
  }
  t->on_device_ = !t->backend_->host_memory();
  t->plan_ = std::move(plan);
  t->options_ = options;
  Graph& g = t->plan_.graph;
  const Plan& p = t->plan_.plan;
  fs::path graph_path = p.graph_file;
  if (graph_path.is_relative())
    graph_path = fs::path(t->plan_.plan_path).parent_path() / graph_path;
  t->input_files_ = {t->plan_.plan_path, graph_path.string(), graph_path.string() + ".data"};
  for (const auto& spec : options.feeds)
    if (size_t eq = spec.find('='); eq != std::string::npos)
      t->input_files_.push_back(spec.substr(eq + 1));
  if (!options.data_path.empty()) t->input_files_.push_back(options.data_path);

  // Parameters: the graph's data, or the seeded initialisation. The graph's tensor is moved out
  // (copied only when another graph shares it), so the weights are held once.
  for (const auto& name : p.parameters) {
    Value* v = g.FindValue(name);
    if (v->dtype != DType::kFloat32)
      return Error("parameter '" + name + "' is " + std::string(DTypeName(v->dtype)) +
                   "; the trainer updates f32 parameters only");
    if (!v->ShapeKnown())
      return Error("parameter '" + name + "' has no concrete shape (" + v->TypeString() + ")");
    ScopedMemoryClass scope(MemoryClass::kParameter);
    Tensor& param = t->params_[name];
    if (!v->data)
      param = InitParameter(name, v->shape, options.init_seed);
    else if (v->data.use_count() == 1)
      param = std::move(const_cast<Tensor&>(*v->data));  // the graph's only reference
    else
      param = *v->data;
    param.SetMemoryClass(MemoryClass::kParameter);
    v->data = nullptr;
  }
  // A value a node produces is computed by that node every step, in the arena. An in-memory graph
  // may still carry its data (autodiff's Constant nodes share their tensor with the value); the
  // graph a plan file loads never does (only initializers carry data in ONNX), so drop it here and
  // both plan, run and count alike.
  for (const Node& n : g.nodes)
    for (const auto& out : n.outputs)
      if (Value* v = out.empty() ? nullptr : g.FindValue(out); v && v->data) v->data = nullptr;
  std::set<std::string> trained(p.parameters.begin(), p.parameters.end());
  for (const auto& init : g.initializers) {
    const Value* v = g.FindValue(init);
    if (v && !v->data && !trained.count(init))
      return Error("initializer '" + init +
                   "' has no data and is not a trained parameter; "
                   "export the model with its buffers");
  }

  // Inputs: --feed, then tokens for whatever is left.
  std::map<std::string, Tensor> fed;
  for (const auto& spec : options.feeds) {
    ASSIGN_OR_RETURN(Feed f, ReadFeed(spec));
    RETURN_IF_ERROR(CheckFeed(f, g, p.inputs));
    t->fed_.insert(f.name);
    fed[f.name] = std::move(f.tensor);
  }
  FindTokenInput(g, p.inputs, &t->tokens_input_, &t->vocab_);
  if (t->tokens_input_.empty() &&
      std::find(p.inputs.begin(), p.inputs.end(), "input_ids") != p.inputs.end())
    t->tokens_input_ = "input_ids";
  if (std::find(p.inputs.begin(), p.inputs.end(), "labels") != p.inputs.end())
    t->labels_input_ = "labels";

  // Token batches fill the token input and, from the same windows, the labels; any other input
  // must be fed.
  std::vector<std::string> unfed;
  for (const auto& in : p.inputs)
    if (!t->fed_.count(in)) unfed.push_back(in);
  if (!unfed.empty() && t->tokens_input_.empty())
    return Error(
        "cannot tell which input takes token ids (no Gather on an embedding consumes one); give "
        "the inputs with --feed NAME=FILE.pb (inputs: " +
        JoinNames(p.inputs) + ")");
  const bool need_tokens = !t->fed_.count(t->tokens_input_) && !t->tokens_input_.empty();
  for (const auto& in : unfed) {
    if (in == t->tokens_input_ || (in == t->labels_input_ && need_tokens)) continue;
    if (in == t->labels_input_)
      return Error("input '" + in + "' has no data: pass it with --feed " + in +
                   "=FILE.pb (with --feed " + t->tokens_input_ +
                   " given, labels cannot come from token windows)");
    return Error("input '" + in + "' has no data: pass it with --feed " + in + "=FILE.pb");
  }
  if (!options.data_path.empty() && !need_tokens)
    return Error("--data " + options.data_path + ": --feed " + t->tokens_input_ +
                 " already gives the tokens; drop one or the other");
  if (need_tokens) {
    if (options.data_path.empty() && t->vocab_ <= 0)
      return Error("synthetic tokens need the vocabulary size, and no embedding Gather consumes '" +
                   t->tokens_input_ + "'; pass --data FILE or --feed " + t->tokens_input_ +
                   "=FILE.pb");
    const Value* ids = g.FindValue(t->tokens_input_);
    if (ids->shape.size() != 2 || !ids->ShapeKnown() ||
        (ids->dtype != DType::kInt64 && ids->dtype != DType::kInt32))
      return Error("input '" + t->tokens_input_ + "' is " + ids->TypeString() +
                   "; token batches need an i64 or i32 [batch, seq] input; give it with --feed");
    t->batch_ = ids->shape[0];
    t->seq_ = ids->shape[1];
    if (!t->labels_input_.empty() && !t->fed_.count(t->labels_input_)) {
      const Value* lv = g.FindValue(t->labels_input_);
      if (lv->shape != ids->shape || (lv->dtype != DType::kInt64 && lv->dtype != DType::kInt32))
        return Error("input '" + t->labels_input_ + "' is " + lv->TypeString() + " but '" +
                     t->tokens_input_ + "' is " + ids->TypeString() +
                     "; token batches need labels shaped like the token ids; give them with "
                     "--feed");
    }
    if (!options.data_path.empty()) {
      ASSIGN_OR_RETURN(TokenFile f, TokenFile::Open(options.data_path, options.data_dtype));
      if (f.num_tokens() < t->seq_ + 1)
        return Error("--data " + options.data_path + ": " + std::to_string(f.num_tokens()) +
                     " tokens is shorter than one window of seq + 1 = " +
                     std::to_string(t->seq_ + 1) + " tokens");
      t->data_ = std::make_unique<TokenFile>(std::move(f));
    }
  } else {
    // Fully fed: batch x seq for tokens/s from the token input when it is [batch, seq].
    const Value* ids = t->tokens_input_.empty() ? nullptr : g.FindValue(t->tokens_input_);
    if (ids && ids->shape.size() == 2) {
      t->batch_ = ids->shape[0];
      t->seq_ = ids->shape[1];
    }
  }
  // Optimizer slots, zero: what the first update starts from.
  {
    ScopedMemoryClass scope(MemoryClass::kOptimizerState);
    const OptimizerOptions& o = options.optimizer;
    for (const auto& name : p.parameters) {
      const Shape& shape = t->params_.at(name).shape();
      if (o.kind == OptimizerKind::kAdamW || o.momentum != 0) {
        ASSIGN_OR_RETURN(t->slot_m_[name], Tensor::Allocate(DType::kFloat32, shape));
      }
      if (o.kind == OptimizerKind::kAdamW) {
        ASSIGN_OR_RETURN(t->slot_v_[name], Tensor::Allocate(DType::kFloat32, shape));
      }
    }
  }

  // The executor: the arena, inputs and outputs, allocated once. Fed inputs are written into
  // their storage now and never again.
#ifdef FOUNDRY_HAVE_CUDA
  // Before any device memory is taken: a graph with an op the GPU cannot run says so at once.
  if (t->on_device_)
    if (std::vector<std::string> missing = MissingCudaKernels(g); !missing.empty())
      return Error("the cuda backend has no kernel for " + JoinNames(missing) + " (in '" +
                   t->plan_.plan_path + "'); run it with --device cpu");
#endif
  ASSIGN_OR_RETURN(MemoryPlan memory, MemoryPlanFor(t->plan_, *t->backend_));
  std::map<std::string, Tensor*> params;
  if (t->on_device_) {
    // Device copies of the parameters and slots, each its own region of its class (as the CPU
    // tensors are), plus the step's status block.
    auto mirror = [&](const std::map<std::string, Tensor>& host, std::map<std::string, Tensor>& dev,
                      MemoryClass c, const std::string& what) -> Status {
      for (const auto& [name, h] : host) {
        ASSIGN_OR_RETURN(Region r, t->backend_->Allocate(static_cast<int64_t>(h.nbytes()), c,
                                                         what + " '" + name + "'"));
        dev[name] = Tensor::View(h.dtype(), h.shape(), r.data());
        t->dev_regions_.push_back(std::move(r));
      }
      return Status::Ok();
    };
    RETURN_IF_ERROR(mirror(t->params_, t->dev_params_, MemoryClass::kParameter, "parameter"));
    RETURN_IF_ERROR(mirror(t->slot_m_, t->dev_m_, MemoryClass::kOptimizerState, "optimizer slot"));
    RETURN_IF_ERROR(mirror(t->slot_v_, t->dev_v_, MemoryClass::kOptimizerState, "optimizer slot"));
    ASSIGN_OR_RETURN(t->status_,
                     t->backend_->Allocate(static_cast<int64_t>(4 * (2 + p.parameters.size())),
                                           MemoryClass::kOther, "the step status"));
    RETURN_IF_ERROR(t->PushToDevice());
    for (auto& [name, tensor] : t->dev_params_) params[name] = &tensor;
  } else {
    for (auto& [name, tensor] : t->params_) params[name] = &tensor;
  }
  ASSIGN_OR_RETURN(t->executor_, Executor::Create(g, memory, *t->backend_, params));
  for (auto& [name, tensor] : fed) {
    Tensor* in = t->executor_->input(name);
    if (!in) return Error("--feed: '" + name + "' is not an input of the graph");
    RETURN_IF_ERROR(t->executor_->backend().CopyIn(tensor, *in));
  }
  return t;
}

int64_t Trainer::num_parameter_elements() const {
  int64_t n = 0;
  for (const auto& name : plan_.plan.parameters) n += params_.at(name).numel();
  return n;
}

namespace {
// The accessors below return references; a device that fails to copy back is past saving.
void PullOrThrow(Status st) {
  if (!st.ok()) throw std::runtime_error(st.message());
}
}  // namespace

Status Trainer::PushToDevice() {
  if (!on_device_) return Status::Ok();
  auto push = [&](const std::map<std::string, Tensor>& host,
                  std::map<std::string, Tensor>& dev) -> Status {
    for (auto& [name, d] : dev) RETURN_IF_ERROR(backend_->CopyIn(host.at(name), d));
    return Status::Ok();
  };
  RETURN_IF_ERROR(push(params_, dev_params_));
  RETURN_IF_ERROR(push(slot_m_, dev_m_));
  RETURN_IF_ERROR(push(slot_v_, dev_v_));
  host_stale_ = false;
  return Status::Ok();
}

Status Trainer::PullFromDevice() const {
  if (!on_device_ || !host_stale_) return Status::Ok();
  auto pull = [&](const std::map<std::string, Tensor>& dev,
                  std::map<std::string, Tensor>& host) -> Status {
    for (const auto& [name, d] : dev) RETURN_IF_ERROR(backend_->CopyOut(d, host.at(name)));
    return Status::Ok();
  };
  RETURN_IF_ERROR(pull(dev_params_, params_));
  RETURN_IF_ERROR(pull(dev_m_, slot_m_));
  RETURN_IF_ERROR(pull(dev_v_, slot_v_));
  host_stale_ = false;
  return Status::Ok();
}

const std::map<std::string, Tensor>& Trainer::slot_m() const {
  PullOrThrow(PullFromDevice());
  return slot_m_;
}

const std::map<std::string, Tensor>& Trainer::slot_v() const {
  PullOrThrow(PullFromDevice());
  return slot_v_;
}

StatusOr<Tensor> Trainer::OutputOnHost(const std::string& name) const {
  const Tensor* t = executor_->value(name);
  if (!t) return Error("no graph output '" + name + "'");
  Tensor host(t->dtype(), t->shape());
  RETURN_IF_ERROR(backend_->CopyOut(*t, host));
  return host;
}

std::map<std::string, Tensor> Trainer::parameters() const {
  PullOrThrow(PullFromDevice());
  std::map<std::string, Tensor> out;
  for (const auto& name : plan_.plan.parameters) out[name] = params_.at(name);
  return out;
}

const Tensor& Trainer::parameter(const std::string& name) const {
  PullOrThrow(PullFromDevice());
  return params_.at(name);
}

const Tensor& Trainer::output(const std::string& name) const {
  const Tensor* t = executor_->value(name);
  if (!t) throw std::out_of_range("no graph output '" + name + "'");
  return *t;
}

std::string Trainer::DataDescription() const {
  if (tokens_input_.empty() || fed_.count(tokens_input_)) return "--feed";
  std::string s = data_ ? "--data " + data_->path() + " (" +
                              std::string(TokenDTypeName(data_->dtype())) + ", " +
                              std::to_string(data_->num_tokens()) + " tokens)"
                        : "synthetic tokens (seed " + std::to_string(options_.seed) + ")";
  if (!fed_.empty()) s += " + --feed";
  return s;
}

Status Trainer::BuildBatch() {
  if (tokens_input_.empty() || fed_.count(tokens_input_)) return Status::Ok();
  const int64_t window = seq_ + 1;
  windows_.resize(static_cast<size_t>(batch_ * window));
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t k = data_position_ + b;
    int64_t* out = &windows_[static_cast<size_t>(b * window)];
    if (data_)
      RETURN_IF_ERROR(data_->ReadWindow(k, window, vocab_, out));
    else
      SyntheticWindow(options_.seed, k, window, vocab_, out);
  }
  // Straight into the executor's input storage on the CPU; staged on the host and copied in
  // for a device backend.
  Tensor* labels = labels_input_.empty() || fed_.count(labels_input_)
                       ? nullptr
                       : executor_->input(labels_input_);
  Tensor* ids = executor_->input(tokens_input_);
  if (!on_device_) {
    WriteTokenBatch(windows_, batch_, seq_, plan_.plan.loss_in_model, *ids, labels);
    return Status::Ok();
  }
  auto staged = [&](const std::string& name, const Tensor& like) -> Tensor& {
    auto it = staged_.find(name);
    if (it == staged_.end()) it = staged_.emplace(name, Tensor(like.dtype(), like.shape())).first;
    return it->second;
  };
  Tensor& host_ids = staged(tokens_input_, *ids);
  Tensor* host_labels = labels ? &staged(labels_input_, *labels) : nullptr;
  WriteTokenBatch(windows_, batch_, seq_, plan_.plan.loss_in_model, host_ids, host_labels);
  RETURN_IF_ERROR(backend_->CopyIn(host_ids, *ids));
  if (labels) RETURN_IF_ERROR(backend_->CopyIn(*host_labels, *labels));
  return Status::Ok();
}

Status Trainer::NonFiniteError(int64_t step, const InterpretOptions& base) const {
  InterpretOptions io = base;
  io.check_finite = true;
  // The step's own bindings, as views: the parameters and the batch still in the input storage.
  // A device run is replayed on the CPU from host copies (the parameters are not updated yet).
  RETURN_IF_ERROR(PullFromDevice());
  std::map<std::string, Tensor> bindings;
  for (const auto& [name, t] : params_)
    bindings[name] = Tensor::View(t.dtype(), t.shape(), const_cast<void*>(t.raw()));
  for (const auto& name : plan_.graph.inputs) {
    const Tensor* t = executor_->value(name);
    if (on_device_) {
      ASSIGN_OR_RETURN(bindings[name], OutputOnHost(name));
      continue;
    }
    bindings[name] = Tensor::View(t->dtype(), t->shape(), const_cast<void*>(t->raw()));
  }
  auto replay = Interpret(plan_.graph, bindings, io);
  const std::string prefix =
      "step " + std::to_string(step) + ": non-finite value first produced by ";
  if (replay.ok()) {
    // Every node produced finite values: a non-finite weight was fed in.
    for (const auto& name : plan_.plan.parameters)
      if (!AllFinite(params_.at(name)))
        return Error("step " + std::to_string(step) + ": parameter '" + name +
                     "' holds a non-finite value");
    return Error("step " + std::to_string(step) + ": non-finite loss or gradient");
  }
  // The interpreter says "<node> produced a non-finite value in '<v>'".
  const std::string& msg = replay.status().message();
  const std::string marker = " produced a non-finite value in ";
  size_t at = msg.rfind(marker);
  if (at == std::string::npos) return Error("step " + std::to_string(step) + ": " + msg);
  return Error(prefix + msg.substr(0, at) + " (in " + msg.substr(at + marker.size()) +
               "); lower --lr, or check the inputs and weights");
}

Status Trainer::ApplyOptimizer(std::string* non_finite_param) {
  const OptimizerOptions& o = options_.optimizer;
  for (const auto& name : plan_.plan.parameters) {
    Tensor& param = params_.at(name);
    const std::string& gname = plan_.plan.gradients.at(name);
    const Tensor& grad = output(gname);
    if (grad.dtype() != DType::kFloat32 || grad.shape() != param.shape())
      return Error("gradient '" + gname + "' is " + TypeOf(grad.dtype(), grad.shape()) +
                   " but parameter '" + name + "' is " + TypeOf(param.dtype(), param.shape()));
    bool finite;
    if (o.kind == OptimizerKind::kAdamW) {
      finite = AdamWUpdate(o, step_ + 1, param.data<float>(), grad.data<float>(),
                           slot_m_.at(name).data<float>(), slot_v_.at(name).data<float>(),
                           param.numel());
    } else {
      // The momentum buffer starts as the first update's gradient: the run's first update, or the
      // first after resuming a save made before any (no slots saved then).
      float* buf = o.momentum != 0 ? slot_m_.at(name).data<float>() : nullptr;
      finite =
          SgdUpdate(o, step_ == 0, param.data<float>(), grad.data<float>(), buf, param.numel());
    }
    if (!finite && non_finite_param->empty()) *non_finite_param = name;
  }
  return Status::Ok();
}

StatusOr<StepReport> Trainer::Step() {
  if (failed_) return Error("an earlier step failed; the trainer cannot go on");
  if (step_ == INT64_MAX) return Error("step " + std::to_string(step_) + " is the last one");
  // Window indices (position + b) * (seq + 1) + t must fit int64 (SyntheticWindow, ReadWindow).
  if (batch_ > 0 && data_position_ > INT64_MAX / (seq_ + 1) - batch_)
    return Error("step " + std::to_string(step_ + 1) + ": the data position " +
                 std::to_string(data_position_) + " is past the last window foundry can address");
  const auto start = std::chrono::steady_clock::now();
  const int64_t step = step_ + 1;
  RETURN_IF_ERROR(BuildBatch());
  InterpretOptions io;
  io.ctx.seed = StepSeed(options_.seed, step);
  io.ctx.training = true;
  Status run = executor_->Run(io.ctx);
  if (!run.ok()) return run.Prepend("step " + std::to_string(step) + ": ");

  float loss = 0;
  bool finite = true;
  if (on_device_) {
    Status st = CheckStepOnDevice(&loss, &finite);
    if (!st.ok()) return st.Prepend("step " + std::to_string(step) + ": ");
  } else {
    const Tensor& loss_t = output(plan_.plan.loss);
    loss = static_cast<float>(loss_t.GetAsDouble(0));
    finite = AllFinite(loss_t);
    for (const auto& [param, gname] : plan_.plan.gradients) finite &= AllFinite(output(gname));
  }
  if (!finite) {
    failed_ = true;
    return NonFiniteError(step, io);
  }

  // Dumps: every target is checked before any is written.
  std::vector<std::tuple<std::string, const Tensor*, std::string>> dumps;  // path, tensor, name
  std::vector<std::unique_ptr<Tensor>> host_copies;  // a device run's dumped outputs
  auto dump_source = [&](const std::string& value) -> StatusOr<const Tensor*> {
    if (!on_device_) return &output(value);
    ASSIGN_OR_RETURN(Tensor h, OutputOnHost(value));
    host_copies.push_back(std::make_unique<Tensor>(std::move(h)));
    return host_copies.back().get();
  };
  auto make_dir = [&](const std::string& option, const std::string& dir) -> Status {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      return Error(option + " " + dir + ": cannot create the folder: " +
                   (ec ? ec.message() : std::string("a file is in the way")));
    return Status::Ok();
  };
  if (steps_this_run_ == 0 && !options_.dump_grads_dir.empty()) {
    for (const auto& name : plan_.plan.parameters) {
      const std::string gname = name + "_grad";
      ASSIGN_OR_RETURN(const Tensor* src, dump_source(plan_.plan.gradients.at(name)));
      dumps.emplace_back(
          (fs::path(options_.dump_grads_dir) / (FileNameForValue(gname) + ".pb")).string(), src,
          gname);
      RETURN_IF_ERROR(CheckNotAnInput(std::get<0>(dumps.back()), "--dump-grads"));
    }
  }
  if (steps_this_run_ == 0 && !options_.dump_outputs_dir.empty()) {
    for (const auto& out : plan_.graph.outputs) {
      ASSIGN_OR_RETURN(const Tensor* src, dump_source(out));
      dumps.emplace_back(
          (fs::path(options_.dump_outputs_dir) / (FileNameForValue(out) + ".pb")).string(), src,
          out);
      RETURN_IF_ERROR(CheckNotAnInput(std::get<0>(dumps.back()), "--dump-outputs"));
    }
  }
  // From here on the parameters are being changed in place: any error ends the trainer.
  failed_ = true;
  // Finite gradients can still give non-finite weights (an lr that overflows fp32, a weight at
  // the edge of the range). The update is in place, so the trainer is done for; nothing of it
  // may be saved.
  std::string non_finite;
  if (on_device_) {
    host_stale_ = true;
    Status st = ApplyOptimizerOnDevice(&non_finite);
    if (!st.ok()) return st.Prepend("step " + std::to_string(step) + ": ");
  } else {
    RETURN_IF_ERROR(ApplyOptimizer(&non_finite));
  }
  if (!non_finite.empty())
    return Error("step " + std::to_string(step) + ": the optimizer update made parameter '" +
                 non_finite + "' non-finite (lr " + Num(options_.optimizer.lr) +
                 "); lower --lr, or check the weights");
  // The dumps last, so a failed step writes nothing.
  if (steps_this_run_ == 0 && !options_.dump_grads_dir.empty())
    RETURN_IF_ERROR(make_dir("--dump-grads", options_.dump_grads_dir));
  if (steps_this_run_ == 0 && !options_.dump_outputs_dir.empty())
    RETURN_IF_ERROR(make_dir("--dump-outputs", options_.dump_outputs_dir));
  for (const auto& [path, tensor, name] : dumps)
    RETURN_IF_ERROR(WriteTensorFile(path, *tensor, name));
  failed_ = false;
  step_ = step;
  data_position_ += batch_;
  ++steps_this_run_;

  StepReport r;
  r.step = step;
  r.loss = loss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_second = r.seconds > 0 ? static_cast<double>(batch_ * seq_) / r.seconds : 0;
  return r;
}

// ---- device backends ----------------------------------------------------------------------

#ifdef FOUNDRY_HAVE_CUDA

Status Trainer::CheckStepOnDevice(float* loss, bool* finite) {
  // One read-back per step: the loss bits and the gradients' finite flag, together.
  void* stream = static_cast<CudaBackend*>(backend_)->stream();
  int* status = reinterpret_cast<int*>(status_.data());
  RETURN_IF_ERROR(cuda::DeviceMemset(status, 0, status_.bytes(), stream, "the step status"));
  const Tensor& loss_t = output(plan_.plan.loss);
  if (loss_t.dtype() != DType::kFloat32 || loss_t.numel() != 1)
    return Error("the loss '" + plan_.plan.loss + "' is " + TypeOf(loss_t.dtype(), loss_t.shape()) +
                 "; the cuda trainer reads an f32 scalar");
  RETURN_IF_ERROR(cuda::DeviceCopy(status, loss_t.raw(), 4, stream, "the loss"));
  RETURN_IF_ERROR(cuda::FlagNonFinite(loss_t.data<float>(), 1, status + 1, stream, "the loss"));
  for (const auto& [param, gname] : plan_.plan.gradients) {
    const Tensor& g = output(gname);
    if (g.dtype() != DType::kFloat32)
      return Error("gradient '" + gname + "' is " + TypeOf(g.dtype(), g.shape()) +
                   "; the trainer updates f32 parameters only");
    RETURN_IF_ERROR(
        cuda::FlagNonFinite(g.data<float>(), g.numel(), status + 1, stream, gname.c_str()));
  }
  int host[2] = {0, 0};
  RETURN_IF_ERROR(cuda::CopyToHost(host, status, sizeof host, stream, "the loss"));
  std::memcpy(loss, &host[0], 4);
  *finite = host[1] == 0;
  return Status::Ok();
}

Status Trainer::ApplyOptimizerOnDevice(std::string* non_finite_param) {
  const OptimizerOptions& o = options_.optimizer;
  void* stream = static_cast<CudaBackend*>(backend_)->stream();
  int* flags = reinterpret_cast<int*>(status_.data()) + 2;
  const auto& names = plan_.plan.parameters;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    Tensor& param = dev_params_.at(name);
    const std::string& gname = plan_.plan.gradients.at(name);
    const Tensor& grad = output(gname);
    if (grad.dtype() != DType::kFloat32 || grad.shape() != param.shape())
      return Error("gradient '" + gname + "' is " + TypeOf(grad.dtype(), grad.shape()) +
                   " but parameter '" + name + "' is " + TypeOf(param.dtype(), param.shape()));
    if (o.kind == OptimizerKind::kAdamW) {
      RETURN_IF_ERROR(CudaAdamWUpdate(o, step_ + 1, param.data<float>(), grad.data<float>(),
                                      dev_m_.at(name).data<float>(), dev_v_.at(name).data<float>(),
                                      param.numel(), flags + i, stream));
    } else {
      float* buf = o.momentum != 0 ? dev_m_.at(name).data<float>() : nullptr;
      RETURN_IF_ERROR(CudaSgdUpdate(o, step_ == 0, param.data<float>(), grad.data<float>(), buf,
                                    param.numel(), flags + i, stream));
    }
  }
  // The end of the step: the updates have run when the flags are back.
  std::vector<int> host(names.size(), 0);
  RETURN_IF_ERROR(cuda::CopyToHost(host.data(), flags, static_cast<int64_t>(4 * host.size()),
                                   stream, "the optimizer flags"));
  for (size_t i = 0; i < names.size(); ++i)
    if (host[i] && non_finite_param->empty()) *non_finite_param = names[i];
  return Status::Ok();
}

#else

Status Trainer::CheckStepOnDevice(float*, bool*) { return Error("the CUDA backend is not built"); }
Status Trainer::ApplyOptimizerOnDevice(std::string*) {
  return Error("the CUDA backend is not built");
}

#endif

}  // namespace foundry
