// libFuzzer target: bytes -> import -> fold/canonicalize/autodiff -> export -> (small) run, as
// foundry-compile and a first step of foundry-run would do. Any input must end in success or in
// one clean error; a crash, a sanitizer report, a leak or an empty or multi-line message is a
// finding. Build and run with tests/fuzz/build.sh (clang + libclang-rt-14-dev).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "tests/support/compile_bytes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace foundry;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // No model directory: external data must not reach files next to the fuzzer.
  CompileBytesOptions options{{}, "/nonexistent-fuzz-dir", int64_t{1} << 20};
  // FOUNDRY_FUZZ_TRIAGE=1 looks past the two findings that drown the rest while they are open
  // (an error message that is not one line; an exception escaping the library), to reach the
  // memory errors behind them. A run that counts must not set it.
  static const bool triage = std::getenv("FOUNDRY_FUZZ_TRIAGE") != nullptr;
  CompileBytesResult r{Status::Ok(), "done"};
  try {
    r = CompileBytes(bytes, options);
  } catch (const std::exception& e) {
    if (triage) return 0;
    throw;
  }
  if (!r.status.ok() && !triage) {
    const std::string& m = r.status.message();
    if (m.empty() || m.find('\n') != std::string::npos) {
      std::fprintf(stderr, "bad error message at %s (%zu bytes): '%s'\n", r.stage.c_str(), m.size(),
                   m.c_str());
      std::abort();
    }
  }
  return 0;
}
