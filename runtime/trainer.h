// The training loop behind foundry-run: load a compiled plan, bind weights, feed a batch, run the
// training graph (forward, loss, backward) on the CPU interpreter, apply the optimizer, save and
// resume.
//
// A step:
//  1. The batch: --feed tensors (fixed for every step), else windows of a flat token file (--data),
//     else synthetic tokens. Window k holds seq + 1 tokens; row b of step s reads window
//     `position + b` (position = windows consumed so far, wrapping around the file).
//       loss_in_model = true  (the model shifts labels itself, HF / llm-foundry):
//                              input_ids = labels = window[0:seq]
//       loss_in_model = false (foundry appended an unshifted loss):
//                              input_ids = window[0:seq], labels = window[1:seq+1]
//  2. Interpret(training graph, batch + current parameters) -> loss and one gradient per parameter.
//     Dropout draws from Philox keyed by StepSeed(seed, step), so a resumed run redraws the masks.
//  3. A non-finite loss or gradient stops the run: the step is replayed with the interpreter's
//     finite check to name the first node that produced the value.
//  4. The optimizer updates every parameter in place, elementwise, in fp32 (see AdamWUpdate).
//
// Resume contract: N steps, Save, Resume, M steps is bitwise identical (losses and weights) to
// N + M steps in one run. Everything a step reads is saved: parameters, optimizer slots, the step
// count (bias correction, dropout seeds), the data position, the seeds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/hash.h"
#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/plan.h"

namespace foundry {

struct InterpretOptions;

// ---- plan ----------------------------------------------------------------------------------

// A plan and its training graph, cross-checked: every plan input is a graph input, every parameter
// an initializer, every gradient and the loss a graph output.
struct LoadedPlan {
  std::string plan_path;
  Plan plan;
  Graph graph;
};

// `prefix_or_plan_path`: "out/mpt" (reads out/mpt.plan) or a path ending in ".plan". The graph
// file is resolved relative to the plan's directory.
StatusOr<LoadedPlan> LoadPlan(const std::string& prefix_or_plan_path);

// The same checks LoadPlan makes, for a plan and graph built in memory (ReadPlan's own checks
// aside): the loss is a scalar float output of the graph; every input is a graph input; every
// parameter is an initializer whose gradient is a graph output of its dtype and shape; each
// dimension in `input_dims` is the size `dims` gives it in the graph's input shapes.
Status CheckPlan(const Plan& plan, const Graph& graph, const std::string& plan_path);

// ---- parameter initialisation --------------------------------------------------------------

// Value of a parameter that carries no data (a --no-weights export), by name:
//   name ends with ".bias"                                  -> 0
//   rank 1 and name contains "norm" or "ln" (any case)      -> 1   (LayerNorm/RMSNorm scales)
//   otherwise                                               -> normal(0, 0.02)
// The normal draws are NormalSample(init_seed, FNV-1a(name), i): one parameter's values depend on
// its name and the seed only, never on which other parameters exist or their order.
Tensor InitParameter(const std::string& name, const Shape& shape, uint64_t init_seed);

// Standard normal sample `index` of stream (seed, key). Box-Muller written out over Philox4x32-10
// (kernels/cpu/philox.h): block index/2 gives two 53-bit uniforms u1 in (0, 1], u2 in [0, 1);
// even indices take r*cos(2 pi u2), odd ones r*sin(2 pi u2), r = sqrt(-2 ln u1), in double.
// std::normal_distribution is avoided on purpose: its algorithm is implementation-defined.
double NormalSample(uint64_t seed, uint64_t key, uint64_t index);

// Seed of the random ops (Dropout) in step `step` (1-based) of a run seeded `run_seed`.
uint64_t StepSeed(uint64_t run_seed, int64_t step);

// ---- optimizer -----------------------------------------------------------------------------

enum class OptimizerKind { kSgd, kAdamW };
std::string_view OptimizerName(OptimizerKind kind);  // "sgd", "adamw"
StatusOr<OptimizerKind> ParseOptimizerName(std::string_view name);

// Hyper-parameters are doubles, as in PyTorch (Python floats); they are rounded to fp32 exactly
// where PyTorch rounds them.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;  // SGD only; 0 = plain SGD (no buffer)
};

// One AdamW step over n elements, PyTorch's torch.optim.AdamW (decoupled weight decay, bias
// correction, amsgrad=False) operation for operation; `step` counts this update (1 = first).
// Bitwise equal to torch 1.13's single-tensor CPU path (checked in trainer_test):
//   p = p * f32(1 - lr*wd)
//   m = fma(g, f32(1 - b1), m * f32(b1))                       exp_avg.mul_(b1).add_(g, alpha=1-b1)
//   v = fma(f32(1 - b2) * g, g, v * f32(b2))        exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
//   p = p + (f32(-lr / (1 - b1^t)) * m) / (sqrt(v) / f32(sqrt(1 - b2^t)) + f32(eps))
// with the bias corrections computed in double, as Python does.
// Each value in range, or an error naming the option as foundry-run spells it ("--lr nan: ..."):
// lr finite > 0, 0 <= beta1, beta2 < 1, eps finite > 0, weight_decay finite >= 0,
// 0 <= momentum < 1.
Status CheckOptimizerOptions(const OptimizerOptions& o);

void AdamWUpdate(const OptimizerOptions& o, int64_t step, float* param, const float* grad, float* m,
                 float* v, int64_t n);

// One SGD step, torch.optim.SGD (dampening 0, no Nesterov): coupled weight decay
// d = fma(p, f32(wd), g) when wd != 0; with momentum, buf = d on the first step, else
// buf = buf * f32(momentum) + d, and d = buf; then p = fma(d, f32(-lr), p).
// `momentum_buf` is unused (may be null) when momentum is 0.
void SgdUpdate(const OptimizerOptions& o, bool first_step, float* param, const float* grad,
               float* momentum_buf, int64_t n);

// ---- data ----------------------------------------------------------------------------------

enum class TokenDType { kUint16, kInt32 };
std::string_view TokenDTypeName(TokenDType t);  // "uint16", "int32"
StatusOr<TokenDType> ParseTokenDType(std::string_view name);

// A flat, header-less file of little-endian token ids, read window by window (the file is not
// held in memory, so it may be larger than RAM).
class TokenFile {
 public:
  static StatusOr<TokenFile> Open(const std::string& path, TokenDType dtype);

  const std::string& path() const { return path_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_tokens() const { return num_tokens_; }

  // Window `k` (any k >= 0) of `window` tokens: window k % W of the W = num_tokens / window whole
  // windows in the file (a tail shorter than a window is never read). Every token is checked
  // against `vocab` (vocab <= 0: unchecked); an id outside [0, vocab) is an error naming its
  // position in the file.
  Status ReadWindow(int64_t k, int64_t window, int64_t vocab, int64_t* out) const;

 private:
  std::string path_;
  TokenDType dtype_ = TokenDType::kUint16;
  int64_t num_tokens_ = 0;
};

// Synthetic token t of window k: uniform in [0, vocab) from Philox(seed, FNV-1a("synthetic"),
// k * window + t), by Lemire's multiply-shift ((bits * vocab) >> 32).
void SyntheticWindow(uint64_t seed, int64_t k, int64_t window, int64_t vocab, int64_t* out);

// input_ids and labels ([batch, seq]) from batch windows of seq + 1 tokens each (row-major), by
// the rule in the header comment.
struct TokenBatch {
  Tensor input_ids;
  Tensor labels;
};
TokenBatch MakeTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                          bool loss_in_model, DType ids_dtype, DType labels_dtype);

// ---- feeds ---------------------------------------------------------------------------------

// One --feed NAME=FILE.pb.
struct Feed {
  std::string spec;  // as given, for messages
  std::string name;
  Tensor tensor;
};
// Parses NAME=FILE.pb and reads the TensorProto file.
StatusOr<Feed> ReadFeed(const std::string& spec);
// The feed names one of `inputs` and matches its dtype and shape exactly.
Status CheckFeed(const Feed& feed, const Graph& graph, const std::vector<std::string>& inputs);

// ---- trainer -------------------------------------------------------------------------------

struct TrainerOptions {
  OptimizerOptions optimizer;
  uint64_t seed = 0;               // dropout masks and synthetic tokens
  uint64_t init_seed = 0;          // parameters without data
  std::vector<std::string> feeds;  // NAME=FILE.pb
  std::string data_path;           // flat token file; "" = synthetic tokens (unless fed)
  TokenDType data_dtype = TokenDType::kUint16;
  // After the first Step() of this trainer: every gradient as DIR/<param>_grad.pb, every graph
  // output as DIR/<output>.pb.
  std::string dump_grads_dir;
  std::string dump_outputs_dir;
};

struct StepReport {
  int64_t step = 0;  // 1-based, counted over resumes
  float loss = 0;
  double seconds = 0;
  double tokens_per_second = 0;
};

// What DIR/state.json records (Save writes it, Resume and ReadTrainState read it).
struct TrainState {
  int64_t step = 0;
  std::string plan_path;  // absolute
  OptimizerOptions optimizer;
  uint64_t seed = 0;
  uint64_t init_seed = 0;
  std::vector<std::string> feeds;
  std::string data_path;  // "" = synthetic (or fully fed)
  TokenDType data_dtype = TokenDType::kUint16;
  int64_t data_position = 0;  // windows consumed
};
// Reads DIR/state.json and checks its values: the optimizer options (CheckOptimizerOptions),
// 0 <= step < 2^63 - 1, data_position >= 0.
StatusOr<TrainState> ReadTrainState(const std::string& dir);

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

  // DIR/model.onnx (the training graph, trained parameters as initializers),
  // DIR/optimizer/<param>.m.pb and .v.pb, DIR/state.json. Written into DIR.tmp.<pid>, then swapped
  // in, so DIR is always either the old save or the new one.
  Status Save(const std::string& dir) const;

  int64_t step() const { return step_; }
  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  int64_t vocab() const { return vocab_; }
  int64_t num_parameter_elements() const;
  const LoadedPlan& plan() const { return plan_; }
  const TrainerOptions& options() const { return options_; }
  // "synthetic tokens (seed 0)", "--data FILE (uint16, 1000 tokens)", "--feed"
  std::string DataDescription() const;
  // The current parameter values (a copy) / one of them.
  std::map<std::string, Tensor> parameters() const;
  const Tensor& parameter(const std::string& name) const;
  // Graph outputs (loss, gradients) of the last step.
  const std::map<std::string, Tensor>& last_outputs() const { return last_outputs_; }

 private:
  Trainer() = default;
  Status BuildBatch();
  Status ApplyOptimizer(const std::map<std::string, Tensor>& outputs);
  Status NonFiniteError(int64_t step, const InterpretOptions& base) const;
  Status WriteSave(const std::string& tmp) const;
  // Error if `path` (about to be written for `option`) is one of the run's input files.
  Status CheckNotAnInput(const std::string& path, const std::string& option) const;

  LoadedPlan plan_;
  TrainerOptions options_;
  // What every step feeds the interpreter: the parameters (updated in place by the optimizer),
  // the --feed tensors and the current token batch.
  std::map<std::string, Tensor> bindings_;
  std::map<std::string, Tensor> slot_m_;  // AdamW exp_avg / SGD momentum buffer
  std::map<std::string, Tensor> slot_v_;  // AdamW exp_avg_sq
  std::map<std::string, Tensor> fed_;     // --feed tensors
  std::unique_ptr<TokenFile> data_;
  std::string tokens_input_;  // the input the embedding gathers ("" if none)
  std::string labels_input_;  // "labels" if the plan has it
  int64_t batch_ = 0, seq_ = 0, vocab_ = 0;
  int64_t step_ = 0;
  int64_t data_position_ = 0;
  int64_t steps_this_run_ = 0;
  bool failed_ = false;
  std::string resume_dir_;
  // Every file the run reads: never overwritten by a dump or a save.
  std::vector<std::string> input_files_;
  std::map<std::string, Tensor> last_outputs_;
};

// A file name for a value name: '/' and '%' are percent-encoded ("a/b" -> "a%2Fb"), so every
// value gets its own file and the name is recoverable.
std::string FileNameForValue(const std::string& name);

}  // namespace foundry
