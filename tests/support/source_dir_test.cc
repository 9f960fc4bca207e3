#include "tests/support/source_dir.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Restores FOUNDRY_SOURCE_DIR as it was (ctest may run this with it set).
class SourceDirTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("FOUNDRY_SOURCE_DIR");
    had_ = v != nullptr;
    if (had_) saved_ = v;
  }
  void TearDown() override {
    if (had_)
      setenv("FOUNDRY_SOURCE_DIR", saved_.c_str(), 1);
    else
      unsetenv("FOUNDRY_SOURCE_DIR");
  }
  bool had_ = false;
  std::string saved_;
};

TEST_F(SourceDirTest, BuildTreeWithoutTheVariable) {
  unsetenv("FOUNDRY_SOURCE_DIR");
  EXPECT_EQ(SourceDir(), std::filesystem::path(FOUNDRY_SOURCE_DIR));
  EXPECT_TRUE(std::filesystem::is_directory(SourceDir() / "models/fixtures"));
}

TEST_F(SourceDirTest, TheVariableWins) {
  setenv("FOUNDRY_SOURCE_DIR", "/tmp/gpu-check-folder", 1);
  EXPECT_EQ(SourceDir(), std::filesystem::path("/tmp/gpu-check-folder"));
}

TEST_F(SourceDirTest, EmptyMeansUnset) {
  setenv("FOUNDRY_SOURCE_DIR", "", 1);
  EXPECT_EQ(SourceDir(), std::filesystem::path(FOUNDRY_SOURCE_DIR));
}

}  // namespace
}  // namespace foundry
