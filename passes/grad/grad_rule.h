// Gradient rules: for each differentiable op, how to emit the backward nodes that turn the
// gradients of its outputs into gradients of its inputs. The autodiff pass walks the forward graph
// in reverse and calls the rule of each node through a GradBuilder, which names and scopes what the
// rule emits (docs/design.md §4: `<fwd name>_Grad/<OpType>_<i>`, same scope as the forward node) and infers
// the emitted values' types on the spot, so a rule can read shapes of what it just built.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "compiler/ir.h"
#include "compiler/op_table.h"

namespace foundry {

class GradBuilder {
 public:
  GradBuilder(Graph& graph, const Node& fwd, std::vector<std::string> output_grads,
              std::vector<bool> needs_input_grad, std::vector<Node>& emitted);

  const Node& fwd() const { return fwd_; }
  Graph& graph() { return graph_; }
  // The gradient flowing into forward output i, or "" when none does (the output does not reach
  // the loss). A rule with no incoming gradient at all is never called.
  const std::string& OutputGrad(size_t i) const;
  bool HasOutputGrad(size_t i) const { return !OutputGrad(i).empty(); }
  // Whether input i needs a gradient (it leads to a trainable parameter). Rules skip the rest.
  bool NeedsInputGrad(size_t i) const;
  const Value& InputValue(size_t i) const;
  const Value& OutputValue(size_t i) const;

  // Emits one backward node and returns its output names (num_outputs fresh names). Its types are
  // inferred immediately; an inference failure is returned as an error.
  StatusOr<std::vector<std::string>> Emit(const std::string& op_type,
                                          std::vector<std::string> inputs,
                                          std::map<std::string, Attribute> attrs = {},
                                          int num_outputs = 1, const std::string& domain = "");
  // Emit() for single-output ops.
  StatusOr<std::string> Emit1(const std::string& op_type, std::vector<std::string> inputs,
                              std::map<std::string, Attribute> attrs = {},
                              const std::string& domain = "");
  // A constant value (an initializer-like constant in the backward graph).
  std::string Constant(Tensor t, const std::string& hint = "const");
  // Sums `grad` (shaped like a broadcast result) down to `target` shape: ReduceSum over the
  // broadcast axes, then Reshape when ranks differ. Returns `grad` itself when shapes are equal.
  StatusOr<std::string> ReduceToShape(const std::string& grad, const Shape& target);

  // Declares the gradient of input i. Calling it twice for the same input is an error.
  Status SetInputGrad(size_t i, const std::string& grad);
  const std::vector<std::string>& input_grads() const { return input_grads_; }

 private:
  Graph& graph_;
  const Node& fwd_;
  std::vector<std::string> output_grads_;
  std::vector<bool> needs_input_grad_;
  std::vector<std::string> input_grads_;
  std::vector<Node>& emitted_;
  int counter_ = 0;
};

using GradFn = Status (*)(GradBuilder& b);

using GradRuleTable = OpTable<GradFn>;

const GradRuleTable& GradRules();

// Registration entry points, one per op family file under passes/grad/.
void RegisterElementwiseGradRules(GradRuleTable& table);
void RegisterShapeOpGradRules(GradRuleTable& table);
void RegisterMathGradRules(GradRuleTable& table);
void RegisterAttentionGradRules(GradRuleTable& table);

}  // namespace foundry
