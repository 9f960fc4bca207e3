// A test fixture with a fresh scratch folder per test case (removed afterwards), where the CLI
// tests run the binaries (tests/support/exec.h) and keep their files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace foundry {

class ScratchDirTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (std::filesystem::path(testing::TempDir()) /
            (std::string(info->test_suite_name()) + "_" + std::to_string(getpid()) + "_" +
             info->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  // The files in the folder (not below it), sorted, without the captured stdout/stderr.
  std::vector<std::string> Files() const {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) != 0 && name.rfind("stderr.", 0) != 0) files.push_back(name);
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  std::string dir_;
};

}  // namespace foundry
