// End-to-end: what foundry-run's checkpoints hold against (docs/design.md §11): one run per save
// folder (a second is refused naming the holder's pid, a dead holder's lock taken over with a
// warning), the temp folders of dead runs removed at the next save (never a live one's; an unheld
// one whose pid runs again once it is older than the newest checkpoint), every
// file of a save checked against its manifest by --resume and --init-from (a flipped byte in
// each file, a missing manifest, an unlisted file), --resume of a save folder falling back to the
// newest checkpoint that verifies, and 20 SIGKILLs at random moments leaving only verifiable
// checkpoints and, after the next save, no debris.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "base/folder_lock.h"
#include "base/output_set.h"
#include "runtime/checkpoint_manifest.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

extern char** environ;

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kModel = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny/model.onnx";

class CheckpointTrustTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    ExecResult c = Exec(
        kCompile, {kModel, "--dim", "batch=2", "--dim", "seq=16", "-o", Path("mpt")}, Path(""));
    ASSERT_EQ(c.code, 0) << c.err;
  }
  ExecResult Run(std::vector<std::string> args) {
    args.insert(args.begin(), Path("mpt"));
    return Exec(kRun, args, Path(""));
  }
  // Names in `dir` (dot files too), sorted.
  std::vector<std::string> Entries(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(Path(dir))) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  static void FlipByte(const std::string& path, int64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x10));
  }
  // foundry-run PREFIX `args`, started in the background with its output discarded.
  pid_t SpawnRun(std::vector<std::string> args) {
    args.insert(args.begin(), {kRun, Path("mpt")});
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t quiet;
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, kRun.c_str(), &quiet, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&quiet);
    EXPECT_EQ(rc, 0);
    return pid;
  }
  // Until `pid` holds DIR's lock (its lock file holds the pid), at most a minute.
  void WaitForLock(const std::string& dir, pid_t pid) {
    const std::string lock = Path(dir + "/.foundry-lock");
    for (int waited = 0; waited < 60000; waited += 2) {
      std::error_code ec;
      if (fs::exists(lock, ec) && ReadWholeFile(lock).rfind(std::to_string(pid), 0) == 0) return;
      usleep(2000);
    }
  }
};

// A pid that is surely not running: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST_F(CheckpointTrustTest, ASecondWriterIsRefusedNamingTheHolder) {
  auto held = FolderLock::Take(Path("f"), "test");
  ASSERT_TRUE(held.ok()) << held.status().message();
  ExecResult r = Run({"--steps", "2", "--save-interval", "1", "--save-folder", Path("f"),
                      "--metrics", Path("m.jsonl")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-run: error: --save-folder '" + Path("f") + "': another process (pid " +
                       std::to_string(getpid()) +
                       ") is writing into it; wait for it to end or choose another folder\n");
  EXPECT_EQ(Entries("f"), std::vector<std::string>{".foundry-lock"});
  EXPECT_FALSE(fs::exists(Path("m.jsonl")));  // refused before the metrics file was opened
  held->Release();
  r = Run({"--steps", "2", "--save-interval", "1", "--save-folder", Path("f")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // a lock let go is not stale
  // The run lets its lock go: nothing but the checkpoints stays.
  EXPECT_EQ(Entries("f"), (std::vector<std::string>{"step1", "step2"}));
}

// Two foundry-runs into one folder at once, as a user starts them: the second is refused naming
// the first's pid, and every checkpoint in the folder is the first run's.
TEST_F(CheckpointTrustTest, TwoRunsAtOnceTheSecondIsRefused) {
  const pid_t first = SpawnRun({"--steps", "100000", "--lr", "0.001", "--save-interval", "1",
                                "--save-folder", Path("f"), "--save-keep", "2"});
  ASSERT_GT(first, 0);
  WaitForLock("f", first);
  ExecResult r =
      Run({"--steps", "40", "--lr", "0.002", "--save-interval", "1", "--save-folder", Path("f")});
  kill(first, SIGTERM);
  int status = 0;
  waitpid(first, &status, 0);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-run: error: --save-folder '" + Path("f") + "': another process (pid " +
                       std::to_string(first) +
                       ") is writing into it; wait for it to end or choose another folder\n");
  for (const auto& name : Entries("f")) {
    if (name.rfind("step", 0) != 0) continue;
    const auto state = nlohmann::json::parse(ReadWholeFile(Path("f/" + name + "/state.json")));
    EXPECT_EQ(state.at("optimizer").at("lr").get<double>(), 0.001) << name;
  }
}

TEST_F(CheckpointTrustTest, ADeadHoldersLockIsTakenOverWithAWarning) {
  fs::create_directories(Path("f"));
  const pid_t dead = DeadPid();
  Write("f/.foundry-lock", std::to_string(dead) + "\n");
  ExecResult r = Run({"--steps", "1", "--save-interval", "1", "--save-folder", Path("f")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "foundry-run: warning: --save-folder '" + Path("f") +
                       "': took over the lock of pid " + std::to_string(dead) +
                       ", which is no longer running\n");
  EXPECT_EQ(Entries("f"), std::vector<std::string>{"step1"});
}

// A dead run's temp folder is removed at the next save, with a line saying so; one that a live
// process holds (an OutputSet of this test's) is left.
TEST_F(CheckpointTrustTest, DeadRunsTempFoldersAreRemovedAtTheNextSave) {
  const std::string debris = ".foundry-tmp." + std::to_string(DeadPid()) + ".7";
  fs::create_directories(Path("f/" + debris + "/step3/optimizer"));
  Write("f/" + debris + "/step3/model.onnx", "partial");
  OutputSet live;
  ASSERT_TRUE(live.AddFolder(Path("f/live"), "test").ok());
  auto staged = live.Stage(Path("f/live"));
  ASSERT_TRUE(staged.ok());
  const std::string live_tmp = fs::path(*staged).parent_path().filename();
  ExecResult r = Run({"--steps", "1", "--save-interval", "1", "--save-folder", Path("f")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\n--save-folder: removed what a dead run left: '" + Path("f/" + debris) +
                       "' (pid " + debris.substr(13, debris.size() - 15) + ", not running)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(Entries("f"), (std::vector<std::string>{live_tmp, "step1"}));
  live.Abort();
  EXPECT_EQ(Entries("f"), std::vector<std::string>{"step1"});
}

// A temp folder whose pid runs again (another process took the number) but that nobody holds:
// removed when it is older than the newest complete checkpoint, kept while it is newer.
TEST_F(CheckpointTrustTest, UnheldTempFoldersOlderThanTheNewestSaveAreRemoved) {
  ASSERT_EQ(Run({"--steps", "1", "--save-interval", "1", "--save-folder", Path("f")}).code, 0);
  const std::string alive = std::to_string(getpid());  // running: this test
  const std::string old_tmp = ".foundry-tmp." + alive + ".1",
                    new_tmp = ".foundry-tmp." + alive + ".2";
  fs::create_directories(Path("f/" + old_tmp + "/step9"));
  fs::create_directories(Path("f/" + new_tmp + "/step9"));
  const auto newest = fs::last_write_time(Path("f/step1/manifest.json"));
  fs::last_write_time(Path("f/" + old_tmp), newest - std::chrono::hours(1));
  fs::last_write_time(Path("f/" + new_tmp), newest + std::chrono::hours(1));
  ExecResult r = Run({"--steps", "1", "--save-interval", "1", "--save-folder", Path("f")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\n--save-folder: removed what a dead run left: '" + Path("f/" + old_tmp) +
                       "' (older than the newest complete save)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(Entries("f"), (std::vector<std::string>{new_tmp, "step1"}));
}

// Each file of a save with one byte flipped: --resume refuses it in one line naming the file, and
// so does --init-from for model.safetensors; a missing manifest and an unlisted file likewise.
TEST_F(CheckpointTrustTest, ADamagedSaveIsRefusedNamingTheFile) {
  ASSERT_EQ(Run({"--steps", "2", "--save", Path("s")}).code, 0);
  const auto manifest = nlohmann::json::parse(ReadWholeFile(Path("s/manifest.json")));
  ASSERT_EQ(manifest.at("files").size(), 2u + 1u + 27u * 2u);  // onnx, safetensors, state, m, v
  for (const auto& f : manifest.at("files")) {
    const std::string name = f.at("path");
    fs::remove_all(Path("d"));
    fs::copy(Path("s"), Path("d"), fs::copy_options::recursive);
    FlipByte(Path("d/" + name), f.at("bytes").get<int64_t>() / 2);
    ExecResult r = Run({"--resume", Path("d"), "--steps", "1"});
    EXPECT_EQ(r.code, 1) << name;
    EXPECT_EQ(r.err.rfind("foundry-run: error: --resume " + Path("d") + ": '" + Path("d/" + name) +
                              "' is damaged: its CRC-32C is ",
                          0),
              0u)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    if (name != "model.safetensors") continue;
    r = Run({"--init-from", Path("d/model.safetensors"), "--steps", "1"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err.rfind("foundry-run: error: --init-from: '" + Path("d/model.safetensors") +
                              "' is damaged: its CRC-32C is ",
                          0),
              0u)
        << r.err;
  }
  EXPECT_EQ(Run({"--init-from", Path("s/model.safetensors"), "--steps", "1"}).code, 0);
  fs::copy_file(Path("s/manifest.json"), Path("manifest.json"));
  fs::remove(Path("s/manifest.json"));
  ExecResult r = Run({"--resume", Path("s"), "--steps", "1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-run: error: --resume " + Path("s") +
                       ": it has no manifest.json: a save by a foundry-run older than "
                       "checksummed saves, or not a complete save; its bytes cannot be verified, "
                       "so it is refused (resume it with the foundry-run that wrote it and --save "
                       "it again)\n");
  fs::copy_file(Path("manifest.json"), Path("s/manifest.json"));
  Write("s/optimizer/extra.pb", "x");
  r = Run({"--resume", Path("s"), "--steps", "1"});
  EXPECT_EQ(r.err, "foundry-run: error: --resume " + Path("s") + ": '" +
                       Path("s/optimizer/extra.pb") +
                       "' is not listed in its manifest.json: the save was changed after it was "
                       "written\n");
}

// --resume of a save folder whose newest checkpoint is damaged continues from the one before,
// saying which it skipped, and ends where the straight run ends, byte for byte.
TEST_F(CheckpointTrustTest, ResumeOfAFolderFallsBackToTheNewestThatVerifies) {
  ASSERT_EQ(Run({"--steps", "4", "--save-interval", "2", "--save-folder", Path("f"), "--save",
                 Path("straight")})
                .code,
            0);
  FlipByte(Path("f/step4/model.onnx"), 100);
  ExecResult r = Run({"--resume", Path("f"), "--steps", "2", "--save", Path("again")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\n  resumed    " + Path("f/step2") + " at step 2 (the newest that " +
                       "verifies in " + Path("f") + ")\n  skipped    " + Path("f/step4") + ": '" +
                       Path("f/step4/model.onnx") + "' is damaged: its CRC-32C is "),
            std::string::npos)
      << r.out;
  for (const char* name : {"model.onnx", "model.safetensors", "manifest.json"})
    EXPECT_TRUE(ReadWholeFile(Path(std::string("again/") + name)) ==
                ReadWholeFile(Path(std::string("straight/") + name)))
        << name;
}

// 20 runs saving every step, each SIGKILLed a random 0-400 ms (seeded) after it took the save
// folder's lock, that is within its first steps and saves however slow the build (a sanitizer's
// included); every checkpoint left verifies, and after one more run into the folder no temp
// folder or lock file is left.
TEST_F(CheckpointTrustTest, KilledRunsLeaveOnlyVerifiableCheckpoints) {
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<int> delay_ms(0, 400);
  int killed = 0;
  std::set<std::string> debris;  // the temp folders seen after a kill
  for (int i = 0; i < 20; ++i) {
    const pid_t pid = SpawnRun({"--steps", "100000", "--save-interval", "1", "--save-folder",
                                Path("f"), "--save-keep", "3"});
    ASSERT_GT(pid, 0);
    WaitForLock("f", pid);
    usleep(static_cast<useconds_t>(delay_ms(rng)) * 1000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    killed += WIFSIGNALED(status) ? 1 : 0;
    for (const auto& name : Entries("f"))
      if (name.rfind(".foundry-tmp.", 0) == 0) debris.insert(name);
  }
  EXPECT_EQ(killed, 20);
  int checkpoints = 0;
  for (const auto& name : Entries("f")) {
    if (name.rfind("step", 0) != 0) continue;
    ++checkpoints;
    EXPECT_TRUE(VerifyCheckpoint(Path("f/" + name)).ok()) << name;
  }
  EXPECT_GT(checkpoints, 0);
  std::cout << "20 kills: " << checkpoints << " checkpoints left, " << debris.size()
            << " temp folders of killed saves seen\n";
  ExecResult r = Run({"--resume", Path("f"), "--steps", "1", "--save-interval", "1",
                      "--save-folder", Path("f"), "--save-keep", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& name : Entries("f")) {
    EXPECT_EQ(name.rfind("step", 0), 0u) << name << " left in the save folder";
    EXPECT_TRUE(VerifyCheckpoint(Path("f/" + name)).ok()) << name;
  }
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
