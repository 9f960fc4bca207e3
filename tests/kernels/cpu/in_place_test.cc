// Views and in-place (compiler/memory_plan.h): the memory planner gives a view op's output input 0's
// buffer, and an in-place op's output 0 the buffer of an input its schema lists, when that input
// has the output's shape and dtype and its other inputs are distinct buffers (which may
// broadcast). Here every such (op, input) runs with the output aliasing the input and must give
// the bits it gives into a separate buffer; view kernels must copy nothing (ASan, under which CI
// runs every test, rejects a memcpy onto itself) and RunCpuKernel must not poison the shared bytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr char kMs[] = "com.microsoft";

struct InPlaceOp {
  std::string domain, op;
  std::vector<int> in_place;  // inputs output 0 may alias
};

// The list the planner works from: every schema's in_place_inputs (compiler/ops/elementwise.cc).
std::vector<InPlaceOp> InPlaceOps() {
  std::vector<InPlaceOp> ops;
  for (const auto& row : OpSchemas().rows())
    if (!row.value.in_place_inputs.empty())
      ops.push_back({row.domain, row.op_type, row.value.in_place_inputs});
  return ops;
}

// Ops whose inputs other than the aliased one may broadcast.
bool Broadcasts(const std::string& op) {
  return op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Where" ||
         op == "Sum";
}

Tensor Bool(const Shape& s, uint64_t seed) {
  Tensor r = RandomTensor(s, seed);
  Tensor t(DType::kBool, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = r.data<float>()[i] > 0;
  return t;
}

struct Trial {
  Node node;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;  // allocated with their types
};

// The node and its inputs: input `alias` has shape `full`, the other elementwise operands `other`
// (full or a shape that broadcasts to it).
Trial Make(const InPlaceOp& o, int alias, const Shape& full, const Shape& other, uint64_t seed) {
  Trial s;
  auto shape = [&](int i) { return i == alias ? full : other; };
  // Both signs, so Abs and Relu change their input too; NaN from Log or Sqrt of a negative is
  // fine (bits are compared, and the same arithmetic gives the same NaN).
  auto value = [&](int i) { return RandomTensor(shape(i), seed * 31 + i, -2.f, 2.f); };
  std::vector<std::string> names;
  if (o.op == "Sum") {
    for (int i = 0; i < 8; ++i) s.inputs.push_back(value(i));
  } else if (o.op == "Where") {
    // The condition varies per element (a [1] condition would pick one input whole).
    s.inputs = {Bool(full, seed), value(1), value(2)};
  } else if (o.op == "Clip") {
    s.inputs = {value(0), Tensor::Scalar(0.8f), Tensor::Scalar(1.6f)};
  } else if (o.op == "Dropout") {
    Tensor training(DType::kBool, {});
    training.data<uint8_t>()[0] = 1;
    s.inputs = {value(0), Tensor::Scalar(0.3f), training};
  } else if (o.op == "DropoutGrad") {
    Tensor training(DType::kBool, {});
    training.data<uint8_t>()[0] = 1;
    s.inputs = {value(0), Bool(full, seed), Tensor::Scalar(0.3f), training};
  } else if (Broadcasts(o.op) || (o.domain == kMs && o.op.ends_with("Grad"))) {
    s.inputs = {value(0), value(1)};
  } else {
    s.inputs = {value(0)};
  }
  for (size_t i = 0; i < s.inputs.size(); ++i) names.push_back("in" + std::to_string(i));
  std::vector<std::string> outs = {"y"};
  s.outputs.emplace_back(s.inputs[alias].dtype(), full);
  if (o.op == "Dropout") {
    outs.push_back("mask");
    s.outputs.emplace_back(DType::kBool, full);
  }
  s.node = MakeNode(o.op, names, outs, {}, o.domain);
  return s;
}

Status RunTrial(const Trial& s, std::vector<const Tensor*> ins, std::vector<Tensor*> outs) {
  KernelContext ctx;
  ctx.seed = 17;
  ctx.node_key = 23;
  return RunCpuKernel(s.node, ins, outs, ctx);
}

TEST(InPlaceTest, EveryListedInputGivesTheSeparateBufferBits) {
  const Shape full = {6, 9};
  int checked = 0;
  const std::vector<InPlaceOp> ops = InPlaceOps();
  ASSERT_FALSE(ops.empty()) << "no schema lists in_place_inputs";
  for (const InPlaceOp& o : ops) {
    ASSERT_NE(CpuKernels().Find(o.domain, o.op), nullptr) << o.op;
    std::vector<Shape> others = {full};
    if (Broadcasts(o.op)) others.insert(others.end(), {{1}, {9}, {6, 1}});
    for (int alias : o.in_place) {
      for (const Shape& other : others) {
        SCOPED_TRACE(o.op + " output aliasing input " + std::to_string(alias) + ", others " +
                     ShapeToString(other));
        Trial s = Make(o, alias, full, other, 100 + checked);
        std::vector<const Tensor*> ins;
        for (const Tensor& t : s.inputs) ins.push_back(&t);
        std::vector<Tensor*> outs;
        for (Tensor& t : s.outputs) outs.push_back(&t);
        Status st = RunTrial(s, ins, outs);
        ASSERT_TRUE(st.ok()) << st.message();

        // The same run with output 0 in the input's buffer (the input's own tensor object: the
        // kernel sees one data pointer for both).
        Tensor shared = s.inputs[alias];
        std::vector<Tensor> rest(s.outputs.begin() + 1, s.outputs.end());
        ins[alias] = &shared;
        std::vector<Tensor*> aliased_outs = {&shared};
        for (Tensor& t : rest) aliased_outs.push_back(&t);
        st = RunTrial(s, ins, aliased_outs);
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_TRUE(shared.BitwiseEqual(s.outputs[0]));
        for (size_t k = 0; k < rest.size(); ++k)
          EXPECT_TRUE(rest[k].BitwiseEqual(s.outputs[k + 1])) << "output " << k + 1;
        // Not vacuous: the result differs from what the input held.
        EXPECT_FALSE(shared.BitwiseEqual(s.inputs[alias]));
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 60);
}

// Dropout inactive (inference, or ratio 0) returns its input: in place that is no work at all.
TEST(InPlaceTest, InactiveDropoutInPlaceLeavesTheBytes) {
  Tensor x = RandomTensor({4, 5}, 3);
  const Tensor want = x;
  Tensor mask(DType::kBool, {4, 5});
  const Tensor* ins[] = {&x};
  Tensor* outs[] = {&x, &mask};
  Status st = RunCpuKernel(MakeNode("Dropout", {"x"}, {"y", "mask"}), ins, outs, {});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(x.BitwiseEqual(want));
  for (int64_t i = 0; i < mask.numel(); ++i) EXPECT_EQ(mask.data<uint8_t>()[i], 1);
}

// View ops: output 0 in input 0's buffer. The kernel must neither copy (ASan: memcpy-param-overlap)
// nor let RunCpuKernel poison the shared bytes (the values would come back NaN). The output
// tensor is the input's own object, so its shape is the input's: Flatten, Squeeze and Unsqueeze
// check only the element count, Reshape is given a target that resolves to the input's shape.
TEST(ViewTest, OutputInTheInputBufferCopiesNothing) {
  const Tensor shape = Tensor::FromVector<int64_t>(DType::kInt64, {3}, {0, -1, 4});
  struct View {
    Node node;
    bool shape_input;
  };
  std::vector<View> views = {
      {MakeNode("Reshape", {"x", "shape"}), true},
      {MakeNode("Flatten", {"x"}, {"y"}, {{"axis", Attribute::Int(1)}}), false},
      {MakeNode("Squeeze", {"x"}), false},
      {MakeNode("Unsqueeze", {"x"}), false},
      {MakeNode("Identity", {"x"}), false},
  };
  for (const View& v : views) {
    SCOPED_TRACE(v.node.op_type);
    Tensor x = RandomTensor({2, 3, 4}, 9);
    const Tensor want = x;
    std::vector<const Tensor*> ins = {&x};
    if (v.shape_input) ins.push_back(&shape);
    Tensor* outs[] = {&x};
    Status st = RunCpuKernel(v.node, ins, outs, {});
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(x.BitwiseEqual(want));
  }
}

// Expand is a view when it keeps the element count: the planner hands it a tensor of the output's
// shape over the input's bytes, and the kernel must move nothing.
TEST(ViewTest, ExpandKeepingTheElementCountCopiesNothing) {
  Tensor x = RandomTensor({2, 3, 4}, 10);
  const Tensor want = x;
  const Tensor shape = Tensor::FromVector<int64_t>(DType::kInt64, {4}, {1, 2, 1, 4});
  Tensor y = Tensor::View(DType::kFloat32, {1, 2, 3, 4}, x.raw());
  const Tensor* ins[] = {&x, &shape};
  Tensor* outs[] = {&y};
  Status st = RunCpuKernel(MakeNode("Expand", {"x", "shape"}), ins, outs, {});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(x.BitwiseEqual(want));
}

}  // namespace
}  // namespace foundry
