// End-to-end: `foundry-compile --memory-budget SIZE` below the smallest plan
// states that plan's total exactly (one byte less is the same error with the same figure, the
// figure itself compiles to a plan of that total), names its largest memory class as the
// compiled plan's report counts it, and says what lowers that class; the bad-input contract
// holds (exit 1, one error line, nothing written, the model untouched).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";

struct Case {
  std::string fixture;
  std::vector<std::string> dims;
  std::string largest;   // the class the error names: "the optimizer state", "the arena"
  std::string json_key;  // its figure in --report-json's "memory"
  std::string lower;     // what the error says lowers it
};

class FoundryCompileBudgetMinimumTest : public ScratchDirTest {
 protected:
  std::string Model(const Case& c) const {
    return std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/" + c.fixture + "/model.onnx";
  }
  ExecResult Compile(const Case& c, std::vector<std::string> args) {
    args.insert(args.begin(), Model(c));
    args.insert(args.end(), c.dims.begin(), c.dims.end());
    return Exec(kCompile, args, dir_);
  }
  // Size, mtime, inode and content of the model and of the scratch folder's files.
  std::map<std::string, std::string> Snapshot(const Case& c) const {
    std::map<std::string, std::string> out;
    std::vector<std::string> paths = {Model(c)};
    for (const auto& f : Files()) paths.push_back(Path(f));
    for (const auto& p : paths) {
      struct stat st {};
      ::stat(p.c_str(), &st);
      out[p] = std::to_string(st.st_ino) + " " + std::to_string(st.st_size) + " " +
               std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
               std::to_string(std::hash<std::string>{}(ReadWholeFile(p)));
    }
    return out;
  }
  // The error for `budget`: exit 1, one line, nothing written; returns the stated minimum.
  int64_t StatedMinimum(const Case& c, int64_t budget) {
    const auto before = Snapshot(c);
    const std::string b = std::to_string(budget);
    ExecResult r = Compile(c, {"--memory-budget", b, "--dry-run"});
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("foundry-compile: error: --memory-budget " + b + ": budget ", 0), 0u)
        << r.err;
    EXPECT_TRUE(Snapshot(c) == before) << "files changed for budget " << b;
    std::smatch m;
    const std::regex re(
        R"(is below the smallest plan foundry finds, [^(]+ \((\d+) bytes, [^;]+\); its largest )"
        R"(part is ([a-z ]+), )");
    if (!std::regex_search(r.err, m, re)) {
      ADD_FAILURE() << r.err;
      return -1;
    }
    EXPECT_EQ(m[2].str(), c.largest) << r.err;
    // Then what more ranks would do (--world-size): fit it, or not.
    EXPECT_TRUE(r.err.find("; to lower it: " + c.lower +
                           "; it fits on 2 ranks: --world-size 2 "
                           "--sharding FULL_SHARD plans ") != std::string::npos ||
                r.err.find("; to lower it: " + c.lower + "; more ranks do not fit it: at ") !=
                    std::string::npos)
        << r.err;
    return std::stoll(m[1].str());
  }
};

TEST_F(FoundryCompileBudgetMinimumTest, TheStatedMinimumIsExactAndItsLargestClassIsRight) {
  const std::vector<Case> cases = {
      // Parameters, gradients and AdamW's two slots dominate at the fixture's shapes.
      {"mpt_tiny_4layer",
       {"--dim", "batch=2", "--dim", "seq=16"},
       "the optimizer state",
       "optimizer_state_bytes",
       "fewer trained parameters (--freeze GLOB); foundry-run --optimizer sgd allocates none of "
       "it, but the plan counts AdamW's"},
      // A longer sequence: the arena dominates.
      {"mpt_tiny",
       {"--dim", "batch=8", "--dim", "seq=128"},
       "the arena",
       "arena_bytes",
       "a smaller batch or sequence (--dim batch=N, --dim seq=N)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fixture);
    const int64_t minimum = StatedMinimum(c, 1);
    ASSERT_GT(minimum, 1);
    // One byte below: the same figure (the minimum does not depend on the budget).
    EXPECT_EQ(StatedMinimum(c, minimum - 1), minimum);
    // The figure itself compiles, to a plan of exactly that total, whose largest class is the
    // one the error named.
    ExecResult ok = Compile(c, {"--memory-budget", std::to_string(minimum), "--dry-run",
                                "--report-json", Path("r.json")});
    ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
    const auto memory = nlohmann::json::parse(ReadWholeFile(Path("r.json"))).at("memory");
    EXPECT_EQ(memory.at("total_bytes").get<int64_t>(), minimum);
    std::string largest_key;
    int64_t largest = -1;
    for (const char* key :
         {"arena_bytes", "parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
          "input_bytes", "constant_bytes", "output_bytes"})
      if (memory.at(key).get<int64_t>() > largest) {
        largest = memory.at(key).get<int64_t>();
        largest_key = key;
      }
    EXPECT_EQ(largest_key, c.json_key);
    fs::remove(Path("r.json"));
  }
}

}  // namespace
}  // namespace foundry
