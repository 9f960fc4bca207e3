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
#include "runtime/interpreter.h"

namespace foundry {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRecompile = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";

std::string TypeOf(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + ShapeToString(shape);
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

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

// Graph values without a concrete type get one from the op schemas (a graph file written without
// value_info); values that already have one keep it.
Status EnsureShapes(Graph& g) {
  bool missing = false;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && (!g.FindValue(o) || !g.FindValue(o)->ShapeKnown())) missing = true;
  if (!missing) return Status::Ok();
  for (const Node& n : g.nodes) RETURN_IF_ERROR(InferAndSetTypes(g, n));
  return Status::Ok();
}

// A number as the user would type it back: shortest round-trip form ("0.001", "1e+300", "nan").
std::string Num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// `path` lies in `dir` (or is `dir`), comparing canonical paths so links and ".." do not hide it.
bool IsInside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  fs::path d = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  auto [di, pi] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return di == d.end() || (std::next(di) == d.end() && di->empty());
}

// Replaces `dir` by `tmp` so that a reader sees either the old directory or the new one: an atomic
// exchange (renameat2 RENAME_EXCHANGE) where the file system has it, else two renames (a crash
// between them leaves the old save as DIR.old.<pid> and the new one as DIR.tmp.<pid>).
Status SwapDirectoryIn(const std::string& tmp, const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (std::rename(tmp.c_str(), dir.c_str()) != 0)
      return Error("cannot rename '" + tmp + "' to '" + dir + "': " + std::strerror(errno));
    return Status::Ok();
  }
#ifdef RENAME_EXCHANGE
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp, ec);  // now the old save
    return Status::Ok();
  }
#endif
  std::string old = dir + ".old." + std::to_string(::getpid());
  fs::remove_all(old, ec);
  if (std::rename(dir.c_str(), old.c_str()) != 0)
    return Error("cannot rename '" + dir + "' to '" + old + "': " + std::strerror(errno));
  if (std::rename(tmp.c_str(), dir.c_str()) != 0)
    return Error("cannot rename '" + tmp + "' to '" + dir + "': " + std::strerror(errno));
  fs::remove_all(old, ec);
  return Status::Ok();
}

}  // namespace

// ---- plan ----------------------------------------------------------------------------------

Status CheckPlan(const Plan& plan, const Graph& g, const std::string& plan_path) {
  auto damaged = [&](const std::string& why) {
    return Error("'" + plan_path + "' is a damaged foundry plan (" + why + ")" + kRecompile);
  };
  auto is_output = [&](const std::string& v) {
    return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
  };
  if (!is_output(plan.loss))
    return damaged("the loss '" + plan.loss + "' is not an output of the graph '" +
                   plan.graph_file + "'");
  if (const Value* loss = g.FindValue(plan.loss);
      loss && loss->ShapeKnown() && (!IsFloat(loss->dtype) || NumElements(loss->shape) != 1))
    return damaged("the loss '" + plan.loss + "' is " + loss->TypeString() +
                   ", not a float scalar");
  for (const auto& in : plan.inputs)
    if (std::find(g.inputs.begin(), g.inputs.end(), in) == g.inputs.end())
      return damaged("input '" + in + "' is not among the inputs of '" + plan.graph_file +
                     "': " + JoinNames(g.inputs));
  for (const auto& p : plan.parameters) {
    if (!g.IsInitializer(p))
      return damaged("parameter '" + p + "' is not an initializer of the graph '" +
                     plan.graph_file + "'");
    auto it = plan.gradients.find(p);
    if (it == plan.gradients.end()) return damaged("no gradient for parameter '" + p + "'");
    if (!is_output(it->second))
      return damaged("the gradient '" + it->second + "' of parameter '" + p +
                     "' is not an output of the graph '" + plan.graph_file + "'");
    const Value* pv = g.FindValue(p);
    const Value* gv = g.FindValue(it->second);
    if (pv && gv && pv->ShapeKnown() && gv->ShapeKnown() &&
        (pv->dtype != gv->dtype || pv->shape != gv->shape))
      return damaged("the gradient '" + it->second + "' is " + gv->TypeString() +
                     " but parameter '" + p + "' is " + pv->TypeString());
  }
  for (const auto& [input, axes] : plan.input_dims) {
    const Value* v = g.FindValue(input);
    if (!v || !v->ShapeKnown()) continue;
    if (v->shape.size() != axes.size())
      return damaged("input '" + input + "' is " + v->TypeString() + " in the graph but has " +
                     std::to_string(axes.size()) + " axes in input_dims");
    for (size_t i = 0; i < axes.size(); ++i)
      if (!axes[i].empty() && plan.dims.at(axes[i]) != v->shape[i])
        return damaged("dims gives '" + axes[i] + "' = " + std::to_string(plan.dims.at(axes[i])) +
                       " but input '" + input + "' is " + v->TypeString() + " in the graph");
  }
  return Status::Ok();
}

StatusOr<LoadedPlan> LoadPlan(const std::string& prefix_or_plan_path) {
  LoadedPlan lp;
  lp.plan_path =
      EndsWith(prefix_or_plan_path, ".plan") ? prefix_or_plan_path : prefix_or_plan_path + ".plan";
  ASSIGN_OR_RETURN(lp.plan, ReadPlan(lp.plan_path));
  fs::path graph_path = fs::path(lp.plan.graph_file);
  if (graph_path.is_relative()) graph_path = fs::path(lp.plan_path).parent_path() / graph_path;
  ImportOptions io;
  io.load_weights = true;
  auto graph = ImportOnnx(graph_path.string(), io);
  if (!graph.ok())
    return graph.status().Prepend("cannot load the training graph of '" + lp.plan_path + "': ");
  lp.graph = std::move(graph).value();
  RETURN_IF_ERROR(CheckPlan(lp.plan, lp.graph, lp.plan_path));
  Status st = EnsureShapes(lp.graph);
  if (!st.ok())
    return Error("'" + lp.plan_path + "' is a damaged foundry plan (" + st.message() + ")" +
                 kRecompile);
  return lp;
}

// ---- parameter initialisation --------------------------------------------------------------

uint64_t StepSeed(uint64_t run_seed, int64_t step) {
  return SplitMix64(run_seed ^ SplitMix64(static_cast<uint64_t>(step)));
}

double NormalSample(uint64_t seed, uint64_t key, uint64_t index) {
  Philox4 r = PhiloxBlock(seed, key, index >> 1);
  // 53-bit uniforms from two 32-bit lanes each; u1 in (0, 1] so the log is finite.
  auto u53 = [](uint32_t hi, uint32_t lo) {
    return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11));
  };
  const double k2m53 = 1.0 / 9007199254740992.0;
  double u1 = (u53(r.v[0], r.v[1]) + 1.0) * k2m53;
  double u2 = u53(r.v[2], r.v[3]) * k2m53;
  double radius = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  return (index & 1) ? radius * std::sin(theta) : radius * std::cos(theta);
}

Tensor InitParameter(const std::string& name, const Shape& shape, uint64_t init_seed) {
  Tensor t(DType::kFloat32, shape);
  float* p = t.data<float>();
  std::string lower = Lower(name);
  if (EndsWith(name, ".bias")) return t;  // zero-filled
  if (shape.size() == 1 &&
      (lower.find("norm") != std::string::npos || lower.find("ln") != std::string::npos)) {
    std::fill(p, p + t.numel(), 1.0f);
    return t;
  }
  uint64_t key = Fnv1a(name);
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(0.02 * NormalSample(init_seed, key, static_cast<uint64_t>(i)));
  return t;
}

// ---- optimizer -----------------------------------------------------------------------------

std::string_view OptimizerName(OptimizerKind kind) {
  return kind == OptimizerKind::kSgd ? "sgd" : "adamw";
}

StatusOr<OptimizerKind> ParseOptimizerName(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  return Error("unknown optimizer '" + std::string(name) + "' (choose sgd or adamw)");
}

Status CheckOptimizerOptions(const OptimizerOptions& o) {
  // Written so that NaN fails every check: each condition is what must hold.
  if (!(std::isfinite(o.lr) && o.lr > 0))
    return Error("--lr " + Num(o.lr) + ": the learning rate must be a finite number > 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    return Error("--beta1 " + Num(o.beta1) + ": must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    return Error("--beta2 " + Num(o.beta2) + ": must be in [0, 1)");
  if (!(std::isfinite(o.eps) && o.eps > 0))
    return Error("--eps " + Num(o.eps) + ": must be a finite number > 0");
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0))
    return Error("--weight-decay " + Num(o.weight_decay) + ": must be a finite number >= 0");
  if (!(o.momentum >= 0 && o.momentum < 1))
    return Error("--momentum " + Num(o.momentum) + ": must be in [0, 1)");
  return Status::Ok();
}

void AdamWUpdate(const OptimizerOptions& o, int64_t step, float* param, const float* grad, float* m,
                 float* v, int64_t n) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  const float decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
  const float beta1 = static_cast<float>(o.beta1);
  const float one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  const float beta2 = static_cast<float>(o.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  const float neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(o.eps);
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    float p = param[i] * decay;
    m[i] = std::fma(g, one_minus_beta1, m[i] * beta1);
    v[i] = std::fma(one_minus_beta2 * g, g, v[i] * beta2);
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
    param[i] = p + (neg_step_size * m[i]) / denom;
  }
}

void SgdUpdate(const OptimizerOptions& o, bool first_step, float* param, const float* grad,
               float* momentum_buf, int64_t n) {
  const float wd = static_cast<float>(o.weight_decay);
  const float momentum = static_cast<float>(o.momentum);
  const float neg_lr = static_cast<float>(-o.lr);
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i];
    if (o.weight_decay != 0) d = std::fma(param[i], wd, d);
    if (o.momentum != 0) {
      // buf.mul_(momentum).add_(d, alpha=1): PyTorch's add_ is fmadd(d, alpha, buf); written
      // as an fma so no compiler contracts buf * momentum + d into one rounding.
      momentum_buf[i] = first_step ? d : std::fma(d, 1.0f, momentum_buf[i] * momentum);
      d = momentum_buf[i];
    }
    param[i] = std::fma(d, neg_lr, param[i]);
  }
}

// ---- data ----------------------------------------------------------------------------------

std::string_view TokenDTypeName(TokenDType t) {
  return t == TokenDType::kUint16 ? "uint16" : "int32";
}

StatusOr<TokenDType> ParseTokenDType(std::string_view name) {
  if (name == "uint16") return TokenDType::kUint16;
  if (name == "int32") return TokenDType::kInt32;
  return Error("--data-dtype " + std::string(name) + ": choose uint16 or int32");
}

StatusOr<TokenFile> TokenFile::Open(const std::string& path, TokenDType dtype) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) return Error("--data " + path + ": cannot open it: " + ec.message());
  const int64_t width = dtype == TokenDType::kUint16 ? 2 : 4;
  if (size % width != 0)
    return Error("--data " + path + ": " + std::to_string(size) +
                 " bytes is not a whole number "
                 "of " +
                 std::string(TokenDTypeName(dtype)) + " tokens; is --data-dtype right?");
  TokenFile f;
  f.path_ = path;
  f.dtype_ = dtype;
  f.num_tokens_ = static_cast<int64_t>(size) / width;
  return f;
}

Status TokenFile::ReadWindow(int64_t k, int64_t window, int64_t vocab, int64_t* out) const {
  const int64_t windows = num_tokens_ / window;
  if (windows == 0)
    return Error("--data " + path_ + ": " + std::to_string(num_tokens_) +
                 " tokens is shorter than one window of seq + 1 = " + std::to_string(window) +
                 " tokens");
  const int64_t start = (k % windows) * window;
  const int64_t width = dtype_ == TokenDType::kUint16 ? 2 : 4;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Error("--data " + path_ + ": cannot open it: " + std::strerror(errno));
  std::vector<unsigned char> bytes(static_cast<size_t>(window * width));
  in.seekg(start * width);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in)
    return Error("--data " + path_ + ": read failed at token " + std::to_string(start) +
                 " (was the file truncated?)");
  for (int64_t t = 0; t < window; ++t) {
    const unsigned char* b = &bytes[static_cast<size_t>(t * width)];
    int64_t id =
        dtype_ == TokenDType::kUint16
            ? static_cast<int64_t>(b[0] | (b[1] << 8))
            : static_cast<int64_t>(static_cast<int32_t>(
                  static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                  (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24)));
    if (vocab > 0 && (id < 0 || id >= vocab))
      return Error("--data " + path_ + ": token " + std::to_string(id) + " at position " +
                   std::to_string(start + t) + " is outside the vocabulary [0, " +
                   std::to_string(vocab) + ")");
    out[t] = id;
  }
  return Status::Ok();
}

void SyntheticWindow(uint64_t seed, int64_t k, int64_t window, int64_t vocab, int64_t* out) {
  static const uint64_t key = Fnv1a("synthetic");
  for (int64_t t = 0; t < window; ++t) {
    uint32_t bits = PhiloxRandom(seed, key, static_cast<uint64_t>(k * window + t));
    out[t] =
        static_cast<int64_t>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(vocab)) >> 32);
  }
}

namespace {

Tensor IntTensor(DType dtype, int64_t batch, int64_t seq, const std::vector<int64_t>& values) {
  Tensor t(dtype, {batch, seq});
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kInt32)
      t.data<int32_t>()[i] = static_cast<int32_t>(values[static_cast<size_t>(i)]);
    else
      t.data<int64_t>()[i] = values[static_cast<size_t>(i)];
  }
  return t;
}

}  // namespace

TokenBatch MakeTokenBatch(const std::vector<int64_t>& windows, int64_t batch, int64_t seq,
                          bool loss_in_model, DType ids_dtype, DType labels_dtype) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq)), labels(ids.size());
  const int64_t shift = loss_in_model ? 0 : 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      ids[static_cast<size_t>(b * seq + t)] = windows[static_cast<size_t>(b * (seq + 1) + t)];
      labels[static_cast<size_t>(b * seq + t)] =
          windows[static_cast<size_t>(b * (seq + 1) + t + shift)];
    }
  return TokenBatch{IntTensor(ids_dtype, batch, seq, ids),
                    IntTensor(labels_dtype, batch, seq, labels)};
}

// ---- feeds ---------------------------------------------------------------------------------

StatusOr<Feed> ReadFeed(const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    return Error("--feed " + spec + ": expected NAME=FILE.pb");
  Feed f;
  f.spec = spec;
  f.name = spec.substr(0, eq);
  auto t = ReadTensorFile(spec.substr(eq + 1));
  if (!t.ok()) return t.status().Prepend("--feed " + spec + ": ");
  f.tensor = std::move(t).value();
  return f;
}

Status CheckFeed(const Feed& feed, const Graph& graph, const std::vector<std::string>& inputs) {
  if (std::find(inputs.begin(), inputs.end(), feed.name) == inputs.end())
    return Error("--feed " + feed.spec + ": no input named '" + feed.name + "'; the inputs are " +
                 JoinNames(inputs));
  const Value* v = graph.FindValue(feed.name);
  if (!v) return Error("--feed " + feed.spec + ": input '" + feed.name + "' has no type");
  if (v->dtype != feed.tensor.dtype() || v->shape != feed.tensor.shape())
    return Error("--feed " + feed.spec + ": expected " + TypeOf(v->dtype, v->shape) + ", got " +
                 TypeOf(feed.tensor.dtype(), feed.tensor.shape()));
  return Status::Ok();
}

// ---- state ---------------------------------------------------------------------------------

std::string FileNameForValue(const std::string& name) {
  std::string s;
  for (char c : name) {
    if (c == '/')
      s += "%2F";
    else if (c == '%')
      s += "%25";
    else
      s += c;
  }
  if (s.empty() || s == "." || s == "..") s = "%" + s;
  return s;
}

StatusOr<TrainState> ReadTrainState(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Error("--resume " + dir + ": cannot open '" + path + "': " + std::strerror(errno) +
                 "; save a run with --save DIR first");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  // Compare as JSON values: value("format", "") would throw on a non-string.
  if (j.is_discarded() || !j.is_object() || !j.contains("format") ||
      j["format"] != "foundry-train-state")
    return Error("--resume " + dir + ": '" + path + "' is not a foundry-run state file");
  if (!j.contains("version") || j["version"] != 1)
    return Error("--resume " + dir + ": '" + path + "' has state format version " +
                 (j.contains("version") ? j["version"].dump() : std::string("(none)")) +
                 "; this foundry-run reads 1");
  TrainState s;
  try {
    s.step = j.at("step").get<int64_t>();
    s.plan_path = j.at("plan").get<std::string>();
    const auto& o = j.at("optimizer");
    auto kind = ParseOptimizerName(o.at("kind").get<std::string>());
    if (!kind.ok()) return kind.status().Prepend("--resume " + dir + ": ");
    s.optimizer.kind = *kind;
    s.optimizer.lr = o.at("lr").get<double>();
    s.optimizer.beta1 = o.at("beta1").get<double>();
    s.optimizer.beta2 = o.at("beta2").get<double>();
    s.optimizer.eps = o.at("eps").get<double>();
    s.optimizer.weight_decay = o.at("weight_decay").get<double>();
    s.optimizer.momentum = o.at("momentum").get<double>();
    s.seed = j.at("seed").get<uint64_t>();
    s.init_seed = j.at("init_seed").get<uint64_t>();
    const auto& d = j.at("data");
    s.feeds = d.at("feeds").get<std::vector<std::string>>();
    s.data_path = d.at("path").get<std::string>();
    auto dtype = ParseTokenDType(d.at("dtype").get<std::string>());
    if (!dtype.ok()) return dtype.status().Prepend("--resume " + dir + ": ");
    s.data_dtype = *dtype;
    s.data_position = d.at("position").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Error("--resume " + dir + ": '" + path + "' is damaged (" + e.what() + ")");
  }
  const std::string damaged = "--resume " + dir + ": '" + path + "' is damaged (";
  if (s.step < 0 || s.step == INT64_MAX)
    return Error(damaged + "step " + std::to_string(s.step) + " is out of range)");
  if (s.data_position < 0)
    return Error(damaged + "data position " + std::to_string(s.data_position) + " is negative)");
  Status st = CheckOptimizerOptions(s.optimizer);
  if (!st.ok()) return Error(damaged + "it records " + st.message() + ")");
  return s;
}

// ---- trainer -------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(LoadedPlan plan, const TrainerOptions& options) {
  RETURN_IF_ERROR(CheckOptimizerOptions(options.optimizer));
  std::unique_ptr<Trainer> t(new Trainer());
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

  // Parameters: the graph's data, or the seeded initialisation. The graph's copy is dropped: the
  // trainer's tensors are fed in every step.
  for (const auto& name : p.parameters) {
    Value* v = g.FindValue(name);
    if (v->dtype != DType::kFloat32)
      return Error("parameter '" + name + "' is " + std::string(DTypeName(v->dtype)) +
                   "; the trainer updates f32 parameters only");
    if (!v->ShapeKnown())
      return Error("parameter '" + name + "' has no concrete shape (" + v->TypeString() + ")");
    t->bindings_[name] = v->data ? *v->data : InitParameter(name, v->shape, options.init_seed);
    v->data = nullptr;
  }
  std::set<std::string> trained(p.parameters.begin(), p.parameters.end());
  for (const auto& init : g.initializers) {
    const Value* v = g.FindValue(init);
    if (v && !v->data && !trained.count(init))
      return Error("initializer '" + init +
                   "' has no data and is not a trained parameter; "
                   "export the model with its buffers");
  }

  // Inputs: --feed, then tokens for whatever is left.
  for (const auto& spec : options.feeds) {
    ASSIGN_OR_RETURN(Feed f, ReadFeed(spec));
    RETURN_IF_ERROR(CheckFeed(f, g, p.inputs));
    t->fed_[f.name] = std::move(f.tensor);
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
  for (auto& [name, tensor] : t->fed_) t->bindings_[name] = tensor;
  return t;
}

int64_t Trainer::num_parameter_elements() const {
  int64_t n = 0;
  for (const auto& name : plan_.plan.parameters) n += bindings_.at(name).numel();
  return n;
}

std::map<std::string, Tensor> Trainer::parameters() const {
  std::map<std::string, Tensor> out;
  for (const auto& name : plan_.plan.parameters) out[name] = bindings_.at(name);
  return out;
}

const Tensor& Trainer::parameter(const std::string& name) const { return bindings_.at(name); }

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
  std::vector<int64_t> windows(static_cast<size_t>(batch_ * window));
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t k = data_position_ + b;
    int64_t* out = &windows[static_cast<size_t>(b * window)];
    if (data_)
      RETURN_IF_ERROR(data_->ReadWindow(k, window, vocab_, out));
    else
      SyntheticWindow(options_.seed, k, window, vocab_, out);
  }
  const Graph& g = plan_.graph;
  DType ids_dtype = g.FindValue(tokens_input_)->dtype;
  DType labels_dtype = labels_input_.empty() ? DType::kInt64 : g.FindValue(labels_input_)->dtype;
  TokenBatch tb =
      MakeTokenBatch(windows, batch_, seq_, plan_.plan.loss_in_model, ids_dtype, labels_dtype);
  bindings_[tokens_input_] = std::move(tb.input_ids);
  if (!labels_input_.empty() && !fed_.count(labels_input_))
    bindings_[labels_input_] = std::move(tb.labels);
  return Status::Ok();
}

Status Trainer::NonFiniteError(int64_t step, const InterpretOptions& base) const {
  InterpretOptions io = base;
  io.check_finite = true;
  auto replay = Interpret(plan_.graph, bindings_, io);
  const std::string prefix =
      "step " + std::to_string(step) + ": non-finite value first produced by ";
  if (replay.ok()) {
    // Every node produced finite values: a non-finite weight was fed in.
    for (const auto& name : plan_.plan.parameters)
      if (!AllFinite(bindings_.at(name)))
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

Status Trainer::ApplyOptimizer(const std::map<std::string, Tensor>& outputs) {
  const OptimizerOptions& o = options_.optimizer;
  for (const auto& name : plan_.plan.parameters) {
    Tensor& param = bindings_.at(name);
    const std::string& gname = plan_.plan.gradients.at(name);
    const Tensor& grad = outputs.at(gname);
    if (grad.dtype() != DType::kFloat32 || grad.shape() != param.shape())
      return Error("gradient '" + gname + "' is " + TypeOf(grad.dtype(), grad.shape()) +
                   " but parameter '" + name + "' is " + TypeOf(param.dtype(), param.shape()));
    if (o.kind == OptimizerKind::kAdamW) {
      auto [mi, m_new] = slot_m_.try_emplace(name, DType::kFloat32, param.shape());
      auto [vi, v_new] = slot_v_.try_emplace(name, DType::kFloat32, param.shape());
      AdamWUpdate(o, step_ + 1, param.data<float>(), grad.data<float>(), mi->second.data<float>(),
                  vi->second.data<float>(), param.numel());
    } else {
      float* buf = nullptr;
      bool first = true;
      if (o.momentum != 0) {
        auto [mi, m_new] = slot_m_.try_emplace(name, DType::kFloat32, param.shape());
        buf = mi->second.data<float>();
        first = m_new;
      }
      SgdUpdate(o, first, param.data<float>(), grad.data<float>(), buf, param.numel());
    }
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
  auto result = Interpret(plan_.graph, bindings_, io);
  if (!result.ok()) return result.status().Prepend("step " + std::to_string(step) + ": ");
  std::map<std::string, Tensor>& outputs = *result;

  const Tensor& loss_t = outputs.at(plan_.plan.loss);
  bool finite = AllFinite(loss_t);
  for (const auto& [param, gname] : plan_.plan.gradients) finite &= AllFinite(outputs.at(gname));
  if (!finite) {
    failed_ = true;
    return NonFiniteError(step, io);
  }

  // Dumps: every target is checked before any is written.
  std::vector<std::tuple<std::string, const Tensor*, std::string>> dumps;  // path, tensor, name
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
      dumps.emplace_back(
          (fs::path(options_.dump_grads_dir) / (FileNameForValue(gname) + ".pb")).string(),
          &outputs.at(plan_.plan.gradients.at(name)), gname);
      RETURN_IF_ERROR(CheckNotAnInput(std::get<0>(dumps.back()), "--dump-grads"));
    }
  }
  if (steps_this_run_ == 0 && !options_.dump_outputs_dir.empty()) {
    for (const auto& out : plan_.graph.outputs) {
      dumps.emplace_back(
          (fs::path(options_.dump_outputs_dir) / (FileNameForValue(out) + ".pb")).string(),
          &outputs.at(out), out);
      RETURN_IF_ERROR(CheckNotAnInput(std::get<0>(dumps.back()), "--dump-outputs"));
    }
  }
  // From here on the parameters are being changed in place: any error ends the trainer.
  failed_ = true;
  RETURN_IF_ERROR(ApplyOptimizer(outputs));
  // Finite gradients can still give non-finite weights (an lr that overflows fp32, a weight at
  // the edge of the range). The update is in place, so the trainer is done for; nothing of it
  // may be saved.
  for (const auto& name : plan_.plan.parameters)
    if (!AllFinite(bindings_.at(name)))
      return Error("step " + std::to_string(step) + ": the optimizer update made parameter '" +
                   name + "' non-finite (lr " + Num(options_.optimizer.lr) +
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
  r.loss = static_cast<float>(loss_t.GetAsDouble(0));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_second = r.seconds > 0 ? static_cast<double>(batch_ * seq_) / r.seconds : 0;
  last_outputs_ = std::move(outputs);
  return r;
}

// ---- save / resume -------------------------------------------------------------------------

namespace {

std::string NormalDir(const std::string& dir_arg) {
  std::string dir = fs::path(dir_arg).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

Status Trainer::CheckNotAnInput(const std::string& path, const std::string& option) const {
  const std::optional<FileId> id = GetFileId(path);
  if (!id) return Status::Ok();
  for (const auto& input : input_files_)
    if (GetFileId(input) == id)
      return Error(option + ": writing '" + path + "' would overwrite '" + input +
                   "', an input of this run; choose another folder");
  return Status::Ok();
}

Status Trainer::CheckSaveTarget(const std::string& dir_arg) const {
  const std::string dir = NormalDir(dir_arg);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      return Error("--save " + dir_arg + ": '" + dir +
                   "' exists and is not a directory; choose a new directory");
    if (!fs::is_empty(dir, ec) && !fs::exists(fs::path(dir) / "state.json"))
      return Error("--save " + dir_arg + ": '" + dir +
                   "' exists and is not a foundry-run save (no state.json); choose another "
                   "directory");
    if (!resume_dir_.empty() && GetFileId(dir) == GetFileId(resume_dir_))
      return Error("--save " + dir_arg +
                   ": it is the --resume directory, whose files this run reads; save to "
                   "another directory");
  }
  for (const auto& input : input_files_)
    if (GetFileId(input) && IsInside(input, dir))
      return Error("--save " + dir_arg + ": '" + dir + "' holds '" + input +
                   "', an input of this run; save to another directory");
  return Status::Ok();
}

Status Trainer::Save(const std::string& dir_arg) const {
  if (failed_) return Error("--save " + dir_arg + ": a step failed; nothing to save");
  RETURN_IF_ERROR(CheckSaveTarget(dir_arg));
  const std::string dir = NormalDir(dir_arg);
  std::error_code ec;
  // A name no one else uses: DIR.tmp could be the user's.
  const std::string tmp = dir + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(fs::path(tmp) / "optimizer", ec))
    return Error("--save " + dir_arg + ": cannot create '" + tmp + "': " + ec.message());
  Status st = WriteSave(tmp);
  if (st.ok()) st = SwapDirectoryIn(tmp, dir);
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

Status Trainer::WriteSave(const std::string& tmp) const {
  std::error_code ec;

  Graph g = plan_.graph;
  for (const auto& name : plan_.plan.parameters)
    g.FindValue(name)->data = std::make_shared<const Tensor>(bindings_.at(name));
  RETURN_IF_ERROR(ExportOnnx(g, (fs::path(tmp) / "model.onnx").string()));
  auto write_slots = [&](const std::map<std::string, Tensor>& slots,
                         const std::string& suffix) -> Status {
    for (const auto& [name, t] : slots)
      RETURN_IF_ERROR(WriteTensorFile(
          (fs::path(tmp) / "optimizer" / (FileNameForValue(name) + suffix)).string(), t,
          name + suffix.substr(0, 2)));
    return Status::Ok();
  };
  RETURN_IF_ERROR(write_slots(slot_m_, ".m.pb"));
  RETURN_IF_ERROR(write_slots(slot_v_, ".v.pb"));

  const OptimizerOptions& o = options_.optimizer;
  nlohmann::ordered_json j;
  j["format"] = "foundry-train-state";
  j["version"] = 1;
  j["plan"] = fs::absolute(plan_.plan_path, ec).lexically_normal().string();
  j["step"] = step_;
  j["optimizer"] = {{"kind", std::string(OptimizerName(o.kind))},
                    {"lr", o.lr},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay},
                    {"momentum", o.momentum}};
  j["seed"] = options_.seed;
  j["init_seed"] = options_.init_seed;
  std::string data_path;
  if (data_) data_path = fs::absolute(data_->path(), ec).lexically_normal().string();
  // Feed files by absolute path, so a resume from another directory finds them.
  std::vector<std::string> feeds;
  for (const auto& spec : options_.feeds) {
    size_t eq = spec.find('=');
    feeds.push_back(spec.substr(0, eq + 1) +
                    fs::absolute(spec.substr(eq + 1), ec).lexically_normal().string());
  }
  j["data"] = {{"feeds", feeds},
               {"path", data_path},
               {"dtype", std::string(TokenDTypeName(options_.data_dtype))},
               {"position", data_position_}};
  std::string json;
  try {
    json = j.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {
    return Error("--save: a --feed or --data path is not valid UTF-8; rename the file");
  }
  return WriteFileAtomic((fs::path(tmp) / "state.json").string(), json);
}

Status Trainer::Resume(const std::string& dir) {
  ASSIGN_OR_RETURN(TrainState s, ReadTrainState(dir));
  const OptimizerOptions& o = options_.optimizer;
  if (s.optimizer.kind != o.kind)
    return Error("--resume " + dir + ": the saved run used --optimizer " +
                 std::string(OptimizerName(s.optimizer.kind)) + ", this one " +
                 std::string(OptimizerName(o.kind)));
  ImportOptions io;
  io.load_weights = true;
  const std::string model = (fs::path(dir) / "model.onnx").string();
  auto saved = ImportOnnx(model, io);
  if (!saved.ok()) return saved.status().Prepend("--resume " + dir + ": ");
  std::map<std::string, Tensor> params, m, v;
  for (const auto& name : plan_.plan.parameters) {
    const Value* sv = saved->FindValue(name);
    const Tensor& cur = bindings_.at(name);
    if (!sv || !sv->data)
      return Error("--resume " + dir + ": '" + model + "' has no values for parameter '" + name +
                   "'; was it saved from another model?");
    if (sv->data->dtype() != cur.dtype() || sv->data->shape() != cur.shape())
      return Error("--resume " + dir + ": parameter '" + name + "' is " +
                   TypeOf(sv->data->dtype(), sv->data->shape()) + " in '" + model + "' but " +
                   TypeOf(cur.dtype(), cur.shape()) + " in the plan");
    params[name] = *sv->data;
    auto load_slot = [&](const std::string& suffix, std::map<std::string, Tensor>& into) -> Status {
      const std::string path =
          (fs::path(dir) / "optimizer" / (FileNameForValue(name) + suffix)).string();
      auto t = ReadTensorFile(path);
      if (!t.ok()) return t.status().Prepend("--resume " + dir + ": optimizer state: ");
      if (t->dtype() != DType::kFloat32 || t->shape() != cur.shape())
        return Error("--resume " + dir + ": '" + path + "' is " + TypeOf(t->dtype(), t->shape()) +
                     ", expected " + TypeOf(DType::kFloat32, cur.shape()));
      into[name] = std::move(t).value();
      return Status::Ok();
    };
    if (s.step == 0) continue;  // no update yet: slots are created by the first step
    if (o.kind == OptimizerKind::kAdamW) {
      RETURN_IF_ERROR(load_slot(".m.pb", m));
      RETURN_IF_ERROR(load_slot(".v.pb", v));
    } else if (o.momentum != 0) {
      RETURN_IF_ERROR(load_slot(".m.pb", m));
    }
  }
  // Room for one more step's windows: (position + batch) * (seq + 1) must fit int64.
  if (batch_ > 0 && s.data_position > INT64_MAX / (seq_ + 1) - batch_)
    return Error("--resume " + dir + ": data position " + std::to_string(s.data_position) +
                 " is out of range for batches of " + std::to_string(batch_) + " x " +
                 std::to_string(seq_ + 1) + " tokens");
  for (auto& [name, t] : params) bindings_[name] = std::move(t);
  slot_m_ = std::move(m);
  slot_v_ = std::move(v);
  step_ = s.step;
  data_position_ = s.data_position;
  resume_dir_ = dir;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) input_files_.push_back(e.path().string());
  return Status::Ok();
}

}  // namespace foundry
