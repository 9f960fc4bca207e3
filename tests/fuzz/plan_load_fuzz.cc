// libFuzzer target: foundry-run's loader. The input is a plan and its training graph:
//   [4 bytes: n, little-endian][n bytes: the .plan JSON text][the rest: the .train.onnx bytes]
// (tests/fuzz/make_plan_corpus.sh writes such pairs from real compiles). LoadPlanFromBytes runs
// every check LoadPlan makes; a plan it accepts whose memory is small (< 64 MiB) is then run for
// one CPU training step on synthetic tokens, as foundry-run would. Any input must end in success
// or in one clean error; a crash, a sanitizer report, a leak or an empty or multi-line message is
// a finding. Build and run with tests/fuzz/build.sh (clang + libclang-rt-14-dev).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/loaded_plan.h"
#include "runtime/trainer.h"

namespace {

void CheckMessage(const foundry::Status& st, const char* stage) {
  if (st.ok()) return;
  const std::string& m = st.message();
  if (m.empty() || m.find('\n') != std::string::npos) {
    std::fprintf(stderr, "bad error message at %s (%zu bytes): '%s'\n", stage, m.size(), m.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace foundry;
  if (size < 4) return 0;
  const uint32_t n = uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 |
                     uint32_t{data[3]} << 24;
  if (n > size - 4) return 0;
  std::string_view plan(reinterpret_cast<const char*>(data) + 4, n);
  std::string_view graph(reinterpret_cast<const char*>(data) + 4 + n, size - 4 - n);
  // No graph directory: external data must not reach files next to the fuzzer.
  StatusOr<LoadedPlan> lp = LoadPlanFromBytes(plan, graph, "fuzz.plan", "/nonexistent-fuzz-dir");
  if (!lp.ok()) {
    CheckMessage(lp.status(), "load");
    return 0;
  }
  // One step only when it is cheap: the arena and what lies outside it under 64 MiB.
  constexpr int64_t kMax = int64_t{64} << 20;
  int64_t bytes = 0;
  for (const auto& l : lp->plan.memory.layouts)
    if (l.backend == "cpu") bytes = l.arena_bytes;
  for (MemoryClass c : kOutsideClasses) {
    const int64_t b = lp->plan.memory.outside[c];
    if (b > kMax || bytes > kMax) return 0;
    bytes += b;
  }
  if (bytes > kMax) return 0;
  TrainerOptions options;
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(std::move(lp).value(), options);
  if (!trainer.ok()) {
    CheckMessage(trainer.status(), "create");
    return 0;
  }
  StatusOr<StepReport> step = (*trainer)->Step();
  if (!step.ok()) CheckMessage(step.status(), "step");
  return 0;
}
