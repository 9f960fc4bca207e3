// Kernel scratch (kernels/cpu/kernel.h): the kernels that need scratch take it from
// ctx.workspace, and the figure they declare is the same from the graph's types (compile time) and
// from the tensors (run time), is enough (ASan, which CI runs every test under, catches a kernel
// that reads or writes past it: the workspace below is an allocation of exactly that size), and is
// enforced: one byte fewer is an error naming the node and both sizes.
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

struct Case {
  std::string label;
  Node node;
  std::map<std::string, Tensor> inputs;  // every input of the node, by name
  int64_t bytes;                         // the figure, worked out by hand
};

Tensor I64(Shape s, std::vector<int64_t> v) { return Tensor::FromVector(DType::kInt64, s, v); }

Tensor F64(const Tensor& f32) {
  Tensor t(DType::kFloat64, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) t.data<double>()[i] = f32.data<float>()[i];
  return t;
}

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
Attribute Int(int64_t v) { return Attribute::Int(v); }

std::vector<Case> Cases() {
  constexpr char kMs[] = "com.microsoft";
  std::vector<Case> cases;
  Tensor x35 = RandomTensor({3, 5}, 1);
  // One double per target: 3 targets; then [N, C, inner] = [2, 5, 3], 2 x 3 targets.
  cases.push_back({"softmaxcrossentropy",
                   MakeNode("SoftmaxCrossEntropyLoss", {"x", "labels"}, {"loss", "log_prob"}),
                   {{"x", x35}, {"labels", I64({3}, {0, 4, 2})}},
                   3 * 8});
  cases.push_back({"softmaxcrossentropy_inner",
                   MakeNode("SoftmaxCrossEntropyLoss", {"x", "labels"}, {"loss"},
                            {{"reduction", Attribute::String("none")}}),
                   {{"x", RandomTensor({2, 5, 3}, 2)}, {"labels", I64({2, 3}, {0, 1, 2, 3, 4, 0})}},
                   6 * 8});
  Tensor x46 = RandomTensor({4, 6}, 3, 0.5f, 1.5f);
  // Trailing axes reduced: the general path (offset tables, 4 + 6 slots).
  cases.push_back({"reducesum_trailing",
                   MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", Int(0)}}),
                   {{"x", x46}, {"axes", I64({1}, {1})}},
                   (4 + 6) * 8});
  // Leading axes reduced: the accumulator path (6 slots of the declared 6 + 4).
  cases.push_back({"reducemean_leading",
                   MakeNode("ReduceMean", {"x"}, {"y"}, {{"axes", Ints({0})}}),
                   {{"x", x46}},
                   (6 + 4) * 8});
  cases.push_back(
      {"reduceprod_all", MakeNode("ReduceProd", {"x"}, {"y"}), {{"x", x46}}, (1 + 24) * 8});
  cases.push_back({"reducelogsumexp_middle",
                   MakeNode("ReduceLogSumExp", {"x"}, {"y"}, {{"axes", Ints({1})}}),
                   {{"x", RandomTensor({2, 3, 4}, 4)}},
                   (8 + 3) * 8});
  // dscale and dbias partial sums, 2 x 8 doubles per chunk of rows: 3 rows of 8 are one chunk
  // (RowGrain(8) = 4096 rows); 5000 rows of 8 are two.
  Tensor x38 = RandomTensor({3, 8}, 5), dy38 = RandomTensor({3, 8}, 6);
  Tensor scale = RandomTensor({8}, 7), mean = RandomTensor({3}, 8);
  Tensor inv = RandomTensor({3}, 9, 0.5f, 2.f);
  cases.push_back({"layernormgrad",
                   MakeNode("LayerNormalizationGrad", {"dy", "x", "scale", "mean", "inv"},
                            {"dx", "dscale", "dbias"}, {{"axis", Int(-1)}}, kMs),
                   {{"dy", dy38}, {"x", x38}, {"scale", scale}, {"mean", mean}, {"inv", inv}},
                   2 * 8 * 8});
  cases.push_back({"simplifiedlayernormgrad_two_chunks",
                   MakeNode("SimplifiedLayerNormalizationGrad", {"dy", "x", "scale", "inv"},
                            {"dx", "dscale"}, {{"axis", Int(-1)}}, kMs),
                   {{"dy", RandomTensor({5000, 8}, 6)},
                    {"x", RandomTensor({5000, 8}, 5)},
                    {"scale", scale},
                    {"inv", RandomTensor({5000}, 9, 0.5f, 2.f)}},
                   2 * 2 * 8 * 8});
  // [2, 3] padded to [3, 5]: 3 + 5 index-map entries.
  cases.push_back({"pad_reflect",
                   MakeNode("Pad", {"x", "pads"}, {"y"}, {{"mode", Attribute::String("reflect")}}),
                   {{"x", RandomTensor({2, 3}, 10)}, {"pads", I64({4}, {1, 0, 0, 2})}},
                   (3 + 5) * 8});
  return cases;
}

// The node's graph with its types inferred; inputs are graph inputs (no values).
StatusOr<Graph> GraphOf(const Case& c) {
  Graph g;
  for (const auto& [name, t] : c.inputs) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.rank_known = true;
    // Shape inference reads constant operands (axes, pads) from their data.
    if (t.dtype() == DType::kInt64) v.data = std::make_shared<const Tensor>(t);
    g.inputs.push_back(name);
  }
  g.nodes.push_back(c.node);
  RETURN_IF_ERROR(InferAndSetTypes(g, g.nodes[0]));
  return g;
}

struct Outcome {
  Status status;
  std::vector<Tensor> outputs;
};

Outcome RunWith(const Case& c, const Graph& g, std::span<std::byte> workspace) {
  std::vector<const Tensor*> ins;
  for (const auto& name : c.node.inputs) ins.push_back(&c.inputs.at(name));
  Outcome r;
  for (const auto& name : c.node.outputs) {
    const Value* v = g.FindValue(name);
    r.outputs.emplace_back(v->dtype, v->shape);
  }
  std::vector<Tensor*> outs;
  for (Tensor& t : r.outputs) outs.push_back(&t);
  KernelContext ctx;
  ctx.workspace = workspace;
  r.status = RunCpuKernel(c.node, ins, outs, ctx);
  return r;
}

class WorkspaceTest : public testing::TestWithParam<Case> {};

TEST_P(WorkspaceTest, GraphAndTensorsAgreeExactBytesRunOneFewerFails) {
  const Case& c = GetParam();
  auto g = GraphOf(c);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const int64_t planned = CpuWorkspaceBytes(*g, g->nodes[0]);
  EXPECT_EQ(planned, c.bytes);

  std::vector<const Tensor*> ins;
  for (const auto& name : c.node.inputs) ins.push_back(&c.inputs.at(name));
  std::vector<Tensor> outs_storage;
  for (const auto& name : c.node.outputs)
    outs_storage.emplace_back(g->FindValue(name)->dtype, g->FindValue(name)->shape);
  std::vector<Tensor*> outs;
  for (Tensor& t : outs_storage) outs.push_back(&t);
  EXPECT_EQ(CpuWorkspaceBytesFor(c.node, ins, outs), planned);

  // Exactly the figure, in an allocation of exactly that size (ASan bounds).
  std::vector<std::byte> exact(planned);
  Outcome run = RunWith(c, *g, exact);
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  // The result does not depend on the workspace's size or prior contents, and equals the
  // unplanned interpreter's (which allocates the workspace per node).
  std::vector<std::byte> roomy(planned + 4096, std::byte{0x5A});
  Outcome again = RunWith(c, *g, roomy);
  ASSERT_TRUE(again.status.ok()) << again.status.message();
  std::map<std::string, Tensor> feeds, constants;
  for (const auto& [name, t] : c.inputs) (t.dtype() == DType::kInt64 ? constants : feeds)[name] = t;
  auto interpreted = RunSingleNode(c.node, feeds, constants);
  ASSERT_TRUE(interpreted.ok()) << interpreted.status().message();
  for (size_t k = 0; k < run.outputs.size(); ++k) {
    EXPECT_TRUE(run.outputs[k].BitwiseEqual(again.outputs[k])) << "output " << k;
    EXPECT_TRUE(run.outputs[k].BitwiseEqual((*interpreted)[k])) << "output " << k;
  }

  std::vector<std::byte> short_by_one(planned - 1);
  Outcome fail = RunWith(c, *g, short_by_one);
  ASSERT_FALSE(fail.status.ok());
  EXPECT_EQ(fail.status.message(),
            c.node.Describe() + ": the cpu kernel needs " + std::to_string(planned) +
                " bytes of workspace but was given " + std::to_string(planned - 1) +
                " (plan the node's workspace with CpuWorkspaceBytes)");
}

INSTANTIATE_TEST_SUITE_P(Ops, WorkspaceTest, testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.label; });

TEST(WorkspaceTableTest, EveryFigureBelongsToAKernel) {
  ASSERT_FALSE(CpuWorkspaces().rows().empty());
  EXPECT_TRUE(CpuWorkspaces().duplicates().empty());
  for (const auto& row : CpuWorkspaces().rows())
    EXPECT_NE(CpuKernels().Find(row.domain, row.op_type), nullptr) << row.op_type;
}

TEST(WorkspaceTableTest, OpsWithoutScratchNeedNone) {
  Graph g;
  for (const char* name : {"a", "b"}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = DType::kFloat32;
    v.shape = {64, 64};
    v.rank_known = true;
  }
  // Softmax keeps its exponentials in its output, LayerNormalizationGrad recomputes xhat.
  for (const char* op : {"MatMul", "Add", "Gather", "Transpose", "Softmax", "LogSoftmax"})
    EXPECT_EQ(CpuWorkspaceBytes(g, MakeNode(op, {"a", "b"}, {"a"})), 0) << op;
}

// A kernel never overflows silently: with no workspace at all a scratch kernel is an error, and
// the message names the node.
TEST(WorkspaceTableTest, NoWorkspaceIsAnErrorNotAnOverflow) {
  Tensor x = RandomTensor({2, 4}, 11), labels = I64({2}, {1, 3}), y(DType::kFloat32, {});
  const Tensor* ins[] = {&x, &labels};
  Tensor* outs[] = {&y};
  Node n = MakeNode("SoftmaxCrossEntropyLoss", {"x", "labels"}, {"y"}, {}, "", "loss");
  Status st = RunCpuKernel(n, ins, outs, {});
  EXPECT_EQ(st.message(), n.Describe() +
                              ": the cpu kernel needs 16 bytes of workspace but was given 0 (plan "
                              "the node's workspace with CpuWorkspaceBytes)");
}

}  // namespace
}  // namespace foundry
