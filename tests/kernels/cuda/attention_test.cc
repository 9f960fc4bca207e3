// The CUDA attention kernels (kernels/cuda/attention.cu) against the contract computed in double
// (attention_reference.h) on every case of the host replay (ragged tiles, GQA / MQA, causal,
// bias broadcasts, masks, both K layouts, O transposed, dropout, head dims 1 to 128), and
// determinism: two runs give the same bits. Skipped without a GPU.
//
// Tolerances: fp32 sums of at most a few hundred terms against double, as in the host replay:
// atol 1e-5 + rtol 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "runtime/interpreter.h"
#include "tests/kernels/cuda/attention_reference.h"
#include "tests/support/cuda_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

using attention_test::Case;
using attention_test::Mismatch;
using attention_test::Reference;
using attention_test::Result;

constexpr double kAtol = 1e-5, kRtol = 1e-5;

std::vector<Tensor> Like(const std::vector<Shape>& shapes) {
  std::vector<Tensor> out;
  for (const Shape& s : shapes) out.emplace_back(DType::kFloat32, s);
  return out;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && BitwiseEqual(a.data<float>(), b.data<float>(), a.numel());
}

// Forward and backward of one case on the GPU against the reference; the backward twice, bit
// for bit.
void CheckCase(const Case& c) {
  SCOPED_TRACE(c.name);
  auto in = attention_test::Inputs(c);
  const Node fwd = attention_test::ForwardNode(c);
  auto o = RunSingleNodeOnCuda(fwd, in, {}, Like({c.OShape(), c.LseShape()}));
  ASSERT_TRUE(o.ok()) << o.status().message();
  Reference ref(c, in, 0, NodeKey(fwd));  // the seed and key RunSingleNodeOnCuda gives
  Result want;
  ref.Forward(&want);
  EXPECT_EQ(Mismatch("O", (*o)[0].data<float>(), want.o, kAtol, kRtol), "");
  EXPECT_EQ(Mismatch("LSE", (*o)[1].data<float>(), want.lse, kAtol, kRtol), "");

  in["o"] = (*o)[0];
  in["lse"] = (*o)[1];
  const Node bwd = attention_test::BackwardNode(c);
  const auto like = Like({c.QShape(), c.KShape(), c.VShape()});
  auto g1 = RunSingleNodeOnCuda(bwd, in, {}, like);
  ASSERT_TRUE(g1.ok()) << g1.status().message();
  ref.Backward((*o)[0], (*o)[1], &want);
  EXPECT_EQ(Mismatch("dQ", (*g1)[0].data<float>(), want.dq, kAtol, kRtol), "");
  EXPECT_EQ(Mismatch("dK", (*g1)[1].data<float>(), want.dk, kAtol, kRtol), "");
  EXPECT_EQ(Mismatch("dV", (*g1)[2].data<float>(), want.dv, kAtol, kRtol), "");
  auto g2 = RunSingleNodeOnCuda(bwd, in, {}, like);
  ASSERT_TRUE(g2.ok()) << g2.status().message();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(SameBits((*g1)[i], (*g2)[i])) << "output " << i;
}

TEST(CudaAttentionTest, MatchesTheContractOnEveryCase) {
  FOUNDRY_REQUIRE_GPU();
  for (const Case& c : attention_test::Cases()) CheckCase(c);
}

// Many blocks per kv head (GQA 4:1, 8 query tiles, 8 key tiles), causal, head dim 64: the
// backward's dK / dV blocks loop over 4 heads x up to 8 query tiles; same bits every run.
TEST(CudaAttentionTest, LargerCausalGqaIsDeterministic) {
  FOUNDRY_REQUIRE_GPU();
  CheckCase({.name = "gqa_causal_500",
             .b = 2,
             .hq = 8,
             .hkv = 2,
             .sq = 500,
             .sk = 500,
             .d = 64,
             .dv = 64,
             .causal = true,
             .bias = {1, 8, 1, 500},
             .seed = 21});
}

TEST(CudaAttentionTest, ForwardIsDeterministic) {
  FOUNDRY_REQUIRE_GPU();
  Case c{.name = "fwd", .b = 1, .hq = 4, .hkv = 4, .sq = 300, .sk = 257, .d = 128, .dv = 128};
  const auto in = attention_test::Inputs(c);
  const Node fwd = attention_test::ForwardNode(c);
  auto a = RunSingleNodeOnCuda(fwd, in, {}, Like({c.OShape(), c.LseShape()}));
  auto b = RunSingleNodeOnCuda(fwd, in, {}, Like({c.OShape(), c.LseShape()}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SameBits((*a)[0], (*b)[0]));
  EXPECT_TRUE(SameBits((*a)[1], (*b)[1]));
}

// A row whose every key is masked: O NaN, LSE -inf, as Softmax gives; its neighbours are finite.
TEST(CudaAttentionTest, FullyMaskedRowGivesNanAndMinusInfinity) {
  FOUNDRY_REQUIRE_GPU();
  const Case c = attention_test::MaskedRowCase();
  auto o = RunSingleNodeOnCuda(attention_test::ForwardNode(c), attention_test::Inputs(c), {},
                               Like({c.OShape(), c.LseShape()}));
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_TRUE(std::isnan((*o)[0].data<float>()[3 * c.dv]));
  EXPECT_EQ((*o)[1].data<float>()[3], -INFINITY);
  EXPECT_TRUE(std::isfinite((*o)[0].data<float>()[4 * c.dv]));
}

}  // namespace
}  // namespace foundry
