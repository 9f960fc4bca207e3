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

}  // namespace foundry
