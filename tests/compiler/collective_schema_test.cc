// The types of the collectives (compiler/ops/collective.cc, docs/design.md §10): a gather's output
// has its shard's type (f32 or bf16, mixed within one node); a gradient collective takes an f32
// or bf16 partial and always gives an f32 gradient; any other type is refused naming the node.
#include <gtest/gtest.h>

#include "compiler/op_schema.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

void AddValue(Graph& g, const std::string& name, DType t, Shape shape) {
  Value& v = g.GetOrAddValue(name);
  v.dtype = t;
  v.shape = std::move(shape);
  v.rank_known = true;
}

Node Collective(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                int64_t world, std::vector<int64_t> shapes = {}) {
  std::map<std::string, Attribute> attrs = {{"world_size", Attribute::Int(world)}};
  if (!shapes.empty()) attrs["shapes"] = Attribute::Ints(shapes);
  return MakeNode(op, std::move(in), std::move(out), attrs, "foundry");
}

TEST(CollectiveSchemaTest, AllGatherKeepsEachShardsType) {
  Graph g;
  AddValue(g, "a", DType::kBFloat16, {3});  // [5] over 2 ranks
  AddValue(g, "b", DType::kFloat32, {4});   // [2, 4] over 2 ranks
  const Node n = Collective("AllGather", {"a", "b"}, {"fa", "fb"}, 2, {1, 5, 2, 2, 4});
  auto t = InferNodeTypes(g, n);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].dtype, DType::kBFloat16);
  EXPECT_EQ((*t)[0].shape, (Shape{5}));
  EXPECT_EQ((*t)[1].dtype, DType::kFloat32);
  EXPECT_EQ((*t)[1].shape, (Shape{2, 4}));
}

TEST(CollectiveSchemaTest, GradientCollectivesGiveF32FromF32OrBf16) {
  for (DType p : {DType::kFloat32, DType::kBFloat16}) {
    Graph g;
    AddValue(g, "p", p, {10, 10});
    auto rs = InferNodeTypes(g, Collective("ReduceScatterGradient", {"p"}, {"g"}, 3));
    ASSERT_TRUE(rs.ok()) << rs.status().message();
    EXPECT_EQ((*rs)[0].dtype, DType::kFloat32);
    EXPECT_EQ((*rs)[0].shape, (Shape{34}));
    auto ar = InferNodeTypes(g, Collective("AllReduceGradient", {"p"}, {"g"}, 3));
    ASSERT_TRUE(ar.ok()) << ar.status().message();
    EXPECT_EQ((*ar)[0].dtype, DType::kFloat32);
    EXPECT_EQ((*ar)[0].shape, (Shape{10, 10}));
  }
}

TEST(CollectiveSchemaTest, OtherTypesAreRefusedNamingTheNode) {
  Graph g;
  AddValue(g, "h", DType::kFloat16, {6});
  AddValue(g, "d", DType::kFloat64, {3});
  auto gather = InferNodeTypes(g, Collective("AllGather", {"d"}, {"f"}, 2, {1, 6}));
  ASSERT_FALSE(gather.ok());
  EXPECT_EQ(gather.status().message(),
            "AllGather node 'n': shard 0 is f64[3]; a collective takes f32 or bf16");
  auto rs = InferNodeTypes(g, Collective("ReduceScatterGradient", {"h"}, {"g"}, 2));
  ASSERT_FALSE(rs.ok());
  EXPECT_EQ(rs.status().message(),
            "ReduceScatterGradient node 'n': the partial gradient is f16[6]; a collective takes "
            "f32 or bf16");
  auto ar = InferNodeTypes(g, Collective("AllReduceGradient", {"h"}, {"g"}, 2));
  ASSERT_FALSE(ar.ok());
  EXPECT_EQ(ar.status().message(),
            "AllReduceGradient node 'n': the partial gradient is f16[6]; a collective takes f32 "
            "or bf16");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
