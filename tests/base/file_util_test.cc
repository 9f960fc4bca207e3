#include "base/file_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t CountFiles(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(WriteFileAtomicTest, WritesAndReplacesWithNothingLeftOver) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir / "f", std::string_view("first")).ok());
  EXPECT_EQ(Read(dir / "f"), "first");
  ASSERT_TRUE(WriteFileAtomic(dir / "f", std::string_view("second, longer")).ok());
  EXPECT_EQ(Read(dir / "f"), "second, longer");
  EXPECT_EQ(CountFiles(dir.path()), 1u);
}

TEST(WriteFileAtomicTest, AFailedWriteLeavesTheOldFile) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir / "f", std::string_view("old")).ok());
  Status st = WriteFileAtomic(dir / "f", [](std::FILE*) {
    errno = ENOSPC;
    return false;
  });
  EXPECT_EQ(st.message(), "cannot write '" + (dir / "f") + "': No space left on device");
  EXPECT_EQ(Read(dir / "f"), "old");
  EXPECT_EQ(CountFiles(dir.path()), 1u);
  // A folder in the way: the rename fails, the temp file goes.
  fs::create_directories(dir / "d/keep");
  st = WriteFileAtomic(dir / "d", std::string_view("x"));
  EXPECT_EQ(st.message(), "cannot write '" + (dir / "d") + "': Is a directory");
  EXPECT_EQ(CountFiles(dir.path()), 2u);
  st = WriteFileAtomic(dir / "missing/f", std::string_view("x"));
  EXPECT_EQ(st.message(), "cannot write '" + (dir / "missing/f") + "': No such file or directory");
}

TEST(FileIdTest, SameFileByAnyName) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir / "a", std::string_view("a")).ok());
  ASSERT_TRUE(WriteFileAtomic(dir / "b", std::string_view("b")).ok());
  fs::create_hard_link(dir / "a", dir / "hard");
  fs::create_symlink("a", dir / "soft");
  EXPECT_TRUE(GetFileId(dir / "a").has_value());
  EXPECT_EQ(GetFileId(dir / "a"), GetFileId(dir / "hard"));
  EXPECT_EQ(GetFileId(dir / "a"), GetFileId(dir / "soft"));
  EXPECT_EQ(GetFileId(dir / "a"), GetFileId(dir.path() + "/./a"));
  EXPECT_NE(GetFileId(dir / "a"), GetFileId(dir / "b"));
  EXPECT_FALSE(GetFileId(dir / "none").has_value());
}

}  // namespace
}  // namespace foundry
