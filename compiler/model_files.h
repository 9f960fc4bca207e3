// A light second look at a model file, for what the importer does not keep: the external data
// files its tensors name (foundry-compile checks its outputs against them, so it never writes
// over its own input) and the symbolic dimension names of its inputs (recorded in the plan; the
// importer binds --dim values in place of the names).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace foundry {

struct ModelFiles {
  // The model's folder joined with each external data `location`, as the importer resolves
  // them; each once, in order of first use: initializers, then tensors in node attributes
  // (subgraphs and local functions included).
  std::vector<std::string> external_data;
  // Graph input -> its dim_param per axis ("" for a fixed axis); inputs without any left out.
  std::map<std::string, std::vector<std::string>> input_dims;
};

StatusOr<ModelFiles> InspectModelFile(const std::string& model_path);

}  // namespace foundry
