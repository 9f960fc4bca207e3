// Math-family CPU kernels against independent double-precision references written here (naive
// triple-loop matmul, textbook softmax / layer norm / cross-entropy), on shapes that are not
// multiples of any vector width. Tolerance: atol + rtol * |ref| with fp32-sized constants.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/op_schema.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr char kMs[] = "com.microsoft";

// A double tensor as a plain vector with a shape.
struct Ref {
  Shape shape;
  std::vector<double> v;
};

Ref ToRef(const Tensor& t) {
  Ref r{t.shape(), std::vector<double>(t.numel())};
  for (int64_t i = 0; i < t.numel(); ++i) r.v[i] = t.GetAsDouble(i);
  return r;
}

void ExpectClose(const Tensor& got, const Ref& want, double atol = 1e-5, double rtol = 1e-5,
                 const std::string& what = "") {
  ASSERT_EQ(got.shape(), want.shape) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.GetAsDouble(i), w = want.v[i];
    ASSERT_LE(std::fabs(g - w), atol + rtol * std::fabs(w))
        << what << " element " << i << ": got " << g << ", want " << w;
  }
}

Tensor Run1(const Node& node, const std::map<std::string, Tensor>& inputs,
            const std::map<std::string, Tensor>& constants = {}) {
  auto outs = RunSingleNode(node, inputs, constants);
  EXPECT_TRUE(outs.ok()) << outs.status().message();
  if (!outs.ok()) return Tensor();
  return (*outs)[0];
}

Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, std::move(shape), v);
}

// ============================== matrix products ==============================

// numpy.matmul in double: 1-D operands promoted and the unit dim dropped, batch dims broadcast.
Ref NaiveMatMul(const Ref& a0, const Ref& b0) {
  Shape as = a0.shape.size() == 1 ? Shape{1, a0.shape[0]} : a0.shape;
  Shape bs = b0.shape.size() == 1 ? Shape{b0.shape[0], 1} : b0.shape;
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  size_t nb = std::max(as.size(), bs.size()) - 2;
  Shape ba(nb, 1), bb(nb, 1), by(nb);
  for (size_t i = 0; i < as.size() - 2; ++i) ba[nb - (as.size() - 2) + i] = as[i];
  for (size_t i = 0; i < bs.size() - 2; ++i) bb[nb - (bs.size() - 2) + i] = bs[i];
  for (size_t i = 0; i < nb; ++i) by[i] = std::max(ba[i], bb[i]);
  Ref y;
  y.shape = by;
  if (a0.shape.size() > 1) y.shape.push_back(m);
  if (b0.shape.size() > 1) y.shape.push_back(n);
  int64_t batches = NumElements(by);
  y.v.assign(batches * m * n, 0.0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Unravel bi over `by`, then ravel over each operand with broadcasting.
    int64_t rem = bi, oa = 0, ob = 0, sa = 1, sb = 1;
    for (int64_t d = static_cast<int64_t>(nb) - 1; d >= 0; --d) {
      int64_t idx = rem % by[d];
      rem /= by[d];
      oa += (ba[d] == 1 ? 0 : idx) * sa;
      ob += (bb[d] == 1 ? 0 : idx) * sb;
      sa *= ba[d];
      sb *= bb[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a0.v[oa * m * k + i * k + p] * b0.v[ob * k * n + p * n + j];
        y.v[bi * m * n + i * n + j] = s;
      }
  }
  return y;
}

// Swaps the last two dims.
Ref TransposeLast2(const Ref& r) {
  Ref t = r;
  size_t k = r.shape.size();
  std::swap(t.shape[k - 1], t.shape[k - 2]);
  int64_t rows = r.shape[k - 2], cols = r.shape[k - 1], mats = NumElements(r.shape) / (rows * cols);
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        t.v[b * rows * cols + j * rows + i] = r.v[b * rows * cols + i * cols + j];
  return t;
}

struct MatMulCase {
  Shape a, b;
};

class MatMulShapes : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulShapes, MatchesNaiveReference) {
  const MatMulCase& c = GetParam();
  Tensor a = RandomTensor(c.a, 1), b = RandomTensor(c.b, 2);
  Tensor y = Run1(MakeNode("MatMul", {"a", "b"}, {"y"}), {{"a", a}, {"b", b}});
  ExpectClose(y, NaiveMatMul(ToRef(a), ToRef(b)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulShapes,
    ::testing::Values(MatMulCase{{3, 5}, {5, 7}}, MatMulCase{{2, 3, 5}, {5, 7}},
                      MatMulCase{{5}, {5, 7}}, MatMulCase{{3, 5}, {5}}, MatMulCase{{5}, {5}},
                      MatMulCase{{2, 1, 3, 4}, {5, 4, 6}}, MatMulCase{{7}, {2, 7, 3}},
                      MatMulCase{{2, 3, 7}, {7}}, MatMulCase{{1, 3, 5}, {2, 5, 7}},
                      MatMulCase{{3, 5}, {2, 5, 7}}, MatMulCase{{3, 0}, {0, 4}},
                      MatMulCase{{3, 67, 45}, {45, 33}}));

// Products large enough to be cut into pieces (kernels/cpu/math.cc SplitGemm): by columns, by rows
// (with a transposed A), by K ranges (a small output over a long K, partials in the workspace),
// and odd sizes that leave a short last piece. Each matches the naive product and gives the same
// bits at 1, 2 and 3 threads.
TEST(MatMulTest, SplitProductsMatchTheReferenceAndDoNotDependOnTheThreadCount) {
  struct Split {
    Shape a, b;
    bool ta, tb;
  };
  for (const Split& c : {Split{{64, 300}, {300, 1000}, false, false},    // columns
                         Split{{700, 130}, {130, 96}, false, false},     // rows
                         Split{{3, 150, 111}, {577, 111}, false, true},  // folded batch, B^T
                         Split{{520, 900}, {520, 70}, true, false},      // rows of A^T
                         Split{{32, 9000}, {9000, 31}, false, false},    // K ranges
                         Split{{9001, 33}, {9001, 30}, true, false}}) {  // K ranges, A^T
    SCOPED_TRACE(ShapeToString(c.a) + " x " + ShapeToString(c.b));
    Node node = MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                         {{"transA", Attribute::Int(c.ta)}, {"transB", Attribute::Int(c.tb)}}, kMs);
    Tensor a = RandomTensor(c.a, 5), b = RandomTensor(c.b, 6);
    Ref ra = ToRef(a), rb = ToRef(b);
    if (c.ta) ra = TransposeLast2(ra);
    if (c.tb) rb = TransposeLast2(rb);
    Tensor one;
    for (int threads : {1, 2, 3}) {
      SetCpuThreads(threads);
      Tensor y = Run1(node, {{"a", a}, {"b", b}});
      SetCpuThreads(1);
      if (threads == 1) {
        ExpectClose(y, NaiveMatMul(ra, rb), 1e-4, 1e-4);
        one = y;
      } else {
        EXPECT_TRUE(y.BitwiseEqual(one)) << threads << " threads";
      }
    }
  }
}

TEST(MatMulTest, FusedMatMulTransposesAndScales) {
  Tensor a = RandomTensor({2, 5, 3}, 3), b = RandomTensor({7, 5}, 4);
  Node n = MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                    {{"transA", Attribute::Int(1)},
                     {"transB", Attribute::Int(1)},
                     {"alpha", Attribute::Float(0.5f)}},
                    kMs);
  Tensor y = Run1(n, {{"a", a}, {"b", b}});
  Ref want = NaiveMatMul(TransposeLast2(ToRef(a)), TransposeLast2(ToRef(b)));
  for (double& v : want.v) v *= 0.5;
  ExpectClose(y, want);
  // transA only, with a batched B that broadcasts over a unit batch dim of A.
  Tensor a2 = RandomTensor({1, 4, 3}, 5), b2 = RandomTensor({2, 4, 6}, 6);
  Tensor y2 = Run1(MakeNode("FusedMatMul", {"a", "b"}, {"y"}, {{"transA", Attribute::Int(1)}}, kMs),
                   {{"a", a2}, {"b", b2}});
  ExpectClose(y2, NaiveMatMul(TransposeLast2(ToRef(a2)), ToRef(b2)));
}

TEST(MatMulTest, SameBitsOnEveryRun) {
  Tensor a = RandomTensor({3, 67, 45}, 7), b = RandomTensor({45, 33}, 8);
  Node n = MakeNode("MatMul", {"a", "b"}, {"y"});
  Tensor y1 = Run1(n, {{"a", a}, {"b", b}});
  Tensor y2 = Run1(n, {{"a", a}, {"b", b}});
  EXPECT_TRUE(y1.BitwiseEqual(y2));
}

TEST(MatMulTest, InnerDimensionMismatchIsAnError) {
  auto outs = RunSingleNode(MakeNode("MatMul", {"a", "b"}, {"y"}),
                            {{"a", RandomTensor({3, 5}, 1)}, {"b", RandomTensor({4, 7}, 2)}});
  ASSERT_FALSE(outs.ok());
  EXPECT_EQ(outs.status().message(),
            "MatMul node 'n': inner dimensions do not match: A is [3,5], B is [4,7]");
  auto batch =
      RunSingleNode(MakeNode("MatMul", {"a", "b"}, {"y"}),
                    {{"a", RandomTensor({2, 3, 5}, 1)}, {"b", RandomTensor({3, 5, 7}, 2)}});
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().message(),
            "MatMul node 'n': batch dimensions: shapes [2] and [3] do not broadcast");
}

struct GemmCase {
  bool ta, tb;
  float alpha, beta;
  Shape c;  // empty vector with has_c=false means no C
  bool has_c;
};

class GemmVariants : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmVariants, MatchesReference) {
  const GemmCase& gc = GetParam();
  int64_t m = 3, k = 5, n = 7;
  Tensor a = RandomTensor(gc.ta ? Shape{k, m} : Shape{m, k}, 11);
  Tensor b = RandomTensor(gc.tb ? Shape{n, k} : Shape{k, n}, 12);
  std::map<std::string, Tensor> in = {{"a", a}, {"b", b}};
  std::vector<std::string> names = {"a", "b"};
  Tensor c;
  if (gc.has_c) {
    c = RandomTensor(gc.c, 13);
    in["c"] = c;
    names.push_back("c");
  }
  Node node = MakeNode("Gemm", names, {"y"},
                       {{"transA", Attribute::Int(gc.ta)},
                        {"transB", Attribute::Int(gc.tb)},
                        {"alpha", Attribute::Float(gc.alpha)},
                        {"beta", Attribute::Float(gc.beta)}});
  Tensor y = Run1(node, in);
  Ref ra = ToRef(a), rb = ToRef(b);
  if (gc.ta) ra = TransposeLast2(ra);
  if (gc.tb) rb = TransposeLast2(rb);
  Ref want = NaiveMatMul(ra, rb);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double cv = 0;
      if (gc.has_c) {
        Shape cs = gc.c;
        while (cs.size() < 2) cs.insert(cs.begin(), 1);
        cv = c.GetAsDouble((cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j));
      }
      want.v[i * n + j] = gc.alpha * want.v[i * n + j] + gc.beta * cv;
    }
  ExpectClose(y, want);
}

INSTANTIATE_TEST_SUITE_P(Attrs, GemmVariants,
                         ::testing::Values(GemmCase{false, false, 1.0f, 1.0f, {}, false},
                                           GemmCase{true, false, 1.0f, 1.0f, {3, 7}, true},
                                           GemmCase{false, true, 0.5f, 2.0f, {7}, true},
                                           GemmCase{true, true, -1.5f, 0.25f, {3, 1}, true},
                                           GemmCase{false, false, 1.0f, 1.0f, {}, true},
                                           GemmCase{false, false, 2.0f, 0.0f, {1, 7}, true}));

// ============================== softmax ==============================

Ref RefSoftmax(const Ref& x, int64_t axis, bool log) {
  Ref y = x;
  int64_t outer = 1, n = x.shape[axis], inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape[i];
  for (size_t i = axis + 1; i < x.shape.size(); ++i) inner *= x.shape[i];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return o * n * inner + j * inner + i; };
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) m = std::max(m, x.v[at(j)]);
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::exp(x.v[at(j)] - m);
      for (int64_t j = 0; j < n; ++j)
        y.v[at(j)] = log ? x.v[at(j)] - m - std::log(s) : std::exp(x.v[at(j)] - m) / s;
    }
  return y;
}

TEST(SoftmaxTest, MatchesReferenceOnEveryAxis) {
  Tensor x = RandomTensor({3, 5, 7}, 21, -4.f, 4.f);
  for (bool log : {false, true}) {
    for (int64_t axis : {-1, 0, 1, 2}) {
      Node n =
          MakeNode(log ? "LogSoftmax" : "Softmax", {"x"}, {"y"}, {{"axis", Attribute::Int(axis)}});
      Tensor y = Run1(n, {{"x", x}});
      ExpectClose(y, RefSoftmax(ToRef(x), axis < 0 ? axis + 3 : axis, log), 1e-6, 1e-5,
                  std::string(log ? "log" : "") + "softmax axis " + std::to_string(axis));
    }
  }
  // Default axis is -1.
  Tensor y = Run1(MakeNode("Softmax", {"x"}, {"y"}), {{"x", x}});
  ExpectClose(y, RefSoftmax(ToRef(x), 2, false), 1e-6, 1e-5);
}

TEST(SoftmaxTest, LargeAndInfiniteScoresStayFinite) {
  float inf = std::numeric_limits<float>::infinity();
  Tensor x =
      Tensor::FromVector<float>(DType::kFloat32, {2, 3}, {1000.f, 1001.f, 1002.f, -inf, 0.f, -inf});
  Tensor y = Run1(MakeNode("Softmax", {"x"}, {"y"}), {{"x", x}});
  ExpectClose(y, Ref{{2, 3}, {0.09003057, 0.24472847, 0.66524096, 0, 1, 0}}, 1e-7, 1e-6);
  Tensor ly = Run1(MakeNode("LogSoftmax", {"x"}, {"y"}), {{"x", x}});
  EXPECT_NEAR(ly.data<float>()[2], -0.40760596, 1e-6);
  EXPECT_EQ(ly.data<float>()[4], 0.0f);
  EXPECT_EQ(ly.data<float>()[3], -inf);
}

TEST(SoftmaxTest, GradKernelsMatchReference) {
  Shape s = {3, 4, 5};
  for (int64_t axis : {1, -1}) {
    int64_t ax = axis < 0 ? axis + 3 : axis;
    Tensor x = RandomTensor(s, 31), dy = RandomTensor(s, 32);
    for (bool log : {false, true}) {
      Ref y = RefSoftmax(ToRef(x), ax, log);
      Tensor yt(DType::kFloat32, s);
      for (int64_t i = 0; i < yt.numel(); ++i) yt.data<float>()[i] = static_cast<float>(y.v[i]);
      Node n = MakeNode(log ? "LogSoftmaxGrad_13" : "SoftmaxGrad_13", {"dy", "y"}, {"dx"},
                        {{"axis", Attribute::Int(axis)}}, kMs);
      Tensor dx = Run1(n, {{"dy", dy}, {"y", yt}});
      // dx_j = sum_i dy_i dy_i/dx_j, from the Jacobian.
      Ref want{s, std::vector<double>(yt.numel(), 0.0)};
      int64_t outer = 1, nn = s[ax], inner = 1;
      for (int64_t i = 0; i < ax; ++i) outer *= s[i];
      for (size_t i = ax + 1; i < s.size(); ++i) inner *= s[i];
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t in = 0; in < inner; ++in)
          for (int64_t j = 0; j < nn; ++j) {
            int64_t pj = o * nn * inner + j * inner + in;
            for (int64_t i = 0; i < nn; ++i) {
              int64_t pi = o * nn * inner + i * inner + in;
              double jac = log ? (i == j) - std::exp(y.v[pj]) : y.v[pi] * ((i == j) - y.v[pj]);
              want.v[pj] += dy.GetAsDouble(pi) * jac;
            }
          }
      ExpectClose(dx, want, 1e-6, 1e-5, log ? "LogSoftmaxGrad_13" : "SoftmaxGrad_13");
    }
  }
}

// ============================== reductions ==============================

// Reference reduction in double over a set of axes (keepdims shape).
Ref RefReduce(const Ref& x, const std::vector<int64_t>& axes, bool keepdims,
              const std::string& op) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<bool> red(rank, false);
  for (int64_t a : axes) red[a < 0 ? a + rank : a] = true;
  Shape keep = x.shape, out;
  for (int64_t i = 0; i < rank; ++i) {
    if (red[i]) keep[i] = 1;
    if (!red[i] || keepdims) out.push_back(red[i] ? 1 : x.shape[i]);
  }
  int64_t on = NumElements(keep);
  std::vector<std::vector<double>> groups(on);
  for (int64_t i = 0; i < static_cast<int64_t>(x.v.size()); ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t idx = rem % x.shape[d];
      rem /= x.shape[d];
      if (!red[d]) o += idx * stride;
      stride *= keep[d];
    }
    groups[o].push_back(x.v[i]);
  }
  Ref y{out, std::vector<double>(on)};
  for (int64_t o = 0; o < on; ++o) {
    const auto& g = groups[o];
    double r = op == "ReduceProd" ? 1 : 0;
    if (op == "ReduceMax") r = -INFINITY;
    if (op == "ReduceMin") r = INFINITY;
    for (double v : g) {
      if (op == "ReduceSum" || op == "ReduceMean") r += v;
      if (op == "ReduceProd") r *= v;
      if (op == "ReduceMax") r = std::max(r, v);
      if (op == "ReduceMin") r = std::min(r, v);
      if (op == "ReduceL1") r += std::fabs(v);
      if (op == "ReduceL2" || op == "ReduceSumSquare") r += v * v;
      if (op == "ReduceLogSum") r += v;
      if (op == "ReduceLogSumExp") r += std::exp(v);
    }
    if (op == "ReduceMean") r /= static_cast<double>(g.size());
    if (op == "ReduceL2") r = std::sqrt(r);
    if (op == "ReduceLogSum" || op == "ReduceLogSumExp") r = std::log(r);
    y.v[o] = r;
  }
  return y;
}

TEST(ReduceTest, EveryOpWithAxesAsAttributeAndAsInput) {
  Tensor x = RandomTensor({3, 5, 7}, 41, 0.5f, 1.5f);
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
    for (std::vector<int64_t> axes :
         {std::vector<int64_t>{1}, {-1}, {0, 2}, {0}, {2, 0, 1}, {0, 1}}) {
      for (bool keepdims : {true, false}) {
        Ref want = RefReduce(ToRef(x), axes, keepdims, op);
        std::string what = std::string(op) + " axes[0]=" + std::to_string(axes[0]) +
                           " n=" + std::to_string(axes.size()) +
                           " keepdims=" + std::to_string(keepdims);
        Node by_attr =
            MakeNode(op, {"x"}, {"y"},
                     {{"axes", Attribute::Ints(axes)}, {"keepdims", Attribute::Int(keepdims)}});
        ExpectClose(Run1(by_attr, {{"x", x}}), want, 1e-6, 1e-6, what + " (attr)");
        Node by_input =
            MakeNode(op, {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(keepdims)}});
        Tensor axes_t = I64({static_cast<int64_t>(axes.size())}, axes);
        ExpectClose(Run1(by_input, {{"x", x}}, {{"axes", axes_t}}), want, 1e-6, 1e-6,
                    what + " (input)");
      }
    }
  }
}

TEST(ReduceTest, EmptyAxesReduceEverythingUnlessNoop) {
  Tensor x = RandomTensor({3, 5, 7}, 42);
  Tensor all =
      Run1(MakeNode("ReduceSum", {"x"}, {"y"}, {{"keepdims", Attribute::Int(0)}}), {{"x", x}});
  ExpectClose(all, RefReduce(ToRef(x), {0, 1, 2}, false, "ReduceSum"), 1e-5, 1e-6);
  Node noop =
      MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"noop_with_empty_axes", Attribute::Int(1)}});
  Tensor same = Run1(noop, {{"x", x}}, {{"axes", I64({0}, {})}});
  EXPECT_TRUE(same.BitwiseEqual(x));
  Tensor mean =
      Run1(MakeNode("ReduceMean", {"x", "axes"}, {"y"}), {{"x", x}}, {{"axes", I64({0}, {})}});
  ExpectClose(mean, RefReduce(ToRef(x), {0, 1, 2}, true, "ReduceMean"), 1e-6, 1e-6);
}

TEST(ReduceTest, IntegersAndNaN) {
  Tensor xi = I64({2, 3}, {1, -2, 3, 4, 5, -6});
  Tensor s = Run1(MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(0)}}),
                  {{"x", xi}}, {{"axes", I64({1}, {1})}});
  EXPECT_EQ(s.dtype(), DType::kInt64);
  EXPECT_EQ(s.ToInt64Vector(), (std::vector<int64_t>{2, 3}));
  Tensor mx =
      Run1(MakeNode("ReduceMax", {"x"}, {"y"}, {{"axes", Attribute::Ints({0})}}), {{"x", xi}});
  EXPECT_EQ(mx.ToInt64Vector(), (std::vector<int64_t>{4, 5, 3}));
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor xf = Tensor::FromVector<float>(DType::kFloat32, {3}, {1.f, nan, 3.f});
  Tensor m = Run1(MakeNode("ReduceMax", {"x"}, {"y"}), {{"x", xf}});
  EXPECT_TRUE(std::isnan(m.data<float>()[0]));
}

TEST(ReduceTest, BadAxesNameTheNode) {
  Tensor x = RandomTensor({3, 5}, 43);
  auto dup = RunSingleNode(
      MakeNode("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::Ints({1, -1})}}), {{"x", x}});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "ReduceMean node 'n': axis -1 appears twice in axes");
  auto range = RunSingleNode(MakeNode("ReduceSum", {"x", "axes"}, {"y"}), {{"x", x}},
                             {{"axes", I64({1}, {2})}});
  ASSERT_FALSE(range.ok());
  EXPECT_EQ(range.status().message(), "ReduceSum node 'n': axis 2 is out of range for rank 2");
}

// ============================== running sums ==============================

Node CumSumNode(int64_t exclusive, int64_t reverse) {
  return MakeNode("CumSum", {"x", "axis"}, {"y"},
                  {{"exclusive", Attribute::Int(exclusive)}, {"reverse", Attribute::Int(reverse)}});
}

TEST(CumSumTest, SpecExamples) {
  // The ONNX operator documentation's examples (the backend node tests use them in f64).
  Tensor x = Tensor::FromVector<double>(DType::kFloat64, {5}, {1, 2, 3, 4, 5});
  Tensor axis = I64({}, {0});
  auto run = [&](int64_t exclusive, int64_t reverse, const Tensor& in, const Tensor& ax) {
    Tensor y = Run1(CumSumNode(exclusive, reverse), {{"x", in}}, {{"axis", ax}});
    std::vector<double> v;
    for (int64_t i = 0; i < y.numel(); ++i) v.push_back(y.GetAsDouble(i));
    return v;
  };
  EXPECT_EQ(run(0, 0, x, axis), (std::vector<double>{1, 3, 6, 10, 15}));
  EXPECT_EQ(run(1, 0, x, axis), (std::vector<double>{0, 1, 3, 6, 10}));
  EXPECT_EQ(run(0, 1, x, axis), (std::vector<double>{15, 14, 12, 9, 5}));
  EXPECT_EQ(run(1, 1, x, axis), (std::vector<double>{14, 12, 9, 5, 0}));
  Tensor x2 = Tensor::FromVector<double>(DType::kFloat64, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(run(0, 0, x2, I64({}, {0})), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(run(0, 0, x2, I64({}, {1})), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(run(0, 0, x2, Tensor::FromVector<int32_t>(DType::kInt32, {1}, {-1})),
            (std::vector<double>{1, 3, 6, 4, 9, 15}));
}

// The reference sums, for output element e, the elements of its line on the summed side of it,
// nearest the line's start (or end, reversed) first: in double for floats, in wrapping uint64 for
// integers, then one conversion to the element type.
template <class T>
Tensor RefCumSum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  const Shape& s = x.shape();
  int64_t stride = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) stride *= s[d];
  const int64_t n = s[axis];
  Tensor y(x.dtype(), s);
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t j = e / stride % n;
    const int64_t first = e - j * stride;  // the line's element 0
    double fsum = 0;
    uint64_t isum = 0;
    for (int64_t q = 0; q < n; ++q) {
      const int64_t i = reverse ? n - 1 - q : q;
      const bool in = reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j);
      if (!in) continue;
      const T v = x.data<T>()[first + i * stride];
      if constexpr (std::is_floating_point_v<T>)
        fsum += static_cast<double>(v);
      else
        isum += static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    if constexpr (std::is_floating_point_v<T>)
      y.data<T>()[e] = static_cast<T>(fsum);
    else
      y.data<T>()[e] = static_cast<T>(isum);
  }
  return y;
}

template <class T>
Tensor Filled(DType dt, Shape s, uint64_t seed) {
  Tensor r = RandomTensor(s, seed, -3.f, 3.f);
  Tensor t(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = r.data<float>()[i];
    if constexpr (std::is_floating_point_v<T>)
      t.data<T>()[i] = static_cast<T>(v);
    else  // near the type's limits, so that the sums wrap
      t.data<T>()[i] = static_cast<T>(v / 3 * static_cast<double>(std::numeric_limits<T>::max()));
  }
  return t;
}

TEST(CumSumTest, EveryAxisModeAndTypeMatchesTheReferenceBitwise) {
  const std::vector<Shape> shapes = {{7}, {3, 5}, {2, 7, 3}, {4, 1, 6, 5}, {1000}};
  uint64_t seed = 60;
  for (const Shape& shape : shapes)
    for (int64_t axis = -static_cast<int64_t>(shape.size());
         axis < static_cast<int64_t>(shape.size()); ++axis)
      for (int64_t exclusive : {0, 1})
        for (int64_t reverse : {0, 1}) {
          const int64_t a = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
          const std::string what = ShapeToString(shape) + " axis " + std::to_string(axis) +
                                   " exclusive " + std::to_string(exclusive) + " reverse " +
                                   std::to_string(reverse);
          auto check = [&](auto tag, DType dt) {
            using T = decltype(tag);
            Tensor x = Filled<T>(dt, shape, ++seed);
            Tensor y =
                Run1(CumSumNode(exclusive, reverse), {{"x", x}}, {{"axis", I64({}, {axis})}});
            EXPECT_TRUE(y.BitwiseEqual(RefCumSum<T>(x, a, exclusive, reverse)))
                << DTypeName(dt) << " " << what;
          };
          check(float{}, DType::kFloat32);
          check(double{}, DType::kFloat64);
          check(int32_t{}, DType::kInt32);
          check(int64_t{}, DType::kInt64);
        }
  // An f32 running sum is accumulated in double: 2^24 + 1 + 1 is not lost to f32 rounding.
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {3}, {16777216.f, 1.f, 1.f});
  Tensor y = Run1(CumSumNode(0, 0), {{"x", x}}, {{"axis", I64({}, {0})}});
  EXPECT_EQ(y.data<float>()[2], 16777218.f);
}

TEST(CumSumTest, BadInputsAreOneLineErrors) {
  Tensor x = RandomTensor({3, 5}, 61);
  auto error = [&](const Node& n, const Tensor& in, const Tensor& axis) {
    auto r = RunSingleNode(n, {{"x", in}}, {{"axis", axis}});
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().message();
  };
  EXPECT_EQ(error(CumSumNode(0, 0), x, I64({}, {2})),
            "CumSum node 'n': axis 2 is out of range for rank 2");
  EXPECT_EQ(error(CumSumNode(0, 0), x, I64({2}, {0, 1})),
            "CumSum node 'n': axis must be a 0-D (or one-element) tensor, has shape [2]");
  EXPECT_EQ(error(CumSumNode(0, 0), x, Tensor::Scalar(0.f)),
            "CumSum node 'n': axis must be i64 or i32, got f32");
  EXPECT_EQ(error(CumSumNode(2, 0), x, I64({}, {0})),
            "CumSum node 'n': attribute 'exclusive' must be 0 or 1, got 2");
  EXPECT_EQ(error(CumSumNode(0, -1), x, I64({}, {0})),
            "CumSum node 'n': attribute 'reverse' must be 0 or 1, got -1");
  EXPECT_EQ(error(CumSumNode(0, 0), Tensor::Scalar(1.f), I64({}, {0})),
            "CumSum node 'n': x must have rank >= 1");
  Tensor b(DType::kBool, {3});
  EXPECT_EQ(error(CumSumNode(0, 0), b, I64({}, {0})),
            "CumSum node 'n': x must be f32, f64, i32 or i64, got bool");
  // The kernel checks on its own too (a caller that skips inference gets the same words).
  Tensor y(DType::kFloat32, {3, 5});
  Tensor axis = I64({}, {-3});
  const Tensor* ins[] = {&x, &axis};
  Tensor* outs[] = {&y};
  EXPECT_EQ(RunCpuKernel(CumSumNode(0, 0), ins, outs, {}).message(),
            "CumSum node 'n': axis -3 is out of range for rank 2");
  axis = I64({}, {0});
  EXPECT_EQ(RunCpuKernel(CumSumNode(3, 0), ins, outs, {}).message(),
            "CumSum node 'n': attributes 'exclusive' and 'reverse' must be 0 or 1, got 3 and 0");
}

// ============================== normalizations ==============================

struct NormRef {
  Ref y, mean, inv;
};

NormRef RefLayerNorm(const Ref& x, const Ref& scale, const Ref* bias, int64_t axis, double eps,
                     bool rms) {
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(x.shape.size()); ++i)
    (i < axis ? rows : cols) *= x.shape[i];
  Shape stats = x.shape;
  for (size_t i = axis; i < stats.size(); ++i) stats[i] = 1;
  NormRef r{x, {stats, std::vector<double>(rows)}, {stats, std::vector<double>(rows)}};
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    if (!rms)
      for (int64_t j = 0; j < cols; ++j) mean += x.v[i * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j)
      var += (x.v[i * cols + j] - mean) * (x.v[i * cols + j] - mean) / cols;
    double inv = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j)
      r.y.v[i * cols + j] =
          (x.v[i * cols + j] - mean) * inv * scale.v[j] + (bias ? bias->v[j] : 0.0);
    r.mean.v[i] = mean;
    r.inv.v[i] = inv;
  }
  return r;
}

TEST(LayerNormTest, MatchesReferenceAcrossAxes) {
  Tensor x = RandomTensor({3, 5, 7}, 51, -2.f, 3.f);
  for (int64_t axis : {-1, 1, 2, 0}) {
    int64_t ax = axis < 0 ? axis + 3 : axis;
    Shape norm(x.shape().begin() + ax, x.shape().end());
    Tensor scale = RandomTensor(norm, 52), bias = RandomTensor(norm, 53);
    for (bool with_bias : {true, false}) {
      std::vector<std::string> ins = {"x", "scale"};
      std::map<std::string, Tensor> feeds = {{"x", x}, {"scale", scale}};
      if (with_bias) {
        ins.push_back("bias");
        feeds["bias"] = bias;
      }
      Node n = MakeNode("LayerNormalization", ins, {"y", "mean", "inv"},
                        {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-3f)}});
      auto outs = RunSingleNode(n, feeds);
      ASSERT_TRUE(outs.ok()) << outs.status().message();
      Ref rb = ToRef(bias);
      NormRef want = RefLayerNorm(ToRef(x), ToRef(scale), with_bias ? &rb : nullptr, ax,
                                  static_cast<double>(1e-3f), false);
      std::string what = "axis " + std::to_string(axis) + (with_bias ? " bias" : "");
      ExpectClose((*outs)[0], want.y, 1e-5, 1e-5, what);
      ExpectClose((*outs)[1], want.mean, 1e-6, 1e-6, what + " mean");
      ExpectClose((*outs)[2], want.inv, 1e-6, 1e-6, what + " inv");
    }
  }
}

TEST(LayerNormTest, DefaultsAndScaleMismatch) {
  Tensor x = RandomTensor({4, 6}, 54);
  Tensor scale = RandomTensor({6}, 55);
  Tensor y =
      Run1(MakeNode("LayerNormalization", {"x", "scale"}, {"y"}), {{"x", x}, {"scale", scale}});
  ExpectClose(y, RefLayerNorm(ToRef(x), ToRef(scale), nullptr, 1, 1e-5, false).y, 1e-5, 1e-5);
  auto bad = RunSingleNode(MakeNode("LayerNormalization", {"x", "scale"}, {"y"}),
                           {{"x", x}, {"scale", RandomTensor({5}, 1)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "LayerNormalization node 'n': scale of shape [5] does not match the normalized shape "
            "[6]");
}

TEST(SimplifiedLayerNormTest, MatchesReference) {
  Tensor x = RandomTensor({3, 5, 7}, 61, -2.f, 2.f);
  for (int64_t axis : {-1, 1}) {
    int64_t ax = axis < 0 ? axis + 3 : axis;
    Shape norm(x.shape().begin() + ax, x.shape().end());
    Tensor scale = RandomTensor(norm, 62);
    Node n = MakeNode("SimplifiedLayerNormalization", {"x", "scale"}, {"y", "inv"},
                      {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-5f)}}, kMs);
    auto outs = RunSingleNode(n, {{"x", x}, {"scale", scale}});
    ASSERT_TRUE(outs.ok()) << outs.status().message();
    NormRef want = RefLayerNorm(ToRef(x), ToRef(scale), nullptr, ax, 1e-5, true);
    ExpectClose((*outs)[0], want.y, 1e-5, 1e-5);
    ExpectClose((*outs)[1], want.inv, 1e-6, 1e-5);
  }
}

// The decomposition torch 1.13 exports (opset 17) for llm-foundry's / Llama's RMSNorm,
// `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight`: rsqrt becomes Div(1, Sqrt).
// Canonicalization fuses it into SimplifiedLayerNormalization, which must give the same bits.
TEST(SimplifiedLayerNormTest, SameBitsAsTheExportedDecomposition) {
  for (int seed = 0; seed < 4; ++seed) {
    Shape s = seed % 2 ? Shape{2, 5, 37} : Shape{3, 129};
    int64_t d = s.back();
    auto graph = ParseGraph(R"(graph rms {
  input x : f32)" + ShapeToString(s) +
                            R"(
  input w : f32[)" + std::to_string(d) +
                            R"(]
  const two : f32[] = [2.0]
  const eps : f32[] = [1e-05]
  const one : f32[] = [1.0]
  p = Pow(x, two)
  m = ReduceMean(p) {axes=[-1], keepdims=1}
  a = Add(m, eps)
  r = Sqrt(a)
  inv = Div(one, r)
  n = Mul(x, inv)
  y = Mul(n, w)
  output y
  output inv
})");
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    for (Node& node : graph->nodes) ASSERT_TRUE(InferAndSetTypes(*graph, node).ok());
    // Inputs with a wide dynamic range so that rounding differences would show.
    Tensor x = RandomTensor(s, 100 + seed, -3.f, 3.f);
    for (int64_t i = 0; i < x.numel(); i += 7) x.data<float>()[i] *= 1000.f;
    Tensor w = RandomTensor({d}, 200 + seed);
    auto ref = Interpret(*graph, {{"x", x}, {"w", w}});
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    Node fused =
        MakeNode("SimplifiedLayerNormalization", {"x", "w"}, {"y", "inv"},
                 {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(1e-5f)}}, kMs);
    auto outs = RunSingleNode(fused, {{"x", x}, {"w", w}});
    ASSERT_TRUE(outs.ok()) << outs.status().message();
    EXPECT_TRUE((*outs)[0].BitwiseEqual(ref->at("y"))) << "seed " << seed;
    EXPECT_TRUE((*outs)[1].BitwiseEqual(ref->at("inv"))) << "seed " << seed;
  }
}

// ============================== softmax cross-entropy ==============================

struct CeRef {
  Ref loss, log_prob;
};

CeRef RefCrossEntropy(const Ref& scores, const std::vector<int64_t>& labels, const Ref* weights,
                      const std::string& reduction, int64_t ignore) {
  int64_t n = scores.shape[0], c = scores.shape[1], inner = NumElements(scores.shape) / (n * c);
  Ref lp = RefSoftmax(scores, 1, true);
  Shape lshape = scores.shape;
  lshape.erase(lshape.begin() + 1);
  Ref none{lshape, std::vector<double>(n * inner, 0.0)};
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < inner; ++k) {
      int64_t t = labels[i * inner + k];
      if (t == ignore) continue;
      double w = weights ? weights->v[t] : 1.0;
      none.v[i * inner + k] = -lp.v[i * c * inner + t * inner + k] * w;
      total += none.v[i * inner + k];
      wsum += w;
    }
  if (reduction == "none") return {none, lp};
  double v = reduction == "sum" ? total : (wsum == 0 ? 0 : total / wsum);
  return {Ref{{}, {v}}, lp};
}

TEST(SoftmaxCrossEntropyTest, MatchesReference) {
  struct Case {
    Shape scores;
    std::vector<int64_t> labels;
    std::string reduction;
    bool weights;
  };
  std::vector<Case> cases = {
      {{4, 5}, {1, -100, 4, 0}, "mean", false},
      {{4, 5}, {1, -100, 4, 0}, "mean", true},
      {{4, 5}, {1, 2, -100, 3}, "sum", true},
      {{4, 5}, {1, -100, 4, 0}, "none", false},
      {{2, 5, 3}, {0, 1, -100, 4, 3, 2}, "mean", false},
      {{2, 5, 3}, {0, 1, -100, 4, 3, 2}, "none", true},
  };
  for (const Case& c : cases) {
    Tensor scores = RandomTensor(c.scores, 71, -3.f, 3.f);
    Shape lshape = c.scores;
    lshape.erase(lshape.begin() + 1);
    Tensor labels = I64(lshape, c.labels);
    Tensor weights = RandomTensor({c.scores[1]}, 72, 0.2f, 2.f);
    std::vector<std::string> ins = {"scores", "labels"};
    std::map<std::string, Tensor> feeds = {{"scores", scores}, {"labels", labels}};
    if (c.weights) {
      ins.push_back("w");
      feeds["w"] = weights;
    }
    Node n = MakeNode(
        "SoftmaxCrossEntropyLoss", ins, {"loss", "log_prob"},
        {{"reduction", Attribute::String(c.reduction)}, {"ignore_index", Attribute::Int(-100)}});
    auto outs = RunSingleNode(n, feeds);
    ASSERT_TRUE(outs.ok()) << outs.status().message();
    Ref rw = ToRef(weights);
    CeRef want =
        RefCrossEntropy(ToRef(scores), c.labels, c.weights ? &rw : nullptr, c.reduction, -100);
    std::string what = c.reduction + " " + ShapeToString(c.scores) + (c.weights ? " w" : "");
    ExpectClose((*outs)[0], want.loss, 1e-6, 1e-5, what);
    ExpectClose((*outs)[1], want.log_prob, 1e-6, 1e-5, what + " log_prob");
  }
}

TEST(SoftmaxCrossEntropyTest, FullyIgnoredBatchHasZeroLossAndGradient) {
  Tensor scores = RandomTensor({3, 4}, 73);
  Tensor labels = I64({3}, {-100, -100, -100});
  Node n = MakeNode("SoftmaxCrossEntropyLoss", {"scores", "labels"}, {"loss", "log_prob"},
                    {{"ignore_index", Attribute::Int(-100)}});
  auto outs = RunSingleNode(n, {{"scores", scores}, {"labels", labels}});
  ASSERT_TRUE(outs.ok()) << outs.status().message();
  EXPECT_EQ((*outs)[0].shape(), Shape{});
  EXPECT_EQ((*outs)[0].data<float>()[0], 0.0f);
  Node grad = MakeNode(
      "SoftmaxCrossEntropyLossGrad", {"dy", "log_prob", "labels"}, {"d"},
      {{"reduction", Attribute::String("mean")}, {"ignore_index", Attribute::Int(-100)}}, kMs);
  Tensor d =
      Run1(grad, {{"dy", Tensor::Scalar(1.0f)}, {"log_prob", (*outs)[1]}, {"labels", labels}});
  ASSERT_EQ(d.shape(), (Shape{3, 4}));
  for (int64_t i = 0; i < d.numel(); ++i) EXPECT_EQ(d.data<float>()[i], 0.0f);
}

TEST(SoftmaxCrossEntropyTest, GradKernelMatchesReference) {
  // d loss / d scores for "mean" with weights: w[t] * (softmax - onehot(t)) / sum of weights.
  Tensor scores = RandomTensor({4, 5}, 74, -2.f, 2.f);
  std::vector<int64_t> lab = {2, -100, 0, 4};
  Tensor labels = I64({4}, lab);
  Tensor weights = RandomTensor({5}, 75, 0.5f, 1.5f);
  Ref lp = RefSoftmax(ToRef(scores), 1, true);
  Tensor lpt(DType::kFloat32, {4, 5});
  for (int64_t i = 0; i < 20; ++i) lpt.data<float>()[i] = static_cast<float>(lp.v[i]);
  Node grad = MakeNode("SoftmaxCrossEntropyLossGrad", {"dy", "lp", "labels", "w"}, {"d"},
                       {{"ignore_index", Attribute::Int(-100)}}, kMs);
  Tensor d =
      Run1(grad, {{"dy", Tensor::Scalar(2.0f)}, {"lp", lpt}, {"labels", labels}, {"w", weights}});
  double wsum = 0;
  for (int64_t t : lab)
    if (t >= 0) wsum += weights.data<float>()[t];
  Ref want{{4, 5}, std::vector<double>(20, 0.0)};
  for (int64_t i = 0; i < 4; ++i) {
    if (lab[i] < 0) continue;
    for (int64_t c = 0; c < 5; ++c)
      want.v[i * 5 + c] =
          2.0 * weights.data<float>()[lab[i]] * (std::exp(lp.v[i * 5 + c]) - (c == lab[i])) / wsum;
  }
  ExpectClose(d, want, 1e-6, 1e-5);
}

// PyTorch's split of the same backward (passes/loss_backward.h): the negative log-likelihood's
// gradient with respect to log_prob, -w[t] * g at the label and 0 elsewhere, then log_softmax's.
// The first is exact; the two together match the fused gradient.
TEST(SoftmaxCrossEntropyTest, NllGradThenLogSoftmaxGradIsTheFusedGradient) {
  struct Case {
    Shape scores;
    std::vector<int64_t> labels;
    std::string reduction;
    bool weights;
  };
  for (const Case& c : std::vector<Case>{{{4, 5}, {2, -100, 0, 4}, "mean", true},
                                         {{4, 5}, {2, 1, 0, 4}, "sum", false},
                                         {{4, 5}, {2, -100, 0, 4}, "none", false},
                                         {{2, 5, 3}, {0, 1, -100, 4, 3, 2}, "mean", false},
                                         {{3, 4}, {-100, -100, -100}, "mean", false}}) {
    Shape lshape = c.scores;
    lshape.erase(lshape.begin() + 1);
    const int64_t n = c.scores[0], classes = c.scores[1], inner = NumElements(lshape) / n;
    Tensor scores = RandomTensor(c.scores, 76, -3.f, 3.f), labels = I64(lshape, c.labels);
    Tensor w = RandomTensor({classes}, 77, 0.5f, 1.5f);
    Tensor dy = c.reduction == "none" ? RandomTensor(lshape, 78) : Tensor::Scalar(1.5f);
    std::vector<std::string> ins = {"scores", "labels"};
    std::map<std::string, Tensor> feeds = {{"scores", scores}, {"labels", labels}};
    std::vector<std::string> gins = {"dy", "lp", "labels"};
    if (c.weights) {
      ins.push_back("w");
      gins.push_back("w");
      feeds["w"] = w;
    }
    const std::map<std::string, Attribute> attrs = {{"reduction", Attribute::String(c.reduction)},
                                                    {"ignore_index", Attribute::Int(-100)}};
    auto fwd =
        RunSingleNode(MakeNode("SoftmaxCrossEntropyLoss", ins, {"loss", "lp"}, attrs), feeds);
    ASSERT_TRUE(fwd.ok()) << fwd.status().message();
    std::map<std::string, Tensor> gfeeds = {{"dy", dy}, {"lp", (*fwd)[1]}, {"labels", labels}};
    if (c.weights) gfeeds["w"] = w;
    const std::string what = c.reduction + " " + ShapeToString(c.scores);
    Tensor fused = Run1(MakeNode("SoftmaxCrossEntropyLossGrad", gins, {"d"}, attrs, kMs), gfeeds);
    Tensor nll =
        Run1(MakeNode("NegativeLogLikelihoodLossGrad", gins, {"d"}, attrs, "foundry"), gfeeds);
    double wsum = 0;
    for (int64_t t : c.labels)
      if (t >= 0) wsum += c.weights ? w.data<float>()[t] : 1.0;
    Ref want{c.scores, std::vector<double>(static_cast<size_t>(scores.numel()), 0.0)};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t t = c.labels[i * inner + k];
        if (t < 0) continue;
        double g = c.reduction == "none" ? dy.data<float>()[i * inner + k] : 1.5;
        if (c.reduction == "mean") g /= wsum;
        want.v[(i * classes + t) * inner + k] = -(c.weights ? w.data<float>()[t] : 1.0) * g;
      }
    ExpectClose(nll, want, 0, 1e-7, what + " nll");
    Tensor split = Run1(
        MakeNode("LogSoftmaxGrad_13", {"dlp", "lp"}, {"d"}, {{"axis", Attribute::Int(1)}}, kMs),
        {{"dlp", nll}, {"lp", (*fwd)[1]}});
    ExpectClose(split, ToRef(fused), 1e-6, 1e-5, what + " split vs fused");
  }
}

TEST(SoftmaxCrossEntropyTest, LabelOutOfRangeNamesTheNode) {
  Node n = MakeNode("SoftmaxCrossEntropyLoss", {"scores", "labels"}, {"loss"},
                    {{"ignore_index", Attribute::Int(-100)}});
  auto outs = RunSingleNode(n, {{"scores", RandomTensor({2, 3}, 1)}, {"labels", I64({2}, {0, 3})}});
  ASSERT_FALSE(outs.ok());
  EXPECT_EQ(outs.status().message(),
            "SoftmaxCrossEntropyLoss node 'n': label 3 at position 1 is outside [0, 3) and is not "
            "ignore_index -100");
  Node bad = MakeNode("SoftmaxCrossEntropyLoss", {"scores", "labels"}, {"loss"},
                      {{"reduction", Attribute::String("avg")}});
  auto r = RunSingleNode(bad, {{"scores", RandomTensor({2, 3}, 1)}, {"labels", I64({2}, {0, 1})}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.status().message(),
      "SoftmaxCrossEntropyLoss node 'n': reduction must be \"mean\", \"sum\" or \"none\", got "
      "\"avg\"");
}

}  // namespace
}  // namespace foundry
