// Element-count and byte-size overflow: shapes of 2^40..2^62 elements, and shapes
// whose product wraps (to 0 even: 2^32 * 2^32 = 2^64 = 0 in int64), must end in an error that names
// the node, the output and the bytes, in shape inference, in fold and at allocation; never in a
// wrapped size, a null buffer or a kernel writing past one.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <string>

#include "base/tensor.h"
#include "compiler/text.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"

#if defined(__SANITIZE_ADDRESS__)
// The allocation test asks AddressSanitizer for 1 TiB: it must answer null (as malloc does), not
// stop the process.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Folds `text` (a graph of constants, so every node folds or is kept for its size) and returns
// the error; "" when folding succeeded.
std::string FoldError(const std::string& text, int64_t fold_limit = 1 << 20) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return "parse error";
  FoldPass pass({.dims = {}, .max_folded_bytes = fold_limit});
  auto changed = pass.Run(*g);
  return changed.ok() ? "" : changed.status().message();
}

std::string Graph1(const std::string& consts, const std::string& node) {
  return "graph g opset=17 {\n" + consts + "  " + node + "\n  output y\n}\n";
}

constexpr const char* kTooBig = "one tensor may hold at most 1099511627776 (1 TiB)";

TEST(CheckTensorSizeTest, CountsBytesAndCatchesEveryWrap) {
  EXPECT_EQ(*CheckTensorSize(DType::kFloat32, Shape{2, 3}), 24);
  EXPECT_EQ(*CheckTensorSize(DType::kFloat32, Shape{}), 4);
  // A zero dimension makes the tensor empty, however large the others are.
  EXPECT_EQ(*CheckTensorSize(DType::kFloat32, Shape{int64_t{1} << 62, 4, 0}), 0);
  // 2^32 * 2^32 = 2^64 wraps to exactly 0 in int64: the unchecked product said "empty".
  auto wrap = CheckTensorSize(DType::kInt64, Shape{int64_t{1} << 32, int64_t{1} << 32});
  ASSERT_FALSE(wrap.ok());
  EXPECT_EQ(wrap.status().message(),
            std::string("i64[4294967296,4294967296] needs more than 9223372036854775807 bytes; ") +
                kTooBig);
  // 2^62 one-byte elements fit int64 but no machine.
  auto big = CheckTensorSize(DType::kUint8, Shape{int64_t{1} << 62});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(),
            std::string("u8[4611686018427387904] needs 4611686018427387904 bytes; ") + kTooBig);
  // Exactly the limit is allowed: the limit is on bytes, not on elements.
  EXPECT_EQ(*CheckTensorSize(DType::kFloat32, Shape{int64_t{1} << 38}), int64_t{1} << 40);
  auto neg = CheckTensorSize(DType::kFloat32, Shape{2, -3});
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "f32[2,-3] has a negative dimension");
}

TEST(CheckTensorSizeTest, NumElementsNeverWraps) {
  EXPECT_EQ(NumElements(Shape{int64_t{1} << 32, int64_t{1} << 32}), -1);
  EXPECT_EQ(NumElements(Shape{int64_t{1} << 62, 4, 0}), 0);
  EXPECT_EQ(NumElements(Shape{3, -1}), -1);
  EXPECT_EQ(NumElements(Shape{}), 1);
}

TEST(CheckTensorSizeTest, AllocateRefusesWhatTheCheckRefuses) {
  auto t = Tensor::Allocate(DType::kFloat32, Shape{int64_t{1} << 32, int64_t{1} << 32});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            std::string("f32[4294967296,4294967296] needs more than 9223372036854775807 bytes; ") +
                kTooBig);
  auto ok = Tensor::Allocate(DType::kFloat64, Shape{3, 0});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->numel(), 0);
  EXPECT_EQ(ok->nbytes(), 0u);
}

TEST(OverflowTest, RangeOf2To62ElementsIsAnInferenceError) {
  std::string err =
      FoldError(Graph1("  const s : i64[] = [0]\n  const l : i64[] = [4611686018427387904]\n"
                       "  const d : i64[] = [1]\n",
                       "y = Range(s, l, d) #\"r\""));
  EXPECT_EQ(err, std::string("Range node 'r': output 'y' i64[4611686018427387904] needs more "
                             "than 9223372036854775807 bytes; ") +
                     kTooBig);
}

TEST(OverflowTest, RangeOf2To40FloatsIsAnInferenceError) {
  // 2^40 f32 elements = 4 TiB: fits int64, not one tensor.
  std::string err =
      FoldError(Graph1("  const s : f32[] = [0.0]\n  const l : f32[] = [1099511627776.0]\n"
                       "  const d : f32[] = [1.0]\n",
                       "y = Range(s, l, d) #\"r\""));
  EXPECT_EQ(err, std::string("Range node 'r': output 'y' f32[1099511627776] needs 4398046511104 "
                             "bytes; ") +
                     kTooBig);
}

TEST(OverflowTest, RangeAcrossAllOfInt64DoesNotOverflowTheSubtraction) {
  // limit - start = 2^64 - 1 does not fit int64 (the subtraction itself was undefined).
  std::string err = FoldError(Graph1(
      "  const s : i64[] = [-9223372036854775808]\n  const l : i64[] = [9223372036854775807]\n"
      "  const d : i64[] = [1]\n",
      "y = Range(s, l, d) #\"r\""));
  EXPECT_EQ(err,
            "Range node 'r': start, limit and delta give more than 9223372036854775807 "
            "elements; one tensor may hold at most 1099511627776 bytes (1 TiB)");
}

TEST(OverflowTest, RangeToInfinityIsAnErrorNotAnUndefinedConversion) {
  std::string err = FoldError(
      Graph1("  const s : f32[] = [0.0]\n  const l : f32[] = [inf]\n  const d : f32[] = [1.0]\n",
             "y = Range(s, l, d) #\"r\""));
  EXPECT_EQ(err,
            "Range node 'r': start, limit and delta give more than 9223372036854775807 "
            "elements; one tensor may hold at most 1099511627776 bytes (1 TiB)");
}

TEST(OverflowTest, RangeNearInt64MaxFoldsWithoutSteppingPastIt) {
  // One element, INT64_MAX - 1; the kernel must not add delta after the last element.
  auto g = ParseGraph(Graph1(
      "  const s : i64[] = [9223372036854775806]\n  const l : i64[] = [9223372036854775807]\n"
      "  const d : i64[] = [5]\n",
      "y = Range(s, l, d) #\"r\""));
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({.dims = {}, .max_folded_bytes = 1 << 20});
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  ASSERT_NE(g->FindValue("y")->data, nullptr);
  EXPECT_EQ(g->FindValue("y")->data->ToInt64Vector(), (std::vector<int64_t>{INT64_MAX - 1}));
}

TEST(OverflowTest, ConstantOfShapeWhoseProductWrapsToZero) {
  std::string err = FoldError(Graph1("  const shape : i64[2] = [4294967296, 4294967296]\n",
                                     "y = ConstantOfShape(shape) #\"c\""));
  EXPECT_EQ(err, std::string("ConstantOfShape node 'c': output 'y' f32[4294967296,4294967296] "
                             "needs more than 9223372036854775807 bytes; ") +
                     kTooBig);
}

TEST(OverflowTest, ExpandTo2To62Elements) {
  // 2^31 * 2^31 f32 = 2^64 bytes: wraps to 0 bytes when counted unchecked.
  std::string err =
      FoldError(Graph1("  const x : f32[1] = [1.0]\n  const shape : i64[2] = [2147483648, "
                       "2147483648]\n",
                       "y = Expand(x, shape) #\"e\""));
  EXPECT_EQ(err, std::string("Expand node 'e': output 'y' f32[2147483648,2147483648] needs more "
                             "than 9223372036854775807 bytes; ") +
                     kTooBig);
}

TEST(OverflowTest, TileWhoseDimensionOverflows) {
  std::string err = FoldError(
      Graph1("  const x : f32[2] = [1.0, 2.0]\n  const r : i64[1] = [4611686018427387904]\n",
             "y = Tile(x, r) #\"t\""));
  EXPECT_EQ(err,
            "Tile node 't': repeats [4611686018427387904] on an input of shape [2] overflow "
            "int64 in axis 0");
}

TEST(OverflowTest, TileOf2To40Elements) {
  std::string err =
      FoldError(Graph1("  const x : f32[2] = [1.0, 2.0]\n  const r : i64[1] = [549755813888]\n",
                       "y = Tile(x, r) #\"t\""));
  EXPECT_EQ(err, std::string("Tile node 't': output 'y' f32[1099511627776] needs 4398046511104 "
                             "bytes; ") +
                     kTooBig);
}

TEST(OverflowTest, ReshapeWhoseRequestedCountWrapsToZero) {
  // [2^32, 2^32] of a 0-element input: unchecked, 2^64 wraps to 0 and "matches" the input.
  std::string err = FoldError(
      Graph1("  const x : f32[0] = []\n  const shape : i64[2] = [4294967296, 4294967296]\n",
             "y = Reshape(x, shape) {allowzero=1} #\"r\""));
  EXPECT_EQ(err,
            "Reshape node 'r': cannot reshape a tensor of shape [0] to shape "
            "[4294967296,4294967296]: the element count overflows int64");
}

TEST(OverflowTest, ReshapeInferringMinusOneFromAWrappedCount) {
  std::string err =
      FoldError(Graph1("  const x : f32[2,3] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]\n"
                       "  const shape : i64[3] = [4294967296, 4294967296, -1]\n",
                       "y = Reshape(x, shape) #\"r\""));
  EXPECT_EQ(err,
            "Reshape node 'r': cannot reshape a tensor of shape [2,3] to shape "
            "[4294967296,4294967296,-1]: the element count overflows int64");
}

TEST(OverflowTest, FoldCannotAllocateIsAnErrorNamingNodeAndBytes) {
  // 1 TiB of f32 is within the per-tensor limit, so it reaches the allocator. With --fold-limit
  // raised past it, fold asks for it. Without a sanitizer, a lowered address-space limit makes
  // the answer "no" on any machine; AddressSanitizer refuses 1 TiB itself (and would not run
  // with an address-space limit).
#if !defined(__SANITIZE_ADDRESS__)
  // Only the soft limit: lowering the hard one could not be undone without privileges.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  rlimit limit = old;
  const rlim_t cap = rlim_t{64} << 30;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > cap) limit.rlim_cur = cap;
  ASSERT_EQ(setrlimit(RLIMIT_AS, &limit), 0);
#endif
  std::string err = FoldError(
      Graph1("  const shape : i64[1] = [274877906944]\n", "y = ConstantOfShape(shape) #\"c\""),
      INT64_MAX);
  EXPECT_EQ(err,
            "fold: ConstantOfShape node 'c': output 'y': cannot allocate 1099511627776 bytes "
            "for f32[274877906944]: out of memory; a smaller --fold-limit leaves it to run "
            "time");

  // At the default limit it is left to run time, where the interpreter asks for it.
  auto g = ParseGraph(
      Graph1("  const shape : i64[1] = [274877906944]\n", "y = ConstantOfShape(shape) #\"c\""));
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({.dims = {}, .max_folded_bytes = 1 << 20});
  ASSERT_TRUE(pass.Run(*g).ok());
  ASSERT_EQ(g->nodes.size(), 1u);
  auto run = Interpret(*g, {});
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().message(),
            "ConstantOfShape node 'c': output 'y': cannot allocate 1099511627776 bytes for "
            "f32[274877906944]: out of memory");
#if !defined(__SANITIZE_ADDRESS__)
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
#endif
}

TEST(OverflowTest, PadAndConcatSumsAreChecked) {
  std::string pad = FoldError(
      Graph1("  const x : f32[2] = [1.0, 2.0]\n  const p : i64[2] = [9223372036854775807, 1]\n",
             "y = Pad(x, p) #\"p\""));
  EXPECT_EQ(pad, "Pad node 'p': pads [9223372036854775807,1] on axis 0 of [2] overflow int64");
  // Two inputs of 512 GiB each are fine; their concatenation is one byte too many.
  std::string concat = FoldError(
      "graph g opset=17 {\n  input a : u8[549755813888]\n  input b : u8[549755813889]\n"
      "  y = Concat(a, b) {axis=0} #\"c\"\n  output y\n}\n");
  EXPECT_EQ(concat, std::string("Concat node 'c': output 'y' u8[1099511627777] needs "
                                "1099511627777 bytes; ") +
                        kTooBig);
}

TEST(OverflowTest, DeclaredShapesAreCheckedBeforeAnyPassSizesABufferFromThem) {
  // A parameter exported by shape only (export_params=False): autodiff would build its zero
  // gradient from this shape.
  std::string param = FoldError(
      "graph g opset=17 {\n  input x : f32[2]\n  param w : f32[4294967296,4294967296]\n"
      "  y = Relu(x) #\"r\"\n  output y\n}\n");
  EXPECT_EQ(param, std::string("fold: parameter 'w' f32[4294967296,4294967296] needs more than "
                               "9223372036854775807 bytes; ") +
                       kTooBig);
  std::string input = FoldError(
      "graph g opset=17 {\n  input x : f32[batch,1099511627776]\n"
      "  y = Relu(x) #\"r\"\n  output y\n}\n");
  // batch is unbound here: the check waits for a concrete shape.
  EXPECT_EQ(input,
            "symbolic dimension 'batch' of input 'x' is not bound; pass --dim batch=N (the inputs' "
            "dimensions: x f32[batch,1099511627776])");
  auto g = ParseGraph(
      "graph g opset=17 {\n  input x : f32[batch,1099511627776]\n"
      "  y = Relu(x) #\"r\"\n  output y\n}\n");
  ASSERT_TRUE(g.ok());
  FoldPass pass({.dims = {{"batch", 2}}, .max_folded_bytes = 1 << 20});
  auto changed = pass.Run(*g);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(
      changed.status().message(),
      std::string("fold: value 'x' f32[2,1099511627776] needs 8796093022208 bytes; ") + kTooBig);
}

TEST(OverflowTest, EmptyResultWithAHugeAxisNeedsNoMemory) {
  // f32[0, 2^34 + 2] holds nothing; Pad's per-axis index table would have asked for 128 GiB
  // (fuzzer finding: libFuzzer's malloc limit).
  const std::string text =
      Graph1("  input x : f32[0,2]\n  const p : i64[4] = [0, 0, 0, 17179869184]\n",
             "y = Pad(x, p) #\"p\"");
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({.dims = {}, .max_folded_bytes = 1 << 20});
  ASSERT_TRUE(pass.Run(*g).ok());
  EXPECT_EQ(g->FindValue("y")->shape, (Shape{0, 17179869186}));
  auto run = Interpret(*g, {{"x", Tensor(DType::kFloat32, {0, 2})}});
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->at("y").shape(), (Shape{0, 17179869186}));

  // Folded: every input constant.
  auto folded =
      ParseGraph(Graph1("  const x : f32[0,2] = []\n  const p : i64[4] = [0, 0, 0, 17179869184]\n",
                        "y = Pad(x, p) #\"p\""));
  ASSERT_TRUE(folded.ok());
  FoldPass pass2({.dims = {}, .max_folded_bytes = 1 << 20});
  auto changed = pass2.Run(*folded);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  ASSERT_NE(folded->FindValue("y")->data, nullptr);
  EXPECT_EQ(folded->FindValue("y")->data->shape(), (Shape{0, 17179869186}));
}

TEST(OverflowTest, OneHotDepthBeyondInt64IsAnError) {
  std::string err =
      FoldError(Graph1("  const i : i64[2] = [0, 1]\n  const depth : f32[] = [1e30]\n"
                       "  const v : f32[2] = [0.0, 1.0]\n",
                       "y = OneHot(i, depth, v) #\"o\""));
  EXPECT_EQ(err,
            "OneHot node 'o': depth 1000000015047466219876688855040.000000 is larger than "
            "one tensor may hold");
}

TEST(OverflowTest, SliceWithAHugeStepDoesNotOverflow) {
  auto g =
      ParseGraph(Graph1("  const x : f32[3] = [1.0, 2.0, 3.0]\n  const s : i64[1] = [0]\n"
                        "  const e : i64[1] = [3]\n  const a : i64[1] = [0]\n"
                        "  const st : i64[1] = [9223372036854775807]\n",
                        "y = Slice(x, s, e, a, st) #\"s\""));
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({.dims = {}, .max_folded_bytes = 1 << 20});
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  ASSERT_NE(g->FindValue("y")->data, nullptr);
  EXPECT_EQ(g->FindValue("y")->shape, (Shape{1}));
}

}  // namespace
}  // namespace foundry
