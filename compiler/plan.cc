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

namespace foundry {

namespace fs = std::filesystem;

StatusOr<std::string> PlanToJson(const Plan& plan) {
  nlohmann::ordered_json j;
  j["format"] = "foundry-plan";
  j["version"] = plan.version;
  j["graph_file"] = plan.graph_file;
  j["source_model"] = plan.source_model;
  j["loss"] = plan.loss;
  j["loss_in_model"] = plan.loss_in_model;
  j["inputs"] = plan.inputs;
  j["parameters"] = plan.parameters;
  j["gradients"] = plan.gradients;
  j["dims"] = plan.dims;
  j["input_dims"] = plan.input_dims;
  const MemoryPlan& m = plan.memory;
  nlohmann::ordered_json mem;
  mem["schedule"] = m.schedule;
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
  j["memory"] = std::move(mem);
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
std::string Shown(const nlohmann::json& v) {
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
    return Error(what + " is " + Shown(v) + ", not a whole number " +
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
    return Error("'" + path + "' is plan format version " + Shown(j["version"]) +
                 "; this foundry-run reads version " + std::to_string(Plan::kVersion) + fix);
  if (const std::string* name = ControlCharacterString(j))
    return Error("'" + path + "' is a damaged foundry plan (" + Shown(nlohmann::json(*name)) +
                 " holds a control character; names never do)" + fix);
  Plan p;
  try {
    p.version = Plan::kVersion;
    p.graph_file = j.at("graph_file").get<std::string>();
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
    Status memory = ReadMemorySection(j.at("memory"), p.memory);
    if (!memory.ok())
      return Error("'" + path + "' is a damaged foundry plan (" + memory.message() + ")" + fix);
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
  return CompiledOutputs{prefix + ".train.onnx", prefix + ".train.onnx.data", prefix + ".plan"};
}

Status WriteCompiledOutputs(const Graph& graph, const Plan* plan, const std::string& prefix) {
  ASSIGN_OR_RETURN(CompiledOutputs out, CompiledOutputPaths(prefix));
  std::string plan_json;
  if (plan) {
    ASSIGN_OR_RETURN(plan_json, PlanToJson(*plan));
  }
  std::error_code ec;
  const fs::path target_dir = fs::path(prefix).parent_path();
  const std::string stem = fs::path(prefix).filename().string();

  // 1. Folders, outermost first, remembered so a failure can take them away again.
  std::vector<fs::path> created;
  for (fs::path d = target_dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
    created.insert(created.begin(), d);
    if (d == d.parent_path()) break;
  }
  auto remove_created = [&] {
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);
  };
  for (const auto& d : created)
    if (!fs::create_directory(d, ec) && !fs::is_directory(d)) {
      std::string why = ec.message();
      remove_created();
      return Error("cannot create output folder '" + d.string() + "': " + why);
    }

  // 2. Everything into a temp folder beside the outputs.
  static int counter = 0;
  const fs::path tmp =
      (target_dir.empty() ? fs::path(".") : target_dir) /
      ("." + stem + ".foundry-tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  if (!fs::create_directory(tmp, ec)) {
    std::string why = ec ? ec.message() : "it already exists";
    remove_created();
    return Error("cannot write '" + out.graph + "': cannot create a temporary folder in '" +
                 (target_dir.empty() ? std::string(".") : target_dir.string()) + "': " + why);
  }
  auto fail = [&](const Status& st) {
    fs::remove_all(tmp, ec);
    remove_created();
    return st;
  };
  const std::string name_graph = fs::path(out.graph).filename().string();
  const std::string name_data = fs::path(out.data).filename().string();
  const std::string name_plan = fs::path(out.plan).filename().string();
  Status st = ExportOnnx(graph, (tmp / name_graph).string());
  if (!st.ok()) return fail(st);
  if (plan) {
    st = WriteFileAtomic((tmp / name_plan).string(), plan_json);
    if (!st.ok()) return fail(st);
  }

  // 3. Rename into place, data first: a graph never refers to data that is not there yet.
  struct Move {
    std::string name, target;
    bool had_old = false, done = false;
  };
  std::vector<Move> moves;
  if (fs::exists(tmp / name_data, ec)) moves.push_back({name_data, out.data});
  moves.push_back({name_graph, out.graph});
  if (plan) moves.push_back({name_plan, out.plan});
  auto undo = [&] {
    for (auto it = moves.rbegin(); it != moves.rend(); ++it) {
      if (!it->done) continue;
      const std::string old = (tmp / (it->name + ".old")).string();
      if (it->had_old)
        std::rename(old.c_str(), it->target.c_str());
      else
        std::remove(it->target.c_str());
    }
  };
  for (Move& m : moves) {
    const std::string from = (tmp / m.name).string();
    const std::string old = (tmp / (m.name + ".old")).string();
    struct stat sb {};
    // A file about to be replaced is kept by a hard link (a symlink is kept as itself); a
    // folder is not replaced at all: the rename below fails on it.
    if (::lstat(m.target.c_str(), &sb) == 0 && !S_ISDIR(sb.st_mode)) {
      if (::link(m.target.c_str(), old.c_str()) != 0) {
        std::string why = std::strerror(errno);
        undo();
        return fail(Error("cannot write '" + m.target + "': cannot keep the old file (" + why +
                          "); nothing was written"));
      }
      m.had_old = true;
    }
    if (std::rename(from.c_str(), m.target.c_str()) != 0) {
      std::string why = std::strerror(errno);
      undo();
      return fail(Error("cannot write '" + m.target + "': " + why + "; nothing was written"));
    }
    m.done = true;
  }
  // 4.
  fs::remove_all(tmp, ec);
  return Status::Ok();
}

}  // namespace foundry
