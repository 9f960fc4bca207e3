#include "runtime/data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <vector>

#include "tests/support/test_util.h"

namespace foundry {
namespace {

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
  EXPECT_EQ(ParseTokenDType("u8").status().message(), "--data-dtype u8: choose uint16 or int32");
}

TEST(DataTest, BatchShiftFollowsLossConvention) {
  // Two windows of seq + 1 = 4 tokens.
  std::vector<int64_t> windows = {1, 2, 3, 4, 5, 6, 7, 8};
  TokenBatch in_model = MakeTokenBatch(windows, 2, 3, true, DType::kInt64, DType::kInt64);
  EXPECT_EQ(in_model.input_ids.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(in_model.labels.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  TokenBatch appended = MakeTokenBatch(windows, 2, 3, false, DType::kInt32, DType::kInt64);
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
