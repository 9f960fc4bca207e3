#include "compiler/plan.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace foundry {

Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error("cannot write '" + path + "': " + std::strerror(errno));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Error("cannot write '" + path + "': " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Error("cannot write '" + path + "': " + why);
  }
  return Status::Ok();
}

Status WritePlan(const Plan& plan, const std::string& path) {
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
  return WriteFileAtomic(path, j.dump(2) + "\n");
}

StatusOr<Plan> ReadPlan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Error("cannot open plan '" + path + "': " + std::strerror(errno) +
                 "; create it with foundry-compile MODEL.onnx -o PREFIX");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string fix = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") ||
      j["format"] != "foundry-plan")
    return Error("'" + path + "' is not a foundry plan (not the JSON foundry-compile writes)" + fix);
  if (!j.contains("version") || !j["version"].is_number_integer())
    return Error("'" + path + "' has no plan format version" + fix);
  int version = j["version"].get<int>();
  if (version != Plan::kVersion)
    return Error("'" + path + "' is plan format version " + std::to_string(version) +
                 "; this foundry-run reads version " + std::to_string(Plan::kVersion) + fix);
  Plan p;
  try {
    p.version = version;
    p.graph_file = j.at("graph_file").get<std::string>();
    p.source_model = j.at("source_model").get<std::string>();
    p.loss = j.at("loss").get<std::string>();
    p.loss_in_model = j.at("loss_in_model").get<bool>();
    p.inputs = j.at("inputs").get<std::vector<std::string>>();
    p.parameters = j.at("parameters").get<std::vector<std::string>>();
    p.gradients = j.at("gradients").get<std::map<std::string, std::string>>();
    p.dims = j.at("dims").get<std::map<std::string, int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    return Error("'" + path + "' is a damaged foundry plan (" + e.what() + ")" + fix);
  }
  for (const auto& param : p.parameters)
    if (!p.gradients.count(param))
      return Error("'" + path + "' is a damaged foundry plan (no gradient for parameter '" +
                   param + "')" + fix);
  return p;
}

}  // namespace foundry
