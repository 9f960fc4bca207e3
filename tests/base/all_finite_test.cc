// AllFinite (base/tensor.h): one NaN or infinity anywhere, in any float dtype, makes it false.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/tensor.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

template <class T>
void ExpectCatches(DType dtype, T nan, T inf, T big) {
  Tensor t(dtype, {3, 5});
  EXPECT_TRUE(AllFinite(t));
  for (int64_t i : {int64_t{0}, int64_t{7}, int64_t{14}})
    for (T bad : {nan, inf, static_cast<T>(-inf)}) {
      Tensor u = t;
      u.data<T>()[i] = bad;
      EXPECT_FALSE(AllFinite(u)) << DTypeName(dtype) << " [" << i << "]";
    }
  t.data<T>()[4] = big;  // the largest finite value is finite
  EXPECT_TRUE(AllFinite(t));
}

TEST(AllFiniteTest, EveryFloatDType) {
  ExpectCatches<float>(DType::kFloat32, std::nanf(""), INFINITY, std::numeric_limits<float>::max());
  ExpectCatches<double>(DType::kFloat64, std::nan(""), INFINITY,
                        std::numeric_limits<double>::max());
  // Half types by their bits: NaN 0x7E00, +Inf 0x7C00, -Inf 0xFC00, max 0x7BFF (f16);
  // NaN 0x7FC0, +Inf 0x7F80, -Inf 0xFF80, max 0x7F7F (bf16).
  for (auto [dtype, nan, inf, ninf, max] :
       {std::tuple<DType, uint16_t, uint16_t, uint16_t, uint16_t>{DType::kFloat16, 0x7E00, 0x7C00,
                                                                  0xFC00, 0x7BFF},
        {DType::kBFloat16, 0x7FC0, 0x7F80, 0xFF80, 0x7F7F}}) {
    Tensor t(dtype, {4});
    t.data<uint16_t>()[1] = max;
    EXPECT_TRUE(AllFinite(t));
    for (uint16_t bad : {nan, inf, ninf}) {
      Tensor u = t;
      u.data<uint16_t>()[3] = bad;
      EXPECT_FALSE(AllFinite(u)) << DTypeName(dtype) << " " << bad;
    }
  }
}

TEST(AllFiniteTest, IntegersAreAlwaysFinite) {
  Tensor t(DType::kInt32, {2});
  t.data<int32_t>()[0] = -1;
  EXPECT_TRUE(AllFinite(t));
}

}  // namespace
}  // namespace foundry
