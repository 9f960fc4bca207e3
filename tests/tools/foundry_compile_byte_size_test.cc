// `--memory-budget SIZE`: ParseByteSize reads any number of digits exactly
// (0.000…01TiB with 31 digits is below one byte, not "too large"), says "too large" only past
// int64, and every rejection is one line naming the text and the accepted forms; foundry-compile
// turns each into the usage error (exit 2, one line, nothing written, the model untouched).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "passes/ckpt_budget.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

const std::string kForms =
    "; write bytes or a number with a unit: 123456789, 512MiB, 20 GiB, 1.5GB (KiB MiB GiB TiB "
    "are powers of 1024, KB MB GB TB of 1000)";
const std::string kThirtyOneDigits = "0." + std::string(30, '0') + "1";  // 31 after the point

TEST(ParseByteSizeTest, AcceptsExactly) {
  const std::pair<std::string, int64_t> ok[] = {
      {"1 GiB", int64_t{1} << 30},
      {"20gib", int64_t{20} << 30},
      {"  20 GiB  ", int64_t{20} << 30},
      {"0.5GiB", int64_t{1} << 29},
      {"1.0", 1},        // trailing zeros: a whole number of bytes
      {"1.3KiB", 1331},  // 1331.2 rounds down
      {"0.001KiB", 1},   // 1.024
      {"0.1KB", 100},
      {"0000000000000000000000000000001GiB", int64_t{1} << 30},
      {"1." + std::string(40, '0') + "GiB", int64_t{1} << 30},
      // 0.999… (60 nines) of a KiB is 1023.99…: every digit counts, it rounds down to 1023.
      {"0." + std::string(60, '9') + "KiB", 1023},
      {"1.5" + std::string(60, '0') + "1KiB", 1536},
      {"9223372036854775807", INT64_MAX},
      {"8388607.999999999999TiB", 9223372036854775806},
  };
  for (const auto& [text, bytes] : ok) {
    auto v = ParseByteSize(text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status().message();
    EXPECT_EQ(*v, bytes) << text;
  }
}

TEST(ParseByteSizeTest, RejectsWithOneLine) {
  const std::pair<std::string, std::string> bad[] = {
      {kThirtyOneDigits + "TiB", "it is below one byte"},
      {"0.0000000001GiB", "it is below one byte"},  // 0.107 bytes
      {"0GiB", "it must be more than 0 bytes"},
      {"0.000GiB", "it must be more than 0 bytes"},
      {" ", "it does not start with a number"},
      {"", "it does not start with a number"},
      {"GiB", "it does not start with a number"},
      {"nanGiB", "it does not start with a number"},
      {"infGiB", "it does not start with a number"},
      {"-1GiB", "it is negative"},
      {"+1GiB", "it has a sign"},
      {"1e3GiB", "unknown unit 'e3GiB'"},
      {"0x10", "unknown unit 'x10'"},
      {"20 GiBs", "unknown unit 'GiBs'"},
      {"1.5", "bytes are whole"},
      {"1.GiB", "no digits after the decimal point"},
      {".5GiB", "no digits before the decimal point"},
      {"9223372036854775808", "too large: more than 9223372036854775807 bytes"},
      {"8388608TiB", "too large: more than 9223372036854775807 bytes"},
      {"9000000000TiB", "too large: more than 9223372036854775807 bytes"},
      {"1" + std::string(30, '0') + "B", "too large: more than 9223372036854775807 bytes"},
  };
  for (const auto& [text, why] : bad) {
    auto v = ParseByteSize(text);
    ASSERT_FALSE(v.ok()) << text << " = " << *v;
    EXPECT_EQ(v.status().message(), "'" + text + "' is not a byte size (" + why + ")" + kForms);
  }
  // Control characters are escaped and a long text is cut: the line stays one short line.
  auto v = ParseByteSize("1\nGiB");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "'1\\x0aGiB' is not a byte size (unknown unit '\\x0aGiB')" + kForms);
  const std::string long_text(100000, 'x');
  v = ParseByteSize(long_text);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "'" + std::string(200, 'x') +
                                      "'... (100000 characters) is not a byte size (it does "
                                      "not start with a number)" +
                                      kForms);
}

class FoundryCompileByteSizeTest : public ScratchDirTest {};

TEST_F(FoundryCompileByteSizeTest, TheCliSaysItOnOneLineAndWritesNothing) {
  const std::string model =
      std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
  struct stat before {};
  ASSERT_EQ(::stat(model.c_str(), &before), 0);
  const std::pair<std::string, std::string> cases[] = {
      {kThirtyOneDigits + "TiB", "it is below one byte"},
      {"1e3GiB", "unknown unit 'e3GiB'"},
      {"-1GiB", "it is negative"},
      {"99999999999999999999", "too large: more than 9223372036854775807 bytes"},
  };
  for (const auto& [text, why] : cases) {
    ExecResult r = Exec(
        FOUNDRY_BINARY_DIR "/foundry-compile",
        {model, "--dim", "batch=2", "--dim", "seq=16", "--memory-budget", text, "-o", Path("out")},
        dir_);
    EXPECT_EQ(r.code, 2) << text << ": " << r.err;
    EXPECT_EQ(r.err, "foundry-compile: error: --memory-budget: '" + text +
                         "' is not a byte size (" + why + ")" + kForms + "\n");
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Files().empty()) << text;
  }
  // Long decimals are read exactly either way: 9e-30 TiB is below a byte, and a 37-digit
  // 0.00001…1 TiB is 10995116 bytes, a budget the plain plan fits.
  ExecResult r = Exec(FOUNDRY_BINARY_DIR "/foundry-compile",
                      {model, "--dim", "batch=2", "--dim", "seq=16", "--memory-budget",
                       "0.000000000000000000000000000009TiB", "--dry-run"},
                      dir_);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("it is below one byte"), std::string::npos) << r.err;
  ExecResult big = Exec(FOUNDRY_BINARY_DIR "/foundry-compile",
                        {model, "--dim", "batch=2", "--dim", "seq=16", "--memory-budget",
                         "0.0000100000000000000000000000000000001TiB", "--dry-run"},
                        dir_);
  EXPECT_EQ(big.code, 0) << big.err;  // 10995116 bytes: more than the plain plan
  EXPECT_NE(big.out.find("budget 10.5 MiB (10995116 B)"), std::string::npos) << big.out;
  struct stat after {};
  ASSERT_EQ(::stat(model.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(before.st_size, after.st_size);
}

}  // namespace
}  // namespace foundry
