// The CUDA shape-op kernels' index arithmetic (kernels/cuda/shape_index.cuh) run on the host: for
// each op, the host preparation builds the parameters the kernel gets, the per-element functions
// fill every output element as the kernel's grid-stride loop would (the scatters' counting sort
// placed in reverse order, as atomics may), and the result must equal the CPU kernel's bitwise.
// Runs without a GPU (and without nvcc: the header is plain C++ under g++).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/shape_index.cuh"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry::cuda {
namespace FOUNDRY_TEST_NS {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

using TensorMap = std::map<std::string, Tensor>;

Tensor F32(Shape s, std::vector<float> v) { return Tensor::FromVector(DType::kFloat32, s, v); }
Tensor I64(Shape s, std::vector<int64_t> v) { return Tensor::FromVector(DType::kInt64, s, v); }
Tensor I32(Shape s, std::vector<int32_t> v) { return Tensor::FromVector(DType::kInt32, s, v); }
Tensor Ints(std::vector<int64_t> v) { return I64({static_cast<int64_t>(v.size())}, v); }

// Seeded values of any dtype: random floats, small counting integers, alternating bools.
Tensor Rand(DType t, Shape s, uint64_t seed) {
  if (t == DType::kFloat32) return RandomTensor(std::move(s), seed, -2.f, 2.f);
  Tensor x(t, std::move(s));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t v = static_cast<int64_t>((i * 7919 + seed * 104729) % 1000) - 500;
    switch (t) {
      case DType::kInt64:
        x.data<int64_t>()[i] = v;
        break;
      case DType::kInt32:
        x.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kFloat64:
        x.data<double>()[i] = v * 0.37;
        break;
      default:
        static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(v & 1);
    }
  }
  return x;
}

// Random indices in [-dim, dim) (both signs), as i64.
Tensor RandIndices(Shape s, int64_t dim, uint64_t seed) {
  Tensor r = RandomTensor(s, seed, 0.f, 1.f);
  Tensor x(DType::kInt64, std::move(s));
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<int64_t>()[i] =
        std::min<int64_t>(static_cast<int64_t>(r.data<float>()[i] * 2 * dim), 2 * dim - 1) - dim;
  return x;
}

Tensor ToI32(const Tensor& t) {
  Tensor x(DType::kInt32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    x.data<int32_t>()[i] = static_cast<int32_t>(t.GetAsInt64(i));
  return x;
}

// One node bound as the CUDA kernel sees it: inputs by position (null where omitted), the host
// constants parallel to them, the CPU's outputs, and poisoned outputs of the same types for the
// emulation to fill.
struct Bound {
  // Owned copies the pointers below point into (a moved map keeps its elements where they are).
  TensorMap inputs, constant_map;
  std::vector<const Tensor*> in;
  std::vector<const Tensor*> constants;
  std::vector<Tensor> cpu;
  std::vector<Tensor> out;
  std::vector<Tensor*> out_ptrs;
};

Bound Bind(const Node& node, const TensorMap& inputs, const TensorMap& constants) {
  Bound b;
  auto cpu = RunSingleNode(node, inputs, constants);
  EXPECT_TRUE(cpu.ok()) << cpu.status().message();
  if (!cpu.ok()) return b;
  b.cpu = std::move(*cpu);
  b.inputs = inputs;
  b.constant_map = constants;
  for (const std::string& name : node.inputs) {
    const Tensor* t = nullptr;
    const Tensor* c = nullptr;
    if (auto it = b.inputs.find(name); it != b.inputs.end()) t = &it->second;
    if (auto it = b.constant_map.find(name); it != b.constant_map.end()) t = c = &it->second;
    b.in.push_back(name.empty() ? nullptr : t);
    b.constants.push_back(c);
  }
  for (const Tensor& t : b.cpu) {
    Tensor o(t.dtype(), t.shape());
    if (o.nbytes()) std::memset(o.raw(), 0xA5, o.nbytes());
    b.out.push_back(std::move(o));
  }
  for (Tensor& t : b.out) b.out_ptrs.push_back(&t);
  return b;
}

void ExpectSameBits(const Bound& b, const std::string& what) {
  ASSERT_EQ(b.cpu.size(), b.out.size());
  for (size_t o = 0; o < b.cpu.size(); ++o)
    if (!b.cpu[o].BitwiseEqual(b.out[o])) {
      int64_t i = 0;
      while (i < b.cpu[o].numel() && b.cpu[o].GetAsDouble(i) == b.out[o].GetAsDouble(i)) ++i;
      ADD_FAILURE() << what << ": output " << o << " differs at element " << i << " of "
                    << b.cpu[o].numel() << ": cpu " << b.cpu[o].GetAsDouble(i) << ", emulated "
                    << b.out[o].GetAsDouble(i);
    }
}

template <class F>
void BySize(size_t size, F f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

template <class F>
void ByIndex(DType t, F f) {
  if (t == DType::kInt32) return f(int32_t{});
  return f(int64_t{});
}

void RunStrided(const StridedParams& p, Tensor& dst, const Tensor& src) {
  BySize(DTypeSize(dst.dtype()), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t e = 0; e < p.n; ++e)
      StridedCopyElement(p, e, static_cast<T*>(dst.raw()), static_cast<const T*>(src.raw()));
  });
}

// The kernels' counting sort on the host, placing each key's indices in reverse order (any order
// the atomics may produce must give the same result).
struct Sorted {
  std::vector<int64_t> start, sorted;
};
Sorted SortOnHost(const std::vector<int64_t>& keys, int64_t slots) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int64_t> count(slots, 0), cursor(slots, 0), unsorted(n, -1);
  Sorted s{std::vector<int64_t>(slots + 1, 0), std::vector<int64_t>(n, -1)};
  for (int64_t k : keys)
    if (k >= 0) ++count[k];
  for (int64_t k = 0; k < slots; ++k) s.start[k + 1] = s.start[k] + count[k];
  for (int64_t e = n - 1; e >= 0; --e)
    if (keys[e] >= 0) unsorted[s.start[keys[e]] + cursor[keys[e]]++] = e;
  for (int64_t e = 0; e < n; ++e)
    if (keys[e] >= 0)
      s.sorted[SortedPosition(unsorted.data(), s.start[keys[e]], s.start[keys[e] + 1], e)] = e;
  return s;
}

Node Op(const std::string& op, std::vector<std::string> in,
        std::map<std::string, Attribute> attrs = {}, std::vector<std::string> out = {"y"},
        const std::string& domain = "") {
  return MakeNode(op, std::move(in), std::move(out), std::move(attrs), domain);
}

// --- views and creation ---

TEST(CudaShapeIndexTest, ViewsKeepTheBytes) {
  Tensor x = Rand(DType::kFloat32, {2, 3, 4}, 1);
  struct Case {
    Node node;
    TensorMap constants;
  };
  std::vector<Case> cases = {
      {Op("Reshape", {"x", "s"}), {{"s", Ints({3, -1, 0})}}},
      {Op("Flatten", {"x"}, {{"axis", Attribute::Int(-1)}}), {}},
      {Op("Squeeze", {"x"}), {}},
      {Op("Unsqueeze", {"x", "a"}), {{"a", Ints({0, -1})}}},
  };
  for (const Case& c : cases) {
    Bound b = Bind(c.node, {{"x", x}}, c.constants);
    ASSERT_FALSE(b.cpu.empty());
    const Tensor* reshape_to = c.node.op_type == "Reshape" ? b.constants[1] : nullptr;
    ASSERT_TRUE(ViewPrep(c.node, *b.in[0], reshape_to, b.out[0]).ok()) << c.node.op_type;
    std::memcpy(b.out[0].raw(), b.in[0]->raw(), b.in[0]->nbytes());
    ExpectSameBits(b, c.node.op_type);
  }
  // A wrong allocation is reported as the CPU reports it.
  Node n = Op("Reshape", {"x", "s"});
  Tensor s = Ints({4, 6});
  Tensor wrong(DType::kFloat32, {4, 5});
  EXPECT_EQ(ViewPrep(n, x, &s, wrong).message(),
            "Reshape node 'n': output was allocated as f32[4,5] but the inputs give f32[4,6]");
}

TEST(CudaShapeIndexTest, CreationOpsFillTheCpuBytes) {
  std::vector<float> big(100);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.5f * i - 3;
  std::vector<Node> constants = {
      Op("Constant", {}, {{"value", Attribute::FromTensor(F32({2, 2}, {1, 2, 3, 4}))}}),
      Op("Constant", {}, {{"value", Attribute::FromTensor(F32({100}, big))}}),  // > 256 bytes
      Op("Constant", {}, {{"value_float", Attribute::Float(2.5f)}}),
      Op("Constant", {}, {{"value_float", Attribute::Int(3)}}),
      Op("Constant", {}, {{"value_ints", Attribute::Ints({4, -5, 6})}}),
  };
  for (const Node& n : constants) {
    Bound b = Bind(n, {}, {});
    ASSERT_FALSE(b.cpu.empty());
    auto c = ConstantPrep(n, b.out[0]);
    ASSERT_TRUE(c.ok()) << c.status().message();
    if (c->is_small) {
      for (int64_t i = 0; i < static_cast<int64_t>(b.out[0].nbytes()); ++i)
        static_cast<uint8_t*>(b.out[0].raw())[i] = PatternByte(c->small, i);
    } else {
      EXPECT_GT(c->nbytes, 256);
      std::memcpy(b.out[0].raw(), c->data, c->nbytes);
    }
    ExpectSameBits(b, "Constant");
  }

  // Shape (with start / end) and Size.
  Tensor x = Rand(DType::kFloat32, {2, 3, 5, 7}, 2);
  for (auto attrs : std::vector<std::map<std::string, Attribute>>{
           {},
           {{"start", Attribute::Int(1)}},
           {{"start", Attribute::Int(-3)}, {"end", Attribute::Int(-1)}}}) {
    Node n = Op("Shape", {"x"}, attrs);
    Bound b = Bind(n, {{"x", x}}, {});
    auto dims = ShapeValues(n, *b.in[0], b.out[0]);
    ASSERT_TRUE(dims.ok()) << dims.status().message();
    std::memcpy(b.out[0].raw(), dims->data(), dims->size() * sizeof(int64_t));
    ExpectSameBits(b, "Shape");
  }

  // ConstantOfShape: default zeros, an i64 value, a f32 value; 1000 elements.
  for (auto attrs : std::vector<std::map<std::string, Attribute>>{
           {},
           {{"value", Attribute::FromTensor(I64({1}, {7}))}},
           {{"value", Attribute::FromTensor(F32({1}, {-1.25f}))}}}) {
    Node n = Op("ConstantOfShape", {"s"}, attrs);
    Bound b = Bind(n, {}, {{"s", Ints({10, 100})}});
    BytePattern v;
    ASSERT_TRUE(ConstantOfShapePrep(n, b.constants[0], b.out[0], &v).ok());
    for (int64_t i = 0; i < static_cast<int64_t>(b.out[0].nbytes()); ++i)
      static_cast<uint8_t*>(b.out[0].raw())[i] = PatternByte(v, i);
    ExpectSameBits(b, "ConstantOfShape");
  }
}

TEST(CudaShapeIndexTest, RangeMatchesTheCpuAccumulation) {
  struct Case {
    Tensor start, limit, delta;
  };
  std::vector<Case> cases = {
      {Tensor::Scalar(0.1f), Tensor::Scalar(77.3f), Tensor::Scalar(0.3f)},  // 258 elements
      {Tensor::ScalarInt64(5), Tensor::ScalarInt64(-1000), Tensor::ScalarInt64(-3)},
      {I32({}, {-7}), I32({}, {250}), I32({}, {1})},
  };
  for (const Case& c : cases) {
    Node n = Op("Range", {"s", "l", "d"});
    TensorMap consts = {{"s", c.start}, {"l", c.limit}, {"d", c.delta}};
    Bound b = Bind(n, {}, consts);
    ASSERT_TRUE(RangePrep(n, b.in, b.constants, b.out[0]).ok());
    // And with the bounds computed at run time: the output's length is trusted.
    std::vector<const Tensor*> none(3, nullptr);
    ASSERT_TRUE(RangePrep(n, b.in, none, b.out[0]).ok());
    Tensor& y = b.out[0];
    switch (y.dtype()) {
      case DType::kFloat32:
        RangeAccumulate(*c.start.data<float>(), *c.delta.data<float>(), y.numel(), y.data<float>());
        break;
      case DType::kInt64:
        for (int64_t i = 0; i < y.numel(); ++i)
          y.data<int64_t>()[i] =
              RangeIntElement(*c.start.data<int64_t>(), *c.delta.data<int64_t>(), i);
        break;
      default:
        for (int64_t i = 0; i < y.numel(); ++i)
          y.data<int32_t>()[i] =
              RangeIntElement(*c.start.data<int32_t>(), *c.delta.data<int32_t>(), i);
    }
    ExpectSameBits(b, "Range");
  }
}

// --- strided copies ---

TEST(CudaShapeIndexTest, TransposeExpandTileMatchTheCpu) {
  for (DType t : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    struct Case {
      Node node;
      Shape x;
      TensorMap constants;
    };
    std::vector<Case> cases = {
        {Op("Transpose", {"x"}, {{"perm", Attribute::Ints({2, 0, 1})}}), {2, 3, 4}, {}},
        {Op("Transpose", {"x"}), {5, 1, 7}, {}},
        {Op("Transpose", {"x"}, {{"perm", Attribute::Ints({1, 0})}}), {1000, 3}, {}},
        {Op("Transpose", {"x"}, {{"perm", Attribute::Ints({0, 2, 1, 3})}}), {2, 257, 3, 5}, {}},
        {Op("Transpose", {"x"}), {}, {}},
        {Op("Expand", {"x", "s"}), {3, 1}, {{"s", Ints({2, 3, 4})}}},
        {Op("Expand", {"x", "s"}), {1}, {{"s", Ints({7})}}},
        {Op("Expand", {"x", "s"}), {257}, {{"s", Ints({2, 1})}}},
        {Op("Expand", {"x", "s"}), {2, 1, 3}, {{"s", Ints({5, 1, 4, 1})}}},
        {Op("Tile", {"x", "r"}), {2, 3}, {{"r", Ints({2, 1})}}},
        {Op("Tile", {"x", "r"}), {1, 257}, {{"r", Ints({3, 2})}}},
        {Op("Tile", {"x", "r"}), {2, 3}, {{"r", Ints({0, 2})}}},
    };
    for (const Case& c : cases) {
      Tensor x = Rand(t, c.x, 3);
      Bound b = Bind(c.node, {{"x", x}}, c.constants);
      ASSERT_FALSE(b.cpu.empty()) << c.node.op_type;
      // With the shape-like input as a constant, and as a run-time input (output shape used).
      for (bool constant : {true, false}) {
        const Tensor* k = constant && b.constants.size() > 1 ? b.constants[1] : nullptr;
        StatusOr<StridedParams> p = Error("unreached");
        if (c.node.op_type == "Transpose") p = TransposeStrided(c.node, x, b.out[0]);
        if (c.node.op_type == "Expand") p = ExpandStrided(c.node, x, k, b.out[0]);
        if (c.node.op_type == "Tile") p = TileStrided(c.node, x, k, b.out[0]);
        ASSERT_TRUE(p.ok()) << p.status().message();
        if (b.out[0].nbytes()) std::memset(b.out[0].raw(), 0xA5, b.out[0].nbytes());
        RunStrided(*p, b.out[0], x);
        ExpectSameBits(b, c.node.op_type + " " + ShapeToString(c.x));
      }
    }
  }
}

TEST(CudaShapeIndexTest, StridedParamsMergeContiguousAxes) {
  // A Concat piece along the last axis of [4, 6]: two axes; a whole-tensor copy: one.
  Node n = Op("Concat", {"a", "b"});
  auto p = MakeStrided(n, {4, 2}, 0, {6, 1}, 0, {2, 1});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rank, 2);
  p = MakeStrided(n, {2, 1, 3, 4}, 0, {12, 12, 4, 1}, 0, {12, 12, 4, 1});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->dims[0], 24);
}

TEST(CudaShapeIndexTest, ConcatAndSplitMatchTheCpu) {
  struct ConcatCase {
    int64_t axis;
    std::vector<Shape> shapes;
  };
  for (const ConcatCase& c : std::vector<ConcatCase>{{1, {{2, 3}, {2, 5}, {2, 1}}},
                                                     {-1, {{3, 2, 4}, {3, 2, 1}}},
                                                     {0, {{255, 3}, {257, 3}, {1, 3}}},
                                                     {0, {{0, 2}, {4, 2}}}}) {
    Node n = Op("Concat", {}, {{"axis", Attribute::Int(c.axis)}});
    TensorMap in;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      n.inputs.push_back("x" + std::to_string(i));
      in[n.inputs.back()] = Rand(DType::kFloat32, c.shapes[i], 10 + i);
    }
    Bound b = Bind(n, in, {});
    auto copies = ConcatStrided(n, b.in, b.out[0]);
    ASSERT_TRUE(copies.ok()) << copies.status().message();
    for (size_t i = 0; i < copies->size(); ++i) RunStrided((*copies)[i], b.out[0], *b.in[i]);
    ExpectSameBits(b, "Concat");
  }

  Tensor x = Rand(DType::kFloat32, {3, 7, 2}, 4);
  struct SplitCase {
    Node node;
    TensorMap constants;
  };
  std::vector<SplitCase> cases = {
      {Op("Split", {"x"}, {{"axis", Attribute::Int(1)}, {"split", Attribute::Ints({2, 5})}},
          {"a", "b"}),
       {}},
      {Op("Split", {"x", "s"}, {{"axis", Attribute::Int(-2)}}, {"a", "b", "c"}),
       {{"s", Ints({1, 0, 6})}}},
      {Op("Split", {"x"}, {{"axis", Attribute::Int(1)}}, {"a", "b", "c"}), {}},  // 3, 3, 1
      {Op("Split", {"x"}, {{"axis", Attribute::Int(0)}}, {"a", "b", "c"}), {}},
  };
  for (const SplitCase& c : cases) {
    Bound b = Bind(c.node, {{"x", x}}, c.constants);
    ASSERT_FALSE(b.cpu.empty());
    const bool split_input = b.in.size() > 1 && b.in[1];
    for (bool constant : {true, false}) {
      auto copies = SplitStrided(c.node, x, split_input,
                                 constant && split_input ? b.constants[1] : nullptr, b.out_ptrs);
      ASSERT_TRUE(copies.ok()) << copies.status().message();
      for (size_t i = 0; i < copies->size(); ++i) RunStrided((*copies)[i], b.out[i], x);
      ExpectSameBits(b, "Split");
    }
  }
}

TEST(CudaShapeIndexTest, SliceAndSliceGradMatchTheCpu) {
  Tensor x = Rand(DType::kFloat32, {6, 5, 300}, 5);
  struct Case {
    TensorMap constants;
    std::vector<std::string> inputs;
  };
  std::vector<Case> cases = {
      {{{"s", Ints({1, -4})}, {"e", Ints({kMax, -1})}, {"a", Ints({0, -2})}}, {"s", "e", "a"}},
      {{{"s", Ints({-1, 250})}, {"e", Ints({kMin, 3})}, {"a", Ints({0, 2})}, {"p", Ints({-2, -7})}},
       {"s", "e", "a", "p"}},
      {{{"s", Ints({0, 0, 0})}, {"e", Ints({6, 5, 300})}}, {"s", "e"}},
      {{{"s", Ints({4})}, {"e", Ints({2})}, {"a", Ints({1})}}, {"s", "e", "a"}},  // empty
      {{{"s", Ints({3})}, {"e", Ints({-100})}, {"a", Ints({2})}, {"p", Ints({-1})}},
       {"s", "e", "a", "p"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> in = {"x"};
    in.insert(in.end(), c.inputs.begin(), c.inputs.end());
    Node n = Op("Slice", in);
    Bound b = Bind(n, {{"x", x}}, c.constants);
    ASSERT_FALSE(b.cpu.empty());
    auto p = SliceStrided(n, b.in, b.constants, b.out[0]);
    ASSERT_TRUE(p.ok()) << p.status().message();
    RunStrided(*p, b.out[0], x);
    ExpectSameBits(b, "Slice");

    // SliceGrad of that slice: dY shaped as the slice, into zeros of x's shape.
    std::vector<std::string> gin = {"dy", "sh"};
    gin.insert(gin.end(), c.inputs.begin(), c.inputs.end());
    Node g = Op("SliceGrad", gin, {}, {"dx"}, "com.microsoft");
    TensorMap gconst = c.constants;
    gconst["sh"] = Ints({6, 5, 300});
    Tensor dy = Rand(DType::kFloat32, b.cpu[0].shape(), 6);
    Bound gb = Bind(g, {{"dy", dy}}, gconst);
    ASSERT_FALSE(gb.cpu.empty());
    auto gp = SliceGradStrided(g, gb.in, gb.constants, gb.out[0]);
    ASSERT_TRUE(gp.ok()) << gp.status().message();
    std::memset(gb.out[0].raw(), 0, gb.out[0].nbytes());
    RunStrided(*gp, gb.out[0], dy);
    ExpectSameBits(gb, "SliceGrad");
  }
  // Opset-1 attributes.
  Node a = Op("Slice", {"x"},
              {{"starts", Attribute::Ints({1, -2})},
               {"ends", Attribute::Ints({3, kMax})},
               {"axes", Attribute::Ints({1, 2})}});
  Bound b = Bind(a, {{"x", x}}, {});
  auto p = SliceStrided(a, b.in, b.constants, b.out[0]);
  ASSERT_TRUE(p.ok());
  RunStrided(*p, b.out[0], x);
  ExpectSameBits(b, "Slice (attributes)");
  // Bounds computed at run time are an error that says what to do.
  Node n = Op("Slice", {"x", "s", "e"});
  Tensor s = Ints({0}), e = Ints({1});
  std::vector<const Tensor*> in = {&x, &s, &e};
  std::vector<const Tensor*> none(3, nullptr);
  Tensor y(DType::kFloat32, {1, 5, 300});
  EXPECT_EQ(SliceStrided(n, in, none, y).status().message(),
            "Slice node 'n': input 1 ('starts') must be a constant on the cuda backend; fold it at "
            "compile time");
}

// --- indexing ---

TEST(CudaShapeIndexTest, GatherAndGatherElementsMatchTheCpu) {
  struct Case {
    Shape data;
    int64_t axis;
    Tensor idx;
  };
  std::vector<Case> cases = {
      {{50, 7}, 0, RandIndices({4, 65}, 50, 1)},
      {{3, 10, 4}, 1, RandIndices({257}, 10, 2)},
      {{3, 10, 4}, -1, RandIndices({2, 2}, 4, 3)},
      {{9}, 0, I64({}, {-2})},
  };
  for (const Case& c : cases)
    for (bool i32 : {false, true}) {
      Tensor x = Rand(DType::kFloat32, c.data, 7);
      Tensor idx = i32 ? ToI32(c.idx) : c.idx;
      Node n = Op("Gather", {"x", "i"}, {{"axis", Attribute::Int(c.axis)}});
      Bound b = Bind(n, {{"x", x}, {"i", idx}}, {});
      auto g = GatherPrep(n, x, idx, &idx, b.out[0]);
      ASSERT_TRUE(g.ok()) << g.status().message();
      ByIndex(idx.dtype(), [&](auto itag) {
        using I = decltype(itag);
        for (int64_t e = 0; e < b.out[0].numel(); ++e)
          GatherElement(*g, e, b.out[0].data<uint32_t>(), x.data<uint32_t>(), idx.data<I>());
      });
      ExpectSameBits(b, "Gather " + ShapeToString(c.data));
    }
  // A constant index out of range: the CPU's message, before anything runs.
  Node n = Op("Gather", {"x", "i"});
  Tensor x = Rand(DType::kFloat32, {5, 2}, 1);
  Tensor bad = I64({3}, {0, 5, 1});
  Tensor y(DType::kFloat32, {3, 2});
  auto r = RunSingleNode(n, {{"x", x}, {"i", bad}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(GatherPrep(n, x, bad, &bad, y).status().message(), r.status().message());
  // The same index at run time reads nothing out of bounds: that row is zeros.
  auto g = GatherPrep(n, x, bad, nullptr, y);
  ASSERT_TRUE(g.ok());
  for (int64_t e = 0; e < 6; ++e)
    GatherElement(*g, e, y.data<float>(), x.data<float>(), bad.data<int64_t>());
  EXPECT_EQ(y.data<float>()[2], 0.f);
  EXPECT_EQ(y.data<float>()[3], 0.f);

  // GatherElements.
  struct ECase {
    Shape data;
    int64_t axis;
    Shape idx;
  };
  for (const ECase& c : std::vector<ECase>{
           {{4, 5}, 0, {7, 5}}, {{4, 5}, -1, {3, 9}}, {{3, 4, 300}, 2, {2, 4, 257}}}) {
    const int64_t dim = c.data[c.axis < 0 ? c.axis + c.data.size() : c.axis];
    Tensor x = Rand(DType::kInt64, c.data, 8);
    Tensor idx = RandIndices(c.idx, dim, 9);
    Node en = Op("GatherElements", {"x", "i"}, {{"axis", Attribute::Int(c.axis)}});
    Bound b = Bind(en, {{"x", x}, {"i", idx}}, {});
    auto p = ElementsPrep(en, x.shape(), idx, &idx);
    ASSERT_TRUE(p.ok()) << p.status().message();
    for (int64_t e = 0; e < b.out[0].numel(); ++e)
      GatherElementsElement(*p, e, b.out[0].data<int64_t>(), x.data<int64_t>(),
                            idx.data<int64_t>());
    ExpectSameBits(b, "GatherElements");
  }
}

TEST(CudaShapeIndexTest, GatherGradSumsInTheCpuOrder) {
  struct Case {
    Shape data;
    int64_t axis;
    Tensor idx;
  };
  // Embedding-like: many repeats of few rows (each row's sum is long), and an axis-1 case.
  std::vector<Case> cases = {
      {{50, 7}, 0, RandIndices({8, 64}, 50, 11)},
      {{5, 3}, 0, I64({2, 4}, {1, 3, 1, 0, -1, 3, 3, 1})},
      {{3, 10, 4}, 1, RandIndices({300}, 10, 12)},
      {{1000, 1}, -2, RandIndices({257}, 1000, 13)},
  };
  for (const Case& c : cases)
    for (bool i32 : {false, true}) {
      Tensor idx = i32 ? ToI32(c.idx) : c.idx;
      const int64_t axis = c.axis < 0 ? c.axis + c.data.size() : c.axis;
      Shape dy_shape(c.data.begin(), c.data.begin() + axis);
      dy_shape.insert(dy_shape.end(), idx.shape().begin(), idx.shape().end());
      dy_shape.insert(dy_shape.end(), c.data.begin() + axis + 1, c.data.end());
      Tensor dy = Rand(DType::kFloat32, dy_shape, 14);
      Node n = Op("GatherGrad", {"s", "i", "dy"}, {{"axis", Attribute::Int(c.axis)}}, {"dx"},
                  "com.microsoft");
      Bound b = Bind(n, {{"dy", dy}}, {{"s", Ints(c.data)}, {"i", idx}});
      ASSERT_FALSE(b.cpu.empty());
      // Shape and indices as constants, then as run-time inputs.
      for (bool constant : {true, false}) {
        auto g = GatherGradPrep(n, constant ? b.constants[0] : nullptr, idx,
                                constant ? b.constants[1] : nullptr, dy, b.out[0]);
        ASSERT_TRUE(g.ok()) << g.status().message();
        std::vector<int64_t> keys(g->n);
        ByIndex(idx.dtype(), [&](auto itag) {
          using I = decltype(itag);
          for (int64_t j = 0; j < g->n; ++j) keys[j] = GatherGradKey(*g, j, idx.data<I>());
        });
        Sorted s = SortOnHost(keys, g->dim);
        for (int64_t e = 0; e < b.out[0].numel(); ++e)
          b.out[0].data<float>()[e] =
              GatherGradValue(*g, e, s.sorted.data(), s.start.data(), dy.data<float>());
        ExpectSameBits(b, "GatherGrad " + ShapeToString(c.data));
      }
    }
}

TEST(CudaShapeIndexTest, GatherElementsGradSumsInTheCpuOrder) {
  Shape data = {6, 5};
  for (int64_t axis : {0, -1}) {
    const int64_t dim = data[axis < 0 ? axis + 2 : axis];
    Tensor idx = RandIndices({20, 5}, dim, 21);
    if (axis != 0) idx = RandIndices({6, 40}, dim, 22);
    Tensor dy = Rand(DType::kFloat32, idx.shape(), 23);
    Node n = Op("GatherElementsGrad", {"dy", "s", "i"}, {{"axis", Attribute::Int(axis)}}, {"dx"},
                "com.microsoft");
    Bound b = Bind(n, {{"dy", dy}}, {{"s", Ints(data)}, {"i", idx}});
    ASSERT_FALSE(b.cpu.empty());
    auto p = GatherElementsGradPrep(n, dy, b.constants[1], idx, b.constants[2], b.out[0]);
    ASSERT_TRUE(p.ok()) << p.status().message();
    std::vector<int64_t> keys(idx.numel());
    for (int64_t e = 0; e < idx.numel(); ++e)
      keys[e] = GatherElementsGradKey(*p, e, idx.data<int64_t>());
    Sorted s = SortOnHost(keys, b.out[0].numel());
    for (int64_t e = 0; e < b.out[0].numel(); ++e)
      b.out[0].data<float>()[e] =
          GatherElementsGradValue(e, s.sorted.data(), s.start.data(), dy.data<float>());
    ExpectSameBits(b, "GatherElementsGrad");
  }
}

// GatherND cases: data, indices' leading shape, tuple length k, batch_dims; indices drawn per
// tuple position from [-dim, dim) of the data axis they index.
struct NDCase {
  Shape data, lead;
  int64_t k, b;
};

const std::vector<NDCase> kNDCases = {
    {{50, 7}, {4, 65}, 1, 0},        {{6, 5, 4}, {257}, 2, 0},      {{3, 10, 4}, {3, 9}, 1, 1},
    {{2, 3, 4, 5}, {2, 3, 7}, 2, 2}, {{2, 300, 3}, {2, 400}, 1, 1}, {{8}, {3}, 1, 0},
};

Tensor NDIndices(const NDCase& c, uint64_t seed) {
  Shape shape = c.lead;
  shape.push_back(c.k);
  Tensor t(DType::kInt64, shape);
  for (int64_t j = 0; j < c.k; ++j) {
    Tensor r = RandIndices({t.numel() / c.k}, c.data[c.b + j], seed + j);
    for (int64_t q = 0; q < r.numel(); ++q) t.data<int64_t>()[q * c.k + j] = r.data<int64_t>()[q];
  }
  return t;
}

TEST(CudaShapeIndexTest, GatherNDMatchesTheCpu) {
  uint64_t seed = 50;
  for (const NDCase& c : kNDCases)
    for (bool i32 : {false, true}) {
      Tensor x = Rand(DType::kFloat32, c.data, ++seed);
      Tensor idx = NDIndices(c, ++seed);
      if (i32) idx = ToI32(idx);
      Node n = Op("GatherND", {"x", "i"}, {{"batch_dims", Attribute::Int(c.b)}});
      Bound b = Bind(n, {{"x", x}, {"i", idx}}, {});
      ASSERT_FALSE(b.cpu.empty());
      for (bool constant : {true, false}) {
        auto p = GatherNDPrep(n, x, idx, constant ? &idx : nullptr, b.out[0]);
        ASSERT_TRUE(p.ok()) << p.status().message();
        ByIndex(idx.dtype(), [&](auto itag) {
          using I = decltype(itag);
          for (int64_t e = 0; e < b.out[0].numel(); ++e)
            GatherNDElement(*p, e, b.out[0].data<uint32_t>(), x.data<uint32_t>(), idx.data<I>());
        });
        ExpectSameBits(b, "GatherND " + ShapeToString(c.data) + " b " + std::to_string(c.b));
      }
    }
  // A constant index out of range: the CPU's message; at run time the tuple's slice is zeros.
  Node n = Op("GatherND", {"x", "i"});
  Tensor x = Rand(DType::kFloat32, {4, 2}, 1);
  Tensor bad = I64({3, 1}, {0, 4, -1});
  Tensor y(DType::kFloat32, {3, 2});
  auto r = RunSingleNode(n, {{"x", x}, {"i", bad}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(GatherNDPrep(n, x, bad, &bad, y).status().message(), r.status().message());
  auto p = GatherNDPrep(n, x, bad, nullptr, y);
  ASSERT_TRUE(p.ok());
  for (int64_t e = 0; e < 6; ++e)
    GatherNDElement(*p, e, y.data<float>(), x.data<float>(), bad.data<int64_t>());
  EXPECT_EQ(y.data<float>()[2], 0.f);
  EXPECT_EQ(y.data<float>()[3], 0.f);
  EXPECT_EQ(y.data<float>()[5], x.data<float>()[7]);
}

TEST(CudaShapeIndexTest, GatherNDGradSumsInTheCpuOrder) {
  uint64_t seed = 70;
  std::vector<NDCase> cases = kNDCases;
  cases.push_back({{5, 3}, {40}, 1, 0});  // 40 tuples over 5 rows: long sums
  for (const NDCase& c : cases)
    for (bool i32 : {false, true}) {
      Tensor idx = NDIndices(c, ++seed);
      if (i32) idx = ToI32(idx);
      Shape dy_shape = c.lead;
      dy_shape.insert(dy_shape.end(), c.data.begin() + c.b + c.k, c.data.end());
      Tensor dy = Rand(DType::kFloat32, dy_shape, ++seed);
      Node n = Op("GatherNDGrad", {"s", "i", "dy"}, {{"batch_dims", Attribute::Int(c.b)}}, {"dx"},
                  "com.microsoft");
      Bound b = Bind(n, {{"dy", dy}}, {{"s", Ints(c.data)}, {"i", idx}});
      ASSERT_FALSE(b.cpu.empty());
      for (bool constant : {true, false}) {
        auto p = GatherNDGradPrep(n, constant ? b.constants[0] : nullptr, idx,
                                  constant ? b.constants[1] : nullptr, dy, b.out[0]);
        ASSERT_TRUE(p.ok()) << p.status().message();
        std::vector<int64_t> keys(p->tuples);
        ByIndex(idx.dtype(), [&](auto itag) {
          using I = decltype(itag);
          for (int64_t t = 0; t < p->tuples; ++t) keys[t] = GatherNDRow(*p, t, idx.data<I>());
        });
        Sorted s = SortOnHost(keys, b.out[0].numel() / p->slice);
        for (int64_t e = 0; e < b.out[0].numel(); ++e)
          b.out[0].data<float>()[e] =
              GatherNDGradValue(*p, e, s.sorted.data(), s.start.data(), dy.data<float>());
        ExpectSameBits(b, "GatherNDGrad " + ShapeToString(c.data) + " b " + std::to_string(c.b));
      }
    }
  // dY of the wrong shape: the CPU's inference message names it too; here the kernel's own check.
  Node n = Op("GatherNDGrad", {"s", "i", "dy"}, {}, {"dx"}, "com.microsoft");
  Tensor idx = I64({3, 1}, {0, 1, 1});
  Tensor dy = Rand(DType::kFloat32, {2, 2}, 1);
  Tensor dx(DType::kFloat32, {2, 2});
  Tensor shape = Ints({2, 2});
  EXPECT_EQ(GatherNDGradPrep(n, &shape, idx, &idx, dy, dx).status().message(),
            "GatherNDGrad node 'n': dY has shape [2,2], expected [3,2]");
}

TEST(CudaShapeIndexTest, ScatterNDAppliesUpdatesInTupleOrder) {
  struct Case {
    std::string reduction;
    DType dtype;
    Shape data;
    Tensor idx;
  };
  std::vector<Case> cases = {
      {"none", DType::kFloat32, {8, 3}, I64({5, 1}, {2, 0, 2, -1, 5})},  // duplicates: last wins
      {"add", DType::kFloat32, {8, 3}, I64({6, 1}, {1, 1, -7, 3, 1, 0})},
      {"mul", DType::kFloat64, {4, 2, 3}, I64({3, 2}, {1, 0, 1, 0, -3, 1})},
      {"max", DType::kInt32, {5, 4}, I64({4, 2}, {0, 0, 0, 0, 4, 3, -1, -1})},
      {"min", DType::kInt64, {300}, I64({260, 1}, std::vector<int64_t>(260, 7))},
      {"none", DType::kBool, {4, 2}, I64({2, 1}, {3, 0})},
  };
  for (const Case& c : cases) {
    const int64_t k = c.idx.shape().back();
    Shape upd_shape(c.idx.shape().begin(), c.idx.shape().end() - 1);
    upd_shape.insert(upd_shape.end(), c.data.begin() + k, c.data.end());
    Tensor x = Rand(c.dtype, c.data, 31);
    Tensor u = Rand(c.dtype, upd_shape, 32);
    Node n = Op("ScatterND", {"x", "i", "u"}, {{"reduction", Attribute::String(c.reduction)}});
    Bound b = Bind(n, {{"x", x}, {"u", u}}, {{"i", c.idx}});
    ASSERT_FALSE(b.cpu.empty()) << c.reduction;
    auto p = ScatterPrep(n, x, c.idx, &c.idx, u, b.out[0]);
    ASSERT_TRUE(p.ok()) << p.status().message();
    std::vector<int64_t> keys(p->tuples);
    for (int64_t t = 0; t < p->tuples; ++t) keys[t] = ScatterKey(*p, t, c.idx.data<int64_t>());
    Sorted s = SortOnHost(keys, p->slots);
    auto fill = [&](auto tag) {
      using T = decltype(tag);
      for (int64_t e = 0; e < b.out[0].numel(); ++e)
        b.out[0].data<T>()[e] =
            ScatterValue(*p, e, s.sorted.data(), s.start.data(), x.data<T>(), u.data<T>());
    };
    switch (c.dtype) {
      case DType::kFloat32:
        fill(float{});
        break;
      case DType::kFloat64:
        fill(double{});
        break;
      case DType::kInt32:
        fill(int32_t{});
        break;
      case DType::kInt64:
        fill(int64_t{});
        break;
      default:
        fill(uint8_t{});
    }
    ExpectSameBits(b, "ScatterND " + c.reduction);
  }
}

TEST(CudaShapeIndexTest, ScatterElementsAppliesUpdatesInIndexOrder) {
  struct Case {
    std::string reduction;
    DType dtype;
    Shape data, idx;
    int64_t axis;
  };
  // Indices longer than data on the axis (positions repeat) and narrower on the others.
  const std::vector<Case> cases = {
      {"none", DType::kFloat32, {6, 5}, {9, 4}, 0},
      {"add", DType::kFloat32, {6, 5}, {9, 4}, 0},
      {"add", DType::kFloat32, {3, 4, 5}, {2, 3, 12}, -1},
      {"mul", DType::kFloat64, {4, 3}, {4, 7}, 1},
      {"max", DType::kInt32, {5, 2, 3}, {4, 2, 3}, 0},
      {"min", DType::kInt64, {300}, {700}, 0},
      {"none", DType::kBool, {4, 2}, {3, 2}, 0},
  };
  uint64_t seed = 80;
  for (const Case& c : cases)
    for (bool i32 : {false, true}) {
      const int64_t a = c.axis < 0 ? c.axis + static_cast<int64_t>(c.data.size()) : c.axis;
      Tensor idx = RandIndices(c.idx, c.data[a], ++seed);
      if (i32) idx = ToI32(idx);
      Tensor x = Rand(c.dtype, c.data, ++seed);
      Tensor u = Rand(c.dtype, c.idx, ++seed);
      Node n =
          Op("ScatterElements", {"x", "i", "u"},
             {{"axis", Attribute::Int(c.axis)}, {"reduction", Attribute::String(c.reduction)}});
      Bound b = Bind(n, {{"x", x}, {"u", u}}, {{"i", idx}});
      ASSERT_FALSE(b.cpu.empty()) << c.reduction;
      for (bool constant : {true, false}) {
        int reduction = -1;
        auto p = ScatterElementsPrep(n, x, idx, constant ? &idx : nullptr, u, b.out[0], &reduction);
        ASSERT_TRUE(p.ok()) << p.status().message();
        std::vector<int64_t> keys(idx.numel());
        ByIndex(idx.dtype(), [&](auto itag) {
          using I = decltype(itag);
          for (int64_t e = 0; e < idx.numel(); ++e)
            keys[e] = ScatterElementsKey(*p, e, idx.data<I>());
        });
        Sorted s = SortOnHost(keys, x.numel());
        auto fill = [&](auto tag) {
          using T = decltype(tag);
          for (int64_t e = 0; e < b.out[0].numel(); ++e)
            b.out[0].data<T>()[e] = ScatterElementsValue(reduction, e, s.sorted.data(),
                                                         s.start.data(), x.data<T>(), u.data<T>());
        };
        switch (c.dtype) {
          case DType::kFloat32:
            fill(float{});
            break;
          case DType::kFloat64:
            fill(double{});
            break;
          case DType::kInt32:
            fill(int32_t{});
            break;
          case DType::kInt64:
            fill(int64_t{});
            break;
          default:
            fill(uint8_t{});
        }
        ExpectSameBits(b, "ScatterElements " + c.reduction + " axis " + std::to_string(c.axis) +
                              (i32 ? " i32" : " i64"));
      }
    }
  // A constant index out of range: the CPU's message; computed at run time, the update is dropped.
  Node n = Op("ScatterElements", {"x", "i", "u"}, {{"axis", Attribute::Int(1)}});
  Tensor x = Rand(DType::kFloat32, {2, 3}, 1);
  Tensor bad = I64({2, 1}, {-1, 3});
  Tensor u = F32({2, 1}, {10, 20});
  Tensor y(DType::kFloat32, {2, 3});
  auto r = RunSingleNode(n, {{"x", x}, {"i", bad}, {"u", u}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "ScatterElements node 'n': indices[1] = 3 is out of range for axis 1 of size 3");
  int reduction = -1;
  EXPECT_EQ(ScatterElementsPrep(n, x, bad, &bad, u, y, &reduction).status().message(),
            r.status().message());
  auto p = ScatterElementsPrep(n, x, bad, nullptr, u, y, &reduction);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(ScatterElementsKey(*p, 0, bad.data<int64_t>()), 2);
  EXPECT_EQ(ScatterElementsKey(*p, 1, bad.data<int64_t>()), -1);
  // A reduction the element type does not take: the CPU's message.
  Node add = Op("ScatterElements", {"x", "i", "u"}, {{"reduction", Attribute::String("add")}});
  Tensor bx(DType::kBool, {3}), bu(DType::kBool, {1}), by(DType::kBool, {3});
  Tensor i0 = I64({1}, {0});
  r = RunSingleNode(add, {{"x", bx}, {"i", i0}, {"u", bu}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ScatterElementsPrep(add, bx, i0, &i0, bu, by, &reduction).status().message(),
            r.status().message());
}

// --- masks and padding ---

TEST(CudaShapeIndexTest, TriluMatchesTheCpu) {
  Tensor x = Rand(DType::kFloat32, {3, 7, 9}, 41);
  for (int upper : {0, 1})
    for (int64_t k : {int64_t{0}, int64_t{-2}, int64_t{3}, int64_t{100}, kMin}) {
      Node n = Op("Trilu", {"x", "k"}, {{"upper", Attribute::Int(upper)}});
      Bound b = Bind(n, {{"x", x}}, {{"k", Tensor::ScalarInt64(k)}});
      TriluParams p;
      p.rows = 7;
      p.cols = 9;
      p.upper = upper;
      for (int64_t e = 0; e < x.numel(); ++e)
        TriluElement(p, k, e, b.out[0].data<float>(), x.data<float>());
      ExpectSameBits(b, "Trilu k=" + std::to_string(k));
    }
}

TEST(CudaShapeIndexTest, PadMatchesTheCpu) {
  Tensor x = Rand(DType::kFloat32, {3, 4, 5}, 51);
  struct Case {
    std::string mode;
    std::vector<int64_t> pads;
    bool value_input;
    std::vector<int64_t> axes;
  };
  std::vector<Case> cases = {
      {"constant", {1, 0, 2, 2, 3, 0}, true, {}}, {"constant", {0, -1, 1, 0, 0, -2}, false, {}},
      {"edge", {2, 3, 0, 1, 0, 4}, false, {}},    {"reflect", {2, 3, 4, 1, 3, 4}, false, {}},
      {"reflect", {1, 2}, false, {-1}},           {"constant", {1, 1, 2, 2}, true, {0, 2}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> in = {"x", "p"};
    TensorMap consts = {{"p", Ints(c.pads)}};
    TensorMap inputs = {{"x", x}};
    in.push_back(c.value_input ? "v" : "");
    if (c.value_input) inputs["v"] = Tensor::Scalar(-3.5f);
    if (!c.axes.empty()) {
      in.push_back("a");
      consts["a"] = Ints(c.axes);
    }
    Node n = Op("Pad", in, {{"mode", Attribute::String(c.mode)}});
    Bound b = Bind(n, inputs, consts);
    ASSERT_FALSE(b.cpu.empty()) << c.mode;
    uint64_t fill_bits = 0;
    auto p = PadPrep(n, b.in, b.constants, b.out[0], &fill_bits);
    ASSERT_TRUE(p.ok()) << p.status().message();
    float fill;
    std::memcpy(&fill, &fill_bits, sizeof(fill));
    if (c.value_input) fill = *inputs["v"].data<float>();
    for (int64_t e = 0; e < b.out[0].numel(); ++e)
      PadElement(*p, e, b.out[0].data<float>(), x.data<float>(), fill);
    ExpectSameBits(b, "Pad " + c.mode);
  }
  // Pads computed at run time.
  Node n = Op("Pad", {"x", "p"});
  Tensor pads = Ints({0, 0, 0, 0, 0, 0});
  std::vector<const Tensor*> in = {&x, &pads};
  std::vector<const Tensor*> none(2, nullptr);
  uint64_t bits;
  EXPECT_EQ(PadPrep(n, in, none, x, &bits).status().message(),
            "Pad node 'n': input 1 ('pads') must be a constant on the cuda backend; fold it at "
            "compile time");
}

TEST(CudaShapeIndexTest, OneHotMatchesTheCpu) {
  struct Case {
    int64_t axis;
    Tensor idx;
  };
  std::vector<Case> cases = {
      {-1, RandIndices({4, 65}, 10, 61)},
      {0, RandIndices({7}, 10, 62)},
      {1, F32({2, 3}, {0, 1, -1, 9, 4.f, -10})},
  };
  for (const Case& c : cases) {
    Node n = Op("OneHot", {"i", "d", "v"}, {{"axis", Attribute::Int(c.axis)}});
    Tensor values = F32({2}, {-0.5f, 3});
    Bound b = Bind(n, {{"i", c.idx}, {"v", values}}, {{"d", Tensor::ScalarInt64(10)}});
    ASSERT_FALSE(b.cpu.empty());
    for (bool constant : {true, false}) {
      auto p =
          OneHotPrep(n, c.idx, *b.in[1], constant ? b.constants[1] : nullptr, values, b.out[0]);
      ASSERT_TRUE(p.ok()) << p.status().message();
      for (int64_t e = 0; e < b.out[0].numel(); ++e) {
        const bool on = c.idx.dtype() == DType::kFloat32 ? OneHotOn(*p, e, c.idx.data<float>())
                                                         : OneHotOn(*p, e, c.idx.data<int64_t>());
        b.out[0].data<float>()[e] = values.data<float>()[on ? 1 : 0];
      }
      ExpectSameBits(b, "OneHot");
    }
  }
}

TEST(CudaShapeIndexTest, ScatterWorkspaceHoldsEveryArray) {
  const SegmentLayout l = SegmentWorkspace(1000, 50);
  EXPECT_EQ(l.keys, 0);
  EXPECT_GE(l.count, 8000);
  EXPECT_GE(l.start - l.count, 400);
  EXPECT_GE(l.unsorted - l.start, 408);
  EXPECT_GE(l.sorted - l.unsorted, 8000);
  EXPECT_GE(l.bytes - l.sorted, 8000);
  for (int64_t off : {l.count, l.start, l.unsorted, l.sorted, l.bytes}) EXPECT_EQ(off % 256, 0);
  EXPECT_EQ(SegmentWorkspace(0, 50).bytes, 0);
}

}  // namespace
}  // namespace foundry::cuda
