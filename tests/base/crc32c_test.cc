// base/crc32c.h against the published check values (RFC 3720 B.4 and the "123456789" check).
#include "base/crc32c.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(Crc32cTest, CheckValues) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<unsigned char>(i), down[i] = 31 - i;
  EXPECT_EQ(Crc32c(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(0, up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(0, down.data(), 32), 0x113FDB5Cu);
}

// Any split of the input gives the same CRC (the 8-byte loop and the byte tail agree).
TEST(Crc32cTest, ContinuesAcrossSplits) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = Crc32c(0, s.data(), s.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000})
    EXPECT_EQ(Crc32c(Crc32c(0, s.data(), cut), s.data() + cut, s.size() - cut), whole) << cut;
}

class ChecksumFileTest : public ScratchDirTest {};

TEST_F(ChecksumFileTest, SizeAndCrcOfAFileLargerThanABlock) {
  std::string bytes((3 << 20) + 5, 'x');
  bytes[12345] = 'y';
  Write("f", bytes);
  auto sum = ChecksumFile(Path("f"));
  ASSERT_TRUE(sum.ok()) << sum.status().message();
  EXPECT_EQ(sum->bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(sum->crc32c, Crc32c(0, bytes.data(), bytes.size()));
  EXPECT_EQ(ChecksumFile(Path("missing")).status().message(),
            "cannot open '" + Path("missing") + "': No such file or directory");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
