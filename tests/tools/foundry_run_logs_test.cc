// End-to-end: foundry-run's logs and periodic checkpoints (driver/run_log.h, driver/train.h) on
// the mpt_tiny fixture: the progress line at --log-interval, --metrics objects against the
// printed lines, --loss-curve, --save-interval/--save-folder/--save-keep, --resume from a
// checkpoint continuing the straight run bit for bit, --resume of a save folder picking the
// latest, a failed run keeping its checkpoints, and every new option's bad values and conflicts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/exec.h"
#include "tests/support/xml_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kFixture = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny";

class FoundryRunLogsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::path(testing::TempDir()) / ("foundry_run_logs_test_" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ExecResult r =
        Exec(kCompile,
             {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16", "-o", dir_ + "/mpt"},
             dir_);
    compiled_ = r.code == 0;
    if (!compiled_) std::cerr << "foundry-compile failed:\n" << r.out << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(compiled_) << "the mpt_tiny plan did not compile"; }

  static ExecResult Run(const std::vector<std::string>& args) { return Exec(kRun, args, dir_); }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }

  // Every file under the test folder (captured output aside): path -> size and content.
  static std::map<std::string, std::string> Snapshot() {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) == 0 || name.rfind("stderr.", 0) == 0) continue;
      files[e.path().string()] = e.is_regular_file() ? ReadWholeFile(e.path().string()) : "(dir)";
    }
    return files;
  }
  // Exit `code`, exactly the one prefixed line on stderr, nothing written or changed.
  static void ExpectCleanError(const std::vector<std::string>& args, const std::string& message,
                               int code) {
    const auto before = Snapshot();
    ExecResult r = Run(args);
    EXPECT_EQ(r.code, code) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-run: error: " + message + "\n");
    EXPECT_TRUE(Snapshot() == before)
        << "files changed by: foundry-run " << testing::PrintToString(args);
  }

  static std::string dir_;
  static bool compiled_;
};

std::string FoundryRunLogsTest::dir_;
bool FoundryRunLogsTest::compiled_ = false;

std::vector<nlohmann::json> JsonLines(const std::string& path) {
  std::vector<nlohmann::json> objects;
  std::istringstream in(ReadWholeFile(path));
  for (std::string line; std::getline(in, line);) objects.push_back(nlohmann::json::parse(line));
  return objects;
}

std::map<std::string, std::string> DirFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = ReadWholeFile(e.path().string());
  return files;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(FoundryRunLogsTest, BadValuesAreUsageErrors) {
  const std::string mpt = Path("mpt");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--log-interval", "0"},
       "--log-interval 0: expected a number of steps from 1 to 9223372036854775807"},
      {{"--log-interval", "x"}, "--log-interval x: expected a number of steps"},
      {{"--save-interval", "0", "--save-folder", Path("ck")},
       "--save-interval 0: expected a number of steps from 1 to 9223372036854775807"},
      {{"--save-interval", "2", "--save-folder", Path("ck"), "--save-keep", "-1"},
       "--save-keep -1: expected a count from 0 to 9223372036854775807"},
      {{"--save-interval", "2"},
       "--save-interval needs --save-folder DIR (where the checkpoints go)"},
      {{"--save-folder", Path("ck")}, "--save-folder needs --save-interval N (how often to save)"},
      {{"--save-keep", "2"},
       "--save-keep is for --save-folder's checkpoints; give --save-folder DIR and "
       "--save-interval N"},
      {{"--loss-curve-log"}, "--loss-curve-log needs --loss-curve FILE.svg"},
      {{"--metrics", ""}, "--metrics is empty; give FILE.jsonl (run foundry-run --help)"},
      {{"--save-folder", ""}, "--save-folder is empty; give DIR (run foundry-run --help)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> a = {mpt};
    a.insert(a.end(), args.begin(), args.end());
    ExpectCleanError(a, message, 2);
  }
  ExpectCleanError({"--forward", kFixture + "/model.onnx", "--metrics", Path("m.jsonl")},
                   "--metrics is for training runs, not --forward", 2);
}

// Outputs checked before the first step like the others: not an input, not inside the --resume
// save, not another output; a step<N> this run would write must be an earlier save.
TEST_F(FoundryRunLogsTest, OutputConflictsStopTheRunBeforeAnyStep) {
  const std::string mpt = Path("mpt");
  ExpectCleanError({mpt, "--metrics", mpt + ".plan"},
                   "--metrics '" + mpt + ".plan': writing it would change '" + mpt +
                       ".plan', an input of this run; choose another file",
                   1);
  ExpectCleanError({mpt, "--loss-curve", mpt + ".train.onnx"},
                   "--loss-curve '" + mpt + ".train.onnx': writing it would change '" + mpt +
                       ".train.onnx', an input of this run; choose another file",
                   1);
  ExpectCleanError({mpt, "--metrics", Path("r.json"), "--report-json", Path("r.json")},
                   "--metrics '" + Path("r.json") + "' is also the output of --report-json '" +
                       Path("r.json") + "'; give each output its own name",
                   1);
  ExpectCleanError({mpt, "--save-interval", "1", "--save-folder", Path("s"), "--save", Path("s")},
                   "--save-folder '" + Path("s") + "' is also the output of --save '" + Path("s") +
                       "'; give each output its own name",
                   1);
  ASSERT_EQ(Run({mpt, "--save", Path("first")}).code, 0);
  ExpectCleanError(
      {"--resume", Path("first"), "--save-interval", "1", "--save-folder", Path("first/ck")},
      "--save-folder '" + Path("first/ck") + "': writing it would change '" + Path("first") +
          "', the --resume save, an input of this run; choose "
          "another folder",
      1);
  fs::create_directories(Path("ck/step2"));
  { std::ofstream(Path("ck/step2/notes.txt")) << "mine\n"; }
  ExpectCleanError({mpt, "--steps", "3", "--save-interval", "2", "--save-folder", Path("ck")},
                   "--save-folder '" + Path("ck") + "': '" + Path("ck/step2") +
                       "' is not a foundry-run save (no state.json), and this run writes its "
                       "step-2 checkpoint there; move it away or choose another folder",
                   1);
  // A run that writes only step3 leaves step2 alone.
  ExecResult r = Run({mpt, "--steps", "3", "--save-interval", "3", "--save-folder", Path("ck")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Entries(Path("ck")), (std::vector<std::string>{"step2", "step3"}));
}

// 5 steps at --log-interval 2: lines and metrics objects for steps 1, 2, 4 and 5 (first,
// multiples, last); each printed loss is its object's loss to 4 decimals; the report keeps its
// keys and adds the whole history.
TEST_F(FoundryRunLogsTest, ProgressLinesMetricsAndReportAgree) {
  ExecResult r =
      Run({Path("mpt"), "--steps", "5", "--log-interval", "2", "--metrics", Path("m.jsonl"),
           "--report-json", Path("r.json"), "--loss-curve", Path("c.svg"), "--loss-curve-log"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto objects = JsonLines(Path("m.jsonl"));
  ASSERT_EQ(objects.size(), 4u);
  const auto report = nlohmann::json::parse(ReadWholeFile(Path("r.json")));
  const std::vector<float> losses = report.at("losses").get<std::vector<float>>();
  ASSERT_EQ(losses.size(), 5u);
  EXPECT_EQ(report.at("first_step"), 0);
  EXPECT_EQ(report.at("loss_first").get<float>(), losses.front());
  EXPECT_EQ(report.at("loss_last").get<float>(), losses.back());
  for (const char* key : {"version", "steps", "ms_per_step", "tokens_per_s", "step_ms", "memory"})
    EXPECT_TRUE(report.contains(key)) << key;
  const int64_t steps[] = {1, 2, 4, 5};
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& o = objects[i];
    EXPECT_EQ(o.at("step"), steps[i]);
    EXPECT_EQ(o.at("loss").get<float>(), losses[steps[i] - 1]);
    EXPECT_EQ(o.at("lr").get<double>(), 0.001);
    // --metrics measures the gradients' norm every step: the report's, as a number.
    EXPECT_EQ(o.at("grad_norm").get<float>(),
              report.at("step_grad_norm")[steps[i] - 1].get<float>());
    EXPECT_GT(o.at("tokens_per_s").get<double>(), 0);
    char loss[32];
    std::snprintf(loss, sizeof loss, "%.4f", o.at("loss").get<float>());
    EXPECT_NE(
        r.out.find("\nstep " + std::to_string(steps[i]) + "/5  loss " + loss + "  lr 1.0e-03  "),
        std::string::npos)
        << r.out;
  }
  EXPECT_EQ(r.out.find("\nstep 3/5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nmetrics " + Path("m.jsonl") + "\n"), std::string::npos);
  EXPECT_NE(r.out.find("\nloss curve " + Path("c.svg") + "\n"), std::string::npos);
  const std::string svg = ReadWholeFile(Path("c.svg"));
  EXPECT_TRUE(ParseXml(svg).ok()) << svg;
  EXPECT_NE(svg.find("loss (log scale)"), std::string::npos);
}

// 6 steps saving every 2, keeping 2: step4 and step6 are left. Resumed from step4 for 2 steps,
// the run ends in step6's state byte for byte, with the same losses; its --metrics continues the
// first run's file (steps 5 and 6 logged again, the same values). --resume of the folder takes
// step6, the latest.
TEST_F(FoundryRunLogsTest, PeriodicCheckpointsResumeBitwise) {
  const std::vector<std::string> common = {"--lr", "0.01", "--seed", "5"};
  std::vector<std::string> a = {Path("mpt"),
                                "--steps",
                                "6",
                                "--save-interval",
                                "2",
                                "--save-folder",
                                Path("ck6"),
                                "--save-keep",
                                "2",
                                "--metrics",
                                Path("a.jsonl"),
                                "--report-json",
                                Path("a.json")};
  a.insert(a.end(), common.begin(), common.end());
  ExecResult straight = Run(a);
  ASSERT_EQ(straight.code, 0) << straight.err;
  EXPECT_EQ(Entries(Path("ck6")), (std::vector<std::string>{"step4", "step6"}));
  EXPECT_NE(straight.out.find("\ncheckpoint " + Path("ck6/step2") + " (step 2)\n"),
            std::string::npos);
  EXPECT_NE(straight.out.find("\ncheckpoint " + Path("ck6/step6") + " (step 6), removed " +
                              Path("ck6/step2") + "\n"),
            std::string::npos)
      << straight.out;

  fs::copy_file(Path("a.jsonl"), Path("b.jsonl"));
  ExecResult resumed =
      Run({"--resume", Path("ck6/step4"), "--steps", "2", "--save", Path("resumed"),
           "--report-json", Path("b.json"), "--metrics", Path("b.jsonl")});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const auto want = DirFiles(Path("ck6/step6")), got = DirFiles(Path("resumed"));
  ASSERT_EQ(want.size(), got.size());
  ASSERT_GT(want.size(), 3u);
  for (const auto& [name, bytes] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(bytes == got.at(name)) << name << " differs from the straight run's step6";
  }
  // A checkpoint in the step loop holds nothing beyond the plan (it exports views of the
  // parameters, not copies).
  const auto memory = nlohmann::json::parse(ReadWholeFile(Path("a.json"))).at("memory");
  EXPECT_EQ(memory.at("outside_plan_during_steps_bytes"), 0);
  EXPECT_EQ(memory.at("total_measured_bytes"), memory.at("total_planned_bytes"));
  const auto la = nlohmann::json::parse(ReadWholeFile(Path("a.json"))).at("losses");
  const auto lb = nlohmann::json::parse(ReadWholeFile(Path("b.json"))).at("losses");
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 2u);
  EXPECT_EQ(lb[0].dump(), la[4].dump());
  EXPECT_EQ(lb[1].dump(), la[5].dump());
  const auto ma = JsonLines(Path("a.jsonl")), mb = JsonLines(Path("b.jsonl"));
  ASSERT_EQ(ma.size(), 6u);
  ASSERT_EQ(mb.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    for (const char* key : {"step", "loss", "lr"})
      EXPECT_EQ(mb[i].at(key).dump(), ma[i].at(key).dump()) << i << " " << key;

  ExecResult latest = Run({"--resume", Path("ck6"), "--steps", "1"});
  ASSERT_EQ(latest.code, 0) << latest.err;
  EXPECT_NE(latest.out.find("\n  resumed    " + Path("ck6/step6") +
                            " at step 6 (the latest checkpoint in " + Path("ck6") + ")\n"),
            std::string::npos)
      << latest.out;
  EXPECT_NE(latest.out.find("\nstep 7/7  loss "), std::string::npos);
}

// On a terminal (a pseudo-terminal from util-linux's script(1)) the line is rewritten in place;
// the terminal turns each newline into "\r\n".
TEST_F(FoundryRunLogsTest, ATerminalGetsOneRewrittenLine) {
  if (!fs::exists("/usr/bin/script")) GTEST_SKIP() << "no /usr/bin/script to give a terminal";
  ExecResult r =
      Exec("/usr/bin/script", {"-qec", kRun + " " + Path("mpt") + " --steps 3", "/dev/null"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const size_t first = r.out.find("\r\n\rstep 1/3  loss ");
  const size_t second = r.out.find("\x1b[K\rstep 2/3  loss ");
  const size_t third = r.out.find("\x1b[K\rstep 3/3  loss ");
  const size_t done = r.out.find("\x1b[K\r\ndone: 3 steps");
  EXPECT_NE(first, std::string::npos) << r.out;
  EXPECT_TRUE(first < second && second < third && third < done && done != std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << r.out;  // no step on a line of its own
}

// A run that fails at step 2 keeps the checkpoint of step 1 and the metrics logged so far; the
// --save and --loss-curve outputs, all-or-nothing, are not written.
TEST_F(FoundryRunLogsTest, AFailedRunKeepsItsCheckpoints) {
  ExecResult r =
      Run({Path("mpt"), "--steps", "4", "--optimizer", "sgd", "--lr", "1e30", "--save-interval",
           "1", "--save-folder", Path("kept"), "--save", Path("final"), "--metrics",
           Path("f.jsonl"), "--report-json", Path("f.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("foundry-run: error: step 2: non-finite value", 0), 0u) << r.err;
  EXPECT_EQ(Entries(Path("kept")), (std::vector<std::string>{"step1"}));
  EXPECT_TRUE(fs::exists(Path("kept/step1/state.json")));
  EXPECT_FALSE(fs::exists(Path("final")));
  EXPECT_FALSE(fs::exists(Path("f.json")));
  const auto objects = JsonLines(Path("f.jsonl"));
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(objects[0].at("step"), 1);
}

}  // namespace
}  // namespace foundry
