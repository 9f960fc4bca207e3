// foundry::Attention / AttentionGrad written as the contract states them
// (compiler/ops/attention.cc), one (b, h, i) row at a time in double: the reference that
// attention_host_test.cc (the kernels' tiling replayed on the host) and attention_test.cc (the CUDA
// kernels) compare with. Test cases and their seeded inputs live here too, so both tests run the
// same shapes.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/philox.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry::attention_test {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Case {
  std::string name{};
  int64_t b = 1, hq = 1, hkv = 1, sq = 1, sk = 1, d = 8, dv = 8;
  bool kt = true;
  bool o_transposed = false;
  bool causal = false;
  Shape bias{};  // empty: no bias
  Shape mask{};  // empty: no mask
  bool mask_keep = false;
  float mask_value = kNegInf;
  float scale = 0.f;        // 0: 1 / sqrt(d)
  float dropout = 0.f;      // applied (the tests run in training mode)
  int64_t window = 0;       // sliding window (with causal)
  float softcap = 0.f;      // logit soft-capping
  float mask_rate = 0.3f;   // fraction of mask elements that mask
  int64_t masked_row = -1;  // a query row whose every key the mask masks (mask [.., Sq, Sk])
  uint64_t seed = 1;

  float Scale() const { return scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d)); }
  Shape QShape() const { return {b, hq, sq, d}; }
  Shape KShape() const { return kt ? Shape{b, hkv, d, sk} : Shape{b, hkv, sk, d}; }
  Shape VShape() const { return {b, hkv, sk, dv}; }
  Shape OShape() const { return o_transposed ? Shape{b, sq, hq, dv} : Shape{b, hq, sq, dv}; }
  Shape LseShape() const { return {b, hq, sq}; }
};

// The cases both tests run: ragged tiles (sizes off the 64 grid), GQA 4:1, 4:4 and MQA, causal
// (square, Sq < Sk, and with a finite mask_value, where no tile may be skipped), bias broadcasts,
// masks kept / dropped, a fully masked row (NaN, as Softmax gives), both K layouts, O
// transposed, dropout, head dims 1 to 128.
inline std::vector<Case> Cases() {
  std::vector<Case> c;
  // One case per row: a table (clang-format would spread each over ten lines).
  // clang-format off
  c.push_back({.name = "ragged_mha", .b = 2, .hq = 2, .hkv = 2, .sq = 70, .sk = 130, .d = 40, .dv = 24});
  c.push_back({.name = "gqa_4to1", .b = 1, .hq = 8, .hkv = 2, .sq = 65, .sk = 67, .d = 32, .dv = 32, .seed = 2});
  c.push_back({.name = "gqa_4to4_kt0", .b = 1, .hq = 4, .hkv = 4, .sq = 33, .sk = 100, .d = 16, .dv = 20, .kt = false, .seed = 3});
  c.push_back({.name = "mqa", .b = 2, .hq = 3, .hkv = 1, .sq = 64, .sk = 129, .d = 24, .dv = 8, .seed = 4});
  c.push_back({.name = "causal_square", .b = 1, .hq = 2, .hkv = 1, .sq = 150, .sk = 150, .d = 32, .dv = 32, .causal = true, .seed = 5});
  c.push_back({.name = "causal_sq_lt_sk_kt0", .b = 1, .hq = 2, .hkv = 2, .sq = 70, .sk = 200, .d = 16, .dv = 16, .kt = false, .causal = true, .seed = 6});
  c.push_back({.name = "causal_finite_mask_value", .b = 1, .hq = 1, .hkv = 1, .sq = 130, .sk = 140, .d = 8, .dv = 8, .causal = true, .mask_value = -2.f, .seed = 7});
  c.push_back({.name = "alibi_bias_1h1k", .b = 2, .hq = 4, .hkv = 2, .sq = 66, .sk = 70, .d = 16, .dv = 16, .bias = {1, 4, 1, 70}, .seed = 8});
  c.push_back({.name = "padding_bias_b11k_causal", .b = 2, .hq = 2, .hkv = 2, .sq = 80, .sk = 80, .d = 16, .dv = 16, .causal = true, .bias = {2, 1, 1, 80}, .seed = 9});
  c.push_back({.name = "full_bias_and_rank2_mask_keep", .b = 1, .hq = 2, .hkv = 1, .sq = 40, .sk = 90, .d = 8, .dv = 12, .bias = {1, 2, 40, 90}, .mask = {40, 90}, .mask_keep = true, .mask_rate = 0.4f, .seed = 10});
  c.push_back({.name = "mask_drop_b11k", .b = 2, .hq = 2, .hkv = 2, .sq = 65, .sk = 77, .d = 16, .dv = 16, .mask = {2, 1, 1, 77}, .mask_keep = false, .seed = 11});
  c.push_back({.name = "mask_keep_finite_value_kt0", .b = 1, .hq = 2, .hkv = 2, .sq = 50, .sk = 60, .d = 16, .dv = 16, .kt = false, .mask = {1, 2, 50, 60}, .mask_keep = true, .mask_value = -1e4f, .seed = 12});
  c.push_back({.name = "o_transposed_gqa", .b = 2, .hq = 4, .hkv = 2, .sq = 70, .sk = 70, .d = 16, .dv = 24, .o_transposed = true, .causal = true, .seed = 13});
  c.push_back({.name = "dropout", .b = 1, .hq = 2, .hkv = 1, .sq = 70, .sk = 90, .d = 16, .dv = 16, .dropout = 0.25f, .seed = 14});
  c.push_back({.name = "head_dim_128_96", .b = 1, .hq = 2, .hkv = 1, .sq = 67, .sk = 80, .d = 128, .dv = 96, .seed = 15});
  c.push_back({.name = "masked_row_nan", .b = 1, .hq = 2, .hkv = 1, .sq = 70, .sk = 80, .d = 8, .dv = 8, .mask = {1, 1, 70, 80}, .mask_keep = true, .mask_rate = 0.2f, .masked_row = 3, .seed = 17});
  c.push_back({.name = "window_skips_both_sides", .b = 1, .hq = 2, .hkv = 1, .sq = 140, .sk = 140, .d = 16, .dv = 16, .causal = true, .window = 40, .seed = 18});
  c.push_back({.name = "window_small_softcap_gqa", .b = 1, .hq = 4, .hkv = 2, .sq = 130, .sk = 130, .d = 16, .dv = 8, .kt = false, .causal = true, .window = 5, .softcap = 0.7f, .seed = 19});
  c.push_back({.name = "softcap_bias_no_causal", .b = 1, .hq = 2, .hkv = 2, .sq = 66, .sk = 70, .d = 32, .dv = 16, .bias = {1, 2, 1, 70}, .softcap = 1.5f, .seed = 20});
  c.push_back({.name = "window_finite_mask_value", .b = 1, .hq = 1, .hkv = 1, .sq = 140, .sk = 140, .d = 8, .dv = 8, .causal = true, .mask_value = -3.f, .window = 20, .seed = 21});
  c.push_back({.name = "head_dim_1", .b = 1, .hq = 1, .hkv = 1, .sq = 5, .sk = 3, .d = 1, .dv = 1, .scale = 0.5f, .seed = 16});
  // clang-format on
  return c;
}

// The case whose query row 3 (head 0) has every key masked.
inline Case MaskedRowCase() {
  for (const Case& c : Cases())
    if (c.masked_row == 3) return c;
  return {};
}

// Seeded inputs of a case: q, k, v, dout, and bias / mask when the case has them.
inline std::map<std::string, Tensor> Inputs(const Case& c) {
  std::map<std::string, Tensor> in;
  in["q"] = RandomTensor(c.QShape(), c.seed * 10 + 1);
  in["k"] = RandomTensor(c.KShape(), c.seed * 10 + 2);
  in["v"] = RandomTensor(c.VShape(), c.seed * 10 + 3);
  in["dout"] = RandomTensor(c.OShape(), c.seed * 10 + 4);
  if (!c.bias.empty()) in["bias"] = RandomTensor(c.bias, c.seed * 10 + 5, -2.f, 2.f);
  if (!c.mask.empty()) {
    Tensor u = RandomTensor(c.mask, c.seed * 10 + 6, 0.f, 1.f);
    Tensor m(DType::kBool, c.mask);
    // A mask element masks when it differs from mask_keep.
    for (int64_t i = 0; i < m.numel(); ++i)
      m.data<uint8_t>()[i] = (u.data<float>()[i] < c.mask_rate) != c.mask_keep;
    if (c.masked_row >= 0)
      for (int64_t j = 0; j < c.sk; ++j) m.data<uint8_t>()[c.masked_row * c.sk + j] = !c.mask_keep;
    in["mask"] = m;
  }
  return in;
}

inline std::map<std::string, Attribute> Attrs(const Case& c) {
  return {{"scale", Attribute::Float(c.Scale())},
          {"causal", Attribute::Int(c.causal)},
          {"mask_keep", Attribute::Int(c.mask_keep)},
          {"mask_value", Attribute::Float(c.mask_value)},
          {"k_transposed", Attribute::Int(c.kt)},
          {"o_transposed", Attribute::Int(c.o_transposed)},
          {"dropout_ratio", Attribute::Float(c.dropout)},
          {"window", Attribute::Int(c.window)},
          {"softcap", Attribute::Float(c.softcap)}};
}

inline Node ForwardNode(const Case& c) {
  return MakeNode("Attention",
                  {"q", "k", "v", c.bias.empty() ? "" : "bias", c.mask.empty() ? "" : "mask"},
                  {"o", "lse"}, Attrs(c), "foundry");
}
inline Node BackwardNode(const Case& c) {
  return MakeNode("AttentionGrad",
                  {"dout", "q", "k", "v", "o", "lse", c.bias.empty() ? "" : "bias",
                   c.mask.empty() ? "" : "mask"},
                  {"dq", "dk", "dv"}, Attrs(c), "foundry");
}

// Element (b, h, i, j) of an operand of shape s broadcast to [B, Hq, Sq, Sk].
inline int64_t BroadcastAt(const Shape& s, const int64_t idx[4]) {
  int64_t off = 0, stride = 1;
  for (int k = 3, r = static_cast<int>(s.size()) - 1; r >= 0; --k, --r) {
    if (s[r] != 1) off += idx[k] * stride;
    stride *= s[r];
  }
  return off;
}

struct Result {
  std::vector<double> o, lse;      // forward
  std::vector<double> dq, dk, dv;  // backward (from the float O and LSE given to it)
};

// The contract, literally. `seed` / `node_key`: the dropout's Philox key (as the kernels get it).
class Reference {
 public:
  Reference(const Case& c, const std::map<std::string, Tensor>& in, uint64_t seed,
            uint64_t node_key)
      : c_(c), in_(in), seed_(seed), key_(node_key) {}

  double Q(int64_t b, int64_t h, int64_t i, int64_t e) const {
    return in_.at("q").data<float>()[((b * c_.hq + h) * c_.sq + i) * c_.d + e];
  }
  double K(int64_t b, int64_t g, int64_t j, int64_t e) const {
    const int64_t off = c_.kt ? ((b * c_.hkv + g) * c_.d + e) * c_.sk + j
                              : ((b * c_.hkv + g) * c_.sk + j) * c_.d + e;
    return in_.at("k").data<float>()[off];
  }
  double V(int64_t b, int64_t g, int64_t j, int64_t e) const {
    return in_.at("v").data<float>()[((b * c_.hkv + g) * c_.sk + j) * c_.dv + e];
  }
  int64_t OIndex(int64_t b, int64_t h, int64_t i, int64_t e) const {
    return c_.o_transposed ? ((b * c_.sq + i) * c_.hq + h) * c_.dv + e
                           : ((b * c_.hq + h) * c_.sq + i) * c_.dv + e;
  }
  int64_t Group(int64_t h) const { return h / (c_.hq / c_.hkv); }

  // scale · Q_i·K_j, before the softcap.
  double Product(int64_t b, int64_t h, int64_t i, int64_t j) const {
    double s = 0;
    for (int64_t e = 0; e < c_.d; ++e) s += Q(b, h, i, e) * K(b, Group(h), j, e);
    return s * c_.Scale();
  }
  // d s / d Product: 1 - tanh² with a softcap.
  double Slope(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (c_.softcap == 0.f) return 1;
    const double t = std::tanh(Product(b, h, i, j) / c_.softcap);
    return 1 - t * t;
  }
  bool Masked(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const int64_t idx[4] = {b, h, i, j};
    return (c_.causal && j > i) || (c_.window > 0 && j <= i - c_.window) ||
           (!c_.mask.empty() &&
            (in_.at("mask").data<uint8_t>()[BroadcastAt(c_.mask, idx)] != 0) != c_.mask_keep);
  }
  double Score(int64_t b, int64_t h, int64_t i, int64_t j) const {
    double s = Product(b, h, i, j);
    if (c_.softcap != 0.f) s = c_.softcap * std::tanh(s / c_.softcap);
    const int64_t idx[4] = {b, h, i, j};
    if (!c_.bias.empty()) s += in_.at("bias").data<float>()[BroadcastAt(c_.bias, idx)];
    return Masked(b, h, i, j) ? c_.mask_value : s;
  }
  double Z(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (c_.dropout == 0.f) return 1;
    const uint64_t e = static_cast<uint64_t>(((b * c_.hq + h) * c_.sq + i) * c_.sk + j);
    return PhiloxBitsToUniform(PhiloxRandom(seed_, key_, e)) >= c_.dropout
               ? 1.0 / (1.0 - c_.dropout)
               : 0.0;
  }

  void Forward(Result* r) const {
    r->o.assign(c_.b * c_.hq * c_.sq * c_.dv, 0);
    r->lse.assign(c_.b * c_.hq * c_.sq, 0);
    std::vector<double> s(c_.sk);
    for (int64_t b = 0; b < c_.b; ++b)
      for (int64_t h = 0; h < c_.hq; ++h)
        for (int64_t i = 0; i < c_.sq; ++i) {
          double m = -INFINITY;
          for (int64_t j = 0; j < c_.sk; ++j) m = std::max(m, s[j] = Score(b, h, i, j));
          double l = 0;
          for (int64_t j = 0; j < c_.sk; ++j) l += m == -INFINITY ? 0 : std::exp(s[j] - m);
          const double lse = m + std::log(l);  // -inf when every score is
          r->lse[(b * c_.hq + h) * c_.sq + i] = lse;
          for (int64_t j = 0; j < c_.sk; ++j) s[j] = std::exp(s[j] - lse) * Z(b, h, i, j);
          for (int64_t e = 0; e < c_.dv; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < c_.sk; ++j) acc += s[j] * V(b, Group(h), j, e);
            r->o[OIndex(b, h, i, e)] = acc;
          }
        }
  }

  // The backward from the float O and LSE the kernels read (`o`, `lse`).
  void Backward(const Tensor& o, const Tensor& lse, Result* r) const {
    const float* dout = in_.at("dout").data<float>();
    r->dq.assign(c_.b * c_.hq * c_.sq * c_.d, 0);
    r->dk.assign(c_.b * c_.hkv * c_.sk * c_.d, 0);
    r->dv.assign(c_.b * c_.hkv * c_.sk * c_.dv, 0);
    for (int64_t b = 0; b < c_.b; ++b)
      for (int64_t h = 0; h < c_.hq; ++h) {
        const int64_t g = Group(h);
        for (int64_t i = 0; i < c_.sq; ++i) {
          double d_row = 0;
          for (int64_t e = 0; e < c_.dv; ++e)
            d_row += double(dout[OIndex(b, h, i, e)]) * o.data<float>()[OIndex(b, h, i, e)];
          const double l = lse.data<float>()[(b * c_.hq + h) * c_.sq + i];
          for (int64_t j = 0; j < c_.sk; ++j) {
            const double p = std::exp(Score(b, h, i, j) - l), z = Z(b, h, i, j);
            double dp = 0;
            for (int64_t e = 0; e < c_.dv; ++e) dp += dout[OIndex(b, h, i, e)] * V(b, g, j, e);
            // A masked score is the constant mask_value: no gradient through it (with -inf its
            // p is 0 already, or NaN in a row masked everywhere, which stays).
            const double ds = std::isfinite(c_.mask_value) && Masked(b, h, i, j)
                                  ? 0.0
                                  : p * (dp * z - d_row) * Slope(b, h, i, j);
            for (int64_t e = 0; e < c_.dv; ++e)
              r->dv[((b * c_.hkv + g) * c_.sk + j) * c_.dv + e] += p * z * dout[OIndex(b, h, i, e)];
            for (int64_t e = 0; e < c_.d; ++e) {
              r->dq[((b * c_.hq + h) * c_.sq + i) * c_.d + e] += c_.Scale() * ds * K(b, g, j, e);
              const int64_t k_off = c_.kt ? ((b * c_.hkv + g) * c_.d + e) * c_.sk + j
                                          : ((b * c_.hkv + g) * c_.sk + j) * c_.d + e;
              r->dk[k_off] += c_.Scale() * ds * Q(b, h, i, e);
            }
          }
        }
      }
  }

 private:
  const Case& c_;
  const std::map<std::string, Tensor>& in_;
  uint64_t seed_, key_;
};

// The reference's O and LSE rounded to float: what the backward reads.
inline Tensor ToFloat(const std::vector<double>& v, const Shape& shape) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

// "" when every element of `got` is within atol + rtol·|want| of `want` (NaN where want is NaN,
// equal infinities), else the first mismatch.
inline std::string Mismatch(const std::string& what, const float* got,
                            const std::vector<double>& want, double atol, double rtol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok =
        std::isnan(w) ? std::isnan(g) : g == w || std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok)
      return what + " element " + std::to_string(i) + " of " + std::to_string(want.size()) +
             ": got " + std::to_string(g) + ", reference " + std::to_string(w);
  }
  return "";
}

}  // namespace foundry::attention_test
