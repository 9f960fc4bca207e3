// Byte-level mutants of the committed models, compiled in-process: every mutant must
// end in success or in one clean error (non-empty, one line), within a generous time bound. The
// mutants come from a fixed seed, so a failure names a mutant that reproduces alone:
//   FOUNDRY_MUTANT=<index> ctest --test-dir build -R tools_mutation_test -V
// (FOUNDRY_MUTANT_VERBOSE=1 prints every mutant's outcome; FOUNDRY_MUTANT_DIR=DIR also writes
// each mutant there, e.g. to replay them through the fuzzer: import_compile_fuzz DIR/*.)
//
// Mutations: bit flips, bytes overwritten with values that stress parsers (0x00, 0xFF, 0x7F,
// 0x80, 0x01), truncation, and a duplicated byte range. Positions are drawn a third from the whole
// file, a third from its first 32 KiB and a third from its last 8 KiB: protobuf writes fields in
// field-number order, so the graph's nodes sit near the front and metadata and functions at the
// back, while the middle is mostly weights whose bytes any value is valid for.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/compile_bytes.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
// At -O0 under AddressSanitizer a fixture compiles ~10x slower: CI's sanitizer pass runs every
// fifth mutant (the same ones every time).
constexpr int kStride = 5;
#else
constexpr int kStride = 1;
#endif
constexpr int kMutants = 1000;
constexpr uint64_t kSeed = 0x5eed'f0d2'0207;
constexpr double kMaxSecondsPerMutant = 20;

struct Fixture {
  std::string path;
  std::string bytes;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<Fixture> LoadFixtures() {
  std::vector<std::string> paths;
  const fs::path root = FOUNDRY_SOURCE_DIR;
  for (const auto& dir : fs::directory_iterator(root / "models/fixtures"))
    for (const auto& f : fs::directory_iterator(dir.path())) {
      std::string name = f.path().filename().string();
      if (name.rfind("model", 0) == 0 && f.path().extension() == ".onnx")
        paths.push_back(f.path().string());
    }
  for (const auto& f : fs::directory_iterator(root / "tests/data/onnx"))
    if (f.path().extension() == ".onnx") paths.push_back(f.path().string());
  std::sort(paths.begin(), paths.end());  // directory order is not deterministic

  std::vector<Fixture> fixtures;
  for (const auto& p : paths) {
    Fixture f{p, ReadFile(p)};
    fixtures.push_back(std::move(f));
  }
  return fixtures;
}

// One mutant: which fixture, what was done (for the failure message), the bytes.
struct Mutant {
  const Fixture* fixture;
  std::string what;
  std::string bytes;
};

Mutant MakeMutant(const std::vector<Fixture>& fixtures, int index) {
  // Each mutant has its own generator, so one can be rebuilt without the others.
  std::mt19937_64 rng(kSeed ^ (static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull));
  const Fixture& f = fixtures[index % fixtures.size()];
  std::string b = f.bytes;
  const size_t n = b.size();
  auto pos = [&]() -> size_t {
    if (n == 0) return 0;
    switch (rng() % 3) {
      case 0:
        return rng() % n;
      case 1:
        return rng() % std::min<size_t>(n, 32 << 10);
      default:
        return n - 1 - rng() % std::min<size_t>(n, 8 << 10);
    }
  };
  std::ostringstream what;
  // Mostly one edit, mostly in place: a truncation or an insertion almost always ends in the
  // protobuf parser, an in-place byte reaches the importer and the passes.
  int edits = rng() % 4 == 0 ? 2 : 1;
  for (int e = 0; e < edits && !b.empty(); ++e) {
    size_t p = pos() % b.size();
    switch (const int kind = static_cast<int>(rng() % 10); kind) {
      case 0:
      case 1:
      case 2: {
        int bit = static_cast<int>(rng() % 8);
        b[p] = static_cast<char>(b[p] ^ (1 << bit));
        what << "flip bit " << bit << " at " << p << "; ";
        break;
      }
      case 3:
      case 4:
      case 5:
      case 6:
      case 7: {
        static constexpr unsigned char kValues[] = {0x00, 0xFF, 0x7F, 0x80, 0x01};
        unsigned char v = kValues[rng() % std::size(kValues)];
        b[p] = static_cast<char>(v);
        what << "byte " << p << " = " << static_cast<int>(v) << "; ";
        break;
      }
      case 8: {
        b.resize(p);
        what << "truncate to " << p << "; ";
        break;
      }
      default: {
        size_t len = 1 + rng() % std::min<size_t>(64, b.size() - p);
        size_t at = pos() % (b.size() + 1);
        b.insert(at, b.substr(p, len));
        what << "copy " << len << " bytes from " << p << " to " << at << "; ";
        break;
      }
    }
  }
  return {&f, what.str(), std::move(b)};
}

// The mutant being compiled, for a crash report: a fatal signal prints it before the default
// action (a sanitizer's report, which ends in abort, included).
char g_current[512];

void OnFatalSignal(int sig) {
  const char prefix[] = "mutation_test: crashed on ";
  [[maybe_unused]] ssize_t w = write(2, prefix, sizeof(prefix) - 1);
  w = write(2, g_current, strnlen(g_current, sizeof(g_current)));
  w = write(2, "\n", 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

// A mutant that hangs cannot be interrupted in-process: a watchdog ends the test with the
// mutant's name instead of leaving it to ctest's timeout.
class Watchdog {
 public:
  Watchdog() : thread_([this] { Loop(); }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  void Start(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      what_ = what;
    }
    start_ns_ = Now();
  }
  void Stop() { start_ns_ = 0; }

 private:
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void Loop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      int64_t s = start_ns_;
      // Twice the per-mutant bound: a slow mutant fails the test normally, a hung one here.
      if (s && Now() - s > static_cast<int64_t>(2 * kMaxSecondsPerMutant * 1e9)) {
        std::lock_guard<std::mutex> lock(mu_);
        std::fprintf(stderr, "mutation_test: hang (> %.0f s): %s\n", 2 * kMaxSecondsPerMutant,
                     what_.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> start_ns_{0};
  std::mutex mu_;
  std::string what_;
  std::thread thread_;
};

TEST(MutationTest, EveryMutantEndsInSuccessOrOneCleanError) {
  const std::vector<Fixture> fixtures = LoadFixtures();
  ASSERT_GE(fixtures.size(), 20u) << "fixtures missing under models/fixtures and tests/data/onnx";

  int only = -1;
  if (const char* e = std::getenv("FOUNDRY_MUTANT")) only = std::atoi(e);
  const bool verbose = std::getenv("FOUNDRY_MUTANT_VERBOSE") != nullptr;
  const char* save_dir = std::getenv("FOUNDRY_MUTANT_DIR");

  Watchdog watchdog;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL}) signal(sig, OnFatalSignal);
  std::map<std::string, int> by_stage;
  int ran = 0;
  double slowest = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kMutants; ++i) {
    if (only >= 0 ? i != only : i % kStride != 0) continue;
    Mutant m = MakeMutant(fixtures, i);
    if (save_dir)
      std::ofstream(std::string(save_dir) + "/mutant_" + std::to_string(i) + ".onnx",
                    std::ios::binary)
          << m.bytes;
    const std::string name =
        "mutant " + std::to_string(i) + " of " +
        fs::path(m.fixture->path).lexically_relative(FOUNDRY_SOURCE_DIR).string() + " (" + m.what +
        ")";
    // Symbolic dimensions are bound as the model asks for them (CompileBytesOptions::dims).
    CompileBytesOptions options{
        {}, fs::path(m.fixture->path).parent_path().string(), int64_t{64} << 20};
    std::snprintf(g_current, sizeof(g_current), "%s", name.c_str());
    watchdog.Start(name);
    const auto start = std::chrono::steady_clock::now();
    CompileBytesResult r{Status::Ok(), "done"};
    try {
      r = CompileBytes(m.bytes, options);
    } catch (const std::exception& e) {
      // In a tool, an escaping exception ends in std::terminate: a crash.
      r = {Error(std::string("uncaught exception: ") + e.what()), "crash"};
      ADD_FAILURE() << name << ": " << r.status.message();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    watchdog.Stop();
    ++ran;
    slowest = std::max(slowest, secs);
    by_stage[r.status.ok() ? "ok" : r.stage]++;
    if (verbose)
      std::printf("%s: %s %s\n", name.c_str(), r.stage.c_str(), r.status.message().c_str());
    EXPECT_LE(secs, kMaxSecondsPerMutant) << name;
    if (!r.status.ok()) {
      const std::string& msg = r.status.message();
      EXPECT_FALSE(msg.empty()) << name << ": empty error message at " << r.stage;
      EXPECT_EQ(msg.find('\n'), std::string::npos)
          << name << ": multi-line error at " << r.stage << ": " << msg;
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream summary;
  for (const auto& [stage, count] : by_stage) summary << " " << stage << "=" << count;
  std::printf("%d mutants of %zu fixtures in %.1f s (slowest %.2f s):%s\n", ran, fixtures.size(),
              total, slowest, summary.str().c_str());
  EXPECT_EQ(ran, only >= 0 ? 1 : (kMutants + kStride - 1) / kStride);
}

}  // namespace
}  // namespace foundry
