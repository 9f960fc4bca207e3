// The three ops torch 2.6's dynamo exporter writes that foundry reads, end to end: ai.onnx Gelu
// (opset 20), CumSum (OPT's positions) and GatherND (GPT-NeoX's rotary cos[position_ids]). A model
// built here as the exporter writes it (IR 10, opset 20) imports, compiles to a training graph in
// which Gelu is com.microsoft's Gelu / FastGelu with their fused gradients, GatherND of a
// parameter differentiates into GatherNDGrad and CumSum into the reversed CumSum, and the compiled
// gradients agree with central differences of the forward graph's loss.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compiler/onnx_import.h"
#include "driver/compile.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

void AddInput(onnx::GraphProto* g, const std::string& name, int elem, const Shape& shape) {
  auto* v = g->add_input();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

void AddFloats(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  auto* p = g->add_initializer();
  p->set_name(name);
  p->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : t.shape()) p->add_dims(d);
  for (int64_t i = 0; i < t.numel(); ++i) p->add_float_data(t.data<float>()[i]);
}

void AddInts(onnx::GraphProto* g, const std::string& name, const Shape& shape,
             const std::vector<int64_t>& v) {
  auto* p = g->add_initializer();
  p->set_name(name);
  p->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : shape) p->add_dims(d);
  for (int64_t x : v) p->add_int64_data(x);
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                         std::vector<std::string> inputs, const std::string& output) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("/" + output + "/" + op);
  for (const auto& in : inputs) n->add_input(in);
  n->add_output(output);
  return n;
}

void SetInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void SetString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

const Tensor kRotary = RandomTensor({6, 4}, 1);
const Tensor kProj = RandomTensor({4, 4}, 2, -0.8f, 0.8f);

// positions = CumSum(mask, 1) * mask - 1 (OPT; -1 at padding, which GatherND reads from the back:
// the table's last row, three times), cos = GatherND(rotary.weight, positions[..., None]),
// g = Gelu_tanh((x * cos) @ proj.weight), r = CumSum(g, 1, reverse), three positions per row of r
// (GatherND, batch_dims 1), loss = mean(Gelu(those)).
std::string Model(int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("dynamo_ops");
  AddInput(g, "mask", onnx::TensorProto::INT64, {2, 5});
  AddInput(g, "x", onnx::TensorProto::FLOAT, {2, 5, 4});
  AddFloats(g, "rotary.weight", kRotary);
  AddFloats(g, "proj.weight", kProj);
  AddInts(g, "axis1", {}, {1});
  AddInts(g, "one", {}, {1});
  AddInts(g, "last", {1}, {-1});
  AddInts(g, "pick", {2, 3, 1}, {0, 4, 4, 3, 1, -1});
  AddNode(g, "CumSum", {"mask", "axis1"}, "c");
  AddNode(g, "Mul", {"c", "mask"}, "cm");
  AddNode(g, "Sub", {"cm", "one"}, "pos");
  AddNode(g, "Unsqueeze", {"pos", "last"}, "idx");
  AddNode(g, "GatherND", {"rotary.weight", "idx"}, "cos");
  AddNode(g, "Mul", {"x", "cos"}, "h");
  AddNode(g, "MatMul", {"h", "proj.weight"}, "p");
  SetString(AddNode(g, "Gelu", {"p"}, "gt"), "approximate", "tanh");
  SetInt(AddNode(g, "CumSum", {"gt", "axis1"}, "r"), "reverse", 1);
  SetInt(AddNode(g, "GatherND", {"r", "pick"}, "s"), "batch_dims", 1);
  AddNode(g, "Gelu", {"s"}, "e");
  SetInt(AddNode(g, "ReduceMean", {"e"}, "loss"), "keepdims", 0);
  auto* out = g->add_output();
  out->set_name("loss");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m.SerializeAsString();
}

StatusOr<CompileResult> CompileModel(bool training) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnxFromBytes(Model(20), {}, "", "dynamo_ops.onnx"));
  CompileRequest request;
  request.model = "dynamo_ops.onnx";
  request.training = training;
  return CompileImported(request, std::move(g));
}

std::map<std::string, Tensor> Feeds() {
  return {
      {"mask", Tensor::FromVector<int64_t>(DType::kInt64, {2, 5}, {1, 1, 1, 0, 0, 0, 1, 1, 1, 1})},
      {"x", RandomTensor({2, 5, 4}, 3, -2.f, 2.f)}};
}

TEST(DynamoOpsTest, Opset20ModelCompilesToTheComMicrosoftOps) {
  StatusOr<CompileResult> r = CompileModel(true);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::map<std::string, int> ops;
  for (const Node& n : r->graph.nodes) ++ops[(n.domain.empty() ? "" : n.domain + "::") + n.op_type];
  EXPECT_EQ(ops["Gelu"], 0);  // renamed by canonicalize
  EXPECT_EQ(ops["com.microsoft::FastGelu"], 1);
  EXPECT_EQ(ops["com.microsoft::FastGeluGrad"], 1);
  EXPECT_EQ(ops["com.microsoft::Gelu"], 1);
  EXPECT_EQ(ops["com.microsoft::GeluGrad"], 1);
  EXPECT_EQ(ops["GatherND"], 2);
  // rotary.weight's gradient, and the batch_dims-1 GatherND's on the way to proj.weight.
  EXPECT_EQ(ops["com.microsoft::GatherNDGrad"], 2);
  // The positions', the forward reversed one, and its gradient (reverse flipped back to 0).
  ASSERT_EQ(ops["CumSum"], 3);
  int reversed = 0;
  for (const Node& n : r->graph.nodes)
    if (n.op_type == "CumSum") reversed += n.GetInt("reverse", 0);
  EXPECT_EQ(reversed, 1);
  EXPECT_EQ(r->graph.opset, 20);
  // Opset 21 is beyond what the importer reads.
  auto newer = ImportOnnxFromBytes(Model(21), {}, "", "dynamo_ops.onnx");
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().message(),
            "'dynamo_ops.onnx' uses ai.onnx opset 21; foundry supports opsets 13 to 20 (export "
            "with torch.onnx.export(..., opset_version=17))");
}

TEST(DynamoOpsTest, CompiledGradientsMatchFiniteDifferencesOfTheForwardLoss) {
  StatusOr<CompileResult> train = CompileModel(true);
  StatusOr<CompileResult> fwd = CompileModel(false);
  ASSERT_TRUE(train.ok()) << train.status().message();
  ASSERT_TRUE(fwd.ok()) << fwd.status().message();
  ASSERT_EQ(train->plan->parameters, (std::vector<std::string>{"rotary.weight", "proj.weight"}));
  const std::map<std::string, Tensor> feeds = Feeds();
  auto out = Interpret(train->graph, feeds);
  ASSERT_TRUE(out.ok()) << out.status().message();
  auto loss_of = [&](const std::string& param, int64_t i, float delta) {
    std::map<std::string, Tensor> f = feeds;
    Tensor w = param == "rotary.weight" ? kRotary : kProj;
    w.data<float>()[i] += delta;
    f[param] = w;
    auto o = Interpret(fwd->graph, f);
    EXPECT_TRUE(o.ok()) << o.status().message();
    return o.ok() ? static_cast<double>(o->at("loss").data<float>()[0]) : 0.0;
  };
  GradCheckOptions tol;
  for (const std::string param : {"rotary.weight", "proj.weight"}) {
    const Tensor& grad = out->at(param + "_grad");
    double largest = 0;
    for (int64_t i = 0; i < grad.numel(); ++i) {
      const double numeric =
          (loss_of(param, i, tol.eps) - loss_of(param, i, -tol.eps)) / (2 * tol.eps);
      const double analytic = grad.data<float>()[i];
      EXPECT_LE(GradientErrorRatio(analytic, numeric, tol), 1.0)
          << param << "[" << i << "]: compiled " << analytic << ", finite differences " << numeric;
      largest = std::max(largest, std::fabs(numeric));
    }
    EXPECT_GT(largest, 1e-3) << param << ": a gradient that is all zeros checks nothing";
  }
  // The positions are [0, 1, 2, -1, -1] and [-1, 0, 1, 2, 3]: no position reads row 4 of the
  // table (its gradient is exactly 0), row 5 is read three times (-1), its gradient their sum.
  const Tensor& dt = out->at("rotary.weight_grad");
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(dt.data<float>()[4 * 4 + d], 0.f);
    EXPECT_NE(dt.data<float>()[5 * 4 + d], 0.f);
  }
}

// torch's dynamo exporter writes a size it specialised while asked to keep the axis dynamic as a
// decimal dim_param (the fixtures' input_ids: "2", "16"), yet the graph computes from the actual
// shape. Rebinding those names trains at another size: the same loss and gradients, at 3 x 12, as
// the scopes export of the same model (the same weights) compiled for 3 x 12.
TEST(DynamoOpsTest, ASizeTorchSpecialisedRebindsWhenNothingHoldsIt) {
  const std::string dir = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/llama_tiny/";
  Tensor ids(DType::kInt64, {3, 12});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 37 + 11) % 128;
  const std::map<std::string, Tensor> feeds = {{"input_ids", ids}, {"labels", ids}};
  auto run = [&](const std::string& file, const std::map<std::string, int64_t>& dims,
                 std::string* warning) -> StatusOr<std::map<std::string, Tensor>> {
    ImportOptions io;
    io.dims = dims;
    ASSIGN_OR_RETURN(Graph g, ImportOnnx(dir + file, io));
    if (auto w = g.metadata.find(kImportWarningKey); w != g.metadata.end()) *warning = w->second;
    RETURN_IF_ERROR(RunPasses(g, BuildPipeline(CompileOptions{}), {}));
    return Interpret(g, feeds);
  };
  std::string warned, none;
  auto dyn = run("dynamo/model.onnx", {{"2", 3}, {"16", 12}, {"s2", 3}, {"s3", 12}}, &warned);
  ASSERT_TRUE(dyn.ok()) << dyn.status().message();
  auto ref = run("model.onnx", {{"batch", 3}, {"seq", 12}}, &none);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  EXPECT_NE(warned.find("torch specialised dimension '16' -> 12, '2' -> 3 at export"),
            std::string::npos)
      << warned;
  EXPECT_EQ(none, "");
  int compared = 0;
  for (const auto& [name, want] : *ref) {
    auto it = dyn->find(name);
    if (it == dyn->end()) {
      ADD_FAILURE() << name << " is missing from the dynamo export's outputs";
      continue;
    }
    ++compared;
    ASSERT_EQ(it->second.shape(), want.shape()) << name;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      diff = std::max(diff, std::fabs(it->second.GetAsDouble(i) - want.GetAsDouble(i)));
      scale = std::max(scale, std::fabs(want.GetAsDouble(i)));
    }
    EXPECT_LE(diff, 1e-5 * scale) << name;
  }
  EXPECT_EQ(compared, static_cast<int>(ref->size()));
  EXPECT_GE(compared, 22);  // the loss and the 21 trainable parameters' gradients
}

// Where a constant holds the traced size (here a weight of that length), the rebound graph does
// not fit together: the error names the node and says what the bindings changed.
TEST(DynamoOpsTest, ASpecialisedSizeAConstantHoldsIsRefusedNamingTheNode) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  m.add_opset_import()->set_version(18);
  auto* g = m.mutable_graph();
  g->set_name("specialised");
  auto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("2");
  tt->mutable_shape()->add_dim()->set_dim_param("16");
  AddFloats(g, "w", RandomTensor({16}, 4));
  AddNode(g, "Mul", {"x", "w"}, "y");
  SetInt(AddNode(g, "ReduceSum", {"y"}, "loss"), "keepdims", 0);
  auto* out = g->add_output();
  out->set_name("loss");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  CompileRequest request;
  request.model = "specialised.onnx";
  request.training = false;  // the shapes are the point: a forward plan
  ImportOptions io;
  io.dims = {{"16", 12}};
  auto imported = ImportOnnxFromBytes(m.SerializeAsString(), io, "", "specialised.onnx");
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  EXPECT_EQ(imported->FindValue("x")->TypeString(), "f32[2,12]");
  auto r = CompileImported(request, std::move(imported).value());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'/y/Mul'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("the bindings change sizes torch specialised at export, "
                                      "'16' -> 12: a constant of the graph holds the traced size"),
            std::string::npos)
      << r.status().message();
  // Bound to the size it was traced at, it is the static size it always was.
  io.dims = {};
  auto same = ImportOnnxFromBytes(m.SerializeAsString(), io, "", "specialised.onnx");
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_EQ(same->FindValue("x")->TypeString(), "f32[2,16]");
  auto fits = CompileImported(request, std::move(same).value());
  EXPECT_TRUE(fits.ok()) << fits.status().message();
}

}  // namespace
}  // namespace foundry
