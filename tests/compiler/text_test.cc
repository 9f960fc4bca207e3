#include "compiler/text.h"

#include <gtest/gtest.h>

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr const char* kGraph = R"(graph tiny opset=17 {
  module "" : models.mpt.MPTForCausalLM
  module "transformer.blocks.0.attn" : models.mpt.MultiheadAttention, models.mpt.GroupedQueryAttention
  input x : f32[batch,4]
  param w : f32[4,2] = [0.1, 0.2, 0.30000001, 0.4, 0.5, 0.6, 0.7, -0.8]
  param big : f32[1024,1024]
  const axes : i64[1] = [0]
  y : f32[batch,2] = MatMul(x, w) @"transformer.blocks.0.attn" #"/blocks.0/attn/MatMul"
  s : f32[?] = ReduceSum(y, axes) {keepdims=0, note="a \"q\"", fs=[1.5, 2.0], e=[:f]}
  g = com.microsoft::GeluGrad(y, y) marks{recompute_of="mm"}
  t = Constant() {value=tensor(f32[2] = [1.0, inf])}
  output s
}
)";

TEST(TextTest, RoundTrips) {
  auto g = ParseGraph(kGraph);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes.size(), 4u);
  EXPECT_EQ(g->parameters, (std::vector<std::string>{"w", "big"}));
  EXPECT_EQ(g->initializers.size(), 3u);
  EXPECT_EQ(g->nodes[0].scope, "transformer.blocks.0.attn");
  EXPECT_EQ(g->nodes[0].name, "/blocks.0/attn/MatMul");
  EXPECT_EQ(g->nodes[2].domain, "com.microsoft");
  EXPECT_EQ(g->nodes[2].marks.at("recompute_of"), "mm");
  EXPECT_EQ(g->nodes[1].attrs.at("note").s, "a \"q\"");
  EXPECT_EQ(g->nodes[1].attrs.at("e").kind, Attribute::Kind::kFloats);
  EXPECT_FALSE(g->FindValue("s")->rank_known);
  EXPECT_EQ(g->FindValue("x")->dim_params[0], "batch");
  EXPECT_EQ(g->FindValue("big")->data, nullptr);
  EXPECT_EQ(g->FindValue("w")->data->data<float>()[7], -0.8f);
  std::string printed = PrintGraph(*g);
  auto again = ParseGraph(printed);
  ASSERT_TRUE(again.ok()) << again.status().message() << "\n" << printed;
  EXPECT_EQ(PrintGraph(*again), printed);
  EXPECT_EQ(g->ClassChain("transformer.blocks.0.attn"),
            (std::vector<std::string>{"MPTForCausalLM", "MultiheadAttention"}));
}

TEST(TextTest, ReportsLineOfError) {
  auto g = ParseGraph("graph g {\n  input x : f99[2]\n}\n");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "graph text line 2: unknown element type 'f99' (at '[')");
  auto h = ParseGraph("graph g {\n  param w : f32[2] = [1.0]\n}\n");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(),
            "graph text line 2: tensor of shape [2] needs 2 values, got 1");
}

}  // namespace
}  // namespace foundry
