// The committed fixtures (models/fixtures/*) as the runtime tests train them: each fixture's
// folder with its input files as --feed specs, and the compile foundry-compile MODEL --dim ...
// -o PREFIX performs, done in memory.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/loaded_plan.h"

namespace foundry {

struct TrainingFixture {
  std::filesystem::path dir;
  std::vector<std::string> feeds;  // NAME=FILE.pb, one per file in inputs/, sorted
};

// Every fixture under `fixtures_dir` that has an inputs/ folder, sorted by folder.
std::vector<TrainingFixture> TrainingFixtures(const std::filesystem::path& fixtures_dir);

// The training plan of `model` with its symbolic dimensions bound from the shapes of the fed
// tensors, checked as LoadPlan checks a plan file (its memory plan is made by the trainer).
// `checkpoint`: module instances the remat pass checkpoints (none: the plain plan).
StatusOr<LoadedPlan> CompileFixture(const std::filesystem::path& model,
                                    const std::vector<std::string>& feeds,
                                    const std::vector<std::string>& checkpoint = {});

}  // namespace foundry
