#include "passes/grad/grad_rule.h"

#include <algorithm>

#include "compiler/op_schema.h"

namespace foundry {

GradBuilder::GradBuilder(Graph& graph, const Node& fwd, std::vector<std::string> output_grads,
                         std::vector<bool> needs_input_grad, std::vector<Node>& emitted)
    : graph_(graph),
      fwd_(fwd),
      output_grads_(std::move(output_grads)),
      needs_input_grad_(std::move(needs_input_grad)),
      input_grads_(fwd.inputs.size()),
      emitted_(emitted) {}

const std::string& GradBuilder::OutputGrad(size_t i) const {
  static const std::string kNone;
  return i < output_grads_.size() ? output_grads_[i] : kNone;
}

bool GradBuilder::NeedsInputGrad(size_t i) const {
  return i < needs_input_grad_.size() && needs_input_grad_[i];
}

const Value& GradBuilder::InputValue(size_t i) const { return *graph_.FindValue(fwd_.inputs[i]); }
const Value& GradBuilder::OutputValue(size_t i) const { return *graph_.FindValue(fwd_.outputs[i]); }

StatusOr<std::vector<std::string>> GradBuilder::Emit(const std::string& op_type,
                                                     std::vector<std::string> inputs,
                                                     std::map<std::string, Attribute> attrs,
                                                     int num_outputs, const std::string& domain) {
  Node n;
  n.op_type = op_type;
  n.domain = domain;
  n.name = graph_.UniqueNodeName(fwd_.name + "_Grad/" + op_type + "_" + std::to_string(counter_++));
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.scope = fwd_.scope;
  for (int i = 0; i < num_outputs; ++i) {
    std::string out = graph_.UniqueValueName(n.name + "_output_" + std::to_string(i));
    graph_.GetOrAddValue(out);
    n.outputs.push_back(out);
  }
  Status st = InferAndSetTypes(graph_, n);
  if (!st.ok())
    return Error("autodiff: gradient rule of " + fwd_.Describe() + " emitted an invalid " +
                 op_type + ": " + st.message());
  emitted_.push_back(n);
  return n.outputs;
}

StatusOr<std::string> GradBuilder::Emit1(const std::string& op_type,
                                         std::vector<std::string> inputs,
                                         std::map<std::string, Attribute> attrs,
                                         const std::string& domain) {
  ASSIGN_OR_RETURN(std::vector<std::string> outs,
                   Emit(op_type, std::move(inputs), std::move(attrs), 1, domain));
  return outs[0];
}

std::string GradBuilder::Constant(Tensor t, const std::string& hint) {
  // An initializer, not a Constant node: a constant needs no step of the schedule, and its bytes
  // are then planned with the other constants instead of living in a node attribute beside the
  // memory plan.
  // The number stays taken, so the names of the nodes emitted after it are as they always were.
  ++counter_;
  std::string out = graph_.UniqueValueName(fwd_.name + "_Grad/" + hint);
  Value& v = graph_.GetOrAddValue(out);
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.rank_known = true;
  v.data = std::make_shared<const Tensor>(std::move(t));
  graph_.initializers.push_back(out);
  return out;
}

StatusOr<std::string> GradBuilder::ReduceToShape(const std::string& grad, const Shape& target) {
  const Value* g = graph_.FindValue(grad);
  if (!g) return Error("autodiff: unknown gradient value '" + grad + "'");
  const Shape& from = g->shape;
  if (from == target) return grad;
  std::vector<int64_t> axes;
  size_t lead = from.size() - std::min(from.size(), target.size());
  for (size_t i = 0; i < from.size(); ++i) {
    if (i < lead) {
      axes.push_back(static_cast<int64_t>(i));
      continue;
    }
    if (target[i - lead] == 1 && from[i] != 1) axes.push_back(static_cast<int64_t>(i));
  }
  std::string reduced = grad;
  if (!axes.empty()) {
    std::string axes_const = Constant(
        Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(axes.size())}, axes),
        "axes");
    ASSIGN_OR_RETURN(reduced,
                     Emit1("ReduceSum", {grad, axes_const}, {{"keepdims", Attribute::Int(1)}}));
  }
  if (graph_.FindValue(reduced)->shape == target) return reduced;
  std::string shape_const = Constant(
      Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(target.size())}, target),
      "shape");
  return Emit1("Reshape", {reduced, shape_const});
}

Status GradBuilder::SetInputGrad(size_t i, const std::string& grad) {
  if (i >= input_grads_.size())
    return Error("autodiff: gradient rule of " + fwd_.Describe() + " set input " +
                 std::to_string(i) + " which does not exist");
  if (!input_grads_[i].empty())
    return Error("autodiff: gradient rule of " + fwd_.Describe() + " set input " +
                 std::to_string(i) + " twice");
  input_grads_[i] = grad;
  return Status::Ok();
}

const GradRuleTable& GradRules() {
  static const GradRuleTable table = [] {
    GradRuleTable t;
    RegisterElementwiseGradRules(t);
    RegisterShapeOpGradRules(t);
    RegisterMathGradRules(t);
    RegisterAttentionGradRules(t);
    return t;
  }();
  return table;
}

}  // namespace foundry
