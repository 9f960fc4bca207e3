// The executable plan foundry-compile writes beside the training graph (<prefix>.plan): what the
// runtime needs to run the graph in <prefix>.train.onnx without re-deriving it — which input is
// what, which output is the loss, which gradient belongs to which parameter. Versioned JSON; the
// memory plan and kernel choices join it as later format versions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace foundry {

struct Plan {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string graph_file;     // relative to the plan's directory
  std::string source_model;   // the model foundry-compile read (as given)
  std::string loss;           // value name of the scalar loss
  bool loss_in_model = true;  // false: foundry appended the loss (labels are not shifted)
  std::vector<std::string> inputs;                // run-time data inputs, e.g. input_ids, labels
  std::vector<std::string> parameters;            // trainable, in optimizer order
  std::map<std::string, std::string> gradients;   // parameter -> its gradient value
  std::map<std::string, int64_t> dims;            // the bindings it was compiled with
};

// Atomic write (temp file + rename).
Status WritePlan(const Plan& plan, const std::string& path);
StatusOr<Plan> ReadPlan(const std::string& path);

// Writes `contents` to `path` atomically: a temp file in the same directory, then rename.
Status WriteFileAtomic(const std::string& path, const std::string& contents);

}  // namespace foundry
