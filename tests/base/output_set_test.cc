#include "base/output_set.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

class OutputSetTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("output_set_test_" + std::to_string(getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void Put(const std::string& name, const std::string& bytes) const {
    std::ofstream(P(name), std::ios::binary) << bytes;
  }
  // Every entry under the test folder.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      names.push_back(fs::relative(e.path(), dir_).string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

TEST_F(OutputSetTest, CommitsEveryFileTogetherAndLeavesNoTemporaries) {
  Put("a", "old a");
  OutputSet out;
  ASSERT_TRUE(out.AddFile(P("a"), "--a").ok());
  ASSERT_TRUE(out.AddFile(P("sub/b"), "--b", {true, /*make_parents=*/true}).ok());
  ASSERT_TRUE(out.Write(P("a"), "new a").ok());
  ASSERT_TRUE(out.Write(P("sub/b"), "b").ok());
  EXPECT_EQ(Read(P("a")), "old a");  // nothing in place before the commit
  ASSERT_TRUE(out.Commit().ok());
  EXPECT_EQ(Read(P("a")), "new a");
  EXPECT_EQ(Read(P("sub/b")), "b");
  EXPECT_EQ(Entries(), (std::vector<std::string>{"a", "sub", "sub/b"}));
}

TEST_F(OutputSetTest, AbortLeavesEverythingAsItWasFoldersIncluded) {
  Put("a", "old a");
  {
    OutputSet out;
    ASSERT_TRUE(out.AddFile(P("a"), "--a").ok());
    ASSERT_TRUE(out.AddFile(P("x/y/b"), "--b", {true, true}).ok());
    ASSERT_TRUE(out.Write(P("a"), "new a").ok());
    ASSERT_TRUE(out.Write(P("x/y/b"), "b").ok());
  }  // destroyed without Commit
  EXPECT_EQ(Read(P("a")), "old a");
  EXPECT_EQ(Entries(), (std::vector<std::string>{"a"}));
}

// The second rename fails (a folder appeared where the file goes): the first is undone.
TEST_F(OutputSetTest, AFailedRenameUndoesTheOnesBefore) {
  Put("a", "old a");
  OutputSet out;
  ASSERT_TRUE(out.AddFile(P("a"), "--a").ok());
  ASSERT_TRUE(out.AddFile(P("b"), "--b").ok());
  ASSERT_TRUE(out.Write(P("a"), "new a").ok());
  ASSERT_TRUE(out.Write(P("b"), "b").ok());
  fs::create_directories(P("b/in_the_way"));
  Status st = out.Commit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--b '" + P("b") + "': cannot write it"), std::string::npos)
      << st.message();
  EXPECT_EQ(Read(P("a")), "old a");
  EXPECT_EQ(Entries(), (std::vector<std::string>{"a", "b", "b/in_the_way"}));
}

TEST_F(OutputSetTest, AFolderIsSwappedWholeAndRestoredOnFailure) {
  fs::create_directories(P("save"));
  Put("save/old", "1");
  {
    OutputSet out;
    ASSERT_TRUE(out.AddFolder(P("save"), "--save").ok());
    ASSERT_TRUE(out.AddFile(P("r"), "--r").ok());
    auto staged = out.Stage(P("save"));
    ASSERT_TRUE(staged.ok());
    std::ofstream(*staged + "/new") << "2";
    ASSERT_TRUE(out.Write(P("r"), "r").ok());
    fs::create_directories(P("r/in_the_way"));
    ASSERT_FALSE(out.Commit().ok());
  }
  EXPECT_EQ(Entries(), (std::vector<std::string>{"r", "r/in_the_way", "save", "save/old"}));
  fs::remove_all(P("r"));
  OutputSet out;
  ASSERT_TRUE(out.AddFolder(P("save"), "--save").ok());
  auto staged = out.Stage(P("save"));
  ASSERT_TRUE(staged.ok());
  std::ofstream(*staged + "/new") << "2";
  ASSERT_TRUE(out.Commit().ok());
  EXPECT_EQ(Entries(), (std::vector<std::string>{"save", "save/new"}));
}

TEST_F(OutputSetTest, ChecksNamesAtOnce) {
  Put("in", "input");
  fs::create_directories(P("folder"));
  OutputSet out;
  ASSERT_TRUE(out.AddInput(P("in"), "the model, an input of this command").ok());
  EXPECT_EQ(out.AddFile("", "--r").message(), "--r: the name is empty; give a file name");
  EXPECT_EQ(out.AddFile(P("folder"), "--r").message(),
            "--r '" + P("folder") + "': it is a folder; give a file name");
  EXPECT_EQ(out.AddFile(P("in"), "--r").message(),
            "--r '" + P("in") + "': writing it would change '" + P("in") +
                "', the model, an input of this command; choose another file");
  EXPECT_EQ(out.AddFile(P("missing/f"), "--r").message(), "--r '" + P("missing/f") +
                                                              "': the folder '" + P("missing") +
                                                              "' does not exist; create it first");
  ASSERT_TRUE(out.AddFolder(P("save"), "--save").ok());
  EXPECT_EQ(out.AddFile(P("save/x"), "--r").message(),
            "--r '" + P("save/x") + "' and --save '" + P("save") +
                "' overlap (one is inside the other folder); give each output its own place");
  ASSERT_TRUE(out.AddFile(P("f"), "--r").ok());
  EXPECT_EQ(out.AddFile(P("./f"), "--t").message(), "--t '" + P("./f") +
                                                        "' is also the output of --r '" + P("f") +
                                                        "'; give each output its own name");
  const std::string name(256, 'x');
  EXPECT_EQ(out.AddFile(P(name), "--r").message(),
            "--r '" + P(name) + "': the name '" + name +
                "' is 256 bytes, more than the 255 a file name may have; choose a shorter one");
}

}  // namespace
}  // namespace foundry
