#include "runtime/train_state.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace {

namespace fs = std::filesystem;

// An integer field of state.json, checked before the JSON library converts it: a float, a string
// or a number outside [min, max] would otherwise convert without a check (1e30 to int64 is
// undefined behaviour). Throws nothing; the message names the field and what it holds.
template <typename T>
StatusOr<T> ReadWhole(const nlohmann::json& v, const std::string& what, T min, T max) {
  bool ok = false;
  if (v.is_number_unsigned())
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(max) &&
         (min <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(min));
  else if (v.is_number_integer())
    ok = v.get<int64_t>() >= static_cast<int64_t>(min) &&
         (v.get<int64_t>() < 0 ||
          static_cast<uint64_t>(v.get<int64_t>()) <= static_cast<uint64_t>(max));
  if (!ok) {
    std::string shown = v.is_array()    ? "an array"
                        : v.is_object() ? "an object"
                                        : v.dump(-1, ' ', /*ensure_ascii=*/true,
                                                 nlohmann::json::error_handler_t::replace);
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    return Error(what + " is " + shown + ", not a whole number from " + std::to_string(min) +
                 " to " + std::to_string(max));
  }
  return v.get<T>();
}

}  // namespace

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
  const std::string damaged = "--resume " + dir + ": '" + path + "' is damaged (";
  TrainState s;
  try {
    StatusOr<int64_t> step = ReadWhole<int64_t>(j.at("step"), "step", INT64_MIN, INT64_MAX);
    if (!step.ok()) return Error(damaged + step.status().message() + ")");
    s.step = *step;
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
    StatusOr<uint64_t> seed = ReadWhole<uint64_t>(j.at("seed"), "seed", 0, UINT64_MAX);
    if (!seed.ok()) return Error(damaged + seed.status().message() + ")");
    s.seed = *seed;
    seed = ReadWhole<uint64_t>(j.at("init_seed"), "init_seed", 0, UINT64_MAX);
    if (!seed.ok()) return Error(damaged + seed.status().message() + ")");
    s.init_seed = *seed;
    const auto& d = j.at("data");
    s.feeds = d.at("feeds").get<std::vector<std::string>>();
    s.data_path = d.at("path").get<std::string>();
    auto dtype = ParseTokenDType(d.at("dtype").get<std::string>());
    if (!dtype.ok()) return dtype.status().Prepend("--resume " + dir + ": ");
    s.data_dtype = *dtype;
    StatusOr<int64_t> position =
        ReadWhole<int64_t>(d.at("position"), "data position", INT64_MIN, INT64_MAX);
    if (!position.ok()) return Error(damaged + position.status().message() + ")");
    s.data_position = *position;
    if (j.contains("init_from")) s.init_from = j.at("init_from").get<std::string>();
    // Optional keys (added with the schedules): absent in older saves.
    if (j.contains("schedule")) {
      const auto& sc = j.at("schedule");
      auto kind = ParseScheduleName(sc.at("name").get<std::string>());
      if (!kind.ok()) return kind.status().Prepend("--resume " + dir + ": ");
      s.schedule.kind = *kind;
      StatusOr<int64_t> w = ReadWhole<int64_t>(sc.at("t_warmup"), "t_warmup", 0, INT64_MAX);
      if (!w.ok()) return Error(damaged + w.status().message() + ")");
      s.schedule.t_warmup = *w;
      StatusOr<int64_t> t_max = ReadWhole<int64_t>(sc.at("t_max"), "t_max", 0, INT64_MAX);
      if (!t_max.ok()) return Error(damaged + t_max.status().message() + ")");
      s.schedule.t_max = *t_max;
      s.schedule.alpha_i = sc.at("alpha_i").get<double>();
      s.schedule.alpha_f = sc.at("alpha_f").get<double>();
    }
    if (j.contains("max_steps")) {
      StatusOr<int64_t> total = ReadWhole<int64_t>(j.at("max_steps"), "max_steps", 0, INT64_MAX);
      if (!total.ok()) return Error(damaged + total.status().message() + ")");
      s.total_steps = *total;
    }
    if (j.contains("clip_norm")) s.clip_norm = j.at("clip_norm").get<double>();
    if (j.contains("accumulation_steps")) {
      StatusOr<int64_t> k =
          ReadWhole<int64_t>(j.at("accumulation_steps"), "accumulation_steps", 1, INT64_MAX);
      if (!k.ok()) return Error(damaged + k.status().message() + ")");
      s.accumulation_steps = *k;
    }
    if (d.contains("mds")) {
      const auto& m = d.at("mds");
      s.mds.shuffle = m.at("shuffle").get<bool>();
      StatusOr<uint64_t> mseed =
          ReadWhole<uint64_t>(m.at("shuffle_seed"), "shuffle_seed", 0, UINT64_MAX);
      if (!mseed.ok()) return Error(damaged + mseed.status().message() + ")");
      s.mds.shuffle_seed = *mseed;
      StatusOr<int64_t> block =
          ReadWhole<int64_t>(m.at("shuffle_block"), "shuffle_block", 1, INT64_MAX);
      if (!block.ok()) return Error(damaged + block.status().message() + ")");
      s.mds.shuffle_block = *block;
      s.mds.drop_last = m.at("drop_last").get<bool>();
      s.mds.token_encoding_type = m.at("token_encoding_type").get<std::string>();
      StatusOr<int64_t> samples = ReadWhole<int64_t>(m.at("samples"), "samples", 1, INT64_MAX);
      if (!samples.ok()) return Error(damaged + samples.status().message() + ")");
      s.mds_samples = *samples;
    }
    if (d.contains("labels")) {
      auto labels = ParseLabelRule(d.at("labels").get<std::string>());
      if (!labels.ok()) return labels.status().Prepend("--resume " + dir + ": ");
      s.labels = *labels;
    }
  } catch (const nlohmann::json::exception& e) {
    return Error("--resume " + dir + ": '" + path + "' is damaged (" + e.what() + ")");
  }
  if (s.step < 0 || s.step == INT64_MAX)
    return Error(damaged + "step " + std::to_string(s.step) + " is out of range)");
  if (s.data_position < 0)
    return Error(damaged + "data position " + std::to_string(s.data_position) + " is negative)");
  Status st = CheckOptimizerOptions(s.optimizer);
  if (st.ok()) st = CheckScheduleOptions(s.schedule, 0);
  if (st.ok()) st = CheckClipNorm(s.clip_norm);
  if (!st.ok()) return Error(damaged + "it records " + st.message() + ")");
  return s;
}

}  // namespace foundry
