// Token ids outside the vocabulary: `foundry-run --feed input_ids=FILE.pb`
// with -1 used to train as token 255 (ONNX Gather reads a negative index from the end) while
// --data rejected the same id. One check for both (runtime/data.h TokenOutsideVocabulary): the
// same one-line error naming the option, the value and the position, exit 1, nothing written,
// the inputs untouched. Labels may hold ignore_index (-100) and are not checked as tokens.
// Token files in the three formats people have (llm.c's header, nanoGPT's raw uint16,
// raw int32): the same tokens train alike, a wrong width is refused, --labels overrides the rule.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "compiler/tensor_proto.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

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

// MDS data that cannot train: refused in one line before the first step, nothing written, the
// folder untouched.
TEST_F(BadTokensTest, BadMdsDataIsRefusedBeforeAnyStep) {
  const std::string mds = FOUNDRY_SOURCE_DIR "/tests/data/mds";
  ExpectCleanError({"--data", mds + "/short_samples/train"},
                   "--data " + mds +
                       "/short_samples/train: sample 5 has 12 tokens, fewer than "
                       "the plan's sequence of 16 (llm-foundry pads a short sample with the "
                       "tokenizer's pad token, and fails when it has none, as GPT-NeoX's; foundry "
                       "does not pad): write samples of 16 tokens or more (convert_dataset_hf.py "
                       "--concat_tokens 16)");
  ExpectCleanError({"--data", mds + "/mpt_tiny"},
                   "--data " + mds + "/mpt_tiny: no index.json in " + mds +
                       "/mpt_tiny (an MDS split folder has one); it holds the splits train, val: "
                       "give one (" +
                       mds + "/mpt_tiny/train)");
  ExpectCleanError({"--data", mds + "/mpt_tiny/train", "--data-dtype", "uint16"},
                   "--data " + mds +
                       "/mpt_tiny/train: --data-dtype is for token files; an MDS "
                       "folder's index.json says how its ids are stored");
  ExpectCleanError({"--data", mds + "/float_tokens/train"},
                   "--data " + mds +
                       "/float_tokens/train: column 'tokens' (ndarray:float32) "
                       "holds float32 values; token ids are integers (int32, uint16, ...)");
  // A truncated shard: its size is not index.json's.
  fs::copy(mds + "/uint16_none/train", Path("cut"));
  fs::resize_file(Path("cut/shard.00001.mds"), 100);
  ExpectCleanError({"--data", Path("cut")},
                   "--data " + Path("cut") +
                       ": shard.00001.mds has 100 bytes but index.json "
                       "says " +
                       std::to_string(fs::file_size(mds + "/uint16_none/train/shard.00001.mds")) +
                       " (truncated or replaced?)");
  ExpectCleanError({"--data", Path("cut"), "--shuffle"},
                   "--data " + Path("cut") +
                       ": shard.00001.mds has 100 bytes but index.json "
                       "says " +
                       std::to_string(fs::file_size(mds + "/uint16_none/train/shard.00001.mds")) +
                       " (truncated or replaced?)");
  ExpectCleanError({"--data", Path("nothing")},
                   "--data " + Path("nothing") + ": cannot open it: No such file or directory");
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

// ---- the three token formats ------------------------------------------------------

// The same 1,000 tokens as llm.c writes them (dev/data/data_common.py write_datafile: 256 int32 of
// header -- magic 20240520, version 1, the count -- then uint16), as nanoGPT writes them
// (np.array(ids, dtype=np.uint16).tofile: no header) and as raw int32.
class TokenFormatsTest : public BadTokensTest {
 protected:
  void SetUp() override {
    BadTokensTest::SetUp();
    for (int i = 0; i < 1000; ++i) tokens_.push_back((i * 37 + 11) % kVocab);
    std::ofstream llmc(Path("llmc.bin"), std::ios::binary),
        raw16(Path("raw16.bin"), std::ios::binary), raw32(Path("raw32.bin"), std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = static_cast<int32_t>(tokens_.size());
    llmc.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (int64_t t : tokens_) {
      const uint16_t u = static_cast<uint16_t>(t);
      const int32_t i = static_cast<int32_t>(t);
      llmc.write(reinterpret_cast<const char*>(&u), 2);
      raw16.write(reinterpret_cast<const char*>(&u), 2);
      raw32.write(reinterpret_cast<const char*>(&i), 4);
    }
  }
  // foundry-run on the plan for 2 steps with `args`, its report in `report`.
  ExecResult Train(std::vector<std::string> args, const std::string& report) {
    args.insert(args.begin(), Path("mpt"));
    args.insert(args.end(), {"--steps", "2", "--report-json", Path(report)});
    ExecResult r = Exec(kRun, args, dir_);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    return r;
  }
  // The report's first and last loss, as written (shortest round-trip decimals: equal strings are
  // equal floats).
  std::string Losses(const std::string& report) {
    nlohmann::json j = nlohmann::json::parse(ReadWholeFile(Path(report)), nullptr, false);
    if (!j.is_object() || !j.contains("loss_first")) return "";
    return j["loss_first"].dump() + " " + j["loss_last"].dump();
  }
  std::vector<int64_t> tokens_;
};

const std::string kOwnLoss =
    "  labels     labels = input_ids (window[0:seq]): the model's own loss shifts them (it slices "
    "'labels', as HF and llm-foundry do)\n";

TEST_F(TokenFormatsTest, TheThreeFormatsTrainAlike) {
  ExecResult llmc = Train({"--data", Path("llmc.bin")}, "llmc.json");
  EXPECT_NE(llmc.out.find("  data       --data " + Path("llmc.bin") +
                          " (llm.c v1 header, uint16, 1000 tokens)\n" + kOwnLoss),
            std::string::npos)
      << llmc.out;
  ExecResult raw16 = Train({"--data", Path("raw16.bin")}, "raw16.json");
  EXPECT_NE(raw16.out.find("  data       --data " + Path("raw16.bin") +
                           " (no header, uint16, 1000 tokens)\n" + kOwnLoss),
            std::string::npos)
      << raw16.out;
  ExecResult raw32 = Train({"--data", Path("raw32.bin"), "--data-dtype", "int32"}, "raw32.json");
  EXPECT_NE(raw32.out.find(" (no header, int32, 1000 tokens)\n"), std::string::npos) << raw32.out;
  ASSERT_NE(Losses("llmc.json"), "");
  EXPECT_EQ(Losses("llmc.json"), Losses("raw16.json"));
  EXPECT_EQ(Losses("llmc.json"), Losses("raw32.json"));
  EXPECT_EQ(llmc.err + raw16.err + raw32.err, "");
}

TEST_F(TokenFormatsTest, AWrongWidthIsRefused) {
  ExpectCleanError({"--data", Path("raw32.bin")},
                   "--data " + Path("raw32.bin") +
                       ": looks like int32 tokens, not uint16: in its first 4000 bytes every "
                       "second uint16 is 0..3, the high half of an int32 id below 262144; pass "
                       "--data-dtype int32 (or --data-dtype uint16 if it is uint16)");
  // uint16 read as int32: the pairs are ids past the vocabulary, and uint16 fits (986 tokens:
  // the 58 whole windows of 17).
  ExpectCleanError({"--data", Path("raw16.bin"), "--data-dtype", "int32"},
                   "--data " + Path("raw16.bin") + ": token " +
                       std::to_string(tokens_[0] + (tokens_[1] << 16)) +
                       " at position 0 is outside the vocabulary [0, 256); read as uint16 "
                       "(--data-dtype uint16) its first 986 tokens are all in the vocabulary");
  ExpectCleanError({"--data", Path("llmc.bin"), "--data-dtype", "int32"},
                   "--data " + Path("llmc.bin") +
                       ": has an llm.c header (magic 20240520, version 1: uint16 tokens) but "
                       "--data-dtype int32 was given; drop --data-dtype (auto reads the header)");
  // A truncated llm.c file.
  const std::string bytes = ReadWholeFile(Path("llmc.bin"));
  { std::ofstream(Path("cut.bin"), std::ios::binary) << bytes.substr(0, bytes.size() - 2); }
  ExpectCleanError({"--data", Path("cut.bin")},
                   "--data " + Path("cut.bin") +
                       ": its llm.c header (magic 20240520, version 1) counts 1000 uint16 tokens, "
                       "1024 + 1000 * 2 = 3024 bytes, but the file is 3022 bytes (truncated, or "
                       "not written by llm.c's write_datafile?)");
}

TEST_F(TokenFormatsTest, Uint16WithManyZerosTrains) {
  // Every other token 0 (in 94% of pairs) and the rest 0..255: a uint16 file the guard must read.
  {
    std::ofstream out(Path("zeros.bin"), std::ios::binary);
    for (int i = 0; i < 4000; ++i) {
      const uint16_t t = i % 2 == 1 ? (i % 100 == 51 ? 200 : 0) : static_cast<uint16_t>(i % 256);
      out.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  ExecResult r = Train({"--data", Path("zeros.bin")}, "zeros.json");
  EXPECT_NE(r.out.find(" (no header, uint16, 4000 tokens)\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(TokenFormatsTest, LabelsOverrideWarnsAndResumeKeepsIt) {
  ExecResult r = Train({"--data", Path("llmc.bin"), "--labels", "shifted", "--save", Path("run")},
                       "shifted.json");
  const std::string warning =
      "foundry-run: warning: --labels shifted overrides the plan's rule: the model's own loss "
      "slices 'labels' (shifts them itself, as HF and llm-foundry do), so shifted labels train it "
      "to predict the token two ahead\n";
  const std::string line =
      "  labels     labels = window[1:seq+1] (input_ids shifted by one): --labels shifted (the "
      "model has its own loss)\n";
  EXPECT_EQ(r.err, warning);
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  // Other labels, another loss.
  EXPECT_NE(Losses("shifted.json"), "");
  Train({"--data", Path("llmc.bin")}, "same.json");
  EXPECT_NE(Losses("shifted.json"), Losses("same.json"));
  // --resume keeps --labels (state.json), and --labels given now overrides it.
  ExecResult resumed = Exec(kRun, {"--resume", Path("run"), "--steps", "1"}, dir_);
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(resumed.err, warning);
  EXPECT_NE(resumed.out.find(line), std::string::npos) << resumed.out;
  resumed = Exec(kRun, {"--resume", Path("run"), "--steps", "1", "--labels", "auto"}, dir_);
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(resumed.err, "");
  EXPECT_NE(resumed.out.find(kOwnLoss), std::string::npos) << resumed.out;
}

}  // namespace
}  // namespace foundry
