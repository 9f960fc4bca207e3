// foundry::Attention and its gradient (compiler/ops/attention.cc, kernels/cpu/attention.cc,
// passes/grad/attention.cc): the tiled kernels against a plain double-precision evaluation of
// the op's formula, the gradient rule against central finite differences, and the kernels'
// determinism. Shapes cross the 64-row / 64-key tile edges (ragged last tiles), and cover GQA and
// MQA, both K layouts, causal masking, broadcast biases and both mask forms.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_report.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

struct Case {
  std::string name;
  int64_t b, hq, hkv, sq, sk, d, dv;
  bool kt = true;
  bool causal = false;
  Shape bias;  // empty: none
  Shape mask;  // empty: none
  bool mask_keep = false;
  float mask_value = -std::numeric_limits<float>::infinity();
  bool o_transposed = false;  // O and dO [B, Sq, Hq, Dv]
  int64_t window = 0;         // sliding window (with causal)
  float softcap = 0;          // logit soft-capping
};

// One case per row: a table (clang-format would spread each over fifteen lines).
// clang-format off
std::vector<Case> Cases() {
  constexpr float kInf = std::numeric_limits<float>::infinity(), kFinfoMin = -3.40282347e38f;
  return {
      {"mha", 1, 2, 2, 5, 5, 4, 4},
      {"ragged_tiles", 1, 1, 1, 70, 67, 8, 6},
      {"causal_two_tiles", 2, 2, 2, 130, 130, 4, 4, true, true},
      {"gqa_4_to_2_untransposed", 1, 4, 2, 9, 9, 3, 5, false, true},
      {"mqa_alibi_bias", 2, 4, 1, 11, 11, 4, 4, true, true, {1, 4, 1, 11}},
      {"padding_bias_finfo_min", 2, 2, 2, 6, 6, 4, 4, true, false, {2, 1, 1, 6}, {}, false, kFinfoMin},
      {"mask_drop", 1, 2, 2, 7, 7, 4, 4, true, false, {}, {7, 7}},
      {"mask_keep_per_batch", 2, 2, 1, 5, 5, 4, 4, false, true, {}, {2, 1, 5, 5}, true, kFinfoMin},
      {"full_bias", 1, 2, 2, 66, 66, 4, 4, true, false, {1, 2, 66, 66}},
      {"o_transposed_gqa_causal", 2, 4, 2, 67, 67, 4, 3, true, true, {1, 4, 1, 67}, {}, false, kFinfoMin, true},
      {"o_transposed_mha", 1, 3, 3, 5, 5, 4, 4, false, false, {}, {5, 5}, true, -kInf, true},
      // Sliding windows: across tile edges (skipped tiles on both sides of the band), one key
      // wide, with GQA and finfo.min; soft-capping alone, with a bias, and with a window.
      {"window_across_tiles", 1, 2, 1, 140, 140, 4, 4, true, true, {}, {}, false, -kInf, false, 40},
      {"window_1_gqa_untransposed", 1, 4, 2, 9, 9, 3, 5, false, true, {}, {}, false, kFinfoMin, false, 1},
      {"softcap", 1, 2, 2, 7, 7, 4, 4, true, false, {}, {}, false, -kInf, false, 0, 0.8f},
      {"softcap_alibi_window_o_transposed", 2, 4, 2, 67, 67, 4, 3, true, true, {1, 4, 1, 67}, {}, false, -kInf, true, 3, 1.3f},
      // A finite mask_value that leaves masked scores a real probability: no gradient flows
      // through them all the same (finite differences see it).
      {"causal_finite_mask_value", 1, 2, 2, 7, 7, 4, 4, true, true, {}, {}, false, -2.f},
      {"mask_finite_mask_value_window", 1, 2, 1, 9, 9, 4, 4, false, true, {}, {9, 9}, false, 0.5f, false, 3},
  };
}
// clang-format on

Node AttentionNode(const Case& c) {
  std::vector<std::string> ins = {"q", "k", "v", c.bias.empty() ? "" : "bias",
                                  c.mask.empty() ? "" : "mask"};
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  return MakeNode("Attention", ins, {"o", "lse"},
                  {{"scale", Attribute::Float(0.37f)},
                   {"causal", Attribute::Int(c.causal)},
                   {"mask_keep", Attribute::Int(c.mask_keep)},
                   {"mask_value", Attribute::Float(c.mask_value)},
                   {"k_transposed", Attribute::Int(c.kt)},
                   {"o_transposed", Attribute::Int(c.o_transposed)},
                   {"window", Attribute::Int(c.window)},
                   {"softcap", Attribute::Float(c.softcap)}},
                  "foundry", "fwd");
}

// A mask that never masks a whole row (so every output is finite): masks about a third.
Tensor MaskTensor(const Shape& shape, bool keep) {
  Tensor m(DType::kBool, shape);
  for (int64_t i = 0; i < m.numel(); ++i) {
    const bool masked = (i * 7 + 3) % 3 == 0 && i % shape.back() != 0;
    m.data<bool>()[i] = keep ? !masked : masked;
  }
  return m;
}

struct Operands {
  std::map<std::string, Tensor> inputs;     // q, k, v
  std::map<std::string, Tensor> constants;  // bias, mask
};

Operands OperandsOf(const Case& c, uint64_t seed) {
  Operands o;
  o.inputs["q"] = RandomTensor({c.b, c.hq, c.sq, c.d}, seed, -1.5f, 1.5f);
  o.inputs["k"] = RandomTensor(c.kt ? Shape{c.b, c.hkv, c.d, c.sk} : Shape{c.b, c.hkv, c.sk, c.d},
                               seed + 1, -1.5f, 1.5f);
  o.inputs["v"] = RandomTensor({c.b, c.hkv, c.sk, c.dv}, seed + 2);
  if (!c.bias.empty()) o.constants["bias"] = RandomTensor(c.bias, seed + 3, -2.f, 0.5f);
  if (!c.mask.empty()) o.constants["mask"] = MaskTensor(c.mask, c.mask_keep);
  return o;
}

// Element of a broadcast operand at scores index (b, h, i, j).
double At(const Tensor& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  const Shape& s = t.shape();
  const int64_t idx[4] = {b, h, i, j};
  int64_t flat = 0;
  const size_t off = 4 - s.size();
  for (size_t k = 0; k < s.size(); ++k) flat = flat * s[k] + (s[k] == 1 ? 0 : idx[off + k]);
  return t.GetAsDouble(flat);
}

// The op's formula in double, straight from its definition: scores, softmax, and the gradients
// of L = Σ <dO, O> for a given dO.
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

Reference Evaluate(const Case& c, const Operands& ops, const Tensor& dout) {
  const Tensor& q = ops.inputs.at("q");
  const Tensor& k = ops.inputs.at("k");
  const Tensor& v = ops.inputs.at("v");
  const int64_t rep = c.hq / c.hkv;
  auto kat = [&](int64_t b, int64_t g, int64_t j, int64_t e) {
    return c.kt ? k.GetAsDouble(((b * c.hkv + g) * c.d + e) * c.sk + j)
                : k.GetAsDouble(((b * c.hkv + g) * c.sk + j) * c.d + e);
  };
  auto kidx = [&](int64_t b, int64_t g, int64_t j, int64_t e) {
    return c.kt ? ((b * c.hkv + g) * c.d + e) * c.sk + j : ((b * c.hkv + g) * c.sk + j) * c.d + e;
  };
  Reference r;
  r.o.assign(c.b * c.hq * c.sq * c.dv, 0);
  r.lse.assign(c.b * c.hq * c.sq, 0);
  r.dq.assign(c.b * c.hq * c.sq * c.d, 0);
  r.dk.assign(k.numel(), 0);
  r.dv.assign(v.numel(), 0);
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t g = h / rep;
      for (int64_t i = 0; i < c.sq; ++i) {
        std::vector<double> s(c.sk), slope(c.sk);
        for (int64_t j = 0; j < c.sk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e)
            dot += q.GetAsDouble(((b * c.hq + h) * c.sq + i) * c.d + e) * kat(b, g, j, e);
          s[j] = static_cast<double>(0.37f) * dot;
          slope[j] = 1;
          if (c.softcap > 0) {
            const double t = std::tanh(s[j] / c.softcap);
            s[j] = c.softcap * t;
            slope[j] = 1 - t * t;
          }
          if (!c.bias.empty()) s[j] += At(ops.constants.at("bias"), b, h, i, j);
          bool masked = (c.causal && j > i) || (c.window > 0 && j <= i - c.window);
          if (!c.mask.empty())
            masked |= (At(ops.constants.at("mask"), b, h, i, j) != 0) != c.mask_keep;
          if (masked) {
            s[j] = c.mask_value;
            slope[j] = 0;  // a constant: nothing flows back through a masked score
          }
        }
        double m = -INFINITY;
        for (double x : s) m = std::max(m, x);
        double l = 0;
        for (double x : s) l += std::exp(x - m);
        const double lse = m + std::log(l);
        r.lse[(b * c.hq + h) * c.sq + i] = lse;
        std::vector<double> p(c.sk);
        for (int64_t j = 0; j < c.sk; ++j) p[j] = std::exp(s[j] - lse);
        const int64_t orow = ((b * c.hq + h) * c.sq + i) * c.dv;
        for (int64_t j = 0; j < c.sk; ++j)
          for (int64_t e = 0; e < c.dv; ++e)
            r.o[orow + e] += p[j] * v.GetAsDouble(((b * c.hkv + g) * c.sk + j) * c.dv + e);
        // Backward of this row.
        double dd = 0;
        for (int64_t e = 0; e < c.dv; ++e) dd += dout.GetAsDouble(orow + e) * r.o[orow + e];
        for (int64_t j = 0; j < c.sk; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < c.dv; ++e) {
            const int64_t vi = ((b * c.hkv + g) * c.sk + j) * c.dv + e;
            dp += dout.GetAsDouble(orow + e) * v.GetAsDouble(vi);
            r.dv[vi] += p[j] * dout.GetAsDouble(orow + e);
          }
          const double ds = static_cast<double>(0.37f) * p[j] * (dp - dd) * slope[j];
          for (int64_t e = 0; e < c.d; ++e) {
            r.dq[((b * c.hq + h) * c.sq + i) * c.d + e] += ds * kat(b, g, j, e);
            r.dk[kidx(b, g, j, e)] += ds * q.GetAsDouble(((b * c.hq + h) * c.sq + i) * c.d + e);
          }
        }
      }
    }
  return r;
}

// max |got - want| / max |want|.
double RelErr(const Tensor& got, const std::vector<double>& want) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.GetAsDouble(i);
    if (!std::isfinite(g)) return INFINITY;
    diff = std::max(diff, std::fabs(g - want[i]));
    ref = std::max(ref, std::fabs(want[i]));
  }
  return ref == 0 ? diff : diff / ref;
}

// [B, X, Y, D] -> [B, Y, X, D] (either direction between the two O layouts).
Tensor SwapMiddle(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor out(t.dtype(), {s[0], s[2], s[1], s[3]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t x = 0; x < s[1]; ++x)
      for (int64_t y = 0; y < s[2]; ++y)
        for (int64_t d = 0; d < s[3]; ++d)
          out.data<float>()[((b * s[2] + y) * s[1] + x) * s[3] + d] =
              t.data<float>()[((b * s[1] + x) * s[2] + y) * s[3] + d];
  return out;
}

Node GradNode(const Case& c) {
  Node f = AttentionNode(c);
  std::vector<std::string> ins = {"dout", "q", "k", "v", "o", "lse"};
  if (!c.bias.empty() || !c.mask.empty()) ins.push_back(c.bias.empty() ? "" : "bias");
  if (!c.mask.empty()) ins.push_back("mask");
  return MakeNode("AttentionGrad", ins, {"dq", "dk", "dv"}, f.attrs, "foundry", "bwd");
}

TEST(AttentionKernelTest, ForwardAndBackwardMatchTheFormulaInDouble) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Operands ops = OperandsOf(c, 11);
    auto fwd = RunSingleNode(AttentionNode(c), ops.inputs, ops.constants);
    ASSERT_TRUE(fwd.ok()) << fwd.status().message();
    Tensor dout = RandomTensor({c.b, c.hq, c.sq, c.dv}, 99);
    const Reference ref = Evaluate(c, ops, dout);
    EXPECT_LT(RelErr(c.o_transposed ? SwapMiddle((*fwd)[0]) : (*fwd)[0], ref.o), 2e-6);
    EXPECT_LT(RelErr((*fwd)[1], ref.lse), 2e-6);
    std::map<std::string, Tensor> in = ops.inputs;
    in["dout"] = c.o_transposed ? SwapMiddle(dout) : dout;
    in["o"] = (*fwd)[0];
    in["lse"] = (*fwd)[1];
    auto bwd = RunSingleNode(GradNode(c), in, ops.constants);
    ASSERT_TRUE(bwd.ok()) << bwd.status().message();
    EXPECT_LT(RelErr((*bwd)[0], ref.dq), 1e-5);
    EXPECT_LT(RelErr((*bwd)[1], ref.dk), 1e-5);
    EXPECT_LT(RelErr((*bwd)[2], ref.dv), 1e-5);
    // Same inputs, same bits.
    auto again = RunSingleNode(GradNode(c), in, ops.constants);
    ASSERT_TRUE(again.ok());
    for (int i = 0; i < 3; ++i) EXPECT_TRUE((*again)[i].BitwiseEqual((*bwd)[i])) << i;
  }
}

// Two threads give the bits one gives (each unit owns its outputs), with dropout too.
TEST(AttentionKernelTest, ThreadCountDoesNotChangeTheBits) {
  for (Case c : Cases()) {
    SCOPED_TRACE(c.name);
    Operands ops = OperandsOf(c, 31);
    Node fwd_node = AttentionNode(c);
    fwd_node.attrs["dropout_ratio"] = Attribute::Float(0.25f);
    fwd_node.attrs["seed"] = Attribute::Int(77);
    Node bwd_node = GradNode(c);
    bwd_node.attrs = fwd_node.attrs;
    std::vector<Tensor> results[2];
    for (int threads : {1, 2}) {
      SetCpuThreads(threads);
      auto fwd = RunSingleNode(fwd_node, ops.inputs, ops.constants);
      ASSERT_TRUE(fwd.ok()) << fwd.status().message();
      std::map<std::string, Tensor> in = ops.inputs;
      in["dout"] = RandomTensor((*fwd)[0].shape(), 5);
      in["o"] = (*fwd)[0];
      in["lse"] = (*fwd)[1];
      auto bwd = RunSingleNode(bwd_node, in, ops.constants);
      ASSERT_TRUE(bwd.ok()) << bwd.status().message();
      results[threads - 1] = {(*fwd)[0], (*fwd)[1], (*bwd)[0], (*bwd)[1], (*bwd)[2]};
    }
    SetCpuThreads(1);
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_TRUE(results[0][i].BitwiseEqual(results[1][i])) << i;
  }
}

TEST(AttentionGradTest, MatchesFiniteDifferences) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Operands ops = OperandsOf(c, 21);
    GradCheckOptions options;
    options.no_grad_outputs = {"lse"};
    options.max_elements = 60;
    Status st = CheckGradients(AttentionNode(c), ops.inputs, ops.constants, options);
    EXPECT_TRUE(st.ok()) << st.message();
    // With dropout: the backward redraws the forward's mask from the same key.
    Node dropped = AttentionNode(c);
    dropped.attrs["dropout_ratio"] = Attribute::Float(0.3f);
    dropped.attrs["seed"] = Attribute::Int(1234);
    st = CheckGradients(dropped, ops.inputs, ops.constants, options);
    EXPECT_TRUE(st.ok()) << "dropout: " << st.message();
  }
}

TEST(AttentionKernelTest, EveryScoreMaskedGivesNaNLikeSoftmax) {
  Case c{"all_masked", 1, 1, 1, 3, 3, 2, 2, true, false, {}, {3, 3}};
  Operands ops = OperandsOf(c, 5);
  Tensor& mask = ops.constants["mask"];
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = i < 3;  // row 0: all masked
  auto fwd = RunSingleNode(AttentionNode(c), ops.inputs, ops.constants);
  ASSERT_TRUE(fwd.ok()) << fwd.status().message();
  EXPECT_TRUE(std::isnan((*fwd)[0].GetAsDouble(0)));
  EXPECT_TRUE(std::isinf((*fwd)[1].GetAsDouble(0)));
  for (int64_t i = 2; i < 6; ++i) EXPECT_TRUE(std::isfinite((*fwd)[0].GetAsDouble(i))) << i;
}

TEST(AttentionSchemaTest, RefusesOperandsThatDoNotFit) {
  Case c = Cases()[3];  // GQA 4 -> 2
  Operands ops = OperandsOf(c, 3);
  // 3 key/value heads do not divide 4 query heads.
  ops.inputs["k"] = RandomTensor({1, 3, 9, 3}, 1);
  ops.inputs["v"] = RandomTensor({1, 3, 9, 5}, 2);
  auto r = RunSingleNode(AttentionNode(c), ops.inputs, ops.constants);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a multiple"), std::string::npos)
      << r.status().message();
  // A bias that does not broadcast to the scores.
  Case b = Cases()[4];
  Operands bops = OperandsOf(b, 3);
  bops.constants["bias"] = RandomTensor({1, 3, 1, 11}, 4);
  r = RunSingleNode(AttentionNode(b), bops.inputs, bops.constants);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not broadcast"), std::string::npos)
      << r.status().message();
  // A window without the causal rule, and a negative softcap.
  Case w = Cases()[0];
  w.window = 2;
  Operands wops = OperandsOf(w, 3);
  r = RunSingleNode(AttentionNode(w), wops.inputs, wops.constants);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("window 2 must be 0 (none) or positive with causal=1"),
            std::string::npos)
      << r.status().message();
  w.window = 0;
  w.softcap = -1;
  r = RunSingleNode(AttentionNode(w), wops.inputs, wops.constants);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("softcap must be 0 (none) or positive"), std::string::npos)
      << r.status().message();
}

// A sliding window does less work: its FLOPs count only the pairs inside the band.
TEST(AttentionSchemaTest, WindowedFlopsCountTheBandOnly) {
  Case full{"causal", 1, 2, 2, 256, 256, 16, 16, true, true};
  Case band = full;
  band.window = 32;
  Graph g;
  for (const char* v : {"q", "k", "v"}) {
    Value& val = g.GetOrAddValue(v);
    val.dtype = DType::kFloat32;
    val.shape = std::string(v) == "k" ? Shape{1, 2, 16, 256} : Shape{1, 2, 256, 16};
    val.rank_known = true;
  }
  const int64_t f = NodeFlops(g, AttentionNode(full)), w = NodeFlops(g, AttentionNode(band));
  // 256·257/2 = 32896 causal pairs; the band: 32·33/2 + 224·32 = 7696.
  EXPECT_EQ(f / 32896, w / 7696);
  EXPECT_EQ(f % 32896, 0);
  EXPECT_EQ(w % 7696, 0);
}

}  // namespace
}  // namespace foundry
