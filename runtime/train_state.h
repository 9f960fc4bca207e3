// What a --save directory records besides tensors (DIR/state.json), and how values map to files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/data.h"
#include "runtime/optimizer.h"

namespace foundry {

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
  // --labels ("labels" in "data"; absent in saves from before it: kAuto).
  LabelRule labels = LabelRule::kAuto;
};
// Reads DIR/state.json and checks its values: the optimizer options (CheckOptimizerOptions),
// 0 <= step < 2^63 - 1, data_position >= 0.
StatusOr<TrainState> ReadTrainState(const std::string& dir);

// A file name for a value name: '/' and '%' are percent-encoded ("a/b" -> "a%2Fb"), so every
// value gets its own file and the name is recoverable.
std::string FileNameForValue(const std::string& name);

}  // namespace foundry
