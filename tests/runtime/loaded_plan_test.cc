// LoadPlan's check of a training graph against its own shape inference: the declared
// types of node outputs must be what inference gives from the node's inputs; order and single
// definition are checked on the way; the inferred types replace the declared ones.
#include "runtime/loaded_plan.h"

#include <gtest/gtest.h>

#include "compiler/memory_plan.h"
#include "compiler/text.h"
#include "passes/autodiff.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

Graph Parse(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph();
}

TEST(CheckTypesByInferenceTest, DeclaredTypeMustBeTheInferredOne) {
  Graph g = Parse(R"(graph t opset=17 {
  input x : f32[2,4]
  param w : f32[4,2]
  y : f32[2,1] = MatMul(x, w) #"mm"
  output y
})");
  Status st = CheckTypesByInference(g, "t.train.onnx");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "value 'y' of MatMul node 'mm' is declared f32[2,1] in 't.train.onnx' but its inputs "
            "give f32[2,2]");
  // A wrong element type too.
  g = Parse(R"(graph t opset=17 {
  input x : f32[2,4]
  param w : f32[4,2]
  y : i64[2,2] = MatMul(x, w) #"mm"
  output y
})");
  st = CheckTypesByInference(g, "t.train.onnx");
  EXPECT_EQ(st.message(),
            "value 'y' of MatMul node 'mm' is declared i64[2,2] in 't.train.onnx' but its inputs "
            "give f32[2,2]");
}

TEST(CheckTypesByInferenceTest, MissingTypesAreFilledIn) {
  Graph g = Parse(R"(graph t opset=17 {
  input x : f32[2,4]
  param w : f32[4,2]
  y = MatMul(x, w) #"mm"
  output y
})");
  ASSERT_TRUE(CheckTypesByInference(g, "t.train.onnx").ok());
  EXPECT_EQ(g.FindValue("y")->TypeString(), "f32[2,2]");
}

TEST(CheckTypesByInferenceTest, OrderAndSingleDefinition) {
  Graph g = Parse(R"(graph t opset=17 {
  input x : f32[2,4]
  y : f32[2,4] = Relu(x) #"r1"
  output y
})");
  // A node that reads a value computed later.
  Node early = g.nodes[0];
  early.name = "r0";
  early.inputs = {"z"};
  early.outputs = {"w"};
  g.nodes.insert(g.nodes.begin(), early);
  Node late = g.nodes[1];
  late.name = "r2";
  late.inputs = {"y"};
  late.outputs = {"z"};
  g.nodes.push_back(late);
  Status st = CheckTypesByInference(g, "t.train.onnx");
  EXPECT_EQ(st.message(), "Relu node 'r0' in 't.train.onnx' reads 'z' before any node computes it");
  // A value computed twice.
  g.nodes.erase(g.nodes.begin());
  g.nodes.back().outputs = {"y"};
  st = CheckTypesByInference(g, "t.train.onnx");
  EXPECT_EQ(st.message(), "value 'y' is computed again by Relu node 'r2' in 't.train.onnx'");
}

TEST(CheckTypesByInferenceTest, AttributesAreValidated) {
  Graph g = Parse(R"(graph t opset=17 {
  input s : f32[2,3]
  input l : i64[2]
  loss : f32[] = SoftmaxCrossEntropyLoss(s, l) {reduction="junk"} #"ce"
  output loss
})");
  Status st = CheckTypesByInference(g, "t.train.onnx");
  EXPECT_EQ(st.message(),
            "SoftmaxCrossEntropyLoss node 'ce': reduction must be \"mean\", \"sum\" or \"none\", "
            "got \"junk\"");
}

// plan_load_fuzz finding: a graph node named with a newline (the importer keeps such names) made
// CheckMemoryPlan's schedule error two lines; names from files are escaped in its messages.
TEST(CheckTypesByInferenceTest, NamesFromTheGraphAreEscapedInMemoryPlanErrors) {
  Graph g = Parse(R"(graph t opset=17 {
  input x : f32[2]
  y : f32[2] = Relu(x) #"r"
  output y
})");
  g.nodes[0].name = "r\nfoundry-run: error: fake";
  MemoryPlan m;
  m.schedule = {"other"};
  Status st = CheckMemoryPlan(g, m);
  EXPECT_EQ(st.message(),
            "memory plan: step 0 of the schedule is 'other'; the graph runs "
            "'r\\x0afoundry-run: error: fake' there");
  // And in the loader's own messages.
  g.GetOrAddValue("y").shape = {3};
  g.nodes[0].outputs = {"y\x1b"};
  g.GetOrAddValue("y\x1b") = *g.FindValue("y");
  st = CheckTypesByInference(g, "t.train.onnx");
  EXPECT_EQ(st.message(),
            "value 'y\\x1b' of Relu node 'r\\x0afoundry-run: error: fake' is declared f32[3] in "
            "'t.train.onnx' but its inputs give f32[2]");
}

// The naming rule LoadPlan checks gradients by (runtime/loaded_plan.cc repeats it).
TEST(GradNameTest, IsGradNameOf) {
  EXPECT_TRUE(IsGradNameOf("w_grad", "w"));
  EXPECT_TRUE(IsGradNameOf("w_grad_12", "w"));
  EXPECT_FALSE(IsGradNameOf("w_grad_", "w"));
  EXPECT_FALSE(IsGradNameOf("w_grad_1a", "w"));
  EXPECT_FALSE(IsGradNameOf("b_grad", "w"));
  EXPECT_FALSE(IsGradNameOf("w_gradient", "w"));
}

}  // namespace
}  // namespace foundry
