// libFuzzer target: bytes as the text of a --ckpt-config file -> ParseCkptConfigText -> (when read)
// the targets matched against mpt_tiny's module tree, as foundry-compile does. Any input must end
// in a config or one clean error; a crash, a sanitizer report, a leak, an out-of-memory (an alias
// that expands) or an empty or multi-line message is a finding. Build and run with
// tests/fuzz/build.sh from the repository root (it reads models/fixtures/mpt_tiny/model.onnx).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "compiler/ckpt_targets.h"
#include "compiler/onnx_import.h"

namespace {

void CheckMessage(const foundry::Status& st, const char* stage) {
  if (st.ok()) return;
  const std::string& m = st.message();
  if (m.empty() || m.find('\n') != std::string::npos || m.size() > 4096) {
    std::fprintf(stderr, "bad error message at %s (%zu bytes): '%.2000s'\n", stage, m.size(),
                 m.c_str());
    std::abort();
  }
}

const foundry::Graph* Model() {
  static std::optional<foundry::Graph> graph = [] {
    auto g = foundry::ImportOnnx("models/fixtures/mpt_tiny/model.onnx", foundry::ImportOptions{});
    if (!g.ok()) {
      std::fprintf(stderr, "ckpt_config_fuzz: run from the repository root (%s)\n",
                   g.status().message().c_str());
      std::abort();
    }
    return std::optional<foundry::Graph>(std::move(g).value());
  }();
  return &*graph;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace foundry;
  const Graph* model = Model();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = ParseCkptConfigText(text, "fuzz.yaml");
  if (!config.ok()) {
    CheckMessage(config.status(), "read");
    return 0;
  }
  if (!config->enabled || config->targets.empty()) return 0;
  auto selection = SelectCkptTargets(*model, config->targets);
  if (!selection.ok()) CheckMessage(selection.status(), "select");
  return 0;
}
