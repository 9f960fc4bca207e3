#include "runtime/evaluator.h"

#include <chrono>
#include <cmath>

#include "compiler/eval_graph.h"
#include "runtime/interpreter.h"
#include "runtime/trainer.h"

namespace foundry {

StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const Trainer& trainer,
                                                       const EvalOptions& options) {
  const LoadedPlan& lp = trainer.plan();
  if (!lp.plan.eval_memory)
    return Error("'" + lp.plan_path +
                 "' has no eval plan (it was compiled before foundry-compile planned one); "
                 "recompile it to evaluate");
  std::unique_ptr<Evaluator> e(new Evaluator());
  e->trainer_ = &trainer;
  e->options_ = options;
  ASSIGN_OR_RETURN(e->graph_, EvalGraph(lp.graph, lp.plan.loss));
  e->memory_ = *lp.plan.eval_memory;
  // Labels as the training run forms them (--labels, the plan's rule).
  StatusOr<DataSource> data =
      ChooseDataSource(e->graph_, e->graph_.inputs, {}, options.data_path, options.data_dtype,
                       lp.plan.loss_in_model, trainer.options().labels, options.mds);
  if (!data.ok()) {
    // Its messages name --data, the option it usually reads.
    std::string message = data.status().message();
    if (message.rfind("--data ", 0) == 0) message = "--eval-data " + message.substr(7);
    return Error(message);
  }
  e->data_ = std::move(data).value();
  if (!e->data_.token_batches() || (!e->data_.file && !e->data_.mds))
    return Error("--eval-data: the plan has no token input to evaluate on");
  for (const std::string& fed : trainer.options().feeds) {
    const std::string name = fed.substr(0, fed.find('='));
    for (const auto& in : e->graph_.inputs)
      if (in == name)
        return Error("--eval-data: the input '" + name +
                     "' is fed (--feed) in training; eval reads token windows into it: train "
                     "from --data instead");
  }
  const int64_t windows =
      e->data_.mds ? e->data_.mds->num_samples() : e->data_.file->num_tokens() / (e->data_.seq + 1);
  e->batches_ = windows / e->data_.batch;
  if (e->batches_ == 0 && e->data_.mds)
    return Error("--eval-data " + options.data_path + ": its " + std::to_string(windows) +
                 " samples hold no whole batch of " + std::to_string(e->data_.batch));
  if (e->batches_ == 0)
    return Error("--eval-data " + options.data_path + ": " +
                 std::to_string(e->data_.file->num_tokens()) + " tokens hold no whole batch (" +
                 std::to_string(e->data_.batch) + " windows of " +
                 std::to_string(e->data_.seq + 1) + " tokens); give a longer file");
  if (options.max_batches > 0 && options.max_batches < e->batches_)
    e->batches_ = options.max_batches;
  std::map<std::string, Tensor*> all = trainer.backend_parameters(), params;
  for (const auto& name : e->graph_.parameters) params[name] = all.at(name);
  Backend& backend = trainer.backend();
  ASSIGN_OR_RETURN(e->executor_,
                   Executor::Create(e->graph_, e->memory_, backend, params, &trainer.executor()));
  const BackendLayout* own = e->memory_.Layout(backend.name());
  if (own && own->arena_bytes > trainer.executor().layout().arena_bytes)
    e->extra_arena_bytes_ = own->arena_bytes;
  e->loss_ = Tensor(DType::kFloat32, {});
  e->staged_ids_ = backend.HostStaging(*e->executor_->input(e->data_.tokens_input));
  if (e->data_.labels_from_windows())
    e->staged_labels_ = backend.HostStaging(*e->executor_->input(e->data_.labels_input));
  return e;
}

StatusOr<EvalReport> Evaluator::Run() {
  const auto start = std::chrono::steady_clock::now();
  Backend& backend = trainer_->backend();
  const std::string& loss_name = trainer_->plan().plan.loss;
  EvalReport r;
  r.step = trainer_->step();
  double sum = 0;
  InterpretOptions io;
  io.ctx.training = false;
  io.ctx.seed = 0;
  for (int64_t b = 0; b < batches_; ++b) {
    RETURN_IF_ERROR(ReadStepWindows(data_, 0, b * data_.batch, windows_)
                        .Prepend("--eval-data " + options_.data_path + ": "));
    Tensor* labels = data_.labels_from_windows() ? &staged_labels_ : nullptr;
    WriteTokenBatch(windows_, data_.batch, data_.seq, data_.shift_labels, staged_ids_, labels);
    RETURN_IF_ERROR(backend.CopyIn(staged_ids_, *executor_->input(data_.tokens_input)));
    if (labels) RETURN_IF_ERROR(backend.CopyIn(*labels, *executor_->input(data_.labels_input)));
    RETURN_IF_ERROR(executor_->Run(io.ctx).Prepend("eval: "));
    const Tensor* out = executor_->value(loss_name);
    if (out->dtype() != DType::kFloat32)
      return Error("eval: the loss '" + loss_name + "' is not f32");
    RETURN_IF_ERROR(backend.CopyOut(*out, loss_));
    sum += static_cast<double>(loss_.data<float>()[0]);
  }
  r.batches = batches_;
  // Labels scored per batch: the model's own loss shifts (seq - 1 per row); foundry's does not.
  const int64_t per_row = trainer_->plan().plan.loss_in_model ? data_.seq - 1 : data_.seq;
  r.tokens = batches_ * data_.batch * per_row;
  r.loss = sum / static_cast<double>(batches_);
  r.perplexity = std::exp(r.loss);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string Evaluator::Describe() const {
  std::string data = data_.Describe(0);
  if (data.rfind("--data ", 0) == 0) data = "--eval-data " + data.substr(7);
  std::string left;  // an MDS split's samples after its last whole batch (a plan's batch is fixed)
  if (data_.mds && batches_ * data_.batch < data_.mds->num_samples() &&
      batches_ == data_.mds->num_samples() / data_.batch)
    left = " (its last " + std::to_string(data_.mds->num_samples() - batches_ * data_.batch) +
           " samples, less than a batch, not evaluated)";
  return data + ": " + std::to_string(batches_) + " batches of " + std::to_string(data_.batch) +
         " x " + std::to_string(data_.seq) + left;
}

}  // namespace foundry
