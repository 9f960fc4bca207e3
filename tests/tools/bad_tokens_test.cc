// Token ids outside the vocabulary (issue 19, class 9): `foundry-run --feed input_ids=FILE.pb`
// with -1 used to train as token 255 (ONNX Gather reads a negative index from the end) while
// --data rejected the same id. One check for both (runtime/data.h TokenOutsideVocabulary): the
// same one-line error naming the option, the value and the position, exit 1, nothing written,
// the inputs untouched. Labels may hold ignore_index (-100) and are not checked as tokens.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "compiler/tensor_proto.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kModel = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny/model.onnx";
constexpr int64_t kVocab = 256;  // mpt_tiny's embedding rows

class BadTokensTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    ExecResult r =
        Exec(kCompile, {kModel, "--dim", "batch=2", "--dim", "seq=16", "-o", Path("mpt")}, dir_);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  // A [2,16] token tensor (i64, or i32 when `i32`), 1 everywhere but `id` at flat `position`.
  std::string Tokens(const std::string& name, int64_t position, int64_t id,
                     const std::string& input = "input_ids") {
    Tensor t(DType::kInt64, {2, 16});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = i == position ? id : 1;
    EXPECT_TRUE(WriteTensorFile(Path(name), t, input).ok());
    return Path(name);
  }
  // Inode, size, mtime and content of every file in the folder and of the model.
  std::map<std::string, std::string> Snapshot() const {
    std::map<std::string, std::string> out;
    std::vector<std::string> paths = {kModel};
    for (const auto& f : Files()) paths.push_back(Path(f));
    for (const auto& p : paths) {
      struct stat st {};
      ::stat(p.c_str(), &st);
      out[p] = std::to_string(st.st_ino) + " " + std::to_string(st.st_size) + " " +
               std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
               std::to_string(std::hash<std::string>{}(ReadWholeFile(p)));
    }
    return out;
  }
  void ExpectCleanError(std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), Path("mpt"));
    args.insert(args.end(),
                {"--steps", "1", "--save", Path("saved"), "--report-json", Path("report.json")});
    const auto before = Snapshot();
    ExecResult r = Exec(kRun, args, dir_);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-run: error: " + message + "\n");
    EXPECT_TRUE(Snapshot() == before) << testing::PrintToString(args);
    EXPECT_FALSE(fs::exists(Path("saved")));
    EXPECT_FALSE(fs::exists(Path("report.json")));
  }
};

TEST_F(BadTokensTest, FedTokenIdsOutsideTheVocabularyAreTheDataError) {
  // -1 at [1,3] (position 19), the vocabulary's size at [0,0], a large one at the end.
  const std::string labels = "labels=" + Tokens("labels.pb", 0, 1, "labels");
  const std::string minus = Tokens("minus.pb", 19, -1);
  ExpectCleanError({"--feed", "input_ids=" + minus, "--feed", labels},
                   "--feed input_ids=" + minus +
                       ": token -1 at position 19 (element [1,3]) is outside the vocabulary [0, "
                       "256)");
  const std::string vocab = Tokens("vocab.pb", 0, kVocab);
  ExpectCleanError({"--feed", "input_ids=" + vocab, "--feed", labels},
                   "--feed input_ids=" + vocab +
                       ": token 256 at position 0 (element [0,0]) is outside the vocabulary [0, "
                       "256)");
  const std::string big = Tokens("big.pb", 31, INT64_MIN);
  ExpectCleanError({"--feed", labels, "--feed", "input_ids=" + big},
                   "--feed input_ids=" + big + ": token " + std::to_string(INT64_MIN) +
                       " at position 31 (element [1,15]) is outside the vocabulary [0, 256)");
  // The same -1 through --data (int32 tokens): the same words.
  {
    std::ofstream out(Path("minus.bin"), std::ios::binary);
    for (int i = 0; i < 40; ++i) {
      const int32_t t = i == 19 ? -1 : 1;
      out.write(reinterpret_cast<const char*>(&t), 4);
    }
  }
  ExpectCleanError({"--data", Path("minus.bin"), "--data-dtype", "int32"},
                   "--data " + Path("minus.bin") +
                       ": token -1 at position 19 is outside the vocabulary [0, 256)");
}

TEST_F(BadTokensTest, LabelsMayHoldIgnoreIndexAndGoodIdsTrain) {
  const std::string ids = Tokens("ids.pb", 0, kVocab - 1);  // the last id is in the vocabulary
  const std::string labels = Tokens("labels.pb", 5, -100, "labels");
  ExecResult r = Exec(
      kRun,
      {Path("mpt"), "--steps", "1", "--feed", "input_ids=" + ids, "--feed", "labels=" + labels},
      dir_);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace foundry
