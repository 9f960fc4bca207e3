#include "runtime/data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// ---- data ----------------------------------------------------------------------------------

TEST(DataTest, WindowsWrapAround) {
  TempDir dir;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 23; ++i) tokens.push_back(i);
  WriteTokens(dir / "d.bin", tokens, TokenDType::kUint16);
  auto f = TokenFile::Open(dir / "d.bin", TokenDType::kUint16);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->num_tokens(), 23);
  // 23 tokens hold 4 whole windows of 5 (the 3-token tail is never read): window 4 is window 0.
  std::vector<int64_t> w(5);
  ASSERT_TRUE(f->ReadWindow(3, 5, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{15, 16, 17, 18, 19}));
  ASSERT_TRUE(f->ReadWindow(4, 5, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ASSERT_TRUE(f->ReadWindow(9, 5, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{5, 6, 7, 8, 9}));
  // Vocabulary check names the first bad position.
  Status st = f->ReadWindow(2, 5, 12, w.data());
  EXPECT_EQ(st.message(), "--data " + (dir / "d.bin") +
                              ": token 12 at position 12 is outside the vocabulary [0, 12)");
  // A window longer than the file.
  st = f->ReadWindow(0, 24, 0, w.data());
  EXPECT_EQ(st.message(), "--data " + (dir / "d.bin") +
                              ": 23 tokens is shorter than one window of seq + 1 = 24 tokens");
}

TEST(DataTest, Int32AndErrors) {
  TempDir dir;
  WriteTokens(dir / "i.bin", {70000, 1, -3, 4}, TokenDType::kInt32);
  auto f = TokenFile::Open(dir / "i.bin", TokenDType::kInt32);
  ASSERT_TRUE(f.ok());
  std::vector<int64_t> w(2);
  ASSERT_TRUE(f->ReadWindow(0, 2, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{70000, 1}));
  EXPECT_EQ(
      f->ReadWindow(1, 2, 100, w.data()).message(),
      "--data " + (dir / "i.bin") + ": token -3 at position 2 is outside the vocabulary [0, 100)");
  // 16 bytes are 8 uint16 tokens but 5 bytes are no whole number of them.
  { std::ofstream(dir / "odd.bin", std::ios::binary) << "abcde"; }
  EXPECT_EQ(TokenFile::Open(dir / "odd.bin", TokenDType::kUint16).status().message(),
            "--data " + (dir / "odd.bin") +
                ": 5 bytes is not a whole number of uint16 tokens; is --data-dtype right?");
  EXPECT_EQ(TokenFile::Open(dir / "none.bin", TokenDType::kUint16).status().message(),
            "--data " + (dir / "none.bin") + ": cannot open it: No such file or directory");
  EXPECT_EQ(ParseTokenDType("u8").status().message(),
            "--data-dtype u8: choose auto, uint16 or int32");
  EXPECT_EQ(ParseTokenDType("uint32").status().message(),
            "--data-dtype uint32: choose auto, uint16 or int32");
}

// ---- the three token formats -----------------------------------------------------------------

// A token file as llm.c's dev/data/data_common.py write_datafile writes it: header =
// np.zeros(256, dtype=np.int32); header[0] = magic; header[1] = version; header[2] = len(toks);
// then the tokens as uint16 (gpt-2: 20240520, 1) or uint32 (llama-3: 20240801, 7), little-endian.
// `count` is written as header[2] (len(toks) unless a test damages it).
void WriteLlmc(const std::string& path, int32_t magic, int32_t version, int64_t count,
               const std::vector<int64_t>& tokens, int width) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(count);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  for (int64_t t : tokens) {
    if (width == 2) {
      const uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

// Every window of `window` tokens of the file (`windows` of them).
std::vector<std::vector<int64_t>> AllWindows(const TokenFile& f, int64_t window, int64_t windows) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t k = 0; k < windows; ++k) {
    std::vector<int64_t> w(static_cast<size_t>(window));
    EXPECT_TRUE(f.ReadWindow(k, window, 0, w.data()).ok());
    out.push_back(w);
  }
  return out;
}

TEST(TokenFormatTest, LlmcFileReadsTheSameWindowsAsTheRawFileOfItsTokens) {
  TempDir dir;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back((i * 7919) % 50257);  // GPT-2's vocabulary
  WriteLlmc(dir / "gpt2.bin", kLlmcMagicGpt2, 1, 1000, tokens, 2);
  WriteTokens(dir / "raw.bin", tokens, TokenDType::kUint16);
  // The header is exactly 256 int32: 1024 + 2 bytes per token.
  EXPECT_EQ(std::filesystem::file_size(dir / "gpt2.bin"), 1024u + 2000u);
  for (TokenDType asked : {TokenDType::kAuto, TokenDType::kUint16}) {
    auto llmc = TokenFile::Open(dir / "gpt2.bin", asked);
    ASSERT_TRUE(llmc.ok()) << llmc.status().message();
    EXPECT_EQ(llmc->num_tokens(), 1000);
    EXPECT_EQ(llmc->dtype(), TokenDType::kUint16);
    EXPECT_EQ(llmc->llmc_version(), 1);
    EXPECT_EQ(llmc->DescribeFormat(), "llm.c v1 header, uint16, 1000 tokens");
    auto raw = TokenFile::Open(dir / "raw.bin", asked);
    ASSERT_TRUE(raw.ok()) << raw.status().message();
    EXPECT_EQ(raw->DescribeFormat(), "no header, uint16, 1000 tokens");
    // 58 windows of 17 (the 14-token tail is never read), and the wrap-around.
    EXPECT_EQ(AllWindows(*llmc, 17, 60), AllWindows(*raw, 17, 60));
    std::vector<int64_t> w(17);
    ASSERT_TRUE(llmc->ReadWindow(58, 17, 0, w.data()).ok());
    EXPECT_EQ(w, std::vector<int64_t>(tokens.begin(), tokens.begin() + 17));
  }
  // The vocabulary check counts positions after the header.
  auto llmc = TokenFile::Open(dir / "gpt2.bin", TokenDType::kAuto);
  std::vector<int64_t> w(17);
  EXPECT_EQ(llmc->ReadWindow(0, 17, 7919, w.data()).message(),
            "--data " + (dir / "gpt2.bin") +
                ": token 7919 at position 1 is outside the vocabulary [0, 7919)");

  // llama-3's header: uint32 tokens (ids past 65535), with auto or the 4-byte --data-dtype int32.
  std::vector<int64_t> big;
  for (int i = 0; i < 100; ++i) big.push_back(128000 + i);
  WriteLlmc(dir / "llama.bin", kLlmcMagicLlama3, 7, 100, big, 4);
  for (TokenDType asked : {TokenDType::kAuto, TokenDType::kInt32}) {
    auto llama = TokenFile::Open(dir / "llama.bin", asked);
    ASSERT_TRUE(llama.ok()) << llama.status().message();
    EXPECT_EQ(llama->DescribeFormat(), "llm.c v7 header, uint32, 100 tokens");
    std::vector<int64_t> v(10);
    ASSERT_TRUE(llama->ReadWindow(1, 10, 128256, v.data()).ok());
    EXPECT_EQ(v, std::vector<int64_t>(big.begin() + 10, big.begin() + 20));
  }
}

TEST(TokenFormatTest, LlmcHeaderErrors) {
  TempDir dir;
  const std::vector<int64_t> tokens = {1, 2, 3, 4, 5};
  auto open = [&](const std::string& name, TokenDType dtype = TokenDType::kAuto) {
    return TokenFile::Open(dir / name, dtype).status().message();
  };
  // The count disagrees with the size: a truncated download, or a count of another width.
  WriteLlmc(dir / "long.bin", kLlmcMagicGpt2, 1, 6, tokens, 2);
  EXPECT_EQ(open("long.bin"), "--data " + (dir / "long.bin") +
                                  ": its llm.c header (magic 20240520, version 1) counts 6 uint16 "
                                  "tokens, 1024 + 6 * 2 = 1036 bytes, but the file is 1034 bytes "
                                  "(truncated, or not written by llm.c's write_datafile?)");
  WriteLlmc(dir / "neg.bin", kLlmcMagicGpt2, 1, -1, tokens, 2);
  EXPECT_EQ(open("neg.bin"), "--data " + (dir / "neg.bin") +
                                 ": its llm.c header (magic 20240520, version 1) counts -1 uint16 "
                                 "tokens, 1024 + -1 * 2 = 1022 bytes, but the file is 1034 bytes "
                                 "(truncated, or not written by llm.c's write_datafile?)");
  // The same check reads the header whatever --data-dtype says.
  EXPECT_EQ(open("long.bin", TokenDType::kInt32), open("long.bin"));
  // An explicit dtype of another width than the header's.
  WriteLlmc(dir / "gpt2.bin", kLlmcMagicGpt2, 1, 5, tokens, 2);
  EXPECT_EQ(open("gpt2.bin", TokenDType::kInt32),
            "--data " + (dir / "gpt2.bin") +
                ": has an llm.c header (magic 20240520, version 1: uint16 tokens) but "
                "--data-dtype int32 was given; drop --data-dtype (auto reads the header)");
  WriteLlmc(dir / "llama.bin", kLlmcMagicLlama3, 7, 5, tokens, 4);
  EXPECT_EQ(open("llama.bin", TokenDType::kUint16),
            "--data " + (dir / "llama.bin") +
                ": has an llm.c header (magic 20240801, version 7: uint32 tokens) but "
                "--data-dtype uint16 was given; drop --data-dtype (auto reads the header)");
  // Versions llm.c does not write for the magic.
  WriteLlmc(dir / "v2.bin", kLlmcMagicGpt2, 2, 5, tokens, 2);
  EXPECT_EQ(open("v2.bin"), "--data " + (dir / "v2.bin") +
                                ": has an llm.c header with magic 20240520, version 2, which "
                                "foundry does not read (it reads magic 20240520 version 1: uint16 "
                                "tokens, and magic 20240801 version 7: uint32 tokens)");
  // llm.c's eval file (HellaSwag, MMLU) is not a token stream.
  WriteLlmc(dir / "eval.bin", kLlmcMagicEval, 1, 5, tokens, 2);
  EXPECT_EQ(open("eval.bin"),
            "--data " + (dir / "eval.bin") +
                ": is llm.c's eval file (magic 20240522: multiple-choice "
                "examples), not a token file; pass a token .bin (magic 20240520)");
  // The magic, then less than a header.
  {
    const int32_t head[3] = {kLlmcMagicGpt2, 1, 0};
    std::ofstream(dir / "short.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(head), 12);
  }
  EXPECT_EQ(open("short.bin"), "--data " + (dir / "short.bin") +
                                   ": starts with llm.c's magic 20240520 but is 12 bytes, shorter "
                                   "than its 1024-byte header (was the file truncated?)");
  // An empty token file with a header is a file of 0 tokens.
  WriteLlmc(dir / "empty.bin", kLlmcMagicGpt2, 1, 0, {}, 2);
  auto empty = TokenFile::Open(dir / "empty.bin", TokenDType::kAuto);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(empty->num_tokens(), 0);
  // A raw file whose size is not a whole number of tokens.
  WriteTokens(dir / "three.bin", {1, 2, 3}, TokenDType::kUint16);
  EXPECT_EQ(open("three.bin", TokenDType::kInt32),
            "--data " + (dir / "three.bin") +
                ": 6 bytes is not a whole number of int32 tokens; is --data-dtype right?");
}

// The int32 guard (data.h kInt32SniffMinPairs): an int32 file read by default as uint16 has a
// high half of 0..3 in every second uint16; a uint16 file has that only if every other token of
// its first 1,024 or more is one of the ids 0..3.
const std::string kLooksInt32 =
    " bytes every second uint16 is 0..3, the high half of an int32 id below 262144; pass "
    "--data-dtype int32 (or --data-dtype uint16 if it is uint16)";

TEST(TokenFormatTest, Int32FileReadAsTheDefaultIsRefused) {
  TempDir dir;
  std::vector<int64_t> ids;
  for (int i = 0; i < 4096; ++i) ids.push_back((i * 7919) % 50257);
  WriteTokens(dir / "i32.bin", ids, TokenDType::kInt32);
  EXPECT_EQ(TokenFile::Open(dir / "i32.bin", TokenDType::kAuto).status().message(),
            "--data " + (dir / "i32.bin") +
                ": looks like int32 tokens, not uint16: in its first 16384" + kLooksInt32);
  // Read as what it is, or as uint16 when the user insists.
  auto f = TokenFile::Open(dir / "i32.bin", TokenDType::kInt32);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->DescribeFormat(), "no header, int32, 4096 tokens");
  std::vector<int64_t> w(4);
  ASSERT_TRUE(f->ReadWindow(1, 4, 50257, w.data()).ok());
  EXPECT_EQ(w, std::vector<int64_t>(ids.begin() + 4, ids.begin() + 8));
  EXPECT_TRUE(TokenFile::Open(dir / "i32.bin", TokenDType::kUint16).ok());
  // Ids up to 262143 (llama-3's 128256, Gemma's 256000) are caught; the sample is 1 MiB.
  std::vector<int64_t> llama(300000);
  for (size_t i = 0; i < llama.size(); ++i) llama[i] = (static_cast<int64_t>(i) * 7919) % 262144;
  WriteTokens(dir / "llama.bin", llama, TokenDType::kInt32);
  EXPECT_EQ(TokenFile::Open(dir / "llama.bin", TokenDType::kAuto).status().message(),
            "--data " + (dir / "llama.bin") +
                ": looks like int32 tokens, not uint16: in its first 1048576" + kLooksInt32);
  // The threshold: 512 int32 tokens are refused, 511 are not (too few to tell).
  WriteTokens(dir / "512.bin", std::vector<int64_t>(ids.begin(), ids.begin() + 512),
              TokenDType::kInt32);
  EXPECT_EQ(TokenFile::Open(dir / "512.bin", TokenDType::kAuto).status().message(),
            "--data " + (dir / "512.bin") +
                ": looks like int32 tokens, not uint16: in its first 2048" + kLooksInt32);
  WriteTokens(dir / "511.bin", std::vector<int64_t>(ids.begin(), ids.begin() + 511),
              TokenDType::kInt32);
  EXPECT_TRUE(TokenFile::Open(dir / "511.bin", TokenDType::kAuto).ok());
}

TEST(TokenFormatTest, Uint16FilesWithManyZerosAreRead) {
  TempDir dir;
  auto opens = [&](const std::string& name, const std::vector<int64_t>& tokens) {
    WriteTokens(dir / name, tokens, TokenDType::kUint16);
    auto f = TokenFile::Open(dir / name, TokenDType::kAuto);
    EXPECT_TRUE(f.ok()) << name << ": " << f.status().message();
    return f.ok() && f->dtype() == TokenDType::kUint16;
  };
  // 95% zeros (padding), at places drawn by an LCG, the rest GPT-2 ids.
  std::vector<int64_t> padded(100000);
  uint64_t x = 1;
  for (auto& t : padded) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = (x >> 33) % 100 < 95 ? 0 : static_cast<int64_t>((x >> 20) % 50257);
  }
  EXPECT_TRUE(opens("padded.bin", padded));
  // All zeros; only ids 0..3 (a 4-token vocabulary); zeros at every other place but one.
  EXPECT_TRUE(opens("zeros.bin", std::vector<int64_t>(4096, 0)));
  std::vector<int64_t> small(4096);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<int64_t>(i % 4);
  EXPECT_TRUE(opens("small.bin", small));
  std::vector<int64_t> alternating(4096);
  for (size_t i = 0; i < alternating.size(); i += 2) alternating[i] = 1000;
  alternating[4095] = 4;  // one token of the 2,048 in odd places is not 0..3
  EXPECT_TRUE(opens("alternating.bin", alternating));
  // ... whereas with that one back to 0 the file is the int32 signature: refused.
  alternating[4095] = 0;
  WriteTokens(dir / "signature.bin", alternating, TokenDType::kUint16);
  EXPECT_FALSE(TokenFile::Open(dir / "signature.bin", TokenDType::kAuto).ok());
  // An odd number of uint16 cannot be int32: never refused.
  alternating.push_back(5);
  EXPECT_TRUE(opens("odd.bin", alternating));
}

TEST(TokenFormatTest, FirstTokensOutsideTheVocabularySayWhichWidthFits) {
  TempDir dir;
  std::vector<int64_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back((i * 37) % 256);
  // uint16 tokens read as int32: pairs make ids past the vocabulary; uint16 fits.
  WriteTokens(dir / "u16.bin", ids, TokenDType::kUint16);
  auto f = TokenFile::Open(dir / "u16.bin", TokenDType::kInt32);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->CheckFirstTokens(150, 256).message(),
            "--data " + (dir / "u16.bin") +
                ": token 2424832 at position 0 is outside the vocabulary [0, 256); read as uint16 "
                "(--data-dtype uint16) its first 300 tokens are all in the vocabulary");
  // int32 tokens (too few for the guard) read as uint16: an id in [0, vocab) has both halves in
  // [0, vocab) (70000 = 1 * 65536 + 4464), so the vocabulary cannot tell; the guard of Open is
  // what catches a file of 512 tokens or more.
  WriteTokens(dir / "i32.bin", {70000, 70001, 70002, 70003}, TokenDType::kInt32);
  f = TokenFile::Open(dir / "i32.bin", TokenDType::kAuto);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->CheckFirstTokens(8, 70004).ok());
  // Neither width fits: the plain error.
  f = TokenFile::Open(dir / "i32.bin", TokenDType::kInt32);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->CheckFirstTokens(4, 4000).message(),
            "--data " + (dir / "i32.bin") +
                ": token 70000 at position 0 is outside the vocabulary [0, 4000)");
  // An llm.c file's width is its header's: no other width is offered.
  WriteLlmc(dir / "gpt2.bin", kLlmcMagicGpt2, 1, 300, ids, 2);
  f = TokenFile::Open(dir / "gpt2.bin", TokenDType::kAuto);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->CheckFirstTokens(300, 200).message(),
            "--data " + (dir / "gpt2.bin") +
                ": token 222 at position 6 is outside the vocabulary [0, 200)");
}

TEST(TokenFormatTest, LabelRuleNames) {
  for (LabelRule r : {LabelRule::kAuto, LabelRule::kShifted, LabelRule::kSame})
    EXPECT_EQ(*ParseLabelRule(LabelRuleName(r)), r);
  EXPECT_EQ(ParseLabelRule("next").status().message(),
            "--labels next: choose auto, shifted or same");
}

TEST(DataTest, BatchShiftFollowsLossConvention) {
  // Two windows of seq + 1 = 4 tokens.
  std::vector<int64_t> windows = {1, 2, 3, 4, 5, 6, 7, 8};
  TokenBatch in_model =
      MakeTokenBatch(windows, 2, 3, /*shift=*/false, DType::kInt64, DType::kInt64);
  EXPECT_EQ(in_model.input_ids.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(in_model.labels.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  TokenBatch appended = MakeTokenBatch(windows, 2, 3, /*shift=*/true, DType::kInt32, DType::kInt64);
  EXPECT_EQ(appended.input_ids.dtype(), DType::kInt32);
  EXPECT_EQ(appended.input_ids.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(appended.labels.ToInt64Vector(), (std::vector<int64_t>{2, 3, 4, 6, 7, 8}));
}

TEST(DataTest, SyntheticTokensAreSeededAndInRange) {
  std::vector<int64_t> a(1000), b(1000), c(1000);
  SyntheticWindow(5, 3, 1000, 7, a.data());
  SyntheticWindow(5, 3, 1000, 7, b.data());
  SyntheticWindow(5, 4, 1000, 7, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int> seen(7, 0);
  for (int64_t t : a) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 7);
    ++seen[t];
  }
  for (int n : seen) EXPECT_GT(n, 100);  // ~143 each
}

// ---- trainer -------------------------------------------------------------------------------

}  // namespace
}  // namespace foundry
