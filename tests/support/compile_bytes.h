// What foundry-compile does to a model, in-process and from bytes: import, the pass pipeline,
// export; then, when the result is small, one run of the training graph on zero inputs. Shared by
// the mutation test (tests/tools/mutation_test.cc) and the libFuzzer target (tests/fuzz/), which
// both require every input to end here in success or in one clean error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/status.h"

namespace foundry {

struct CompileBytesOptions {
  // --dim bindings. Each symbolic dimension the compiler then asks for ("pass --dim seq=N") is
  // bound to 4 and the model compiled again, so one harness fits models with any dimension names.
  std::map<std::string, int64_t> dims;
  std::string model_dir;  // where external data would be looked up
  // Run the compiled graph once when its values hold at most this many bytes in all (0: never).
  int64_t max_run_bytes = 0;
};

// What happened: the first error, or Ok. `stage` says how far the model got ("import", "compile",
// "plan", "export", "run", "done").
struct CompileBytesResult {
  Status status;
  std::string stage;
};

CompileBytesResult CompileBytes(std::string_view bytes, const CompileBytesOptions& options);

}  // namespace foundry
