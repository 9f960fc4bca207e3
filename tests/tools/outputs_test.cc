// the outputs of both CLIs: device nodes and pipes are written to, never renamed over;
// no output is another output or an input; a failure anywhere leaves no output behind; two
// compiles to one prefix never leave a mixed pair; empty values and control characters in values
// are one-line usage errors. Each case builds its input and checks the bad-input contract: the
// exit code, exactly one `tool: error: ...` line, every file (inputs included) unchanged by
// content and inode, nothing new.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/exec.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kTiny = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny/model.onnx";

class OutputsTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::path(testing::TempDir()) /
            ("outputs_test_" + std::to_string(getpid()) + "_" + info->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  ExecResult Compile(std::vector<std::string> args, bool tiny = true) {
    if (tiny) args.insert(args.begin(), {kTiny, "--dim", "batch=2", "--dim", "seq=16"});
    return Exec(kCompile, args, dir_);
  }
  ExecResult Run(const std::vector<std::string>& args) { return Exec(kRun, args, dir_); }
  // A plan of mpt_tiny at `prefix` (in the test folder).
  void CompilePlan(const std::string& prefix = "p") {
    ExecResult r = Compile({"-o", Path(prefix)});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }

  // Type, inode, size, mtime and content of every entry under the test folder (captured output
  // aside) and of `extra`.
  static std::string State(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return "(missing)";
    std::string s = std::to_string(st.st_mode) + " ino " + std::to_string(st.st_ino) + " rdev " +
                    std::to_string(st.st_rdev);
    if (S_ISREG(st.st_mode))
      s += " size " + std::to_string(st.st_size) + " mtime " + std::to_string(st.st_mtim.tv_sec) +
           "." + std::to_string(st.st_mtim.tv_nsec) + " hash " +
           std::to_string(std::hash<std::string>{}(ReadWholeFile(path)));
    return s;
  }
  std::map<std::string, std::string> Snapshot(const std::vector<std::string>& extra = {}) const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) == 0 || name.rfind("stderr.", 0) == 0) continue;
      files[e.path().string()] = State(e.path().string());
    }
    files[kTiny] = State(kTiny);
    for (const auto& path : extra) files[path] = State(path);
    return files;
  }
  // The contract; `message` is the whole line after "tool: error: ".
  void ExpectCleanError(const std::string& tool, const std::vector<std::string>& args,
                        const std::string& message, int code,
                        const std::vector<std::string>& extra = {}) {
    auto before = Snapshot(extra);
    ExecResult r = tool == "foundry-compile" ? Compile(args, false) : Run(args);
    EXPECT_EQ(r.code, code) << r.out << r.err;
    EXPECT_EQ(r.err, tool + ": error: " + message + "\n");
    EXPECT_EQ(Snapshot(extra), before) << tool << " " << testing::PrintToString(args);
  }
  std::vector<std::string> Tiny(std::vector<std::string> args) const {
    args.insert(args.begin(), {kTiny, "--dim", "batch=2", "--dim", "seq=16"});
    return args;
  }
  std::string Q(const std::string& name) const { return "'" + Path(name) + "'"; }

  std::string dir_;
};

bool IsCharDevice(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// ---- class 2: a device or pipe is written to, never replaced ---------------------------------

TEST_F(OutputsTest, ReportsToDevNullLeaveItADevice) {
  ASSERT_TRUE(IsCharDevice("/dev/null"));
  ExecResult r = Compile({"--dry-run", "--report-json", "/dev/null"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(IsCharDevice("/dev/null"));
  for (const char* option : {"--report-json", "--memory-timeline", "--dump-plan"}) {
    r = Compile({"-o", Path("p"), option, "/dev/null"});
    ASSERT_EQ(r.code, 0) << option << ": " << r.err;
    EXPECT_TRUE(IsCharDevice("/dev/null")) << option;
  }
  CompilePlan();
  r = Run({Path("p"), "--steps", "1", "--report-json", "/dev/null"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(IsCharDevice("/dev/null"));
}

// /dev/stdout is the tool's own standard output, written after what it printed; a symlink
// output keeps the link and replaces the file it names.
TEST_F(OutputsTest, StandardOutputAndSymlinks) {
  ExecResult r = Compile({"--dry-run", "--report-json", "/dev/stdout", "--memory-timeline",
                          "/dev/null", "--dump-plan", "/dev/null"});
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t json = r.out.find("\n{");
  ASSERT_NE(json, std::string::npos) << r.out;
  const size_t end = r.out.find("\n}\n", json);
  ASSERT_NE(end, std::string::npos) << r.out;
  EXPECT_TRUE(nlohmann::json::accept(r.out.substr(json + 1, end + 2 - json))) << r.out;
  EXPECT_TRUE(IsCharDevice("/dev/null"));

  Write("real.json", "old");
  fs::create_symlink("real.json", Path("link.json"));
  r = Compile({"--dry-run", "--report-json", Path("link.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(Path("link.json")));
  EXPECT_TRUE(nlohmann::json::accept(ReadWholeFile(Path("real.json"))));
}

// A character device of the test's own (root only: mknod), as each output of a compile and a
// run: a report file is written into it, the plan pair refuses it; it stays a device.
TEST_F(OutputsTest, OwnCharacterDeviceIsNeverReplaced) {
  if (::mknod(Path("dev").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod needs root: " << std::strerror(errno);
  for (const char* option : {"--report-json", "--memory-timeline", "--dump-plan"}) {
    ExecResult r = Compile({"--dry-run", option, Path("dev")});
    ASSERT_EQ(r.code, 0) << option << ": " << r.err;
    EXPECT_TRUE(IsCharDevice(Path("dev"))) << option;
  }
  ASSERT_EQ(::mknod(Path("x.plan").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ExpectCleanError(
      "foundry-compile", Tiny({"-o", Path("x")}),
      "-o " + Q("x.plan") + ": it is a device or a named pipe; give the name of a regular file", 1);
  EXPECT_TRUE(IsCharDevice(Path("x.plan")));
  CompilePlan();
  ExecResult r = Run({Path("p"), "--report-json", Path("dev")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(IsCharDevice(Path("dev")));
}

TEST_F(OutputsTest, NamedPipeWithoutAReaderIsAnErrorNotAHang) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0666), 0);
  const auto start = std::chrono::steady_clock::now();
  ExpectCleanError("foundry-compile", Tiny({"-o", Path("p"), "--report-json", Path("fifo")}),
                   "--report-json " + Q("fifo") +
                       ": it is a named pipe that nobody reads; start its reader first, or give "
                       "a file",
                   1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST_F(OutputsTest, NamedPipeWithAReaderGetsTheReport) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0666), 0);
  std::string received;
  std::thread reader([&] { received = ReadWholeFile(Path("fifo")); });
  ExecResult r = Compile({"--dry-run", "--report-json", Path("fifo")});
  reader.join();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::accept(received)) << received.substr(0, 200);
  struct stat st {};
  ASSERT_EQ(::lstat(Path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// ---- class 3: no output is another output or an input ---------------------------------------

TEST_F(OutputsTest, OutputsThatAreEachOtherFailBeforeAnythingIsWritten) {
  Write("keep.plan", "old plan");
  const std::string dup = "; give each output its own name";
  ExpectCleanError(
      "foundry-compile", Tiny({"-o", Path("x"), "--report-json", Path("x.plan")}),
      "--report-json " + Q("x.plan") + " is also the output of -o " + Q("x.plan") + dup, 1);
  ExpectCleanError("foundry-compile",
                   Tiny({"-o", Path("x"), "--memory-timeline", Path("x.train.onnx")}),
                   "--memory-timeline " + Q("x.train.onnx") + " is also the output of -o " +
                       Q("x.train.onnx") + dup,
                   1);
  ExpectCleanError(
      "foundry-compile",
      Tiny({"--dry-run", "--report-json", Path("f"), "--memory-timeline", Path("f")}),
      "--memory-timeline " + Q("f") + " is also the output of --report-json " + Q("f") + dup, 1);
  // Another spelling of the same file, and a hard link to an existing one.
  fs::create_directories(Path("sub"));
  ExpectCleanError(
      "foundry-compile",
      Tiny({"--dry-run", "--report-json", Path("f"), "--dump-plan", dir_ + "/./sub/../f"}),
      "--report-json " + Q("f") + " is also the output of --dump-plan '" + dir_ + "/./sub/../f'" +
          dup,
      1);
  ASSERT_EQ(::link(Path("keep.plan").c_str(), Path("link.plan").c_str()), 0);
  ExpectCleanError(
      "foundry-compile", Tiny({"-o", Path("keep"), "--report-json", Path("link.plan")}),
      "--report-json " + Q("link.plan") + " is also the output of -o " + Q("keep.plan") + dup, 1);
}

TEST_F(OutputsTest, NoOutputIsTheCkptConfigFile) {
  Write("c.yaml", "[mptmlp]\n");
  const std::string input =
      ": writing it would change " + Q("c.yaml") +
      ", the --ckpt-config file, an input of this command; choose another file";
  for (const char* option : {"--report-json", "--dump-plan", "--emit-ckpt-config"})
    ExpectCleanError("foundry-compile",
                     Tiny({"--dry-run", "--ckpt-config", Path("c.yaml"), option, Path("c.yaml")}),
                     std::string(option) + " " + Q("c.yaml") + input, 1);
  Write("P.plan", "[mptmlp]\n");
  ExpectCleanError("foundry-compile", Tiny({"-o", Path("P"), "--ckpt-config", Path("P.plan")}),
                   "-o " + Q("P.plan") + ": writing it would change " + Q("P.plan") +
                       ", the --ckpt-config file, an input of this command; choose another file",
                   1);
  ExpectCleanError("foundry-compile", Tiny({"--dry-run", "--report-json", kTiny}),
                   "--report-json '" + kTiny + "': writing it would change '" + kTiny +
                       "', the model, an input of this command; choose another file",
                   1);
}

// ---- class 4: nothing left behind after a failure -------------------------------------------

TEST_F(OutputsTest, AnUnwritableReportLeavesNoPlan) {
  // /proc takes no new files, whoever asks (access() says yes to root): found by the folder
  // probe before the import, so nothing is written.
  ExecResult r = Compile({"-o", Path("p"), "--report-json", "/proc/x.json"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("foundry-compile: error: --report-json '/proc/x.json': ", 0), 0) << r.err;
  EXPECT_FALSE(fs::exists(Path("p.plan")));
  EXPECT_FALSE(fs::exists(Path("p.train.onnx")));
  r = Compile({"--dry-run", "--dump-plan", Path("d.txt"), "--report-json", "/proc/x.json"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_FALSE(fs::exists(Path("d.txt")));
  // The folders made for -o go too.
  r = Compile({"-o", Path("a/b/p"), "--report-json", "/proc/x.json"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_FALSE(fs::exists(Path("a")));
}

TEST_F(OutputsTest, ALongNameFailsBeforeAnyFolderIsMade) {
  const std::string long_name(300, 'n');
  ExpectCleanError("foundry-compile", Tiny({"-o", Path("a/" + long_name + "/x")}),
                   "-o " + Q("a/" + long_name + "/x.train.onnx") + ": the name '" + long_name +
                       "' is 300 bytes, more than the 255 a file name may have; choose a "
                       "shorter one",
                   1);
  EXPECT_FALSE(fs::exists(Path("a")));
}

TEST_F(OutputsTest, AFailedRunLeavesNoSaveReportOrDumps) {
  CompilePlan();
  auto before = Snapshot();
  ExecResult r = Run({Path("p"), "--steps", "2", "--save", Path("S"), "--dump-grads", Path("D"),
                      "--report-json", "/proc/x.json"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("foundry-run: error: --report-json '/proc/x.json': ", 0), 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(Snapshot(), before);
  // A step that diverges after the first (whose gradients were dumped): an lr of 1e30 keeps the
  // weights finite after step 1 and overflows the forward of step 2.
  r = Run({Path("p"), "--steps", "3", "--lr", "1e30", "--dump-grads", Path("D"), "--dump-outputs",
           Path("O"), "--save", Path("S")});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("step 2"), std::string::npos) << r.err;
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(OutputsTest, SaveInsideTheResumedSaveIsRefused) {
  CompilePlan();
  ExecResult r = Run({Path("p"), "--save", Path("R")});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectCleanError("foundry-run", {Path("p"), "--resume", Path("R"), "--save", Path("R/sub")},
                   "--save " + Q("R/sub") + ": writing it would change " + Q("R") +
                       ", the --resume save, an input of this run; choose another folder",
                   1);
  ExpectCleanError("foundry-run",
                   {Path("p"), "--resume", Path("R"), "--dump-grads", Path("R/optimizer")},
                   "--dump-grads '" + Path("R/optimizer") +
                       "/transformer.wte.weight_grad.pb': writing it would "
                       "change " +
                       Q("R") + ", the --resume save, an input of this run; choose another file",
                   1);
}

// ---- class 11: two writers, one prefix --------------------------------------------------------

// The plan names its graph by digest: a graph from another compile is refused.
TEST_F(OutputsTest, APlanWithAnotherCompilesGraphIsRefused) {
  CompilePlan("a");
  ExecResult r = Compile({"-o", Path("b"), "--ckpt", "mptmlp"});
  ASSERT_EQ(r.code, 0) << r.err;
  fs::copy_file(Path("b.train.onnx"), Path("a.train.onnx"), fs::copy_options::overwrite_existing);
  r = Run({Path("a")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("come from different compiles"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Two compiles of different plans to one prefix at once: the first pauses 1.5 s between its
// renames (FOUNDRY_COMMIT_DELAY_MS), the second starts 0.3 s later without a pause, so its
// renames fall inside the first one's. Without the commit's folder lock the pair ends mixed (the
// first's plan beside the second's graph), which foundry-run refuses.
TEST_F(OutputsTest, TwoCompilesToOnePrefixNeverLeaveAMixedPair) {
  auto compile = [&](const std::string& batch, int delay_ms, const std::string& log) {
    const std::string cmd = "cd '" + dir_ +
                            "' && FOUNDRY_COMMIT_DELAY_MS=" + std::to_string(delay_ms) + " '" +
                            kCompile + "' '" + kTiny + "' --dim batch=" + batch +
                            " --dim seq=16 -o '" + Path("p") + "' >" + log + " 2>&1";
    return std::system(cmd.c_str());
  };
  int a = -1, b = -1;
  std::thread ta([&] { a = compile("2", 1500, "a.log"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread tb([&] { b = compile("3", 0, "b.log"); });
  ta.join();
  tb.join();
  ASSERT_EQ(a, 0) << ReadWholeFile(Path("a.log"));
  ASSERT_EQ(b, 0) << ReadWholeFile(Path("b.log"));
  ExecResult r = Run({Path("p"), "--steps", "0"});
  EXPECT_EQ(r.code, 0) << r.err;
}

// ---- class 9: empty values, control characters -------------------------------------------------

TEST_F(OutputsTest, EmptyValuesAreUsageErrors) {
  for (const char* option : {"--memory-budget", "--ckpt-config", "--report-json",
                             "--memory-timeline", "--memory-frontier", "--emit-ckpt-config",
                             "--dump-plan", "-o", "--ckpt", "--dim", "--freeze"}) {
    auto before = Snapshot();
    ExecResult r = Compile({option, ""});
    EXPECT_EQ(r.code, 2) << option << ": " << r.err;
    EXPECT_NE(r.err.find(" is empty; give "), std::string::npos) << option << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(Snapshot(), before);
  }
  ExpectCleanError("foundry-compile", Tiny({"--dry-run", "--report-json", ""}),
                   "--report-json is empty; give FILE (run foundry-compile --help)", 2);
  ExpectCleanError("foundry-compile", {""},
                   "the model argument is empty; give a value (run foundry-compile --help)", 2);
  for (const char* option :
       {"--save", "--resume", "--report-json", "--dump-grads", "--data", "--feed", "--lr"}) {
    ExecResult r = Run({Path("p"), option, ""});
    EXPECT_EQ(r.code, 2) << option << ": " << r.err;
    EXPECT_NE(r.err.find(" is empty; give "), std::string::npos) << option << ": " << r.err;
  }
}

TEST_F(OutputsTest, ControlCharactersInValuesStayOnOneLine) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--ckpt", "a\nb"},
                                               {"--memory-budget", "1\n2"},
                                               {"--dim", "seq\n=3"},
                                               {"--ckpt-config", Path("no\nsuch\r.yaml")}}) {
    ExecResult r = Compile(args);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  }
  ExecResult r = Run({Path("no\nplan")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("no\\x0aplan"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace foundry
