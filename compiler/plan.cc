#include "compiler/plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/file_util.h"
#include "compiler/onnx_export.h"
#include "compiler/sharding.h"

namespace foundry {

namespace fs = std::filesystem;

namespace {

nlohmann::ordered_json MemoryToJson(const MemoryPlan& m) {
  nlohmann::ordered_json mem;
  mem["schedule"] = m.schedule;
  if (m.gradients_in_arena) mem["gradients_in_arena"] = true;
  mem["alias"] = nlohmann::ordered_json::object();
  for (const auto& [value, a] : m.alias)
    mem["alias"][value] = {{"owner", a.owner},
                           {"kind", a.kind == AliasKind::kView ? "view" : "in_place"}};
  mem["layouts"] = nlohmann::ordered_json::object();
  for (const BackendLayout& l : m.layouts) {
    nlohmann::ordered_json lj;
    lj["arena_bytes"] = l.arena_bytes;
    lj["lower_bound_bytes"] = l.lower_bound_bytes;
    lj["peak_step"] = l.peak_step;
    lj["offsets"] = l.offsets;
    lj["workspace"] = nlohmann::ordered_json::object();
    for (size_t s = 0; s < l.workspace_bytes.size() && s < m.schedule.size(); ++s)
      if (l.workspace_bytes[s] != 0)
        lj["workspace"][m.schedule[s]] = {l.workspace_offsets.at(s), l.workspace_bytes[s]};
    mem["layouts"][l.backend] = std::move(lj);
  }
  for (MemoryClass c : kOutsideClasses)  // "parameter_bytes", ..., "optimizer_state_bytes"
    mem[std::string(MemoryClassName(c)) + "_bytes"] = m.outside[c];
  return mem;
}

}  // namespace

StatusOr<std::string> PlanToJson(const Plan& plan) {
  nlohmann::ordered_json j;
  j["format"] = "foundry-plan";
  j["version"] = plan.version;
  j["graph_file"] = plan.graph_file;
  if (!plan.graph_digest.empty()) j["graph_digest"] = plan.graph_digest;
  j["source_model"] = plan.source_model;
  j["loss"] = plan.loss;
  j["loss_in_model"] = plan.loss_in_model;
  j["inputs"] = plan.inputs;
  j["parameters"] = plan.parameters;
  j["gradients"] = plan.gradients;
  j["dims"] = plan.dims;
  j["input_dims"] = plan.input_dims;
  if (plan.grad_accumulation != 1) j["grad_accumulation"] = plan.grad_accumulation;
  j["memory"] = MemoryToJson(plan.memory);
  if (plan.eval_memory) j["eval_memory"] = MemoryToJson(*plan.eval_memory);
  if (plan.sharding) {
    nlohmann::ordered_json sj;
    sj["world_size"] = plan.sharding->world_size;
    sj["strategy"] = plan.sharding->strategy;
    sj["shard_group"] = plan.sharding->shard_group;
    sj["parameters"] = nlohmann::ordered_json::object();
    for (const auto& [name, sp] : plan.sharding->parameters)
      sj["parameters"][name] = {{"shape", sp.shape}, {"shard", sp.shard}};
    if (!plan.sharding->init_file.empty()) sj["init"] = plan.sharding->init_file;
    j["sharding"] = std::move(sj);
  }
  try {
    return j.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {
    // JSON strings are UTF-8; a name or path that is not cannot be written faithfully.
    return Error(
        "cannot write the plan: a value name or the model path is not valid UTF-8; rename it");
  }
}

Status WritePlan(const Plan& plan, const std::string& path) {
  ASSIGN_OR_RETURN(std::string json, PlanToJson(plan));
  return WriteFileAtomic(path, json);
}

namespace {

// A JSON value as the error shows it: its JSON text, at most 40 characters of it (a 10 MB string
// is not copied into a message; control characters are escaped by the JSON writer).
std::string ShownJson(const nlohmann::json& v) {
  if (v.is_array()) return "an array";  // not dumped: dump() recurses, and a file may nest deeply
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// An integer field of the plan. The JSON library converts a float or an out-of-range number to
// int64 without a check (1e19 is undefined behaviour), so the kind and range are checked first: a
// float, a string, a number below `min` or above 2^63-1 is an error naming the field.
StatusOr<int64_t> ReadInt(const nlohmann::json& v, const std::string& what, int64_t min) {
  bool ok = false;
  if (v.is_number_unsigned())
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) && v.get<int64_t>() >= min;
  else if (v.is_number_integer())
    ok = v.get<int64_t>() >= min;
  if (!ok)
    return Error(what + " is " + ShownJson(v) + ", not a whole number " +
                 (min == INT64_MIN ? std::string("of 64 bits")
                                   : "from " + std::to_string(min) + " to 2^63-1"));
  return v.get<int64_t>();
}

// The first string of `j` (a key or a value) that holds a control character, or null: names reach
// error lines, and a newline in one would split the line. Iterative: a file may nest deeply.
const std::string* ControlCharacterString(const nlohmann::json& root) {
  auto bad = [](const std::string& s) {
    return std::any_of(s.begin(), s.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  };
  std::vector<const nlohmann::json*> todo = {&root};
  while (!todo.empty()) {
    const nlohmann::json& j = *todo.back();
    todo.pop_back();
    if (j.is_string() && bad(j.get_ref<const std::string&>()))
      return &j.get_ref<const std::string&>();
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (bad(it.key())) return &it.key();
        todo.push_back(&it.value());
      }
    } else if (j.is_array()) {
      for (const auto& e : j) todo.push_back(&e);
    }
  }
  return nullptr;
}

// The "memory" section; what the JSON library cannot catch (type errors throw) is said here. The
// returned message is the part in parentheses of ReadPlan's "damaged" error.
Status ReadMemorySection(const nlohmann::json& j, MemoryPlan& m) {
  if (!j.is_object()) return Error("memory is not an object");
  m.schedule = j.at("schedule").get<std::vector<std::string>>();
  if (j.contains("gradients_in_arena")) {
    if (!j.at("gradients_in_arena").is_boolean())
      return Error("gradients_in_arena is not true or false");
    m.gradients_in_arena = j.at("gradients_in_arena").get<bool>();
  }
  std::map<std::string, size_t> step;
  for (size_t s = 0; s < m.schedule.size(); ++s)
    if (!step.emplace(m.schedule[s], s).second)
      return Error("node '" + m.schedule[s] + "' is scheduled twice");
  for (const auto& [value, a] : j.at("alias").items()) {
    Alias alias;
    alias.owner = a.at("owner").get<std::string>();
    const std::string kind = a.at("kind").get<std::string>();
    if (kind == "view")
      alias.kind = AliasKind::kView;
    else if (kind == "in_place")
      alias.kind = AliasKind::kInPlace;
    else
      return Error("alias '" + value + "' has kind '" + kind + "'; kinds are view and in_place");
    m.alias[value] = alias;
  }
  for (const auto& [backend, lj] : j.at("layouts").items()) {
    BackendLayout l;
    l.backend = backend;
    const std::string in = "layout '" + backend + "': ";
    ASSIGN_OR_RETURN(l.arena_bytes, ReadInt(lj.at("arena_bytes"), in + "arena_bytes", 0));
    ASSIGN_OR_RETURN(l.lower_bound_bytes,
                     ReadInt(lj.at("lower_bound_bytes"), in + "lower_bound_bytes", 0));
    ASSIGN_OR_RETURN(l.peak_step, ReadInt(lj.at("peak_step"), in + "peak_step", -1));
    const nlohmann::json& offsets = lj.at("offsets");
    if (!offsets.is_object()) return Error(in + "offsets is not an object");
    for (const auto& [value, off] : offsets.items()) {
      ASSIGN_OR_RETURN(l.offsets[value], ReadInt(off, in + "the offset of '" + value + "'", 0));
    }
    l.workspace_bytes.assign(m.schedule.size(), 0);
    l.workspace_offsets.assign(m.schedule.size(), -1);
    for (const auto& [node, w] : lj.at("workspace").items()) {
      auto it = step.find(node);
      if (it == step.end())
        return Error("layout '" + backend + "' gives workspace to '" + node +
                     "', which is not a scheduled node");
      if (!w.is_array() || w.size() != 2)
        return Error("layout '" + backend + "': the workspace of '" + node +
                     "' is not [offset, bytes]");
      const std::string of = in + "the workspace of '" + node + "': ";
      ASSIGN_OR_RETURN(l.workspace_offsets[it->second], ReadInt(w[0], of + "offset", 0));
      ASSIGN_OR_RETURN(l.workspace_bytes[it->second], ReadInt(w[1], of + "bytes", 0));
    }
    m.layouts.push_back(std::move(l));
  }
  for (MemoryClass c : kOutsideClasses) {
    const std::string key = std::string(MemoryClassName(c)) + "_bytes";
    ASSIGN_OR_RETURN(m.outside[c], ReadInt(j.at(key), key, 0));
  }
  return Status::Ok();
}

// The "sharding" section: ranks >= 2, a known strategy, a shard group that divides the ranks,
// and for each sharded parameter (a parameter of the plan) a positive shape whose shard is
// ceil(numel / group).
Status ReadShardingSection(const nlohmann::json& j, Plan& p) {
  if (!j.is_object()) return Error("not an object");
  ShardingPlan s;
  ASSIGN_OR_RETURN(s.world_size, ReadInt(j.at("world_size"), "world_size", 2));
  s.strategy = j.at("strategy").get<std::string>();
  const std::optional<ShardingStrategy> strategy = ParseSharding(s.strategy);
  if (!strategy) return Error("strategy '" + s.strategy + "' is not one of " + ShardingNames(", "));
  ASSIGN_OR_RETURN(s.shard_group, ReadInt(j.at("shard_group"), "shard_group", 2));
  if (s.shard_group > s.world_size || s.world_size % s.shard_group != 0)
    return Error("shard_group " + std::to_string(s.shard_group) + " does not divide world_size " +
                 std::to_string(s.world_size));
  if (j.contains("init")) s.init_file = j.at("init").get<std::string>();
  const nlohmann::json& params = j.at("parameters");
  if (!params.is_object()) return Error("parameters is not an object");
  for (const auto& [name, pj] : params.items()) {
    if (std::find(p.parameters.begin(), p.parameters.end(), name) == p.parameters.end())
      return Error("'" + name + "' is not a parameter of the plan");
    ShardedParameter sp;
    int64_t numel = 1;
    for (const auto& d : pj.at("shape")) {
      ASSIGN_OR_RETURN(int64_t v, ReadInt(d, "a dimension of '" + name + "'", 1));
      if (numel > (int64_t{1} << 50) / v) return Error("'" + name + "' is too large");
      numel *= v;
      sp.shape.push_back(v);
    }
    ASSIGN_OR_RETURN(sp.shard, ReadInt(pj.at("shard"), "the shard of '" + name + "'", 1));
    if (sp.shard != ShardElements(numel, s.shard_group))
      return Error("the shard of '" + name + "' is " + std::to_string(sp.shard) + " elements; " +
                   std::to_string(numel) + " over " + std::to_string(s.shard_group) + " ranks is " +
                   std::to_string(ShardElements(numel, s.shard_group)));
    s.parameters[name] = std::move(sp);
  }
  const bool no_shard = *strategy == ShardingStrategy::kNoShard;
  if (no_shard ? !s.parameters.empty() : s.parameters.size() != p.parameters.size())
    return Error(no_shard ? "NO_SHARD shards no parameter"
                          : "every parameter is sharded under " + s.strategy);
  p.sharding = std::move(s);
  return Status::Ok();
}

}  // namespace

StatusOr<Plan> ReadPlan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Error("cannot open plan '" + path + "': " + std::strerror(errno) +
                 "; create it with foundry-compile MODEL.onnx -o PREFIX");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePlan(ss.str(), path);
}

StatusOr<Plan> ParsePlan(std::string_view text, const std::string& path) {
  const std::string fix = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != "foundry-plan")
    return Error("'" + path + "' is not a foundry plan (not the JSON foundry-compile writes)" +
                 fix);
  if (!j.contains("version") || !j["version"].is_number_integer())
    return Error("'" + path + "' has no plan format version" + fix);
  if (j["version"] != Plan::kVersion)
    return Error("'" + path + "' is plan format version " + ShownJson(j["version"]) +
                 "; this foundry-run reads version " + std::to_string(Plan::kVersion) + fix);
  if (const std::string* name = ControlCharacterString(j))
    return Error("'" + path + "' is a damaged foundry plan (" + ShownJson(nlohmann::json(*name)) +
                 " holds a control character; names never do)" + fix);
  Plan p;
  try {
    p.version = Plan::kVersion;
    p.graph_file = j.at("graph_file").get<std::string>();
    if (j.contains("graph_digest")) p.graph_digest = j.at("graph_digest").get<std::string>();
    p.source_model = j.at("source_model").get<std::string>();
    p.loss = j.at("loss").get<std::string>();
    p.loss_in_model = j.at("loss_in_model").get<bool>();
    p.inputs = j.at("inputs").get<std::vector<std::string>>();
    p.parameters = j.at("parameters").get<std::vector<std::string>>();
    p.gradients = j.at("gradients").get<std::map<std::string, std::string>>();
    const nlohmann::json& dims = j.at("dims");
    if (!dims.is_object())
      return Error("'" + path + "' is a damaged foundry plan (dims is not an object)" + fix);
    for (const auto& [name, value] : dims.items()) {
      StatusOr<int64_t> d = ReadInt(value, "dimension '" + name + "'", INT64_MIN);
      if (!d.ok())
        return Error("'" + path + "' is a damaged foundry plan (" + d.status().message() + ")" +
                     fix);
      p.dims[name] = *d;
    }
    if (j.contains("input_dims"))
      p.input_dims = j.at("input_dims").get<std::map<std::string, std::vector<std::string>>>();
    if (j.contains("grad_accumulation")) {
      StatusOr<int64_t> k = ReadInt(j.at("grad_accumulation"), "grad_accumulation", 1);
      if (!k.ok())
        return Error("'" + path + "' is a damaged foundry plan (" + k.status().message() + ")" +
                     fix);
      p.grad_accumulation = *k;
    }
    Status memory = ReadMemorySection(j.at("memory"), p.memory);
    if (!memory.ok())
      return Error("'" + path + "' is a damaged foundry plan (" + memory.message() + ")" + fix);
    if (j.contains("eval_memory")) {
      p.eval_memory.emplace();
      Status eval = ReadMemorySection(j.at("eval_memory"), *p.eval_memory);
      if (!eval.ok())
        return Error("'" + path + "' is a damaged foundry plan (eval_memory: " + eval.message() +
                     ")" + fix);
    }
    if (j.contains("sharding")) {
      Status sharding = ReadShardingSection(j.at("sharding"), p);
      if (!sharding.ok())
        return Error("'" + path + "' is a damaged foundry plan (sharding: " + sharding.message() +
                     ")" + fix);
    }
  } catch (const nlohmann::json::exception& e) {
    return Error("'" + path + "' is a damaged foundry plan (" + e.what() + ")" + fix);
  }
  auto damaged = [&](const std::string& why) {
    return Error("'" + path + "' is a damaged foundry plan (" + why + ")" + fix);
  };
  std::set<std::string> params, inputs, grads;
  for (const auto& in : p.inputs)
    if (!inputs.insert(in).second) return damaged("input '" + in + "' is listed twice");
  for (const auto& param : p.parameters) {
    if (!params.insert(param).second) return damaged("parameter '" + param + "' is listed twice");
    if (inputs.count(param))
      return damaged("'" + param + "' is listed both as an input and as a parameter");
    if (!p.gradients.count(param)) return damaged("no gradient for parameter '" + param + "'");
  }
  for (const auto& [param, grad] : p.gradients) {
    if (!params.count(param))
      return damaged("gradient '" + grad + "' belongs to '" + param +
                     "', which is not a parameter");
    if (!grads.insert(grad).second)
      return damaged("gradient '" + grad + "' is given for two parameters");
    if (grad == p.loss) return damaged("the loss '" + p.loss + "' is also a gradient");
    if (params.count(grad) || inputs.count(grad))
      return damaged("gradient '" + grad + "' is also an input or a parameter");
  }
  if (params.count(p.loss) || inputs.count(p.loss))
    return damaged("the loss '" + p.loss + "' is also an input or a parameter");
  for (const auto& [name, value] : p.dims)
    if (value <= 0)
      return damaged("dimension '" + name + "' is " + std::to_string(value) +
                     "; dimensions are positive");
  for (const auto& [input, axes] : p.input_dims) {
    if (!inputs.count(input))
      return damaged("input_dims names '" + input + "', which is not an input");
    for (const auto& d : axes)
      if (!d.empty() && !p.dims.count(d))
        return damaged("input '" + input + "' has dimension '" + d + "', which dims does not bind");
  }
  return p;
}

// ---- foundry-compile's outputs -------------------------------------------------------------

StatusOr<CompiledOutputs> CompiledOutputPaths(const std::string& prefix) {
  const std::string stem = fs::path(prefix).filename().string();
  if (stem.empty() || stem == "." || stem == "..")
    return Error(
        "-o " + prefix + ": PREFIX needs a file name after the folder (e.g. -o " +
        (prefix.empty() ? std::string("out/") : prefix + (prefix.back() == '/' ? "" : "/")) +
        "model writes model.train.onnx and model.plan there)");
  return CompiledOutputs{prefix + ".train.onnx", prefix + ".train.onnx.data", prefix + ".plan",
                         prefix + ".init.safetensors"};
}

StatusOr<std::string> GraphDigest(const std::string& graph_path, const std::string& data_path) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, streamed
  for (const std::string& path : {graph_path, data_path}) {
    if (path == data_path && !fs::exists(path)) continue;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return Error("cannot read '" + path + "': " + std::strerror(errno));
    std::vector<unsigned char> buf(1 << 16);
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
      for (size_t i = 0; i < n; ++i) {
        h ^= buf[i];
        h *= 1099511628211ull;
      }
    const bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) return Error("cannot read '" + path + "'");
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "fnv1a64:" + std::string(hex);
}

Status StageCompiledOutputs(const Graph& graph, Plan* plan, const CompiledOutputs& paths,
                            OutputSet& outputs) {
  // The graph and its data are staged side by side under their own names, so the graph's
  // reference to its data file holds once both are renamed into place.
  ASSIGN_OR_RETURN(std::string graph_file, outputs.Stage(paths.graph));
  ASSIGN_OR_RETURN(std::string data_file, outputs.Stage(paths.data));
  RETURN_IF_ERROR(ExportOnnx(graph, graph_file));
  if (!plan) return Status::Ok();
  ASSIGN_OR_RETURN(plan->graph_digest, GraphDigest(graph_file, data_file));
  ASSIGN_OR_RETURN(std::string json, PlanToJson(*plan));
  return outputs.Write(paths.plan, json);
}

Status WriteCompiledOutputs(const Graph& graph, const Plan* plan, const std::string& prefix) {
  ASSIGN_OR_RETURN(CompiledOutputs paths, CompiledOutputPaths(prefix));
  OutputSet outputs;
  const OutputSet::FileOptions pair{/*special=*/false, /*make_parents=*/true};
  RETURN_IF_ERROR(outputs.AddFile(paths.graph, "-o", pair));
  RETURN_IF_ERROR(outputs.AddFile(paths.data, "-o", pair));
  RETURN_IF_ERROR(outputs.AddFile(paths.plan, "-o", pair));
  std::optional<Plan> copy;
  if (plan) copy = *plan;
  RETURN_IF_ERROR(StageCompiledOutputs(graph, copy ? &*copy : nullptr, paths, outputs));
  return outputs.Commit();
}

}  // namespace foundry
