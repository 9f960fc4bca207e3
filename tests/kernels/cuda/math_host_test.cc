// The host half of the CUDA math kernels (kernels/cuda/math_rows.cuh), checked without a GPU: each
// test replays a kernel of math.cu on the host, with the same index maps, formulas and
// accumulation order (strided per-thread partials, then the fixed block tree), and compares with
// the CPU kernel (RunSingleNode). What this cannot catch (launch geometry, cuBLAS arguments,
// shared-memory races) is math_test.cc's job on a GPU.
//
// Tolerances: fp32 outputs of double accumulations that differ only in summation order agree to a
// few fp32 ulps: atol 1e-6 + rtol 1e-5 (1e-5 / 1e-5 for the matmuls, whose host replay sums in
// double while OpenBLAS sums in float).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/math_rows.cuh"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace mr = math_rows;
constexpr char kMs[] = "com.microsoft";
constexpr int kRowThreads = 256;  // math.cu's block size for row kernels

void ExpectClose(const Tensor& got, const Tensor& want, double atol, double rtol,
                 const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " element " << i;
      continue;
    }
    ASSERT_LE(std::fabs(g - w), atol + rtol * std::fabs(w))
        << what << " element " << i << ": host replay " << g << ", cpu " << w;
  }
}

std::vector<Tensor> Cpu(const Node& node, const std::map<std::string, Tensor>& inputs,
                        const std::map<std::string, Tensor>& constants = {}) {
  auto outs = RunSingleNode(node, inputs, constants);
  EXPECT_TRUE(outs.ok()) << outs.status().message();
  return outs.ok() ? *outs : std::vector<Tensor>{};
}

Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, std::move(shape), v);
}

// RowReduce / ColumnReduce of math.cu on the host: `threads` strided partials (partial t combines
// elements t, t + threads, ...), then the halving tree.
template <class A, class Lift, class Op>
A Tree(int64_t n, int threads, A init, Lift lift, Op op) {
  std::vector<A> part(threads, init);
  for (int t = 0; t < threads; ++t)
    for (int64_t j = t; j < n; j += threads) part[t] = op(part[t], lift(j));
  for (int s = threads / 2; s > 0; s >>= 1)
    for (int t = 0; t < s; ++t) part[t] = op(part[t], part[t + s]);
  return part[0];
}
double Add(double a, double b) { return a + b; }

// ============================== matrix products ==============================

// The launcher's cuBLAS calls (GemmRowMajor) as naive products: `batch` row-major Y = op(A) op(B)
// at the given element strides.
void HostGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t sa, const float* b, int64_t sb, float* y, int64_t sy, int64_t batch) {
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          double av = ta ? a[bi * sa + p * m + i] : a[bi * sa + i * k + p];
          double bv = tb ? b[bi * sb + j * k + p] : b[bi * sb + p * n + j];
          s += av * bv;
        }
        y[bi * sy + i * n + j] = static_cast<float>(alpha * s);
      }
}

// MatMulTyped of math.cu with HostGemm for cuBLAS.
Tensor ReplayMatMul(const Tensor& A, const Tensor& B, const Shape& y_shape, bool ta, bool tb,
                    float alpha, mr::MatMulPlan* plan_out) {
  mr::MatMulPlan p;
  std::string err = mr::MakeMatMulPlan(A.shape(), B.shape(), ta, tb, &p);
  EXPECT_EQ(err, "");
  *plan_out = p;
  Tensor Y(DType::kFloat32, y_shape);
  EXPECT_EQ(Y.numel(), p.batches * p.m * p.n);
  const float* a = A.data<float>();
  const float* b = B.data<float>();
  float* y = Y.data<float>();
  if (p.fold_rows) {
    HostGemm(false, tb, p.batches * p.m, p.n, p.k, alpha, a, 0, b, 0, y, 0, 1);
    return Y;
  }
  EXPECT_EQ(p.batches % p.group, 0);
  for (int64_t first = 0; first < p.batches; first += p.group) {
    int64_t ai = 0, bi = 0;
    mr::MatMulBatchOperands(p, first, &ai, &bi);
    // Within a group the operands advance linearly, as one strided batched call assumes.
    for (int64_t j = 0; j < p.group; ++j) {
      int64_t aj = 0, bj = 0;
      mr::MatMulBatchOperands(p, first + j, &aj, &bj);
      EXPECT_EQ(aj, ai + j * p.group_a_stride) << "batch " << first + j;
      EXPECT_EQ(bj, bi + j * p.group_b_stride) << "batch " << first + j;
    }
    HostGemm(ta, tb, p.m, p.n, p.k, alpha, a + ai * p.a_mat, p.group_a_stride * p.a_mat,
             b + bi * p.b_mat, p.group_b_stride * p.b_mat, y + first * p.m * p.n, p.m * p.n,
             p.group);
  }
  return Y;
}

struct MatMulCase {
  Shape a, b;
  bool ta, tb;
  int64_t group;  // expected batches per strided call (0: rows folded into one GEMM)
};

TEST(CudaMathHostTest, MatMulBatchPlanReproducesTheCpu) {
  const std::vector<MatMulCase> cases = {
      {{3, 5}, {5, 7}, false, false, 0},
      {{2, 3, 5}, {5, 7}, false, false, 0},
      {{5}, {5, 7}, false, false, 0},
      {{3, 5}, {5}, false, false, 0},
      {{5}, {5}, false, false, 0},
      {{7}, {2, 7, 3}, false, false, 2},
      {{2, 3, 7}, {7}, false, false, 0},
      {{2, 1, 3, 4}, {5, 4, 6}, false, false, 5},  // A broadcasts over the inner batch dim
      {{1, 3, 5}, {2, 5, 7}, false, false, 2},
      {{3, 5}, {2, 5, 7}, false, false, 2},
      {{2, 3, 4, 5}, {2, 3, 5, 6}, false, false, 6},  // one call over both batch dims
      {{2, 1, 4, 5}, {1, 3, 5, 6}, false, false, 3},  // not one linear run: 2 calls of 3
      {{4, 1, 3, 5}, {1, 6, 5, 2}, false, false, 6},
      {{3, 4, 1, 6, 5}, {4, 1, 5, 7}, false, false, 4},  // B repeats for each of A's 3
      {{2, 5, 3}, {7, 5}, true, true, 2},
      {{1, 4, 3}, {2, 4, 6}, true, false, 2},
      {{2, 3, 67, 45}, {45, 33}, false, false, 0},
      {{2, 3, 45, 67}, {2, 3, 33, 45}, true, true, 6},
      {{5, 3}, {4, 5}, true, true, 1},
      {{3, 0}, {0, 4}, false, false, 0},
  };
  for (const MatMulCase& c : cases) {
    std::string what = ShapeToString(c.a) + " x " + ShapeToString(c.b) + (c.ta ? " transA" : "") +
                       (c.tb ? " transB" : "");
    Tensor a = RandomTensor(c.a, 1), b = RandomTensor(c.b, 2);
    const bool fused = c.ta || c.tb;
    Node node = fused ? MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                                 {{"transA", Attribute::Int(c.ta)},
                                  {"transB", Attribute::Int(c.tb)},
                                  {"alpha", Attribute::Float(0.75f)}},
                                 kMs)
                      : MakeNode("MatMul", {"a", "b"}, {"y"});
    std::vector<Tensor> cpu = Cpu(node, {{"a", a}, {"b", b}});
    ASSERT_EQ(cpu.size(), 1u) << what;
    mr::MatMulPlan plan;
    Tensor y = ReplayMatMul(a, b, cpu[0].shape(), c.ta, c.tb, fused ? 0.75f : 1.0f, &plan);
    EXPECT_EQ(plan.fold_rows ? 0 : plan.group, c.group) << what;
    ExpectClose(y, cpu[0], 1e-5, 1e-5, what);
  }
}

TEST(CudaMathHostTest, MatMulPlanRejectsWhatTheCpuRejects) {
  mr::MatMulPlan p;
  EXPECT_EQ(mr::MakeMatMulPlan({3, 5}, {4, 7}, false, false, &p),
            "inner dimensions do not match: [3,5] x [4,7]");
  EXPECT_EQ(mr::MakeMatMulPlan({2, 3, 5}, {3, 5, 7}, false, false, &p),
            "batch dimensions of [2,3,5] and [3,5,7] do not broadcast");
}

// ============================== reductions ==============================

// ReduceGroups of math.cu: per output, blockDim.y strided partials over the reduced index, then
// the tree, with math.cu's block shape.
template <class T, int kOp>
Tensor ReplayReduce(const Tensor& X, const std::vector<bool>& reduced, const Shape& y_shape) {
  using R = mr::Reducer<T, kOp>;
  using Acc = typename R::Acc;
  mr::ReducePlan p;
  EXPECT_EQ(mr::MakeReducePlan(X.shape(), reduced, &p), "");
  Tensor Y(X.dtype(), y_shape);
  EXPECT_EQ(Y.numel(), p.out_n);
  const int by = p.inner_kept ? kRowThreads / 32 : kRowThreads;
  const T* x = X.data<T>();
  for (int64_t o = 0; o < p.out_n; ++o) {
    const T* base = x + mr::KeptOffset(p, o);
    Acc acc = Tree<Acc>(
        p.red_n, by, R::Init(), [&](int64_t r) { return R::Lift(base[mr::ReducedOffset(p, r)]); },
        [](Acc a, Acc b) { return R::Combine(a, b); });
    Y.data<T>()[o] = R::Finish(acc, p.red_n);
  }
  return Y;
}

template <class T>
Tensor ReplayReduceOp(const std::string& op, const Tensor& X, const std::vector<bool>& reduced,
                      const Shape& y_shape) {
  if (op == "ReduceSum") return ReplayReduce<T, mr::kSum>(X, reduced, y_shape);
  if (op == "ReduceMean") return ReplayReduce<T, mr::kMean>(X, reduced, y_shape);
  if (op == "ReduceMax") return ReplayReduce<T, mr::kMax>(X, reduced, y_shape);
  if (op == "ReduceMin") return ReplayReduce<T, mr::kMin>(X, reduced, y_shape);
  if (op == "ReduceProd") return ReplayReduce<T, mr::kProd>(X, reduced, y_shape);
  if constexpr (std::is_floating_point_v<T>) {
    if (op == "ReduceL1") return ReplayReduce<T, mr::kL1>(X, reduced, y_shape);
    if (op == "ReduceL2") return ReplayReduce<T, mr::kL2>(X, reduced, y_shape);
    if (op == "ReduceSumSquare") return ReplayReduce<T, mr::kSumSquare>(X, reduced, y_shape);
    if (op == "ReduceLogSum") return ReplayReduce<T, mr::kLogSum>(X, reduced, y_shape);
    if (op == "ReduceLogSumExp") return ReplayReduce<T, mr::kLogSumExp>(X, reduced, y_shape);
  }
  ADD_FAILURE() << op;
  return Tensor();
}

// Every subset of the axes of `shape`, as axis lists.
std::vector<std::vector<int64_t>> AxisSubsets(int64_t rank) {
  std::vector<std::vector<int64_t>> out;
  for (int mask = 1; mask < (1 << rank); ++mask) {
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d)
      if (mask & (1 << d)) axes.push_back(d);
    out.push_back(axes);
  }
  return out;
}

TEST(CudaMathHostTest, ReducePlanVisitsEveryElementOnceInTheCpuOrder) {
  for (Shape s : {Shape{3, 5, 7}, Shape{2, 1, 4, 3}, Shape{1, 6}, Shape{4, 1}, Shape{2, 3, 2, 5}}) {
    const int64_t rank = static_cast<int64_t>(s.size());
    for (const auto& axes : AxisSubsets(rank)) {
      std::vector<bool> reduced(rank, false);
      for (int64_t a : axes) reduced[a] = true;
      mr::ReducePlan p;
      ASSERT_EQ(mr::MakeReducePlan(s, reduced, &p), "");
      ASSERT_EQ(p.out_n * p.red_n, NumElements(s));
      // The reduced index runs over the reduced dims in row-major order (the CPU's order): the
      // offsets of consecutive r, for a fixed output, appear in increasing order.
      std::vector<int> seen(NumElements(s), 0);
      for (int64_t o = 0; o < p.out_n; ++o) {
        int64_t prev = -1;
        for (int64_t r = 0; r < p.red_n; ++r) {
          int64_t off = mr::KeptOffset(p, o) + mr::ReducedOffset(p, r);
          ASSERT_GE(off, 0);
          ASSERT_LT(off, NumElements(s));
          EXPECT_GT(off, prev);
          prev = off;
          ++seen[off];
        }
      }
      for (int v : seen) ASSERT_EQ(v, 1) << ShapeToString(s);
    }
  }
}

TEST(CudaMathHostTest, ReductionsOverEveryAxisSubsetReproduceTheCpu) {
  const std::vector<std::string> ops = {
      "ReduceSum", "ReduceMean", "ReduceMax",       "ReduceMin",    "ReduceProd",
      "ReduceL1",  "ReduceL2",   "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"};
  for (Shape s : {Shape{3, 5, 7}, Shape{2, 300, 3}, Shape{1000, 3}, Shape{3, 1000}}) {
    Tensor x = RandomTensor(s, 41, 0.9f, 1.1f);
    for (const auto& axes : AxisSubsets(static_cast<int64_t>(s.size()))) {
      std::vector<bool> reduced(s.size(), false);
      for (int64_t a : axes) reduced[a] = true;
      for (bool keepdims : {true, false}) {
        for (const std::string& op : ops) {
          Node n = MakeNode(op, {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(keepdims)}});
          std::vector<Tensor> cpu =
              Cpu(n, {{"x", x}}, {{"axes", I64({static_cast<int64_t>(axes.size())}, axes)}});
          ASSERT_EQ(cpu.size(), 1u);
          std::string what = op + " " + ShapeToString(s) + " axes " + ShapeToString(axes);
          // Products of up to 1000 factors in [0.9, 1.1] drift further from 1: relative only.
          ExpectClose(ReplayReduceOp<float>(op, x, reduced, cpu[0].shape()), cpu[0], 1e-6, 1e-5,
                      what);
        }
      }
    }
  }
  // Integers: exact; the noop with empty axes; all axes.
  Tensor xi = I64({3, 4}, {1, -2, 3, 4, 5, -6, 7, 8, -9, 10, 11, 12});
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}) {
    for (std::vector<bool> reduced :
         {std::vector<bool>{true, false}, {false, true}, {true, true}}) {
      std::vector<int64_t> axes;
      for (int64_t d = 0; d < 2; ++d)
        if (reduced[d]) axes.push_back(d);
      std::vector<Tensor> cpu =
          Cpu(MakeNode(op, {"x"}, {"y"}, {{"axes", Attribute::Ints(axes)}}), {{"x", xi}});
      ASSERT_EQ(cpu.size(), 1u);
      Tensor y = ReplayReduceOp<int64_t>(op, xi, reduced, cpu[0].shape());
      EXPECT_EQ(y.ToInt64Vector(), cpu[0].ToInt64Vector()) << op;
    }
  }
  Tensor x = RandomTensor({3, 5}, 42);
  std::vector<Tensor> noop = Cpu(
      MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"noop_with_empty_axes", Attribute::Int(1)}}),
      {{"x", x}}, {{"axes", I64({0}, {})}});
  ASSERT_EQ(noop.size(), 1u);
  EXPECT_TRUE(
      ReplayReduceOp<float>("ReduceSum", x, {false, false}, x.shape()).BitwiseEqual(noop[0]));
  // NaN propagates through the tree as through the CPU's loop.
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor xn = Tensor::FromVector<float>(DType::kFloat32, {1, 300}, std::vector<float>(300, 1.f));
  xn.data<float>()[137] = nan;
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    Tensor y = ReplayReduceOp<float>(op, xn, {false, true}, {1, 1});
    EXPECT_TRUE(std::isnan(y.data<float>()[0])) << op;
  }
}

// ============================== softmax ==============================

// SoftmaxLanes / SoftmaxGradLanes of math.cu.
template <bool kLog>
Tensor ReplaySoftmax(const Tensor& X, int64_t axis) {
  Tensor Y(DType::kFloat32, X.shape());
  int64_t outer = 1, n = X.shape()[axis], inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= X.shape()[i];
  for (int64_t i = axis + 1; i < X.rank(); ++i) inner *= X.shape()[i];
  const float* x = X.data<float>();
  for (int64_t lane = 0; lane < outer * inner; ++lane) {
    const int64_t base = (lane / inner) * n * inner + lane % inner;
    auto at = [&](int64_t j) { return static_cast<double>(x[base + j * inner]); };
    double m = Tree<double>(n, kRowThreads, -HUGE_VAL, at, mr::MaxIgnoringNaN);
    double sum = Tree<double>(
        n, kRowThreads, 0.0, [&](int64_t j) { return exp(at(j) - m); }, Add);
    for (int64_t j = 0; j < n; ++j)
      Y.data<float>()[base + j * inner] = static_cast<float>(mr::SoftmaxOut<kLog>(at(j), m, sum));
  }
  return Y;
}

template <bool kLog>
Tensor ReplaySoftmaxGrad(const Tensor& DY, const Tensor& Yt, int64_t axis) {
  Tensor DX(DType::kFloat32, Yt.shape());
  int64_t outer = 1, n = Yt.shape()[axis], inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= Yt.shape()[i];
  for (int64_t i = axis + 1; i < Yt.rank(); ++i) inner *= Yt.shape()[i];
  const float* dy = DY.data<float>();
  const float* y = Yt.data<float>();
  for (int64_t lane = 0; lane < outer * inner; ++lane) {
    const int64_t base = (lane / inner) * n * inner + lane % inner;
    double s = Tree<double>(
        n, kRowThreads, 0.0,
        [&](int64_t j) {
          return mr::SoftmaxGradTerm<kLog>(dy[base + j * inner], y[base + j * inner]);
        },
        Add);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = base + j * inner;
      DX.data<float>()[p] = static_cast<float>(mr::SoftmaxGradOut<kLog>(dy[p], y[p], s));
    }
  }
  return DX;
}

// CumSum: one line per thread, sequential, so the replay must equal the CPU bit for bit.
TEST(CudaMathHostTest, CumSumLinesReproduceTheCpuBitwise) {
  uint64_t seed = 90;
  for (const Shape& shape : std::vector<Shape>{{300}, {3, 257}, {2, 5, 7}, {4, 1, 3, 2}})
    for (int64_t axis = -static_cast<int64_t>(shape.size());
         axis < static_cast<int64_t>(shape.size()); ++axis)
      for (int64_t exclusive : {0, 1})
        for (int64_t reverse : {0, 1}) {
          Node n = MakeNode(
              "CumSum", {"x", "a"}, {"y"},
              {{"exclusive", Attribute::Int(exclusive)}, {"reverse", Attribute::Int(reverse)}});
          mr::CumSumPlan p;
          ASSERT_EQ(mr::MakeCumSumPlan(shape, axis, exclusive, reverse, &p), "");
          auto check = [&](auto tag, DType dt) {
            using T = decltype(tag);
            Tensor r = RandomTensor(shape, ++seed, -2.f, 2.f);
            Tensor x(dt, shape);
            for (int64_t i = 0; i < x.numel(); ++i)  // integers spread over the whole type
              x.data<T>()[i] =
                  std::is_floating_point_v<T>
                      ? static_cast<T>(r.data<float>()[i])
                      : static_cast<T>(r.data<float>()[i] / 2 *
                                       static_cast<double>(std::numeric_limits<T>::max()));
            std::vector<Tensor> cpu = Cpu(n, {{"x", x}}, {{"a", I64({}, {axis})}});
            ASSERT_EQ(cpu.size(), 1u);
            Tensor y(dt, shape);
            for (int64_t l = 0; l < p.lines; ++l) mr::CumSumLine(p, l, y.data<T>(), x.data<T>());
            EXPECT_TRUE(y.BitwiseEqual(cpu[0]))
                << DTypeName(dt) << ShapeToString(shape) << " axis " << axis << " exclusive "
                << exclusive << " reverse " << reverse;
          };
          check(float{}, DType::kFloat32);
          check(double{}, DType::kFloat64);
          check(int32_t{}, DType::kInt32);
          check(int64_t{}, DType::kInt64);
        }
  // The plan's errors are the CPU kernel's words.
  mr::CumSumPlan p;
  EXPECT_EQ(mr::MakeCumSumPlan({3, 4}, 2, 0, 0, &p), "axis 2 is out of range for rank 2");
  EXPECT_EQ(mr::MakeCumSumPlan({}, 0, 0, 0, &p), "x must have rank >= 1");
  EXPECT_EQ(mr::MakeCumSumPlan({3}, 0, 0, 2, &p),
            "attributes 'exclusive' and 'reverse' must be 0 or 1, got 0 and 2");
}

TEST(CudaMathHostTest, SoftmaxAndItsGradientReproduceTheCpu) {
  for (Shape s : {Shape{3, 5, 7}, Shape{2, 1000}, Shape{4, 257}, Shape{1, 1}}) {
    const int64_t rank = static_cast<int64_t>(s.size());
    Tensor x = RandomTensor(s, 21, -4.f, 4.f), dy = RandomTensor(s, 22);
    for (int64_t axis = 0; axis < rank; ++axis) {
      Node sm = MakeNode("Softmax", {"x"}, {"y"}, {{"axis", Attribute::Int(axis)}});
      Node lsm = MakeNode("LogSoftmax", {"x"}, {"y"}, {{"axis", Attribute::Int(axis)}});
      std::vector<Tensor> y = Cpu(sm, {{"x", x}}), ly = Cpu(lsm, {{"x", x}});
      ASSERT_FALSE(y.empty() || ly.empty());
      std::string what = ShapeToString(s) + " axis " + std::to_string(axis);
      ExpectClose(ReplaySoftmax<false>(x, axis), y[0], 1e-6, 1e-5, "softmax " + what);
      ExpectClose(ReplaySoftmax<true>(x, axis), ly[0], 1e-6, 1e-5, "log_softmax " + what);
      Node g =
          MakeNode("SoftmaxGrad_13", {"dy", "y"}, {"dx"}, {{"axis", Attribute::Int(axis)}}, kMs);
      Node lg =
          MakeNode("LogSoftmaxGrad_13", {"dy", "y"}, {"dx"}, {{"axis", Attribute::Int(axis)}}, kMs);
      std::vector<Tensor> dx = Cpu(g, {{"dy", dy}, {"y", y[0]}});
      std::vector<Tensor> ldx = Cpu(lg, {{"dy", dy}, {"y", ly[0]}});
      ASSERT_FALSE(dx.empty() || ldx.empty());
      ExpectClose(ReplaySoftmaxGrad<false>(dy, y[0], axis), dx[0], 1e-6, 1e-5, "grad " + what);
      ExpectClose(ReplaySoftmaxGrad<true>(dy, ly[0], axis), ldx[0], 1e-6, 1e-5, "log grad " + what);
    }
  }
}

// ============================== normalizations ==============================

struct Norm {
  Tensor y, mean, inv;
};

Norm ReplayLayerNorm(const Tensor& X, const Tensor& scale, const Tensor* bias, int64_t rows,
                     int64_t cols, double eps) {
  Norm r{Tensor(DType::kFloat32, X.shape()), Tensor(DType::kFloat32, {rows}),
         Tensor(DType::kFloat32, {rows})};
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = X.data<float>() + i * cols;
    double mean = Tree<double>(
                      cols, kRowThreads, 0.0, [&](int64_t j) { return xr[j]; }, Add) /
                  static_cast<double>(cols);
    double sq = Tree<double>(
        cols, kRowThreads, 0.0, [&](int64_t j) { return (xr[j] - mean) * (xr[j] - mean); }, Add);
    double inv = mr::LayerNormInv(sq, cols, eps);
    for (int64_t j = 0; j < cols; ++j)
      r.y.data<float>()[i * cols + j] = mr::LayerNormOut(xr[j], mean, inv, scale.data<float>()[j],
                                                         bias ? bias->data<float>() : nullptr, j);
    r.mean.data<float>()[i] = static_cast<float>(mean);
    r.inv.data<float>()[i] = static_cast<float>(inv);
  }
  return r;
}

// RmsNormRows of math.cu with `threads` partials (1: the CPU's sequential order).
Norm ReplayRmsNorm(const Tensor& X, const Tensor& w, int64_t rows, int64_t cols, float eps,
                   int threads) {
  Norm r{Tensor(DType::kFloat32, X.shape()), Tensor(), Tensor(DType::kFloat32, {rows})};
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = X.data<float>() + i * cols;
    double sq = Tree<double>(
        cols, threads, 0.0, [&](int64_t j) { return mr::RmsSquare(xr[j]); }, Add);
    float inv = mr::RmsInv(sq, cols, eps);
    for (int64_t j = 0; j < cols; ++j)
      r.y.data<float>()[i * cols + j] = mr::RmsOut(xr[j], inv, w.data<float>()[j]);
    r.inv.data<float>()[i] = inv;
  }
  return r;
}

// LayerNormGradRows and LayerNormGradColumns of math.cu (mean null for RMSNorm).
std::vector<Tensor> ReplayLayerNormGrad(const Tensor& DY, const Tensor& X, const Tensor& scale,
                                        const float* mean, const float* inv, int64_t rows,
                                        int64_t cols) {
  Tensor dx(DType::kFloat32, X.shape()), dscale(DType::kFloat32, scale.shape()),
      dbias(DType::kFloat32, scale.shape());
  const float* dy = DY.data<float>();
  const float* x = X.data<float>();
  const float* sc = scale.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const double m = mean ? mean[r] : 0.0, iv = inv[r];
    auto g = [&](int64_t j) { return static_cast<double>(dy[r * cols + j]) * sc[j]; };
    auto xhat = [&](int64_t j) { return mr::LnXhat(x[r * cols + j], m, iv); };
    double s1 = Tree<double>(cols, kRowThreads, 0.0, g, Add);
    double s2 = Tree<double>(
        cols, kRowThreads, 0.0, [&](int64_t j) { return g(j) * xhat(j); }, Add);
    const double c1 = mean ? s1 / static_cast<double>(cols) : 0.0;
    const double c2 = s2 / static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j)
      dx.data<float>()[r * cols + j] = static_cast<float>(mr::LnDx(iv, g(j), c1, xhat(j), c2));
  }
  constexpr int kColumnY = 16;  // math.cu's row slices per column
  for (int64_t j = 0; j < cols; ++j) {
    auto d = [&](int64_t r) { return static_cast<double>(dy[r * cols + j]); };
    dscale.data<float>()[j] = static_cast<float>(Tree<double>(
        rows, kColumnY, 0.0,
        [&](int64_t r) { return d(r) * mr::LnXhat(x[r * cols + j], mean ? mean[r] : 0.0, inv[r]); },
        Add));
    dbias.data<float>()[j] = static_cast<float>(Tree<double>(rows, kColumnY, 0.0, d, Add));
  }
  return {dx, dscale, dbias};
}

TEST(CudaMathHostTest, LayerNormForwardAndBackwardReproduceTheCpu) {
  for (Shape s : {Shape{3, 5, 7}, Shape{4, 1000}, Shape{300, 17}, Shape{2, 257}}) {
    for (int64_t axis : {int64_t{1}, static_cast<int64_t>(s.size()) - 1}) {
      int64_t rows = 1, cols = 1;
      for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) (i < axis ? rows : cols) *= s[i];
      Shape norm(s.begin() + axis, s.end());
      Tensor x = RandomTensor(s, 51, -2.f, 3.f), scale = RandomTensor(norm, 52),
             bias = RandomTensor(norm, 53), dy = RandomTensor(s, 54);
      std::string what = ShapeToString(s) + " axis " + std::to_string(axis);
      Node ln = MakeNode("LayerNormalization", {"x", "scale", "bias"}, {"y", "mean", "inv"},
                         {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-3f)}});
      std::vector<Tensor> cpu = Cpu(ln, {{"x", x}, {"scale", scale}, {"bias", bias}});
      ASSERT_EQ(cpu.size(), 3u);
      Norm h = ReplayLayerNorm(x, scale, &bias, rows, cols, static_cast<double>(1e-3f));
      ExpectClose(h.y, cpu[0], 1e-5, 1e-5, "LN y " + what);
      for (int64_t i = 0; i < rows; ++i) {
        EXPECT_NEAR(h.mean.data<float>()[i], cpu[1].data<float>()[i], 1e-6) << what;
        EXPECT_NEAR(h.inv.data<float>()[i], cpu[2].data<float>()[i],
                    1e-5 * std::fabs(cpu[2].data<float>()[i]))
            << what;
      }
      Node lng = MakeNode("LayerNormalizationGrad", {"dy", "x", "scale", "mean", "inv"},
                          {"dx", "dscale", "dbias"}, {{"axis", Attribute::Int(axis)}}, kMs);
      std::vector<Tensor> gcpu =
          Cpu(lng, {{"dy", dy}, {"x", x}, {"scale", scale}, {"mean", cpu[1]}, {"inv", cpu[2]}});
      ASSERT_EQ(gcpu.size(), 3u);
      std::vector<Tensor> g =
          ReplayLayerNormGrad(dy, x, scale, cpu[1].data<float>(), cpu[2].data<float>(), rows, cols);
      ExpectClose(g[0], gcpu[0], 1e-5, 1e-5, "LN dx " + what);
      ExpectClose(g[1], gcpu[1], 1e-5, 1e-5, "LN dscale " + what);
      ExpectClose(g[2], gcpu[2], 1e-5, 1e-5, "LN dbias " + what);

      // RMSNorm.
      Node rms =
          MakeNode("SimplifiedLayerNormalization", {"x", "scale"}, {"y", "inv"},
                   {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-5f)}}, kMs);
      std::vector<Tensor> rcpu = Cpu(rms, {{"x", x}, {"scale", scale}});
      ASSERT_EQ(rcpu.size(), 2u);
      // In the CPU's sequential order the formula is the CPU's bit for bit; in the device's tree
      // order it is within rounding.
      Norm serial = ReplayRmsNorm(x, scale, rows, cols, 1e-5f, 1);
      EXPECT_TRUE(serial.y.BitwiseEqual(rcpu[0])) << what;
      Tensor cpu_inv = rcpu[1];
      cpu_inv.Reshape({rows});
      EXPECT_TRUE(serial.inv.BitwiseEqual(cpu_inv)) << what;
      Norm tree = ReplayRmsNorm(x, scale, rows, cols, 1e-5f, kRowThreads);
      ExpectClose(tree.y, rcpu[0], 1e-6, 1e-5, "RMS y " + what);
      Node rg = MakeNode("SimplifiedLayerNormalizationGrad", {"dy", "x", "scale", "inv"},
                         {"dx", "dscale"}, {{"axis", Attribute::Int(axis)}}, kMs);
      std::vector<Tensor> rgcpu =
          Cpu(rg, {{"dy", dy}, {"x", x}, {"scale", scale}, {"inv", rcpu[1]}});
      ASSERT_EQ(rgcpu.size(), 2u);
      std::vector<Tensor> rgh =
          ReplayLayerNormGrad(dy, x, scale, nullptr, rcpu[1].data<float>(), rows, cols);
      ExpectClose(rgh[0], rgcpu[0], 1e-5, 1e-5, "RMS dx " + what);
      ExpectClose(rgh[1], rgcpu[1], 1e-5, 1e-5, "RMS dscale " + what);
    }
  }
}

// ============================== softmax cross-entropy ==============================

// CeSamples + CeTotal (forward) and CeWeightSum + CeGrad (backward) of math.cu, for scores [N, C]
// or [N, C, inner] with int64 labels.
struct Ce {
  Tensor loss, log_prob;
};

Ce ReplayCe(const Tensor& S, const std::vector<int64_t>& labels, const Tensor* w,
            const std::string& reduction, int64_t ignore) {
  const int64_t n = S.shape()[0], c = S.shape()[1], inner = S.numel() / (n * c);
  Shape lshape = S.shape();
  lshape.erase(lshape.begin() + 1);
  Ce r{Tensor(DType::kFloat32, reduction == "none" ? lshape : Shape{}),
       Tensor(DType::kFloat32, S.shape())};
  const float* s = S.data<float>();
  std::vector<double> sample_loss(n * inner), sample_weight(n * inner);
  for (int64_t k = 0; k < n * inner; ++k) {
    const int64_t base = (k / inner) * c * inner + k % inner;
    auto at = [&](int64_t j) { return static_cast<double>(s[base + j * inner]); };
    double m = Tree<double>(c, kRowThreads, -HUGE_VAL, at, mr::MaxIgnoringNaN);
    double log_sum = log(Tree<double>(
        c, kRowThreads, 0.0, [&](int64_t j) { return exp(at(j) - m); }, Add));
    for (int64_t j = 0; j < c; ++j)
      r.log_prob.data<float>()[base + j * inner] = static_cast<float>((at(j) - m) - log_sum);
    const int64_t t = mr::CeTarget(labels[k], true, ignore, c);
    double li = 0, wk = 0;
    if (t >= 0) {
      wk = w ? w->data<float>()[t] : 1.0;
      li = -((at(t) - m) - log_sum) * wk;
    } else if (t == mr::kBadLabel) {
      li = wk = NAN;
    }
    if (reduction == "none") r.loss.data<float>()[k] = static_cast<float>(li);
    sample_loss[k] = li;
    sample_weight[k] = wk;
  }
  if (reduction != "none") {
    double total = Tree<double>(
        n * inner, kRowThreads, 0.0, [&](int64_t k) { return sample_loss[k]; }, Add);
    double wsum = Tree<double>(
        n * inner, kRowThreads, 0.0, [&](int64_t k) { return sample_weight[k]; }, Add);
    r.loss.data<float>()[0] =
        static_cast<float>(reduction == "sum" ? total : (wsum == 0 ? 0.0 : total / wsum));
  }
  return r;
}

Tensor ReplayCeGrad(const Tensor& DY, const Tensor& LP, const std::vector<int64_t>& labels,
                    const Tensor* w, const std::string& reduction, int64_t ignore) {
  const int64_t n = LP.shape()[0], c = LP.shape()[1], inner = LP.numel() / (n * c);
  double wsum = Tree<double>(
      n * inner, kRowThreads, 0.0,
      [&](int64_t k) {
        int64_t t = mr::CeTarget(labels[k], true, ignore, c);
        return t >= 0 ? (w ? w->data<float>()[t] : 1.0) : (t == mr::kBadLabel ? NAN : 0.0);
      },
      Add);
  Tensor ds(DType::kFloat32, LP.shape());
  const float* dy = DY.data<float>();
  for (int64_t p = 0; p < LP.numel(); ++p) {
    const int64_t i = p % inner, cls = (p / inner) % c, nn = p / (c * inner), k = nn * inner + i;
    const int64_t t = mr::CeTarget(labels[k], true, ignore, c);
    double g = 0;
    if (t >= 0) {
      double scale = reduction == "none" ? dy[k] : dy[0];
      if (reduction == "mean") scale = wsum == 0 ? 0.0 : scale / wsum;
      g = (w ? w->data<float>()[t] : 1.0) * scale;
    } else if (t == mr::kBadLabel) {
      g = NAN;
    }
    ds.data<float>()[p] = mr::CeGradOut(LP.data<float>()[p], cls == t, g);
  }
  return ds;
}

TEST(CudaMathHostTest, CrossEntropyForwardAndBackwardReproduceTheCpu) {
  struct Case {
    Shape scores;
    std::string reduction;
    bool weights;
  };
  const std::vector<Case> cases = {
      {{4, 5}, "mean", false},    {{4, 5}, "mean", true},     {{300, 7}, "sum", true},
      {{7, 1000}, "none", false}, {{2, 5, 3}, "mean", false}, {{2, 5, 3}, "none", true},
      {{3, 4}, "mean", false},  // every label ignored below
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    Shape lshape = c.scores;
    lshape.erase(lshape.begin() + 1);
    std::vector<int64_t> lab(NumElements(lshape));
    for (size_t i = 0; i < lab.size(); ++i)
      lab[i] = ci + 1 == cases.size() || i % 3 == 1 ? -100 : (i * 7 + 3) % c.scores[1];
    Tensor scores = RandomTensor(c.scores, 71, -3.f, 3.f), labels = I64(lshape, lab);
    Tensor w = RandomTensor({c.scores[1]}, 72, 0.2f, 2.f);
    std::vector<std::string> ins = {"scores", "labels"};
    std::map<std::string, Tensor> feeds = {{"scores", scores}, {"labels", labels}};
    if (c.weights) {
      ins.push_back("w");
      feeds["w"] = w;
    }
    Node node = MakeNode(
        "SoftmaxCrossEntropyLoss", ins, {"loss", "log_prob"},
        {{"reduction", Attribute::String(c.reduction)}, {"ignore_index", Attribute::Int(-100)}});
    std::vector<Tensor> cpu = Cpu(node, feeds);
    ASSERT_EQ(cpu.size(), 2u);
    std::string what = c.reduction + " " + ShapeToString(c.scores) + (c.weights ? " w" : "");
    Ce h = ReplayCe(scores, lab, c.weights ? &w : nullptr, c.reduction, -100);
    ExpectClose(h.loss, cpu[0], 1e-6, 1e-5, "loss " + what);
    ExpectClose(h.log_prob, cpu[1], 1e-6, 1e-5, "log_prob " + what);

    Tensor dy = c.reduction == "none" ? RandomTensor(lshape, 73) : Tensor::Scalar(1.5f);
    std::vector<std::string> gins = {"dy", "lp", "labels"};
    std::map<std::string, Tensor> gfeeds = {{"dy", dy}, {"lp", cpu[1]}, {"labels", labels}};
    if (c.weights) {
      gins.push_back("w");
      gfeeds["w"] = w;
    }
    Node grad = MakeNode(
        "SoftmaxCrossEntropyLossGrad", gins, {"d"},
        {{"reduction", Attribute::String(c.reduction)}, {"ignore_index", Attribute::Int(-100)}},
        kMs);
    std::vector<Tensor> gcpu = Cpu(grad, gfeeds);
    ASSERT_EQ(gcpu.size(), 1u);
    ExpectClose(ReplayCeGrad(dy, cpu[1], lab, c.weights ? &w : nullptr, c.reduction, -100), gcpu[0],
                1e-6, 1e-5, "grad " + what);
  }
}

TEST(CudaMathHostTest, CrossEntropyTargets) {
  EXPECT_EQ(mr::CeTarget(3, true, -100, 5), 3);
  EXPECT_EQ(mr::CeTarget(-100, true, -100, 5), mr::kIgnored);
  EXPECT_EQ(mr::CeTarget(5, true, -100, 5), mr::kBadLabel);
  EXPECT_EQ(mr::CeTarget(-1, false, 0, 5), mr::kBadLabel);
  // Without ignore_index, the attribute's default 0 is an ordinary class.
  EXPECT_EQ(mr::CeTarget(0, false, 0, 5), 0);
  // A label outside [0, C) that the CPU rejects is NaN on the device, in the loss and the gradient.
  Tensor s = RandomTensor({2, 3}, 1);
  Ce h = ReplayCe(s, {0, 7}, nullptr, "mean", -100);
  EXPECT_TRUE(std::isnan(h.loss.data<float>()[0]));
  Tensor d = ReplayCeGrad(Tensor::Scalar(1.f), h.log_prob, {0, 7}, nullptr, "sum", -100);
  EXPECT_FALSE(std::isnan(d.data<float>()[0]));
  EXPECT_TRUE(std::isnan(d.data<float>()[3]));
}

}  // namespace
}  // namespace foundry
