#include "base/bytes.h"

#include <gtest/gtest.h>

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(BytesTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(50381), "49.2 KiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 20), "3.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{13} << 30), "13.0 GiB");
}

// The memory line's precision: the unit changes where the count reaches it, not where the
// rounded figure would.
TEST(BytesTest, HumanBytesWithTwoDecimals) {
  EXPECT_EQ(HumanBytes(512, 2), "512 B");
  EXPECT_EQ(HumanBytes(3328, 2), "3.25 KiB");
  EXPECT_EQ(HumanBytes((int64_t{1} << 20) - 1, 2), "1024.00 KiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 19, 2), "1.50 MiB");
  EXPECT_EQ(HumanBytes(int64_t{2} << 30, 2), "2.00 GiB");
  EXPECT_EQ(HumanBytes(int64_t{5} << 40, 2), "5.00 TiB");
}

TEST(BytesTest, InMiB) {
  EXPECT_EQ(InMiB(0), "0.00 MiB");
  EXPECT_EQ(InMiB(387973), "0.37 MiB");
  EXPECT_EQ(InMiB(int64_t{3} << 30), "3072.00 MiB");
  EXPECT_EQ(InMiB(int64_t{3} << 19, 1), "1.5 MiB");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
