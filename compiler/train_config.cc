#include "compiler/train_config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <set>

#include "base/quote.h"
#include "compiler/ir.h"
#include "compiler/module_tree.h"
#include "compiler/sharding.h"
#include "compiler/yaml_words.h"

namespace foundry {
namespace {

std::string Shown(std::string_view s) { return Clip(EscapeName(s)); }

// The keys foundry reads, by mapping. A key of a mapping not listed is ignored (and listed as
// such), except in the mappings whose every key changes the math (optimizer, scheduler,
// gradient_clipping): there an unknown key is an error.
const std::set<std::string> kTopKeys = {"variables",
                                        "max_seq_len",
                                        "model",
                                        "precision",
                                        "device_train_microbatch_size",
                                        "global_train_batch_size",
                                        "device_eval_batch_size",
                                        "optimizer",
                                        "scheduler",
                                        "algorithms",
                                        "max_duration",
                                        "eval_interval",
                                        "eval_first",
                                        "eval_subset_num_batches",
                                        "save_interval",
                                        "save_folder",
                                        "save_num_checkpoints_to_keep",
                                        "seed",
                                        "fsdp_config",
                                        "console_log_interval",
                                        "train_loader",
                                        "eval_loader"};
const std::set<std::string> kModelKeys = {
    "name",       "d_model",         "n_heads",
    "n_layers",   "expansion_ratio", "max_seq_len",
    "vocab_size", "attn_config",     "activation_checkpointing_target",
    "loss_fn"};
const std::set<std::string> kOptimizerKeys = {"name", "lr", "betas", "eps", "weight_decay"};
const std::set<std::string> kSchedulerKeys = {"name",    "t_warmup", "t_max",       "alpha",
                                              "alpha_i", "alpha_f",  "scale_warmup"};
const std::set<std::string> kClippingKeys = {"clipping_type", "clipping_threshold"};

class Reader {
 public:
  Reader(YAML::Node root, std::string path) : root_(std::move(root)), path_(std::move(path)) {}

  Status Fail(const std::string& key, const std::string& what) const {
    return Error("--config " + path_ + ": key '" + key + "' " + what);
  }

  // The node at a dotted path of the file as written (no resolution), or an undefined node.
  YAML::Node Raw(const std::string& dotted) const {
    YAML::Node n = root_;
    size_t start = 0;
    while (true) {
      const size_t dot = dotted.find('.', start);
      const std::string part = dotted.substr(start, dot - start);
      if (!n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      // A const lookup: operator[] on a non-const node would add the key. And reset(), not
      // operator=, which in yaml-cpp writes through to the node `n` refers to.
      const YAML::Node& parent = n;
      YAML::Node child = parent[part];
      if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      n.reset(child);
      if (dot == std::string::npos) return n;
      start = dot + 1;
    }
  }

  // The value of `node` (at `key`) with its interpolations resolved, as OmegaConf does.
  StatusOr<YAML::Node> Resolve(const YAML::Node& node, const std::string& key,
                               int depth = 0) const {
    if (!node.IsScalar()) return node;
    const std::string& s = node.Scalar();
    const size_t open = s.find("${");
    if (open == std::string::npos) return node;
    if (depth > 32)
      return Fail(key, "has interpolations that refer to each other in a cycle (" + Shown(s) + ")");
    // The whole scalar one interpolation: the value it names, with its type.
    const size_t close = s.find('}', open);
    if (close == std::string::npos)
      return Fail(key, "has an unterminated interpolation '" + Shown(s) + "'");
    if (open == 0 && close == s.size() - 1) return Lookup(s.substr(2, close - 2), key, depth);
    // Inside a longer string: the text of each.
    std::string out;
    size_t at = 0;
    while (true) {
      const size_t o = s.find("${", at);
      if (o == std::string::npos) break;
      const size_t c = s.find('}', o);
      if (c == std::string::npos)
        return Fail(key, "has an unterminated interpolation '" + Shown(s) + "'");
      out += s.substr(at, o - at);
      ASSIGN_OR_RETURN(YAML::Node v, Lookup(s.substr(o + 2, c - o - 2), key, depth));
      if (!v.IsScalar() && !v.IsNull())
        return Fail(key, "interpolates '" + Shown(s.substr(o, c - o + 1)) + "', which is " +
                             YamlKindOf(v) + ", into a string");
      if (v.IsScalar()) out += v.Scalar();
      at = c + 1;
    }
    out += s.substr(at);
    return YAML::Node(out);
  }

  // Node at `key` resolved; undefined or null: nullopt.
  StatusOr<std::optional<YAML::Node>> Get(const std::string& key) const {
    YAML::Node raw = Raw(key);
    if (!raw.IsDefined()) return std::optional<YAML::Node>();
    ASSIGN_OR_RETURN(YAML::Node v, Resolve(raw, key));
    if (v.IsNull()) return std::optional<YAML::Node>();
    return std::optional<YAML::Node>(v);
  }

  StatusOr<std::optional<int64_t>> Int(const std::string& key, int64_t min, int64_t max,
                                       const std::string& expected) const {
    ASSIGN_OR_RETURN(auto v, Get(key));
    if (!v) return std::optional<int64_t>();
    int64_t out = 0;
    if (!IsPlainYaml(*v) || !YAML::convert<int64_t>::decode(*v, out) || out < min || out > max)
      return Fail(key, "is " + YamlKindOf(*v) + "; expected " + expected);
    return std::optional<int64_t>(out);
  }

  StatusOr<std::optional<double>> Double(const std::string& key, const YAML::Node* given,
                                         const std::string& expected,
                                         const std::function<bool(double)>& ok) const {
    std::optional<YAML::Node> v;
    if (given) {
      v = *given;
    } else {
      ASSIGN_OR_RETURN(v, Get(key));
    }
    if (!v) return std::optional<double>();
    double out = 0;
    if (!IsPlainYaml(*v) || !YAML::convert<double>::decode(*v, out) || !std::isfinite(out) ||
        !ok(out))
      return Fail(key, "is " + YamlKindOf(*v) + "; expected " + expected);
    return std::optional<double>(out);
  }

  StatusOr<std::optional<bool>> Bool(const std::string& key) const {
    ASSIGN_OR_RETURN(auto v, Get(key));
    if (!v) return std::optional<bool>();
    bool out = false;
    if (!IsPlainYaml(*v) || !YAML::convert<bool>::decode(*v, out))
      return Fail(key, "is " + YamlKindOf(*v) + "; expected true or false");
    return std::optional<bool>(out);
  }

  StatusOr<std::optional<std::string>> String(const std::string& key) const {
    ASSIGN_OR_RETURN(auto v, Get(key));
    if (!v) return std::optional<std::string>();
    if (!v->IsScalar()) return Fail(key, "is " + YamlKindOf(*v) + "; expected a string");
    return std::optional<std::string>(v->Scalar());
  }

  StatusOr<std::optional<ComposerTime>> Time(const std::string& key) const {
    ASSIGN_OR_RETURN(auto v, Get(key));
    if (!v) return std::optional<ComposerTime>();
    if (!v->IsScalar())
      return Fail(key, "is " + YamlKindOf(*v) + "; expected a duration such as 100ba, 1ep, 0.5dur");
    auto t = ParseComposerTime(v->Scalar(), key);
    if (!t.ok()) return Error("--config " + path_ + ": " + t.status().message());
    return std::optional<ComposerTime>(*t);
  }

  // Every key of the mapping at `key` ("" = the root) that `known` does not hold, dotted.
  void Unread(const std::string& key, const std::set<std::string>& known,
              std::vector<std::string>& out) const {
    YAML::Node n = key.empty() ? root_ : Raw(key);
    if (!n.IsDefined() || !n.IsMap()) return;
    for (const auto& kv : n) {
      const std::string k = kv.first.Scalar();
      if (!known.count(k)) out.push_back(key.empty() ? k : key + "." + k);
    }
  }

 private:
  StatusOr<YAML::Node> Lookup(const std::string& ref, const std::string& key, int depth) const {
    const size_t colon = ref.find(':');
    if (colon != std::string::npos) {
      const std::string resolver = ref.substr(0, colon);
      if (resolver != "oc.env")
        return Fail(key, "uses the resolver '" + Shown(resolver) +
                             "', which foundry does not have (it resolves ${a.b} and "
                             "${oc.env:NAME}); write the value out");
      std::string arg = ref.substr(colon + 1);
      std::optional<std::string> fallback;
      if (size_t comma = arg.find(','); comma != std::string::npos) {
        fallback = arg.substr(comma + 1);
        arg = arg.substr(0, comma);
        auto trim = [](std::string& s) {
          s.erase(0, s.find_first_not_of(" \t"));
          s.erase(s.find_last_not_of(" \t") + 1);
        };
        trim(arg);
        trim(*fallback);
      }
      if (const char* env = std::getenv(arg.c_str())) return YAML::Load(env);
      if (fallback) return YAML::Load(*fallback);
      return Fail(key, "reads the environment variable " + Shown(arg) + " (${oc.env:" + Shown(arg) +
                           "}), which is not set; set it or write "
                           "the value out");
    }
    if (ref.empty() || ref.front() == '.')
      return Fail(key, "uses the relative interpolation '${" + Shown(ref) +
                           "}'; foundry resolves absolute ones (${variables.name}); write the "
                           "path from the top of the file");
    YAML::Node target = Raw(ref);
    if (!target.IsDefined())
      return Fail(key, "refers to '${" + Shown(ref) + "}', a key the file does not have");
    return Resolve(target, ref, depth + 1);
  }

  YAML::Node root_;
  std::string path_;
};

bool Positive(double x) { return x > 0; }

Status ReadModel(const Reader& r, TrainConfig& c) {
  ASSIGN_OR_RETURN(c.model.name, r.String("model.name"));
  const std::string dims = "a positive integer";
  ASSIGN_OR_RETURN(c.model.d_model, r.Int("model.d_model", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.n_heads, r.Int("model.n_heads", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.n_layers, r.Int("model.n_layers", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.expansion_ratio,
                   r.Int("model.expansion_ratio", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.max_seq_len, r.Int("model.max_seq_len", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.vocab_size, r.Int("model.vocab_size", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.kv_n_heads,
                   r.Int("model.attn_config.kv_n_heads", 1, int64_t{1} << 40, dims));
  ASSIGN_OR_RETURN(c.model.loss_fn, r.String("model.loss_fn"));
  if (c.model.loss_fn && *c.model.loss_fn != "fused_crossentropy" &&
      *c.model.loss_fn != "torch_crossentropy")
    return r.Fail("model.loss_fn", "is '" + Shown(*c.model.loss_fn) +
                                       "'; expected fused_crossentropy or torch_crossentropy");
  return Status::Ok();
}

Status ReadOptimizer(const Reader& r, TrainConfig& c) {
  ASSIGN_OR_RETURN(auto node, r.Get("optimizer"));
  if (!node) return Status::Ok();
  if (!node->IsMap())
    return r.Fail("optimizer", "is " + YamlKindOf(*node) + "; expected a mapping");
  std::vector<std::string> unknown;
  r.Unread("optimizer", kOptimizerKeys, unknown);
  if (!unknown.empty())
    return r.Fail(unknown.front(),
                  "is not an option foundry's optimizers have (they take lr, betas, eps, "
                  "weight_decay); remove it");
  TrainConfig::Optimizer o;
  ASSIGN_OR_RETURN(auto name, r.String("optimizer.name"));
  if (!name) return r.Fail("optimizer.name", "is missing; write decoupled_adamw or adamw");
  if (*name != "decoupled_adamw" && *name != "adamw")
    return r.Fail("optimizer.name", "is '" + Shown(*name) +
                                        "'; foundry has decoupled_adamw (Composer's) and adamw "
                                        "(PyTorch's)");
  o.name = *name;
  ASSIGN_OR_RETURN(o.lr, r.Double("optimizer.lr", nullptr, "a learning rate > 0", Positive));
  ASSIGN_OR_RETURN(o.eps, r.Double("optimizer.eps", nullptr, "a number > 0", Positive));
  ASSIGN_OR_RETURN(o.weight_decay, r.Double("optimizer.weight_decay", nullptr, "a number >= 0",
                                            [](double x) { return x >= 0; }));
  ASSIGN_OR_RETURN(auto betas, r.Get("optimizer.betas"));
  if (betas) {
    if (!betas->IsSequence() || betas->size() != 2)
      return r.Fail("optimizer.betas",
                    "is " + YamlKindOf(*betas) + "; expected a list of two numbers");
    auto beta = [](double x) { return x >= 0 && x < 1; };
    for (size_t i = 0; i < 2; ++i) {
      const std::string key = "optimizer.betas[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(YAML::Node item, r.Resolve((*betas)[i], key));
      ASSIGN_OR_RETURN(auto b, r.Double(key, &item, "a number in [0, 1)", beta));
      (i == 0 ? o.beta1 : o.beta2) = b;
    }
  }
  c.optimizer = o;
  return Status::Ok();
}

Status ReadScheduler(const Reader& r, TrainConfig& c) {
  ASSIGN_OR_RETURN(auto node, r.Get("scheduler"));
  if (!node) return Status::Ok();
  if (!node->IsMap())
    return r.Fail("scheduler", "is " + YamlKindOf(*node) + "; expected a mapping");
  std::vector<std::string> unknown;
  r.Unread("scheduler", kSchedulerKeys, unknown);
  if (!unknown.empty())
    return r.Fail(unknown.front(),
                  "is not an option of foundry's schedulers (t_warmup, t_max, alpha, alpha_i, "
                  "alpha_f, scale_warmup); remove it");
  TrainConfig::Scheduler s;
  ASSIGN_OR_RETURN(auto name, r.String("scheduler.name"));
  static const std::set<std::string> kNames = {"cosine_with_warmup", "linear_decay_with_warmup",
                                               "constant_with_warmup"};
  if (!name) return r.Fail("scheduler.name", "is missing; write cosine_with_warmup");
  if (!kNames.count(*name))
    return r.Fail("scheduler.name", "is '" + Shown(*name) +
                                        "'; foundry has cosine_with_warmup, "
                                        "linear_decay_with_warmup and constant_with_warmup");
  s.name = *name;
  ASSIGN_OR_RETURN(s.t_warmup, r.Time("scheduler.t_warmup"));
  if (!s.t_warmup) return r.Fail("scheduler.t_warmup", "is missing (Composer requires it)");
  ASSIGN_OR_RETURN(s.t_max, r.Time("scheduler.t_max"));
  auto unit = [](double x) { return x >= 0; };
  ASSIGN_OR_RETURN(auto alpha, r.Double("scheduler.alpha", nullptr, "a number >= 0", unit));
  ASSIGN_OR_RETURN(s.alpha_i, r.Double("scheduler.alpha_i", nullptr, "a number >= 0", unit));
  ASSIGN_OR_RETURN(s.alpha_f, r.Double("scheduler.alpha_f", nullptr, "a number >= 0", unit));
  if (alpha && s.name != "constant_with_warmup")
    return r.Fail("scheduler.alpha",
                  "is constant_with_warmup's; " + s.name + " takes alpha_i / alpha_f");
  if (s.alpha_i && s.name != "linear_decay_with_warmup")
    return r.Fail("scheduler.alpha_i", "is linear_decay_with_warmup's; " + s.name + " has none");
  if (s.alpha_f && s.name == "constant_with_warmup")
    return r.Fail("scheduler.alpha_f", "is not an option of constant_with_warmup (it takes alpha)");
  if (alpha) s.alpha_i = alpha;
  ASSIGN_OR_RETURN(s.scale_warmup, r.Bool("scheduler.scale_warmup"));
  c.scheduler = s;
  return Status::Ok();
}

Status ReadAlgorithms(const Reader& r, TrainConfig& c) {
  ASSIGN_OR_RETURN(auto node, r.Get("algorithms"));
  if (!node) return Status::Ok();
  if (!node->IsMap())
    return r.Fail("algorithms", "is " + YamlKindOf(*node) + "; expected a mapping");
  r.Unread("algorithms", {"gradient_clipping"}, c.ignored);
  ASSIGN_OR_RETURN(auto clip, r.Get("algorithms.gradient_clipping"));
  if (!clip) return Status::Ok();
  if (!clip->IsMap())
    return r.Fail("algorithms.gradient_clipping",
                  "is " + YamlKindOf(*clip) + "; expected a mapping");
  std::vector<std::string> unknown;
  r.Unread("algorithms.gradient_clipping", kClippingKeys, unknown);
  if (!unknown.empty())
    return r.Fail(unknown.front(),
                  "is not an option of gradient_clipping (clipping_type, clipping_threshold); "
                  "remove it");
  TrainConfig::Clipping g;
  ASSIGN_OR_RETURN(auto type, r.String("algorithms.gradient_clipping.clipping_type"));
  if (!type) return r.Fail("algorithms.gradient_clipping.clipping_type", "is missing; write norm");
  if (*type != "norm")
    return r.Fail("algorithms.gradient_clipping.clipping_type",
                  "is '" + Shown(*type) +
                      "'; foundry clips by the global norm only (norm, as "
                      "torch.nn.utils.clip_grad_norm_); adaptive and value are not there");
  g.type = *type;
  ASSIGN_OR_RETURN(auto threshold, r.Double("algorithms.gradient_clipping.clipping_threshold",
                                            nullptr, "a number > 0", Positive));
  if (!threshold)
    return r.Fail("algorithms.gradient_clipping.clipping_threshold", "is missing; write 1.0");
  g.threshold = *threshold;
  c.clipping = g;
  return Status::Ok();
}

// The keys of a `text` loader's dataset that foundry reads, and those that change nothing it does
// (streaming's download, cache and partition settings; the loader's worker settings).
const std::set<std::string> kDatasetKeys = {"local",
                                            "remote",
                                            "split",
                                            "max_seq_len",
                                            "shuffle",
                                            "shuffle_seed",
                                            "shuffle_block_size",
                                            "token_encoding_type"};
const std::set<std::string> kDatasetNoEffect = {
    "download_retry",     "download_timeout",     "validate_hash",   "keep_zip",
    "predownload",        "cache_limit",          "partition_algo",  "num_canonical_nodes",
    "sampling_method",    "sampling_granularity", "batching_method", "shuffle_algo",
    "allow_unsafe_types", "stream_name",          "stream_config"};
const std::set<std::string> kLoaderNoEffect = {"num_workers", "pin_memory", "prefetch_factor",
                                               "persistent_workers", "timeout"};

// A loader's dataset keys: read, ignored (no effect), or refused (they change the data).
Status ReadDataset(const Reader& r, const std::string& at, TrainConfig::Loader& l) {
  ASSIGN_OR_RETURN(auto ds, r.Get(at));
  if (!ds) return r.Fail(at, "is missing; a text loader names its MDS dataset (local, split)");
  if (!ds->IsMap()) return r.Fail(at, "is " + YamlKindOf(*ds) + "; expected a mapping");
  for (const auto& kv : *ds) {
    const std::string k = kv.first.Scalar();
    if (kDatasetKeys.count(k)) continue;
    if (kDatasetNoEffect.count(k)) {
      l.ignored.push_back(at + "." + k);
      continue;
    }
    ASSIGN_OR_RETURN(auto v, r.Get(at + "." + k));
    if (!v) continue;  // null: the default
    return r.Fail(at + "." + k, k == "streams"
                                    ? "mixes several datasets; foundry reads one: give local and "
                                      "split of one MDS folder"
                                    : "changes the samples (or how they are batched) in a way "
                                      "foundry does not reproduce; remove it");
  }
  ASSIGN_OR_RETURN(l.local, r.String(at + ".local"));
  ASSIGN_OR_RETURN(l.remote, r.String(at + ".remote"));
  ASSIGN_OR_RETURN(l.split, r.String(at + ".split"));
  ASSIGN_OR_RETURN(l.token_encoding_type, r.String(at + ".token_encoding_type"));
  ASSIGN_OR_RETURN(l.max_seq_len,
                   r.Int(at + ".max_seq_len", 1, int64_t{1} << 40, "a positive integer"));
  ASSIGN_OR_RETURN(l.shuffle_block_size,
                   r.Int(at + ".shuffle_block_size", 1, int64_t{1} << 40, "a positive integer"));
  ASSIGN_OR_RETURN(l.shuffle, r.Bool(at + ".shuffle"));
  ASSIGN_OR_RETURN(auto seed, r.Int(at + ".shuffle_seed", 0, INT64_MAX, "an integer >= 0"));
  if (seed) l.shuffle_seed = static_cast<uint64_t>(*seed);
  return Status::Ok();
}

Status ReadLoader(const Reader& r, const std::string& key,
                  std::optional<TrainConfig::Loader>& out) {
  ASSIGN_OR_RETURN(auto node, r.Get(key));
  if (!node) return Status::Ok();
  if (!node->IsMap()) return r.Fail(key, "is " + YamlKindOf(*node) + "; expected a mapping");
  TrainConfig::Loader l;
  l.key = key;
  ASSIGN_OR_RETURN(auto name, r.String(key + ".name"));
  l.name = name.value_or("");
  if (l.name != "text")
    return r.Fail(key + ".name",
                  "is '" + Shown(l.name) +
                      "'; foundry reads llm-foundry's `text` loader (pretraining on an MDS "
                      "dataset of token ids), not finetuning loaders");
  for (const auto& kv : *node) {
    const std::string k = kv.first.Scalar();
    if (k == "name" || k == "dataset" || k == "drop_last") continue;
    if (kLoaderNoEffect.count(k)) {
      l.ignored.push_back(key + "." + k);
      continue;
    }
    return r.Fail(key + "." + k,
                  "is not a key of llm-foundry's text loader that foundry reads; "
                  "remove it");
  }
  ASSIGN_OR_RETURN(l.drop_last, r.Bool(key + ".drop_last"));
  RETURN_IF_ERROR(ReadDataset(r, key + ".dataset", l));
  out = std::move(l);
  return Status::Ok();
}

Status ReadFsdp(const Reader& r, TrainConfig& c) {
  ASSIGN_OR_RETURN(auto node, r.Get("fsdp_config"));
  if (!node) return Status::Ok();
  if (!node->IsMap())
    return r.Fail("fsdp_config", "is " + YamlKindOf(*node) + "; expected a mapping");
  c.has_fsdp_config = true;
  for (const auto& kv : *node) {
    const std::string key = "fsdp_config." + kv.first.Scalar();
    ASSIGN_OR_RETURN(YAML::Node v, r.Resolve(kv.second, key));
    if (v.IsScalar()) {
      c.fsdp[kv.first.Scalar()] = v.Scalar();
    } else if (v.IsMap() && kv.first.Scalar() == "mixed_precision") {
      std::string spec;  // Composer's dict: param_dtype, reduce_dtype, buffer_dtype
      for (const auto& e : v) {
        ASSIGN_OR_RETURN(YAML::Node t, r.Resolve(e.second, key + "." + e.first.Scalar()));
        if (!t.IsScalar())
          return r.Fail(key + "." + e.first.Scalar(), "is " + YamlKindOf(t) + "; expected a dtype");
        spec += (spec.empty() ? "" : ",") + e.first.Scalar() + "=" + t.Scalar();
      }
      c.fsdp["mixed_precision"] = spec;
    } else if (!v.IsNull()) {
      c.ignored.push_back(key);
    }
  }
  if (c.fsdp.count("mixed_precision")) {  // the names and dtypes Composer accepts
    auto mp = ParseFsdpMixedPrecision(c.fsdp.at("mixed_precision"), DType::kBFloat16);
    if (!mp.ok()) return r.Fail("fsdp_config.mixed_precision", mp.status().message());
  }
  if (c.fsdp.count("sharding_strategy")) {
    // FSDP's names, and torch's _HYBRID_SHARD_ZERO2, which foundry-compile then refuses.
    const std::string& strategy = c.fsdp.at("sharding_strategy");
    if (!ParseSharding(strategy) && strategy != "_HYBRID_SHARD_ZERO2")
      return r.Fail(
          "fsdp_config.sharding_strategy",
          "is '" + Shown(strategy) + "'; expected " +
              ShardingNames(" or ", {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                     ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard}));
  }
  return Status::Ok();
}

StatusOr<TrainConfig> Parse(const std::string& text, const std::string& path) {
  const std::string source = "--config " + path;
  if (std::string problem = StrictYamlProblem(text); !problem.empty())
    return Error(source + ": " + problem);
  const YAML::Node root = YAML::Load(text);
  if (!root.IsDefined() || root.IsNull())
    return Error(source + ": the file is empty; give an llm-foundry training YAML");
  if (!root.IsMap())
    return Error(source + ": the file holds " + YamlKindOf(root) +
                 "; an llm-foundry training YAML is a mapping (model:, optimizer:, ...)");
  const Reader r(root, path);
  TrainConfig c;
  c.path = path;
  r.Unread("", kTopKeys, c.ignored);
  ASSIGN_OR_RETURN(auto model, r.Get("model"));
  if (model && !model->IsMap())
    return r.Fail("model", "is " + YamlKindOf(*model) + "; expected a mapping");
  r.Unread("model", kModelKeys, c.ignored);
  if (model && r.Raw("model.attn_config").IsMap())
    r.Unread("model.attn_config", {"kv_n_heads"}, c.ignored);
  RETURN_IF_ERROR(ReadModel(r, c));
  const std::string positive = "a positive integer";
  ASSIGN_OR_RETURN(c.max_seq_len, r.Int("max_seq_len", 1, int64_t{1} << 40, positive));
  ASSIGN_OR_RETURN(auto micro, r.Get("device_train_microbatch_size"));
  if (micro && micro->IsScalar() && micro->Scalar() == "auto")
    return r.Fail("device_train_microbatch_size",
                  "is auto (Composer's search for the largest microbatch that fits); foundry "
                  "compiles one microbatch size: give a number (foundry-compile "
                  "--memory-budget says what fits)");
  ASSIGN_OR_RETURN(c.device_train_microbatch_size,
                   r.Int("device_train_microbatch_size", 1, int64_t{1} << 40, positive));
  ASSIGN_OR_RETURN(c.global_train_batch_size,
                   r.Int("global_train_batch_size", 1, int64_t{1} << 40, positive));
  ASSIGN_OR_RETURN(c.device_eval_batch_size,
                   r.Int("device_eval_batch_size", 1, int64_t{1} << 40, positive));
  ASSIGN_OR_RETURN(c.precision, r.String("precision"));
  RETURN_IF_ERROR(ReadOptimizer(r, c));
  RETURN_IF_ERROR(ReadScheduler(r, c));
  RETURN_IF_ERROR(ReadAlgorithms(r, c));
  ASSIGN_OR_RETURN(c.max_duration, r.Time("max_duration"));
  ASSIGN_OR_RETURN(c.eval_interval, r.Time("eval_interval"));
  ASSIGN_OR_RETURN(c.save_interval, r.Time("save_interval"));
  ASSIGN_OR_RETURN(c.console_log_interval, r.Time("console_log_interval"));
  if (c.max_duration && c.max_duration->unit == ComposerTime::Unit::kDuration)
    return r.Fail("max_duration", "is " + c.max_duration->text +
                                      "; a run's length cannot be a fraction of itself: write it "
                                      "in ba, tok, sp or ep");
  ASSIGN_OR_RETURN(c.eval_first, r.Bool("eval_first"));
  ASSIGN_OR_RETURN(c.eval_subset_num_batches,
                   r.Int("eval_subset_num_batches", -1, int64_t{1} << 40,
                         "a number of batches (-1: the whole eval set)"));
  if (c.eval_subset_num_batches && *c.eval_subset_num_batches == 0)
    return r.Fail("eval_subset_num_batches", "is 0; give -1 (the whole eval set) or a count");
  ASSIGN_OR_RETURN(c.save_folder, r.String("save_folder"));
  // A loader foundry cannot follow is foundry-run's error, when it reads that loader (not with
  // --data; never foundry-compile's, which reads no data).
  for (auto [key, loader] :
       {std::pair{"train_loader", &c.train_loader}, std::pair{"eval_loader", &c.eval_loader}})
    if (Status st = ReadLoader(r, key, *loader); !st.ok()) {
      loader->emplace();
      (*loader)->key = key;
      (*loader)->problem = st.message();
    }
  for (const auto* loader : {&c.train_loader, &c.eval_loader})
    if (*loader)
      c.ignored.insert(c.ignored.end(), (*loader)->ignored.begin(), (*loader)->ignored.end());
  ASSIGN_OR_RETURN(
      c.save_num_checkpoints_to_keep,
      r.Int("save_num_checkpoints_to_keep", -1, int64_t{1} << 40, "a count (-1: keep all)"));
  ASSIGN_OR_RETURN(auto seed, r.Int("seed", 0, INT64_MAX, "an integer >= 0"));
  if (seed) c.seed = static_cast<uint64_t>(*seed);
  RETURN_IF_ERROR(ReadFsdp(r, c));
  // The checkpointing target, as --ckpt-config reads it from the same file.
  if (root["model"].IsDefined() || root["fsdp_config"].IsDefined()) {
    ASSIGN_OR_RETURN(c.ckpt, ParseCkptConfigText(text, path, "--config"));
  } else {
    c.ckpt.enabled = false;  // llm-foundry checkpoints only when fsdp_config says so
  }
  c.precision = c.precision ? c.precision : c.ckpt.precision;
  for (const auto& w : c.ckpt.warnings) c.warnings.push_back(w);
  return c;
}

}  // namespace

StatusOr<ComposerTime> ParseComposerTime(const std::string& text, const std::string& key) {
  const std::string expected =
      "; expected a duration: a number and a unit (ba, tok, sp, ep, dur), e.g. 100ba";
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
          text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
    // An 'e' is an exponent only when a digit follows it and the unit is not "ep".
    if ((text[end] == 'e' || text[end] == 'E') &&
        !(end + 1 < text.size() && (std::isdigit(static_cast<unsigned char>(text[end + 1])) ||
                                    text[end + 1] == '-' || text[end + 1] == '+')))
      break;
    ++end;
  }
  const std::string number = text.substr(0, end), unit = text.substr(end);
  char* stop = nullptr;
  errno = 0;
  const double value = number.empty() ? 0 : std::strtod(number.c_str(), &stop);
  if (number.empty() || stop != number.c_str() + number.size() || errno == ERANGE ||
      !std::isfinite(value))
    return Error("key '" + key + "' is '" + Shown(text) + "'" + expected);
  if (value < 0) return Error("key '" + key + "' is '" + Shown(text) + "'; durations are >= 0");
  ComposerTime t;
  t.value = value;
  t.text = text;
  if (unit == "ba")
    t.unit = ComposerTime::Unit::kBatch;
  else if (unit == "tok")
    t.unit = ComposerTime::Unit::kToken;
  else if (unit == "sp")
    t.unit = ComposerTime::Unit::kSample;
  else if (unit == "ep" || unit.empty())
    t.unit = ComposerTime::Unit::kEpoch;  // a bare number is epochs, as Composer reads an int
  else if (unit == "dur")
    t.unit = ComposerTime::Unit::kDuration;
  else
    return Error("key '" + key + "' is '" + Shown(text) + "'" + expected);
  if (unit.empty() && value != std::floor(value))
    return Error("key '" + key + "' is '" + Shown(text) + "'" + expected);
  if (t.unit != ComposerTime::Unit::kDuration && t.unit != ComposerTime::Unit::kEpoch &&
      value != std::floor(value))
    return Error("key '" + key + "' is '" + Shown(text) + "'; a count of " + unit +
                 " is a whole number");
  return t;
}

StatusOr<int64_t> StepsOf(const ComposerTime& t, const StepUnits& u, const std::string& key,
                          std::string* note) {
  double steps = 0;
  std::string per;
  switch (t.unit) {
    case ComposerTime::Unit::kBatch:
      steps = t.value;
      break;
    case ComposerTime::Unit::kToken:
      if (u.tokens_per_step <= 0)
        return Error("key '" + key + "' is " + t.text + ": tokens per step are not known here");
      steps = std::ceil(t.value / static_cast<double>(u.tokens_per_step));
      per = std::to_string(u.tokens_per_step) + " tokens per step";
      break;
    case ComposerTime::Unit::kSample:
      if (u.samples_per_step <= 0)
        return Error("key '" + key + "' is " + t.text + ": samples per step are not known here");
      steps = std::ceil(t.value / static_cast<double>(u.samples_per_step));
      per = std::to_string(u.samples_per_step) + " samples per step";
      break;
    case ComposerTime::Unit::kEpoch:
      if (u.steps_per_epoch <= 0)
        return Error("key '" + key + "' is " + t.text +
                     " (epochs): an epoch is known only from a --data file; give it, or write "
                     "the duration in ba or tok");
      steps = std::round(t.value * static_cast<double>(u.steps_per_epoch));
      per = std::to_string(u.steps_per_epoch) + " steps per epoch";
      break;
    case ComposerTime::Unit::kDuration:
      if (u.max_steps <= 0)
        return Error("key '" + key + "' is " + t.text +
                     " (a fraction of max_duration), and the run's length is not known; set "
                     "max_duration or --steps");
      steps = std::round(t.value * static_cast<double>(u.max_steps));
      per = "max_duration " + std::to_string(u.max_steps) + " steps";
      break;
  }
  if (!(steps < 9.2e18)) return Error("key '" + key + "' is " + t.text + ": too many steps");
  if (note && !per.empty())
    *note = key + " " + t.text + " = " + std::to_string(static_cast<int64_t>(steps)) + " steps (" +
            per + ")";
  return static_cast<int64_t>(steps);
}

StatusOr<TrainConfig> ParseTrainConfigText(const std::string& text, const std::string& path) {
  try {
    return Parse(text, path);
  } catch (const YAML::ParserException& e) {
    return Error("--config " + path + ": YAML syntax error at line " +
                 std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                 ": " + Shown(e.msg));
  } catch (const YAML::Exception& e) {
    return Error("--config " + path + ": cannot read the file: " + Shown(e.msg));
  }
}

StatusOr<TrainConfig> ReadTrainConfig(const std::string& path) {
  ASSIGN_OR_RETURN(
      std::string text,
      ReadConfigText("--config " + path, path, "give the training YAML", "give the YAML file"));
  return ParseTrainConfigText(text, path);
}

std::string IgnoredKeysLine(const TrainConfig& config) {
  if (config.ignored.empty()) return "";
  std::string line = config.path + ": keys foundry does not read (ignored): ";
  for (size_t i = 0; i < config.ignored.size(); ++i) line += (i ? ", " : "") + config.ignored[i];
  return line;
}

StatusOr<int64_t> AccumulationSteps(const TrainConfig& c, int64_t world_size) {
  if (!c.global_train_batch_size) return 1;
  if (!c.device_train_microbatch_size)
    return Error("--config " + c.path +
                 ": global_train_batch_size is set but device_train_microbatch_size is not; "
                 "give both (the microbatch is the compiled batch)");
  const int64_t per_step = world_size * *c.device_train_microbatch_size;
  if (*c.global_train_batch_size % per_step != 0)
    return Error("--config " + c.path + ": global_train_batch_size " +
                 std::to_string(*c.global_train_batch_size) + " is not a multiple of " +
                 std::to_string(world_size) + " process(es) x device_train_microbatch_size " +
                 std::to_string(*c.device_train_microbatch_size) +
                 "; make it one (foundry accumulates whole microbatches)");
  return *c.global_train_batch_size / per_step;
}

StatusOr<ConfigDims> BindConfigDims(const TrainConfig& c, const ModelFiles& files,
                                    const std::map<std::string, int64_t>& given) {
  const std::string source = "--config " + c.path + ": ";
  ConfigDims out{given, {}};
  std::string token;
  if (files.input_shapes.count("input_ids")) {
    token = "input_ids";
  } else {
    for (const auto& [name, shape] : files.input_shapes)
      if (shape.size() == 2) {
        if (!token.empty())
          return Error(source +
                       "the model has no input 'input_ids' and more than one rank-2 "
                       "input ('" +
                       token + "', '" + name + "'): bind the batch and sequence with --dim NAME=N");
        token = name;
      }
  }
  if (token.empty() || files.input_shapes.at(token).size() != 2)
    return Error(source +
                 "the model has no token input [batch, seq] (input_ids) to give "
                 "device_train_microbatch_size and max_seq_len to; bind dimensions "
                 "with --dim NAME=N");
  const std::optional<int64_t> seq = c.max_seq_len ? c.max_seq_len : c.model.max_seq_len;
  const std::pair<const char*, std::optional<int64_t>> axes[2] = {
      {"device_train_microbatch_size", c.device_train_microbatch_size}, {"max_seq_len", seq}};
  const std::vector<std::string>* names =
      files.input_dims.count(token) ? &files.input_dims.at(token) : nullptr;
  for (size_t axis = 0; axis < 2; ++axis) {
    const auto& [key, value] = axes[axis];
    if (!value) continue;
    const std::string name = names && axis < names->size() ? (*names)[axis] : "";
    if (name.empty()) {
      const int64_t fixed = files.input_shapes.at(token)[axis];
      if (fixed != *value)
        return Error(source + key + " is " + std::to_string(*value) + " but the export fixes " +
                     token + " axis " + std::to_string(axis) + " to " + std::to_string(fixed) +
                     ": export the model with a dynamic axis there, or change the YAML");
      continue;
    }
    if (auto it = given.find(name); it != given.end()) {
      if (it->second != *value)
        out.notes.push_back("--dim " + name + "=" + std::to_string(it->second) + " overrides " +
                            c.path + "'s " + key + " " + std::to_string(*value));
      continue;
    }
    out.dims[name] = *value;
  }
  return out;
}

Status CheckModelAgainstGraph(const TrainConfig& config, const Graph& graph,
                              std::vector<std::string>* notes) {
  const TrainConfig::Model& m = config.model;
  const std::string source = "--config " + config.path + ": ";
  auto note = [&](const std::string& s) {
    if (notes) notes->push_back(source + s);
  };
  auto mismatch = [&](const std::string& key, int64_t want, const std::string& export_says) {
    return Error(source + "model." + key + " is " + std::to_string(want) + " but " + export_says +
                 ": the YAML and the export describe different models (export the model the YAML "
                 "configures, or fix the YAML)");
  };
  std::set<std::string> inputs(graph.inputs.begin(), graph.inputs.end());
  std::set<std::string> initializers(graph.initializers.begin(), graph.initializers.end());
  // The token embedding: a Gather of a rank-2 initializer by a graph input.
  const Value* embedding = nullptr;
  for (const Node& n : graph.nodes) {
    if (n.op_type != "Gather" || !n.domain.empty() || n.inputs.size() < 2) continue;
    if (!initializers.count(n.inputs[0]) || !inputs.count(n.inputs[1])) continue;
    const Value* w = graph.FindValue(n.inputs[0]);
    if (w && w->shape.size() == 2 && w->ShapeKnown()) {
      embedding = w;
      break;
    }
  }
  if (!embedding) {
    if (m.vocab_size || m.d_model)
      note(
          "model.vocab_size / d_model not checked: no token embedding (a Gather of a weight by a "
          "graph input) in the export");
  } else {
    const std::string shape = "the export's token embedding '" + embedding->name + "' is " +
                              std::to_string(embedding->shape[0]) + " x " +
                              std::to_string(embedding->shape[1]);
    if (m.d_model && *m.d_model != embedding->shape[1])
      return mismatch("d_model", *m.d_model, shape);
    if (m.vocab_size && *m.vocab_size != embedding->shape[0])
      return mismatch("vocab_size", *m.vocab_size, shape);
  }
  if (m.n_layers) {
    std::map<std::string, int64_t> blocks;  // block list -> blocks
    for (const ModuleInfo& info : ListModules(graph))
      if (info.is_block) ++blocks[info.block_list];
    if (blocks.empty()) {
      note("model.n_layers not checked: the export carries no module tree with blocks");
    } else if (blocks.size() == 1 && blocks.begin()->second != *m.n_layers) {
      return mismatch("n_layers", *m.n_layers,
                      "the export has " + std::to_string(blocks.begin()->second) + " blocks in " +
                          blocks.begin()->first);
    }
  }
  // Heads: the fused attention's query [batch, heads, seq, head_dim] and key.
  if (m.n_heads || m.kv_n_heads) {
    const Node* attention = nullptr;
    for (const Node& n : graph.nodes)
      if (n.op_type == "Attention" && n.domain == "foundry") {
        attention = &n;
        break;
      }
    const Value* q = attention ? graph.FindValue(attention->inputs[0]) : nullptr;
    const Value* k = attention ? graph.FindValue(attention->inputs[1]) : nullptr;
    if (!q || q->shape.size() != 4 || !k || k->shape.size() != 4) {
      note("model.n_heads not checked: no fused attention in the plan to read the heads from");
    } else {
      const std::string where = "the export's attention (" + attention->scope + ") has " +
                                std::to_string(q->shape[1]) + " query heads and " +
                                std::to_string(k->shape[1]) + " key/value heads";
      if (m.n_heads && *m.n_heads != q->shape[1]) return mismatch("n_heads", *m.n_heads, where);
      if (m.kv_n_heads && *m.kv_n_heads != k->shape[1])
        return mismatch("attn_config.kv_n_heads", *m.kv_n_heads, where);
    }
  }
  // Learned positions: a rank-2 initializer named like wpe with max_seq_len rows.
  if (m.max_seq_len)
    for (const auto& name : graph.initializers)
      if (name.size() >= 10 && name.rfind("wpe.weight") == name.size() - 10) {
        const Value* v = graph.FindValue(name);
        if (v && v->shape.size() == 2 && v->shape[0] != *m.max_seq_len)
          return mismatch("max_seq_len", *m.max_seq_len,
                          "the export's position table '" + name + "' has " +
                              std::to_string(v->shape[0]) + " rows");
      }
  return Status::Ok();
}

}  // namespace foundry
