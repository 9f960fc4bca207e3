// The "functions" annotation format against what stock torch 1.13 exports write, and malformed
// calls built here with ONNX's protobuf types.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "compiler/onnx_import.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::string Data(const std::string& name) {
  return std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/" + name;
}

Graph MustImport(const std::string& path) {
  auto g = ImportOnnx(path);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph();
}

// A model whose graph input `x` (f32[2,4]) feeds `call`, which calls `f`; `after` runs last.
struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  ModelBuilder() {
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_version(17);
    auto* local = m.add_opset_import();
    local->set_domain("local");
    local->set_version(1);
    g = m.mutable_graph();
    g->set_name("g");
    auto* x = g->add_input();
    x->set_name("x");
    auto* tt = x->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  onnx::FunctionProto* Function(const std::string& name, std::vector<std::string> inputs,
                                std::vector<std::string> outputs) {
    auto* f = m.add_functions();
    f->set_name(name);
    f->set_domain("local");
    f->add_opset_import()->set_version(17);
    for (const auto& i : inputs) f->add_input(i);
    for (const auto& o : outputs) f->add_output(o);
    return f;
  }
  template <typename Parent>
  static onnx::NodeProto* Node(Parent* p, const std::string& op, std::vector<std::string> in,
                               std::vector<std::string> out, const std::string& name,
                               const std::string& domain = "") {
    auto* n = p->add_node();
    n->set_op_type(op);
    n->set_name(name);
    n->set_domain(domain);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  void Initializer(const std::string& name, int64_t size) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(size);
    for (int64_t i = 0; i < size; ++i) t->add_float_data(1.0f);
  }
  void Output(const std::string& name) { g->add_output()->set_name(name); }
  StatusOr<Graph> Import() {
    ImportOptions options;
    options.run_checker = false;  // ONNX's checker would reject some of these first
    return ImportOnnxFromBytes(m.SerializeAsString(), options, "", "m.onnx");
  }
};

TEST(OnnxImportFunctionsTest, HoistedNoneBiasIsAnOmittedInput) {
  // torch 1.13 makes LayerNorm's None bias an output of `Block` and of `LPLayerNorm` that no node
  // writes; the LayerNormalization outside reads it as its optional bias.
  Graph g = MustImport(Data("ln_nobias.functions.onnx"));
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "functions");
  std::vector<std::string> got;
  for (const Node& n : g.nodes) {
    std::string ins;
    for (const auto& in : n.inputs) ins += (ins.empty() ? "" : ",") + in;
    got.push_back(n.op_type + "@" + n.scope + "(" + ins + ")");
  }
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], "LayerNormalization@b.norm(x,b.norm.weight,)");
  EXPECT_EQ(got[2], "LayerNormalization@norm_f(/b/fc/Block_output_1,norm_f.weight,)");
  EXPECT_EQ(g.nodes[1].op_type, "Gemm");  // fc is no function: part of Block's body
  EXPECT_EQ(g.nodes[1].scope, "b");
  EXPECT_EQ(g.modules.at("b.norm").classes, (std::vector<std::string>{"stock.LPLayerNorm"}));
}

TEST(OnnxImportFunctionsTest, UndefinedOutputReadByARequiredInputIsAnError) {
  ModelBuilder b;
  auto* f = b.Function("F", {"in"}, {"y", "none"});
  ModelBuilder::Node(f, "Relu", {"in"}, {"y"}, "Relu_0");
  ModelBuilder::Node(b.g, "F", {"x"}, {"a", "z"}, "/F", "local");
  ModelBuilder::Node(b.g, "Add", {"a", "z"}, {"out"}, "/Add");
  b.Output("out");
  auto g = b.Import();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'m.onnx': function F never produces its output 'none', which Add node '/Add' reads "
            "as input 1; only an optional input may be left undefined (a broken export?)");
}

TEST(OnnxImportFunctionsTest, UndefinedOutputInAnOptionalSlotIsOmitted) {
  ModelBuilder b;
  b.Initializer("scale", 4);
  auto* f = b.Function("F", {"in"}, {"y", "none"});
  ModelBuilder::Node(f, "Relu", {"in"}, {"y"}, "Relu_0");
  ModelBuilder::Node(b.g, "F", {"x"}, {"a", "z"}, "/F", "local");
  ModelBuilder::Node(b.g, "LayerNormalization", {"a", "scale", "z"}, {"out"}, "/LN");
  b.Output("out");
  auto g = b.Import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes.back().inputs, (std::vector<std::string>{"a", "scale", ""}));
}

TEST(OnnxImportFunctionsTest, UndefinedOutputAsGraphOutputIsAnError) {
  ModelBuilder b;
  auto* f = b.Function("F", {"in"}, {"y", "none"});
  ModelBuilder::Node(f, "Relu", {"in"}, {"y"}, "Relu_0");
  ModelBuilder::Node(b.g, "F", {"x"}, {"a", "z"}, "/F", "local");
  b.Output("z");
  auto g = b.Import();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'m.onnx': function F never produces its output 'none', which is the graph output "
            "'z'");
}

TEST(OnnxImportFunctionsTest, CallWithMoreInputsThanDeclared) {
  ModelBuilder b;
  auto* f = b.Function("F", {"in"}, {"y"});
  ModelBuilder::Node(f, "Relu", {"in"}, {"y"}, "Relu_0");
  ModelBuilder::Node(b.g, "F", {"x", "x"}, {"out"}, "/F", "local");
  b.Output("out");
  auto g = b.Import();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'m.onnx': F node '/F' passes 2 inputs to function F, which declares 1");
}

TEST(OnnxImportFunctionsTest, NestedCallWithOneChildsParametersIsItsOwnModule) {
  // Layer calls Intermediate, which reads only its child `dense`'s weight and bias: the instance
  // is layer.N.intermediate, not layer.N.intermediate.dense.
  Graph g = MustImport(Data("nested_child.functions.onnx"));
  for (int i = 0; i < 2; ++i) {
    std::string layer = "layer." + std::to_string(i);
    EXPECT_TRUE(g.modules.count(layer + ".intermediate")) << layer;
    EXPECT_FALSE(g.modules.count(layer + ".intermediate.dense")) << layer;
    EXPECT_EQ(g.modules.at(layer + ".intermediate").classes,
              (std::vector<std::string>{"stock.Intermediate"}));
    EXPECT_EQ(g.modules.at(layer + ".output").classes, (std::vector<std::string>{"stock.Output"}));
  }
  int gelu_nodes = 0;
  for (const Node& n : g.nodes)
    if (n.op_type == "Erf") {
      ++gelu_nodes;
      EXPECT_TRUE(n.scope == "layer.0.intermediate" || n.scope == "layer.1.intermediate")
          << n.scope;
    }
  EXPECT_EQ(gelu_nodes, 2);
}

TEST(OnnxImportFunctionsTest, ChildOfAModuleInlinedIntoTheCallerKeepsItsPath) {
  // Outer's body reads `mid.weight` itself (mid is no function), then calls Leaf on
  // `mid.leaf.weight` alone: the caller's own read inside `mid` shows mid is not Leaf's module.
  ModelBuilder b;
  b.Initializer("outer.mid.weight", 4);
  b.Initializer("outer.mid.leaf.weight", 4);
  b.Initializer("outer.own.weight", 4);
  auto* leaf = b.Function("Leaf", {"in", "w"}, {"y"});
  ModelBuilder::Node(leaf, "Mul", {"in", "w"}, {"y"}, "Mul_0");
  auto* outer = b.Function("Outer", {"in", "mw", "lw", "ow"}, {"y"});
  ModelBuilder::Node(outer, "Mul", {"in", "mw"}, {"t"}, "Mul_1");
  ModelBuilder::Node(outer, "Leaf", {"t", "lw"}, {"u"}, "Leaf_2", "local");
  ModelBuilder::Node(outer, "Mul", {"u", "ow"}, {"y"}, "Mul_3");
  ModelBuilder::Node(b.g, "Outer",
                     {"x", "outer.mid.weight", "outer.mid.leaf.weight", "outer.own.weight"},
                     {"out"}, "Outer_0", "local");
  b.Output("out");
  auto g = b.Import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::vector<std::string> got;
  for (const Node& n : g->nodes) got.push_back(n.scope);
  EXPECT_EQ(got, (std::vector<std::string>{"outer", "outer.mid.leaf", "outer"}));
}

}  // namespace
}  // namespace foundry
