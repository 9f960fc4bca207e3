// What a --save directory records besides tensors (DIR/state.json), and how values map to files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/data.h"
#include "runtime/optimizer.h"
#include "runtime/lr_schedule.h"

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
  std::string init_from;      // absolute: --init-from of the run that saved ("" = none)
  // The schedule, its total as given (0: the last step of each run) and the clipping threshold;
  // a save without them (older foundry-run) reads as none: constant, 0, 0.
  ScheduleOptions schedule;
  int64_t total_steps = 0;
  double clip_norm = 0;
  // Microbatches per optimizer step ("accumulation_steps", written when above 1; saves without
  // it ran one).
  int64_t accumulation_steps = 1;
  // --labels ("labels" in "data"; absent in saves from before it: kAuto).
  LabelRule labels = LabelRule::kAuto;
  // How an MDS --data folder was read ("mds" in "data", written when the data is one), and its
  // samples then (0: not recorded).
  MdsReadOptions mds;
  int64_t mds_samples = 0;
};
// Reads DIR/state.json and checks its values: the optimizer options (CheckOptimizerOptions),
// 0 <= step < 2^63 - 1, data_position >= 0, the schedule (CheckScheduleOptions), total_steps >= 0,
// clip_norm finite >= 0.
StatusOr<TrainState> ReadTrainState(const std::string& dir);

// A file name for a value name: '/' and '%' are percent-encoded ("a/b" -> "a%2Fb"), so every
// value gets its own file and the name is recoverable.
std::string FileNameForValue(const std::string& name);

}  // namespace foundry
