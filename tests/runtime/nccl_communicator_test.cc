// runtime/nccl_communicator: what needs neither a GPU nor NCCL. NCCL is loaded at run time, so
// this build has no NCCL in it; without the library the loader says what to install, and a
// library that is not NCCL is named as such. The NCCL id file through which ranks without MPI
// meet: written atomically by rank 0, read by the others (who wait for it), with one-line errors
// for a stale file, a wrong world size, a foreign file and a rank 0 that never comes. Joining the
// world (rank, size, id) without MPI: a world of one, two ranks through the file, the variables'
// errors (needs NCCL, which the CUDA 13 toolkit here ships, for ncclGetUniqueId; no GPU).
// Where NCCL loads: tests/runtime/nccl_abi_test.cc. The collectives on a GPU:
// tests/runtime/cuda_nccl_communicator_test.cc.
#include "runtime/nccl_communicator.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/support/scoped_env.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// What dlopen says about `path` on this machine (the error text is the C library's).
std::string DlopenError(const char* path) {
  dlerror();
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h) {
    dlclose(h);
    return "";
  }
  return dlerror();
}

TEST(NcclLibraryTest, WithoutNcclTheErrorSaysWhatToInstall) {
  ScopedEnv env("FOUNDRY_NCCL_LIBRARY", nullptr);
  const std::string why = DlopenError("libnccl.so.2");
  if (why.empty()) GTEST_SKIP() << "libnccl.so.2 is installed on this machine";
  auto lib = LoadNcclLibrary();
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().message(),
            "NCCL not found: dlopen libnccl.so.2 failed (" + why +
                "); install NVIDIA's NCCL (e.g. the nvidia-nccl-cu12 wheel) or set "
                "FOUNDRY_NCCL_LIBRARY");
  // The build has no NCCL in it: the message is the dlopen error, which here is "no such file".
  EXPECT_NE(why.find("libnccl.so.2: cannot open shared object file"), std::string::npos) << why;
}

// The same message where this machine has NCCL: the default name's path through the loader, with
// a name that no machine has.
TEST(NcclLibraryTest, TheDefaultNamesErrorSaysWhatToInstall) {
  const char* name = "libnccl-absent-for-this-test.so.2";
  const std::string why = DlopenError(name);
  ASSERT_NE(why, "");
  auto lib = LoadNcclLibraryFrom(name, false);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().message(),
            std::string("NCCL not found: dlopen ") + name + " failed (" + why +
                "); install NVIDIA's NCCL (e.g. the nvidia-nccl-cu12 wheel) or set "
                "FOUNDRY_NCCL_LIBRARY");
}

TEST(NcclLibraryTest, AMissingLibraryFromTheEnvironmentIsNamed) {
  TempDir dir;
  const std::string path = dir / "libnccl.so.2";  // no such file
  ScopedEnv env("FOUNDRY_NCCL_LIBRARY", path.c_str());
  auto lib = LoadNcclLibrary();
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().message(),
            "NCCL not found: dlopen " + path + " (FOUNDRY_NCCL_LIBRARY) failed (" + path +
                ": cannot open shared object file: No such file or directory); set "
                "FOUNDRY_NCCL_LIBRARY to NCCL's libnccl.so.2 (e.g. "
                "site-packages/nvidia/nccl/lib/libnccl.so.2 of PyTorch's nvidia-nccl wheel)");
}

TEST(NcclLibraryTest, AFileThatIsNotALibraryIsRefusedByTheLoader) {
  TempDir dir;
  const std::string path = dir.File("libnccl.so.2", "not an ELF file\n");
  ScopedEnv env("FOUNDRY_NCCL_LIBRARY", path.c_str());
  auto lib = LoadNcclLibrary();
  ASSERT_FALSE(lib.ok());
  const std::string& m = lib.status().message();
  EXPECT_EQ(
      m.rfind("NCCL not found: dlopen " + path + " (FOUNDRY_NCCL_LIBRARY) failed (" + path + ": ",
              0),
      0u)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(NcclLibraryTest, ALibraryWithoutNcclsFunctionsIsNotNccl) {
  ASSERT_EQ(DlopenError("libm.so.6"), "");
  ScopedEnv env("FOUNDRY_NCCL_LIBRARY", "libm.so.6");
  auto lib = LoadNcclLibrary();
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().message(),
            "libm.so.6: not an NCCL library: missing symbol ncclCommInitRank; set "
            "FOUNDRY_NCCL_LIBRARY to NCCL's libnccl.so.2 (e.g. "
            "site-packages/nvidia/nccl/lib/libnccl.so.2 of PyTorch's nvidia-nccl wheel)");
}

NcclId SomeId(char seed) {
  NcclId id;
  for (int i = 0; i < kNcclIdBytes; ++i) id[i] = static_cast<char>(seed + i * 7);
  return id;
}

TEST(NcclIdFileTest, RankZeroWritesTheOthersRead) {
  TempDir dir;
  const std::string path = dir / "nccl.id";
  const NcclId id = SomeId(3);
  ASSERT_TRUE(WriteNcclIdFile(path, id, 4).ok());
  // Nothing but the file: the temporary one was renamed into place.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  for (int rank : {1, 2, 3}) {
    auto got = ReadNcclIdFile(path, rank, 4, 1.0);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, id);
  }
}

TEST(NcclIdFileTest, AReaderWaitsForRankZero) {
  TempDir dir;
  const std::string path = dir / "nccl.id";
  const NcclId id = SomeId(11);
  const auto start = std::chrono::steady_clock::now();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(WriteNcclIdFile(path, id, 2).ok());
  });
  auto got = ReadNcclIdFile(path, 1, 2, 30.0);
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, id);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
}

TEST(NcclIdFileTest, NoRankZeroTimesOutWithAClearError) {
  TempDir dir;
  const std::string path = dir / "nccl.id";
  auto got = ReadNcclIdFile(path, 1, 2, 0.05);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "rank 1: no NCCL id in FOUNDRY_NCCL_ID_FILE=" + path +
                " after 0.05 s; is rank 0 running, with the same FOUNDRY_NCCL_ID_FILE on a file "
                "system every rank sees? (FOUNDRY_NCCL_ID_TIMEOUT_S sets the wait)");
}

TEST(NcclIdFileTest, AStaleFileIsRefusedByRankZero) {
  TempDir dir;
  const std::string path = dir.File("nccl.id", "left over");
  Status st = WriteNcclIdFile(path, SomeId(1), 2);
  EXPECT_EQ(st.message(), "FOUNDRY_NCCL_ID_FILE=" + path +
                              " already exists (left by an earlier run?); delete it before "
                              "starting the ranks");
}

TEST(NcclIdFileTest, AnotherWorldSizeOrAForeignFileIsNamed) {
  TempDir dir;
  const std::string path = dir / "nccl.id";
  ASSERT_TRUE(WriteNcclIdFile(path, SomeId(5), 4).ok());
  auto got = ReadNcclIdFile(path, 1, 2, 1.0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "FOUNDRY_NCCL_ID_FILE=" + path +
                " was written by rank 0 of a world of 4 ranks, rank 1 is in a world of 2; start "
                "every rank with the same world size");
  const std::string other = dir.File("other.id", "hello\n");
  got = ReadNcclIdFile(other, 1, 2, 1.0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "FOUNDRY_NCCL_ID_FILE=" + other +
                " is not an NCCL id file written by rank 0 (6 bytes); delete it and start every "
                "rank again");
}

// --- joining the world (needs NCCL for ncclGetUniqueId, no GPU) ---

#define REQUIRE_NCCL()                                                                      \
  do {                                                                                      \
    if (auto lib_ = LoadNcclLibrary(); !lib_.ok()) GTEST_SKIP() << lib_.status().message(); \
  } while (0)

// The rendezvous variables unset for the scope.
struct NoRendezvous {
  ScopedEnv a{"FOUNDRY_NCCL_ID_FILE", nullptr};
  ScopedEnv b{"FOUNDRY_RANK", nullptr};
  ScopedEnv c{"FOUNDRY_WORLD_SIZE", nullptr};
};

bool AllZero(const NcclId& id) {
  for (char c : id)
    if (c != 0) return false;
  return true;
}

TEST(NcclJoinTest, WithoutVariablesAWorldOfOne) {
  REQUIRE_NCCL();
  NoRendezvous none;
  auto join = JoinNcclWorld(nullptr);
  ASSERT_TRUE(join.ok()) << join.status().message();
  EXPECT_EQ(join->rank, 0);
  EXPECT_EQ(join->size, 1);
  EXPECT_EQ(join->id_file, "");
  EXPECT_FALSE(AllZero(join->id));  // NCCL's bootstrap address
}

TEST(NcclJoinTest, TwoRanksMeetThroughTheIdFile) {
  REQUIRE_NCCL();
  TempDir dir;
  const std::string file = dir / "nccl.id";
  ScopedEnv f("FOUNDRY_NCCL_ID_FILE", file.c_str());
  ScopedEnv s("FOUNDRY_WORLD_SIZE", "2");
  NcclId id0{};
  {
    ScopedEnv r("FOUNDRY_RANK", "0");
    auto join = JoinNcclWorld(nullptr);
    ASSERT_TRUE(join.ok()) << join.status().message();
    EXPECT_EQ(join->rank, 0);
    EXPECT_EQ(join->size, 2);
    EXPECT_EQ(join->id_file, file);
    EXPECT_FALSE(AllZero(join->id));
    id0 = join->id;
  }
  auto read = ReadNcclIdFile(file, 1, 2, 1.0);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, id0);
  ScopedEnv r("FOUNDRY_RANK", "1");
  auto join = JoinNcclWorld(nullptr);
  ASSERT_TRUE(join.ok()) << join.status().message();
  EXPECT_EQ(join->rank, 1);
  EXPECT_EQ(join->size, 2);
  EXPECT_EQ(join->id, id0);
  // A second rank 0 (a second run while the first one's file is still there) is refused.
  ScopedEnv r0("FOUNDRY_RANK", "0");
  EXPECT_EQ(JoinNcclWorld(nullptr).status().message(),
            "FOUNDRY_NCCL_ID_FILE=" + file +
                " already exists (left by an earlier run?); delete it before starting the ranks");
}

TEST(NcclJoinTest, TheVariablesComeTogetherAndMakeSense) {
  REQUIRE_NCCL();
  NoRendezvous none;
  {
    ScopedEnv r("FOUNDRY_RANK", "1");
    EXPECT_EQ(JoinNcclWorld(nullptr).status().message(),
              "nccl: without MPI the ranks meet through FOUNDRY_NCCL_ID_FILE, FOUNDRY_RANK and "
              "FOUNDRY_WORLD_SIZE; set all three (missing: FOUNDRY_NCCL_ID_FILE, "
              "FOUNDRY_WORLD_SIZE)");
  }
  TempDir dir;
  const std::string file = dir / "nccl.id";
  ScopedEnv f("FOUNDRY_NCCL_ID_FILE", file.c_str());
  {
    ScopedEnv s("FOUNDRY_WORLD_SIZE", "2");
    EXPECT_EQ(JoinNcclWorld(nullptr).status().message(),
              "nccl: without MPI the ranks meet through FOUNDRY_NCCL_ID_FILE, FOUNDRY_RANK and "
              "FOUNDRY_WORLD_SIZE; set all three (missing: FOUNDRY_RANK)");
  }
  ScopedEnv r("FOUNDRY_RANK", "2");
  ScopedEnv s("FOUNDRY_WORLD_SIZE", "2");
  EXPECT_EQ(JoinNcclWorld(nullptr).status().message(),
            "nccl: FOUNDRY_RANK=2 is not a rank of FOUNDRY_WORLD_SIZE=2 (0 to size - 1)");
  ScopedEnv r2("FOUNDRY_RANK", "one");
  EXPECT_EQ(JoinNcclWorld(nullptr).status().message(),
            "FOUNDRY_RANK=one: not a whole number (0 or more)");
  EXPECT_FALSE(std::filesystem::exists(file));  // nothing written on the way
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef REQUIRE_NCCL
