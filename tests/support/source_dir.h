// Where the tests find the committed files they read (models/fixtures, tests/data): the source
// tree they were built from, or, for a test binary copied elsewhere (the GPU check folder of
// scripts/gpu-check.sh), the folder named by FOUNDRY_SOURCE_DIR in the environment.
#pragma once

#include <filesystem>

namespace foundry {

// $FOUNDRY_SOURCE_DIR when set and not empty, else the source tree at build time.
std::filesystem::path SourceDir();

}  // namespace foundry
