#include "tests/support/source_dir.h"

#include <cstdlib>

namespace foundry {

std::filesystem::path SourceDir() {
  const char* env = std::getenv("FOUNDRY_SOURCE_DIR");
  if (env && *env) return env;
  return FOUNDRY_SOURCE_DIR;
}

}  // namespace foundry
