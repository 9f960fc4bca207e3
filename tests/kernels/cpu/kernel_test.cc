// The kernel table's poison switch (kernels/cpu/kernel.h): every test binary runs with it on, and
// an output element a kernel does not write reads back as poison, never as zero.
#include "kernels/cpu/kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(PoisonTest, OnInEveryTestBinary) { EXPECT_TRUE(PoisonKernelOutputs()); }

TEST(PoisonTest, NanForFloatsA5BytesOtherwise) {
  Tensor f(DType::kFloat32, {3}), d(DType::kFloat64, {2}), h(DType::kFloat16, {2}),
      bf(DType::kBFloat16, {2}), i(DType::kInt64, {2}), b(DType::kBool, {5});
  for (Tensor* t : {&f, &d, &h, &bf, &i, &b}) FillPoison(*t);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(std::isnan(f.data<float>()[k]));
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(std::isnan(d.data<double>()[k]));
  // fp16 / bf16 NaN: exponent all ones, mantissa nonzero.
  EXPECT_EQ(h.data<uint16_t>()[1] & 0x7C00, 0x7C00);
  EXPECT_NE(h.data<uint16_t>()[1] & 0x03FF, 0);
  EXPECT_EQ(bf.data<uint16_t>()[1] & 0x7F80, 0x7F80);
  EXPECT_NE(bf.data<uint16_t>()[1] & 0x007F, 0);
  EXPECT_EQ(static_cast<uint64_t>(i.data<int64_t>()[1]), 0xA5A5A5A5A5A5A5A5u);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(reinterpret_cast<const uint8_t*>(b.raw())[k], 0xA5);
  Tensor empty(DType::kFloat32, {0});
  FillPoison(empty);  // no bytes, nothing to write
}

// Sqrt rejects an int64 input before writing anything, so what its caller's zeroed buffer holds
// afterwards is exactly what RunCpuKernel put there before calling the kernel.
TEST(PoisonTest, RunCpuKernelPoisonsOutputsBeforeTheKernelRuns) {
  Tensor x = Tensor::FromVector<int64_t>(DType::kInt64, {2}, {4, 9});
  Tensor y(DType::kFloat32, {2}), mask(DType::kBool, {2});  // zero-filled by the constructor
  const Tensor* ins[] = {&x};
  Tensor* outs[] = {&y, &mask};
  EXPECT_FALSE(RunCpuKernel(MakeNode("Sqrt", {"x"}), ins, outs, {}).ok());
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_TRUE(std::isnan(y.data<float>()[1]));
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(mask.raw())[1], 0xA5);
}

// An output that shares its data pointer with an input (a view, in place) holds that input: the
// poison fill must leave it alone, or the kernel would read NaN.
TEST(PoisonTest, AnOutputInAnInputsBufferIsNotPoisoned) {
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {3}, {1.f, -2.f, 3.f});
  const Tensor* ins[] = {&x};
  Tensor* outs[] = {&x};
  ASSERT_TRUE(RunCpuKernel(MakeNode("Neg", {"x"}), ins, outs, {}).ok());
  EXPECT_EQ(x.data<float>()[0], -1.f);
  EXPECT_EQ(x.data<float>()[1], 2.f);
  EXPECT_EQ(x.data<float>()[2], -3.f);
}

}  // namespace
}  // namespace foundry
