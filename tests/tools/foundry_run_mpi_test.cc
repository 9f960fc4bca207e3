// Data-parallel training end to end: mpt_tiny compiled with
// `foundry-compile --world-size 2 --sharding S` (S = NO_SHARD, SHARD_GRAD_OP, FULL_SHARD) and run
// by `mpirun -n 2 foundry-run PLAN --steps 20` (AdamW), against one process compiled with
// --grad-accum 2 over the same global batch (2 x 2 sequences a step):
//  - every step's loss (--report-json "losses") and the final weights (--save's model.safetensors)
//    bitwise equal; the measured maxima of the relative differences are printed;
//  - two runs at N = 2 bitwise equal (the whole save, byte for byte);
//  - the planned arena and total equal the measured ones (rank 0's --report-json);
//  - a save at N = 2 after 10 steps resumed at N = 2 and in one process, and a one-process save
//    resumed at N = 2, continue bitwise as the uninterrupted run (losses 11..20 and weights);
//  - mpt_tiny_dropout at K = 2 per rank against --grad-accum 4 with --clip-norm: within the
//    issue's bounds (the norm's sums split at shard boundaries);
//  - periodic checkpoints at N = 2 are whole and verify against their manifests, the save
//    folder is locked for the run, and --resume of the folder at N = 2 skips a damaged newest
//    checkpoint and continues bitwise from the one before;
//  - refusals: the plan without mpirun, a one-process plan under mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/folder_lock.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/safetensors.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kModel = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny/model.onnx";
#ifdef FOUNDRY_MPIEXEC
const std::string kMpiexec = FOUNDRY_MPIEXEC;
#else
const std::string kMpiexec;
#endif

class FoundryRunMpiTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    // OpenMPI refuses root without both (containers, CI).
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  ExecResult Compile(const std::vector<std::string>& extra, const std::string& prefix) {
    std::vector<std::string> args = {kModel,   "--dim", "batch=2",   "--dim",
                                     "seq=16", "-o",    Path(prefix)};
    args.insert(args.end(), extra.begin(), extra.end());
    return Exec(kCompile, args, Path(""));
  }
  ExecResult Run(const std::vector<std::string>& args) { return Exec(kRun, args, Path("")); }
  ExecResult Mpirun(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"-n", "2", "--oversubscribe", kRun};
    all.insert(all.end(), args.begin(), args.end());
    return Exec(kMpiexec, all, Path(""));
  }
  nlohmann::json Report(const std::string& name) {
    return nlohmann::json::parse(ReadWholeFile(Path(name)));
  }
  std::map<std::string, Tensor> Weights(const std::string& save) {
    auto f = ReadSafetensors(Path(save) + "/model.safetensors");
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? f->tensors : std::map<std::string, Tensor>{};
  }
  std::map<std::string, std::string> DirFiles(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(Path(dir)))
      if (e.is_regular_file())
        files[fs::relative(e.path(), Path(dir)).string()] = ReadWholeFile(e.path());
    return files;
  }
};

double MaxRelative(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-30));
  }
  return worst;
}

// Losses as f32 (the report's numbers are f32 values written in full).
std::vector<float> Losses(const nlohmann::json& report) {
  std::vector<float> out;
  for (const auto& l : report.at("losses")) out.push_back(l.get<float>());
  return out;
}

void ExpectSameRun(const std::vector<float>& got, const std::vector<float>& want,
                   const std::map<std::string, Tensor>& got_w,
                   const std::map<std::string, Tensor>& want_w, const std::string& what) {
  double worst_loss = 0, worst_weight = 0;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    worst_loss = std::max(worst_loss, std::abs(double(got[i]) - want[i]) / std::abs(want[i]));
    EXPECT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
        << what << ": loss " << i << ": " << got[i] << " vs " << want[i];
  }
  ASSERT_EQ(got_w.size(), want_w.size()) << what;
  for (const auto& [name, w] : want_w) {
    ASSERT_TRUE(got_w.count(name)) << what << ": " << name;
    const Tensor& g = got_w.at(name);
    ASSERT_EQ(g.shape(), w.shape()) << what << ": " << name;
    worst_weight = std::max(worst_weight, MaxRelative(g, w));
    EXPECT_EQ(std::memcmp(g.raw(), w.raw(), w.nbytes()), 0) << what << ": " << name;
  }
  std::cout << what << ": max relative difference: losses " << worst_loss << ", weights "
            << worst_weight << "\n";
}

class StrategyTest : public FoundryRunMpiTest, public testing::WithParamInterface<std::string> {};

TEST_P(StrategyTest, TwoRanksEqualOneProcessWithGradAccumBitwise) {
  FOUNDRY_SKIP_UNLESS(!kMpiexec.empty(), "foundry was built without MPI (no mpirun)");
  const std::string s = GetParam();
  ExecResult c = Compile({"--grad-accum", "2"}, "one");
  ASSERT_EQ(c.code, 0) << c.err;
  c = Compile({"--world-size", "2", "--sharding", s}, "two");
  ASSERT_EQ(c.code, 0) << c.err;
  ExecResult r = Run({Path("one"), "--steps", "20", "--report-json", Path("one.json"), "--save",
                      Path("one_save")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Mpirun({Path("two"), "--steps", "20", "--report-json", Path("two.json"), "--save",
              Path("two_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // Rank 0 alone prints: one header, one "done" line, nothing from rank 1.
  EXPECT_EQ(r.out.find("foundry-run "), r.out.rfind("foundry-run ")) << r.out;
  EXPECT_EQ(r.out.find("done: "), r.out.rfind("done: ")) << r.out;
  EXPECT_EQ(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  ranks      2 (mpi, " + s +
                       "): rank r's microbatch k is global "
                       "microbatch k*2+r, 4 sequences a step\n"),
            std::string::npos)
      << r.out;
  ExpectSameRun(Losses(Report("two.json")), Losses(Report("one.json")), Weights("two_save"),
                Weights("one_save"), s + " at N = 2 against --grad-accum 2");
  // Planned == measured on rank 0 (the ranks run the same plan on shards of the same sizes).
  const nlohmann::json mem = Report("two.json").at("memory");
  EXPECT_EQ(mem.at("arena_planned_bytes"), mem.at("arena_measured_bytes")) << mem.dump();
  EXPECT_EQ(mem.at("total_planned_bytes"), mem.at("total_measured_bytes")) << mem.dump();
  std::cout << s << ": rank 0 planned " << mem.at("total_planned_bytes") << " bytes, measured "
            << mem.at("total_measured_bytes") << "\n";
  // A second run at N = 2: the same bytes (losses and every saved file but the plan path).
  r = Mpirun({Path("two"), "--steps", "20", "--report-json", Path("again.json"), "--save",
              Path("again_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Report("again.json").at("losses"), Report("two.json").at("losses"));
  EXPECT_EQ(DirFiles("again_save"), DirFiles("two_save"));
}

INSTANTIATE_TEST_SUITE_P(Sharding, StrategyTest,
                         testing::Values("NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"));

// FSDP mixed precision under amp_bf16 (DEFAULT: bf16 parameters, f32 reductions; PURE: bf16
// reductions too) at N = 2: planned == measured, losses within bf16 rounding of one process with
// --grad-accum 2 and the same mixed precision (DEFAULT's bitwise equal), and two runs bitwise
// equal.
class MixedPrecisionTest : public FoundryRunMpiTest,
                           public testing::WithParamInterface<std::pair<std::string, std::string>> {
};

TEST_P(MixedPrecisionTest, PlannedIsMeasuredAndRunsRepeatBitwise) {
  FOUNDRY_SKIP_UNLESS(!kMpiexec.empty(), "foundry was built without MPI (no mpirun)");
  const auto& [mp, sharding] = GetParam();
  const std::vector<std::string> amp = {"--precision", "amp_bf16", "--fsdp-mixed-precision", mp};
  std::vector<std::string> one = amp, two = amp;
  one.insert(one.end(), {"--grad-accum", "2"});
  two.insert(two.end(), {"--world-size", "2", "--sharding", sharding});
  ExecResult c = Compile(one, "one");
  ASSERT_EQ(c.code, 0) << c.err;
  c = Compile(two, "two");
  ASSERT_EQ(c.code, 0) << c.err;
  // The gathers move bf16 shards.
  if (sharding != "NO_SHARD")
    EXPECT_NE(ReadWholeFile(Path("two.train.onnx")).find("/shard_bf16"), std::string::npos);
  ExecResult r = Run({Path("one"), "--steps", "8", "--report-json", Path("one.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Mpirun(
      {Path("two"), "--steps", "8", "--report-json", Path("two.json"), "--save", Path("two_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json mem = Report("two.json").at("memory");
  EXPECT_EQ(mem.at("arena_planned_bytes"), mem.at("arena_measured_bytes")) << mem.dump();
  EXPECT_EQ(mem.at("total_planned_bytes"), mem.at("total_measured_bytes")) << mem.dump();
  const std::vector<float> got = Losses(Report("two.json")), want = Losses(Report("one.json"));
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::abs(want[i]));
  EXPECT_LT(worst, 1e-2) << mp;  // a few bf16 roundings apart
  // DEFAULT reduces the f32 widenings in rank order: AccumulateGradient's order in one process.
  if (mp == std::string("DEFAULT")) EXPECT_EQ(worst, 0) << mp;
  std::cout << mp << " " << sharding << ": losses at N = 2 vs one process, max relative " << worst
            << "; rank 0 planned " << mem.at("total_planned_bytes") << " bytes\n";
  r = Mpirun({Path("two"), "--steps", "8", "--report-json", Path("again.json"), "--save",
              Path("again_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Report("again.json").at("losses"), Report("two.json").at("losses"));
  EXPECT_EQ(DirFiles("again_save"), DirFiles("two_save"));
}

INSTANTIATE_TEST_SUITE_P(Fsdp, MixedPrecisionTest,
                         testing::Values(std::make_pair("DEFAULT", "FULL_SHARD"),
                                         std::make_pair("PURE", "FULL_SHARD"),
                                         std::make_pair("PURE", "NO_SHARD")));

TEST_F(FoundryRunMpiTest, SavesResumeAcrossWorldSizesBitwise) {
  FOUNDRY_SKIP_UNLESS(!kMpiexec.empty(), "foundry was built without MPI (no mpirun)");
  ASSERT_EQ(Compile({"--grad-accum", "2"}, "one").code, 0);
  ExecResult c = Compile({"--world-size", "2", "--sharding", "FULL_SHARD"}, "two");
  ASSERT_EQ(c.code, 0) << c.err;
  ExecResult r = Run({Path("one"), "--steps", "20", "--report-json", Path("full.json"), "--save",
                      Path("full_save")});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<float> full = Losses(Report("full.json"));
  std::vector<float> last10(full.begin() + 10, full.end());
  const auto want = Weights("full_save");
  // Ten steps at N = 2, saved; ten steps in one process, saved.
  r = Mpirun({Path("two"), "--steps", "10", "--save", Path("n2_10")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_FALSE(fs::exists(Path("n2_10/model.onnx")));  // the sharded graph holds no full weights
  r = Run({Path("one"), "--steps", "10", "--save", Path("n1_10")});
  ASSERT_EQ(r.code, 0) << r.err;
  // N = 2 -> N = 2.
  r = Mpirun({Path("two"), "--resume", Path("n2_10"), "--steps", "10", "--report-json",
              Path("a.json"), "--save", Path("a_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  ExpectSameRun(Losses(Report("a.json")), last10, Weights("a_save"), want, "N=2 save, N=2 resume");
  // N = 2 -> one process (its plan accumulates the same 2 microbatches a step).
  r = Run({Path("one"), "--resume", Path("n2_10"), "--grad-accum", "2", "--steps", "10",
           "--report-json", Path("b.json"), "--save", Path("b_save")});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectSameRun(Losses(Report("b.json")), last10, Weights("b_save"), want, "N=2 save, N=1 resume");
  // One process -> N = 2.
  r = Mpirun({Path("two"), "--resume", Path("n1_10"), "--grad-accum", "1", "--steps", "10",
              "--report-json", Path("c.json"), "--save", Path("c_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  ExpectSameRun(Losses(Report("c.json")), last10, Weights("c_save"), want, "N=1 save, N=2 resume");
}

// Sharded periodic checkpoints: rank 0 writes each one whole, gathered, with its manifest; a
// second writer is refused while the folder is held; a flipped byte in the newest checkpoint's
// weights makes --resume of the folder (on both ranks) continue from the one before, saying so,
// and the continuation ends on the straight run's weights, byte for byte.
TEST_F(FoundryRunMpiTest, ShardedCheckpointsVerifyAndResumeFromTheNewestThatVerifies) {
  FOUNDRY_SKIP_UNLESS(!kMpiexec.empty(), "foundry was built without MPI (no mpirun)");
  ExecResult c = Compile({"--world-size", "2", "--sharding", "FULL_SHARD"}, "two");
  ASSERT_EQ(c.code, 0) << c.err;
  ExecResult r = Mpirun({Path("two"), "--steps", "4", "--save-interval", "2", "--save-folder",
                         Path("f"), "--save", Path("straight")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(Path("f"))) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step2", "step4"}));  // no lock, no temp folder
  for (const char* save : {"f/step2", "f/step4", "straight"}) {
    Status st = VerifyCheckpoint(Path(save));
    EXPECT_TRUE(st.ok()) << save << ": " << st.message();
  }
  {
    auto held = FolderLock::Take(Path("f"), "test");
    ASSERT_TRUE(held.ok()) << held.status().message();
    r = Mpirun({Path("two"), "--resume", Path("f"), "--steps", "1", "--save-interval", "1",
                "--save-folder", Path("f")});
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("foundry-run: error: --save-folder '" + Path("f") +
                         "': another process (pid " + std::to_string(getpid()) +
                         ") is writing into it; wait for it to end or choose another folder\n"),
              std::string::npos)
        << r.err;
  }
  const std::string weights = Path("f/step4/model.safetensors");
  std::string bytes = ReadWholeFile(weights);
  bytes[bytes.size() / 2] ^= 0x10;
  Write("f/step4/model.safetensors", bytes);
  r = Mpirun({Path("two"), "--resume", Path("f"), "--steps", "2", "--save", Path("again")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("  resumed    " + Path("f/step2") +
                       " at step 2 (the newest that verifies in " + Path("f") + ")\n  skipped    " +
                       Path("f/step4") + ": '" + weights + "' is damaged: its CRC-32C is "),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(DirFiles("again") == DirFiles("straight"));
}

// Dropout (rank r's microbatch k draws global microbatch k*N+r's masks), K = 2 per rank against
// --grad-accum 4, with --clip-norm: the norm's sums of squares are split at the shard boundaries
// (not bitwise in general), so the bound is the (1e-6 on losses and norms, 1e-5 on
// weights); the measured maxima are printed.
TEST_F(FoundryRunMpiTest, DropoutAccumulationAndClipping) {
  FOUNDRY_SKIP_UNLESS(!kMpiexec.empty(), "foundry was built without MPI (no mpirun)");
  const std::string dropout = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny_dropout/model.onnx";
  auto compile = [&](const std::vector<std::string>& extra, const std::string& prefix) {
    std::vector<std::string> args = {dropout,  "--dim", "batch=2",   "--dim",
                                     "seq=16", "-o",    Path(prefix)};
    args.insert(args.end(), extra.begin(), extra.end());
    return Exec(kCompile, args, Path(""));
  };
  ASSERT_EQ(compile({"--grad-accum", "4"}, "one").code, 0);
  ExecResult c =
      compile({"--grad-accum", "2", "--world-size", "2", "--sharding", "FULL_SHARD"}, "two");
  ASSERT_EQ(c.code, 0) << c.err;
  ExecResult r = Run({Path("one"), "--steps", "10", "--clip-norm", "0.1", "--report-json",
                      Path("one.json"), "--save", Path("one_save")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Mpirun({Path("two"), "--steps", "10", "--clip-norm", "0.1", "--report-json", Path("two.json"),
              "--save", Path("two_save")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json a = Report("one.json"), b = Report("two.json");
  double loss = 0, norm = 0, weight = 0;
  const std::vector<float> la = Losses(a), lb = Losses(b);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    loss = std::max(loss, std::abs(double(lb[i]) - la[i]) / std::abs(la[i]));
    const double na = a.at("step_grad_norm")[i].get<double>();
    const double nb = b.at("step_grad_norm")[i].get<double>();
    norm = std::max(norm, std::abs(nb - na) / na);
  }
  const auto wa = Weights("one_save"), wb = Weights("two_save");
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) weight = std::max(weight, MaxRelative(wb.at(name), t));
  std::cout << "mpt_tiny_dropout, N = 2, K = 2, --clip-norm 0.1 against --grad-accum 4: max "
               "relative difference: losses "
            << loss << ", grad norms " << norm << ", weights " << weight << "\n";
  EXPECT_LE(loss, 1e-6);
  EXPECT_LE(norm, 1e-6);
  EXPECT_LE(weight, 1e-5);
}

TEST_F(FoundryRunMpiTest, RefusesAPlanOnTheWrongWorld) {
  FOUNDRY_SKIP_UNLESS(!kMpiexec.empty(), "foundry was built without MPI (no mpirun)");
  ASSERT_EQ(Compile({}, "one").code, 0);
  ExecResult c = Compile({"--world-size", "2", "--sharding", "FULL_SHARD"}, "two");
  ASSERT_EQ(c.code, 0) << c.err;
  ExecResult r = Run({Path("two"), "--steps", "1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-run: error: this plan is for 2 ranks; run it with mpirun -n 2 foundry-run "
            "...\n");
  r = Mpirun({Path("one"), "--steps", "1"});
  EXPECT_NE(r.code, 0);
  // Both ranks refuse it; the first to fail ends the other (MPI_Abort), so either rank 0's line
  // or rank 1's, prefixed "rank 1: ", is there (or both).
  const std::string why = "'" + Path("one.plan") +
                          "' is a plan for one process and this run has 2 ranks; compile it with "
                          "foundry-compile --world-size 2 --sharding FULL_SHARD (or run it "
                          "without mpirun)\n";
  EXPECT_TRUE(r.err.find("foundry-run: error: " + why) != std::string::npos ||
              r.err.find("foundry-run: error: rank 1: " + why) != std::string::npos)
      << r.err;
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
