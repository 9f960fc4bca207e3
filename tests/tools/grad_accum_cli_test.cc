// --grad-accum end to end: foundry-compile records K in the plan, foundry-run runs K
// microbatches per step (its header says so), refuses a K the plan was not compiled for, and a
// save of an accumulated run resumes bit for bit (every saved file byte-identical to the run that
// never stopped).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kModel = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny_dropout/model.onnx";

class GradAccumCliTest : public ScratchDirTest {
 protected:
  ExecResult Compile(const std::vector<std::string>& extra, const std::string& prefix) {
    std::vector<std::string> args = {kModel,   "--dim", "batch=2",   "--dim",
                                     "seq=16", "-o",    Path(prefix)};
    args.insert(args.end(), extra.begin(), extra.end());
    return Exec(kCompile, args, Path(""));
  }
  ExecResult Run(const std::vector<std::string>& args) { return Exec(kRun, args, Path("")); }
  std::map<std::string, std::string> DirFiles(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file())
        files[fs::relative(e.path(), dir).string()] = ReadWholeFile(e.path());
    return files;
  }
};

TEST_F(GradAccumCliTest, CompileChecksK) {
  ExecResult r = Compile({"--grad-accum", "0"}, "m");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find("foundry-compile: error: --grad-accum 0: "), 0u) << r.err;
  r = Exec(kCompile,
           {kModel, "--dim", "batch=2", "--dim", "seq=16", "--forward-only", "--grad-accum", "2",
            "--dry-run"},
           Path(""));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --grad-accum accumulates a training step's gradients; drop "
            "--forward-only\n");
}

TEST_F(GradAccumCliTest, RunsKMicrobatchesAndRefusesAnotherK) {
  ASSERT_EQ(Compile({"--grad-accum", "3"}, "k3").code, 0);
  ASSERT_EQ(Compile({}, "k1").code, 0);
  const auto plan = nlohmann::json::parse(ReadWholeFile(Path("k3.plan")));
  EXPECT_EQ(plan.at("grad_accumulation"), 3);
  ExecResult r = Run({Path("k3"), "--steps", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  batch      2 x 16 per microbatch, 3 microbatches per step (gradient "
                       "accumulation: 96 tokens/step)\n"),
            std::string::npos)
      << r.out;
  // The plan's K is the default; the same K given is the same run.
  ExecResult same = Run({Path("k3"), "--steps", "2", "--grad-accum", "3"});
  ASSERT_EQ(same.code, 0) << same.err;
  auto losses = [](const std::string& out) {
    const size_t a = out.find("step 1/2  loss "), b = out.find("step 2/2  loss ");
    if (a == std::string::npos || b == std::string::npos) return std::string("(none)");
    return out.substr(a, 22) + out.substr(b, 22);
  };
  EXPECT_EQ(losses(same.out), losses(r.out)) << same.out << r.out;
  r = Run({Path("k3"), "--grad-accum", "2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-run: error: gradient accumulation over 2 microbatches: '" +
                       Path("k3.plan") +
                       "' was compiled with --grad-accum 3; run it with 3 or recompile it with "
                       "--grad-accum 2\n");
  r = Run({Path("k1"), "--grad-accum", "4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-run: error: gradient accumulation over 4 microbatches: '" +
                       Path("k1.plan") +
                       "' was compiled without it; compile it with foundry-compile --grad-accum "
                       "4\n");
  r = Run({Path("k3"), "--grad-accum", "0"});
  EXPECT_EQ(r.code, 2);
}

// The checkpointing search plans the accumulating graph (the accumulators and their partials
// included), and what it plans is what the run measures.
TEST_F(GradAccumCliTest, MemoryBudgetPlansTheAccumulatingStep) {
  ExecResult c = Compile({"--grad-accum", "4", "--memory-budget", "2.25MB"}, "b4");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("  grad_accumulate: 27 gradients accumulated over 4 microbatches"),
            std::string::npos)
      << c.out;
  ExecResult r = Run({Path("b4"), "--steps", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t arena = r.out.find("\n  arena ");
  ASSERT_NE(arena, std::string::npos) << r.out;
  EXPECT_NE(r.out.substr(arena, r.out.find('\n', arena + 1) - arena).find("(equal)"),
            std::string::npos)
      << r.out;
  const size_t total = r.out.find("\n  total ");
  ASSERT_NE(total, std::string::npos) << r.out;
  std::istringstream line(r.out.substr(total + 1));
  std::string word;
  int64_t planned = 0, measured = 0;
  line >> word >> planned >> measured;
  EXPECT_GT(planned, 0);
  EXPECT_EQ(planned, measured) << r.out;
}

// 2 accumulated steps + save + resume for 1 is the 3-step run: every saved file byte-identical
// (dropout on: each microbatch's masks come from the step and the microbatch index).
TEST_F(GradAccumCliTest, ResumeAcrossAccumulatedStepsIsBitwise) {
  ASSERT_EQ(Compile({"--grad-accum", "2"}, "k2").code, 0);
  ExecResult straight =
      Run({Path("k2"), "--steps", "3", "--lr", "0.01", "--seed", "5", "--save", Path("straight")});
  ASSERT_EQ(straight.code, 0) << straight.err;
  ExecResult first =
      Run({Path("k2"), "--steps", "2", "--lr", "0.01", "--seed", "5", "--save", Path("run")});
  ASSERT_EQ(first.code, 0) << first.err;
  const auto state = nlohmann::json::parse(ReadWholeFile(Path("run/state.json")));
  EXPECT_EQ(state.at("accumulation_steps"), 2);
  EXPECT_EQ(state.at("data").at("position"), 8);  // 2 steps x 2 microbatches x 2 windows
  ExecResult second = Run({"--resume", Path("run"), "--steps", "1", "--save", Path("resumed")});
  ASSERT_EQ(second.code, 0) << second.err;
  auto a = DirFiles(Path("straight")), b = DirFiles(Path("resumed"));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 3u);
  for (const auto& [name, bytes] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(bytes == b[name]) << name << " differs between the straight and resumed runs";
  }
}

}  // namespace
}  // namespace foundry
