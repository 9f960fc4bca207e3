#include "passes/autodiff.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/op_schema.h"
#include "compiler/padding_rows.h"
#include "compiler/phase.h"
#include "passes/grad/grad_rule.h"

namespace foundry {

bool IsNonDifferentiable(const Node& n) {
  static const std::set<std::string> kOps = {
      "Floor",     "Ceil",   "Round", "Sign", "RandomNormalLike", "RandomUniformLike",
      "Bernoulli", "EyeLike"};
  return n.domain.empty() && kOps.count(n.op_type) > 0;
}

bool IsNonDifferentiableInput(const Node& n, size_t k) {
  return n.domain.empty() && n.op_type == "CastLike" && k == 1;
}

Status CheckGradientShapes(const Graph& g) {
  if (g.outputs.size() != g.parameters.size() + 1)
    return Error("autodiff: the training graph has " + std::to_string(g.outputs.size()) +
                 " outputs for " + std::to_string(g.parameters.size()) +
                 " parameters; expected the loss and one gradient per parameter");
  for (size_t k = 0; k < g.parameters.size(); ++k) {
    const Value* p = g.FindValue(g.parameters[k]);
    const Value* d = g.FindValue(g.outputs[k + 1]);
    if (!p || !d)
      return Error("autodiff: parameter or gradient '" + g.outputs[k + 1] + "' is missing");
    if (!d->rank_known || d->shape != p->shape || d->dtype != p->dtype)
      return Error("autodiff: gradient '" + d->name + "' is " + d->TypeString() +
                   " but parameter '" + p->name + "' is " + p->TypeString() +
                   "; a gradient rule produced the wrong shape (please file an issue with the "
                   "model)");
  }
  return Status::Ok();
}

namespace {

// 1 in `dtype`, the seed of the backward pass.
StatusOr<Tensor> One(DType dtype, const Shape& shape) {
  Tensor one(dtype, shape);
  switch (dtype) {
    case DType::kFloat32:
      one.data<float>()[0] = 1.0f;
      break;
    case DType::kFloat64:
      one.data<double>()[0] = 1.0;
      break;
    case DType::kFloat16:
      one.data<uint16_t>()[0] = 0x3C00;
      break;
    case DType::kBFloat16:
      one.data<uint16_t>()[0] = 0x3F80;
      break;
    default:
      return Error("autodiff: the loss has element type " + std::string(DTypeName(dtype)) +
                   "; expected a floating-point loss");
  }
  return one;
}

bool IsFloatValue(const Graph& g, const std::string& name) {
  const Value* v = g.FindValue(name);
  return v && IsFloat(v->dtype);
}

// Step 1: find or append the loss. Returns its value name.
StatusOr<std::string> EnsureLoss(Graph& g, const std::string& labels_input) {
  std::string loss;
  for (const auto& out : g.outputs) {
    const Value* v = g.FindValue(out);
    if (v && IsFloat(v->dtype) && v->rank_known && NumElements(v->shape) == 1 &&
        (loss.empty() || out == "loss"))
      loss = out;
  }
  if (!loss.empty()) return loss;
  std::string logits;
  for (const auto& out : g.outputs) {
    const Value* v = g.FindValue(out);
    if (v && IsFloat(v->dtype) && v->shape.size() >= 2) {
      logits = out;
      break;
    }
  }
  if (logits.empty())
    return Error(
        "autodiff: the model has no scalar loss output and no logits output to put a "
        "cross-entropy loss on; export the model with its loss (as models/export_mpt.py does)");
  const Value& lv = *g.FindValue(logits);
  int64_t classes = lv.shape.back();
  int64_t rows = NumElements(lv.shape) / classes;
  if (g.FindValue(labels_input))
    return Error("autodiff: cannot add a '" + labels_input +
                 "' input for the loss: the model already has a value of that name");
  Value& labels = g.GetOrAddValue(labels_input);
  labels.dtype = DType::kInt64;
  labels.shape = Shape(lv.shape.begin(), lv.shape.end() - 1);
  labels.rank_known = true;
  g.inputs.push_back(labels_input);

  auto add_const = [&](const std::string& name, Shape s) {
    std::string n = g.UniqueValueName(name);
    Value& v = g.GetOrAddValue(n);
    v.dtype = DType::kInt64;
    v.shape = {static_cast<int64_t>(s.size())};
    v.rank_known = true;
    v.data = std::make_shared<const Tensor>(Tensor::FromVector<int64_t>(DType::kInt64, v.shape, s));
    g.initializers.push_back(n);
    return n;
  };
  std::string s2 = add_const("loss/logits_shape", {rows, classes});
  std::string s1 = add_const("loss/labels_shape", {rows});
  auto add_node = [&](const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs) -> Status {
    Node n;
    n.op_type = op;
    n.name = g.UniqueNodeName("loss/" + op);
    n.inputs = std::move(ins);
    for (auto& o : outs) o = g.UniqueValueName(o);
    n.outputs = outs;
    for (const auto& o : outs) g.GetOrAddValue(o);
    if (op == "SoftmaxCrossEntropyLoss") {
      n.attrs["ignore_index"] = Attribute::Int(-100);
      n.attrs["reduction"] = Attribute::String("mean");
    }
    RETURN_IF_ERROR(InferAndSetTypes(g, n));
    g.nodes.push_back(std::move(n));
    return Status::Ok();
  };
  RETURN_IF_ERROR(add_node("Reshape", {logits, s2}, {"loss/logits_2d"}));
  std::string logits2d = g.nodes.back().outputs[0];
  RETURN_IF_ERROR(add_node("Reshape", {labels_input, s1}, {"loss/labels_1d"}));
  std::string labels1d = g.nodes.back().outputs[0];
  RETURN_IF_ERROR(
      add_node("SoftmaxCrossEntropyLoss", {logits2d, labels1d}, {"loss", "loss/log_prob"}));
  g.metadata["foundry.loss_appended"] = "1";
  return g.nodes.back().outputs[0];
}

// Step 3: make the optional outputs that gradient rules read explicit.
Status ExposeSavedStatistics(Graph& g) {
  for (Node& n : g.nodes) {
    size_t want = 0;
    if (n.domain.empty() && n.op_type == "LayerNormalization") want = 3;
    if (n.domain.empty() && n.op_type == "Dropout") want = 2;
    if (n.domain.empty() && n.op_type == "SoftmaxCrossEntropyLoss") want = 2;
    if (n.domain == "com.microsoft" && n.op_type == "SimplifiedLayerNormalization") want = 2;
    if (want == 0) continue;
    bool changed = false;
    if (n.outputs.size() < want) n.outputs.resize(want);
    for (size_t i = 1; i < want; ++i) {
      if (!n.outputs[i].empty()) continue;
      n.outputs[i] = g.UniqueValueName(n.outputs[0] + "_saved_" + std::to_string(i));
      g.GetOrAddValue(n.outputs[i]);
      changed = true;
    }
    if (changed) RETURN_IF_ERROR(InferAndSetTypes(g, n));
  }
  return Status::Ok();
}

// Overwrites row `row` of `grad` (a Gather's gradient with respect to an embedding table) with
// zeros: ScatterND copies every other element bit for bit and writes exact +0.0 on the row, as
// torch's embedding backward leaves the padding row untouched. Returns the new value.
StatusOr<std::string> ZeroPaddingRow(GradBuilder& b, const std::string& grad, int64_t row) {
  const Value& table = b.InputValue(0);
  Shape update_shape = table.shape;
  update_shape[0] = 1;
  ASSIGN_OR_RETURN(Tensor zeros, Tensor::Allocate(table.dtype, update_shape));
  std::string indices =
      b.Constant(Tensor::FromVector<int64_t>(DType::kInt64, {1, 1}, {row}), "padding_row");
  std::string updates = b.Constant(std::move(zeros), "padding_zeros");
  return b.Emit1("ScatterND", {grad, indices, updates});
}

void RenameValue(Graph& g, std::vector<Node>& nodes, const std::string& from,
                 const std::string& to) {
  Value v = *g.FindValue(from);
  g.EraseValue(from);
  v.name = to;
  g.GetOrAddValue(to) = v;
  for (Node& n : nodes) {
    for (auto& o : n.outputs)
      if (o == from) o = to;
    for (auto& i : n.inputs)
      if (i == from) i = to;
  }
}

}  // namespace

StatusOr<bool> AutodiffPass::Run(Graph& g) {
  stats_.forward_nodes = static_cast<int>(g.nodes.size());
  ASSIGN_OR_RETURN(std::string loss, EnsureLoss(g, options_.labels_input));
  RETURN_IF_ERROR(ExposeSavedStatistics(g));
  const int num_forward = static_cast<int>(g.nodes.size());

  // Step 2: the trainable set, decided before folding by ParametersPass.
  std::vector<std::string> trainable;
  for (const auto& p : g.parameters)
    if (IsFloatValue(g, p)) trainable.push_back(p);
  stats_.trainable = static_cast<int>(trainable.size());
  stats_.padding_rows_zeroed = 0;
  auto padding_rows = PaddingRows(g, /*require_present=*/false);
  if (!padding_rows.ok()) return padding_rows.status().Prepend("autodiff: ");
  if (g.metadata.count(kPaddingIdxKey)) {
    // Only the tables still in the graph, so the training graph's file imports again.
    nlohmann::json present(*padding_rows);
    g.metadata[kPaddingIdxKey] = present.dump();
  }
  if (trainable.empty())
    return Error(
        "autodiff: the model has no trainable parameters (every initializer is frozen "
        "or a buffer); nothing to train");

  // Step 4: which values depend on a trainable parameter, and which reach the loss.
  std::unordered_set<std::string> requires_grad(trainable.begin(), trainable.end());
  for (int i = 0; i < num_forward; ++i) {
    const Node& n = g.nodes[i];
    if (IsNonDifferentiable(n)) continue;  // stops the gradient: nothing flows back through n
    bool any = false;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      any |= requires_grad.count(n.inputs[k]) > 0 && !IsNonDifferentiableInput(n, k);
    if (!any) continue;
    for (const auto& out : n.outputs)
      if (!out.empty() && IsFloatValue(g, out)) requires_grad.insert(out);
  }
  if (!requires_grad.count(loss))
    return Error("autodiff: the loss '" + loss + "' does not depend on any trainable parameter");
  std::unordered_set<std::string> reaches_loss = {loss};
  std::vector<bool> on_path(num_forward, false);
  for (int i = num_forward - 1; i >= 0; --i) {
    const Node& n = g.nodes[i];
    bool reaches = false;
    for (const auto& out : n.outputs) reaches |= !out.empty() && reaches_loss.count(out) > 0;
    if (!reaches) continue;
    bool any_input = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& in = n.inputs[k];
      if (!in.empty() && requires_grad.count(in) && !IsNonDifferentiableInput(n, k)) {
        reaches_loss.insert(in);
        any_input = true;
      }
    }
    on_path[i] = any_input;
  }

  // Step 5: reverse walk.
  std::unordered_map<std::string, std::vector<std::string>> contributions;
  std::unordered_set<std::string> finalized_names;
  std::vector<Node> backward;
  {
    std::string seed = GradName(loss);
    Value& v = g.GetOrAddValue(seed);
    const Value& lv = *g.FindValue(loss);
    v.dtype = lv.dtype;
    v.shape = lv.shape;
    v.rank_known = true;
    ASSIGN_OR_RETURN(Tensor one, One(lv.dtype, lv.shape));
    v.data = std::make_shared<const Tensor>(std::move(one));
    g.initializers.push_back(seed);
    contributions[loss].push_back(seed);
    finalized_names.insert(seed);
  }
  // Turns the contributions to `value` into one gradient value, named <value>_grad when possible.
  std::unordered_set<std::string> produced_by_rules;
  // How many contribution lists name a value: only a value used once may be renamed.
  std::unordered_map<std::string, int> uses;
  auto renamable = [&](const std::string& v) {
    return produced_by_rules.count(v) && !finalized_names.count(v) && uses[v] == 1;
  };
  auto finalize = [&](const std::string& value) -> StatusOr<std::string> {
    auto it = contributions.find(value);
    if (it == contributions.end() || it->second.empty()) return std::string();
    std::vector<std::string>& parts = it->second;
    std::string target = GradName(value);
    if (g.FindValue(target) && !produced_by_rules.count(target) && parts.size() == 1 &&
        parts[0] != target)
      target = g.UniqueValueName(target);
    if (parts.size() == 1) {
      const std::string& only = parts[0];
      if (only == target || !renamable(only)) return only;
      RenameValue(g, backward, only, target);
      produced_by_rules.erase(only);
      finalized_names.insert(target);
      return target;
    }
    for (size_t k = 0; k < parts.size(); ++k) {
      if (!renamable(parts[k])) continue;
      std::string renamed = g.UniqueValueName(target + "_" + std::to_string(k));
      RenameValue(g, backward, parts[k], renamed);
      produced_by_rules.erase(parts[k]);
      parts[k] = renamed;
    }
    Node sum;
    sum.op_type = "Sum";
    sum.name = g.UniqueNodeName(target + "/Sum");
    const Node* producer = nullptr;
    for (int i = 0; i < num_forward; ++i)
      for (const auto& out : g.nodes[i].outputs)
        if (out == value) producer = &g.nodes[i];
    sum.scope = producer ? producer->scope : "";
    sum.inputs = parts;
    std::string out = g.FindValue(target) ? g.UniqueValueName(target) : target;
    g.GetOrAddValue(out);
    sum.outputs = {out};
    RETURN_IF_ERROR(InferAndSetTypes(g, sum));
    backward.push_back(std::move(sum));
    finalized_names.insert(out);
    return out;
  };

  for (int i = num_forward - 1; i >= 0; --i) {
    if (!on_path[i]) continue;
    const Node fwd = g.nodes[i];  // copy: g.nodes is stable, but rules hold a reference
    std::vector<std::string> out_grads;
    bool any = false;
    for (const auto& out : fwd.outputs) {
      std::string gname;
      if (!out.empty()) {
        ASSIGN_OR_RETURN(gname, finalize(out));
      }
      any |= !gname.empty();
      out_grads.push_back(gname);
    }
    if (!any) continue;
    std::vector<bool> needs;
    for (size_t k = 0; k < fwd.inputs.size(); ++k) {
      const std::string& in = fwd.inputs[k];
      needs.push_back(!in.empty() && requires_grad.count(in) && reaches_loss.count(in) &&
                      !IsNonDifferentiableInput(fwd, k));
    }
    const GradFn* rule = GradRules().Find(fwd.domain, fwd.op_type);
    if (!rule) {
      return Error("autodiff: no gradient rule for " + fwd.Describe() +
                   ", which lies between a trainable parameter and the loss; freeze the "
                   "parameters before it (--freeze GLOB) or file an issue for the op");
    }
    std::vector<Node> emitted;
    GradBuilder b(g, fwd, out_grads, needs, emitted);
    Status st = (*rule)(b);
    if (!st.ok()) return st.Prepend("autodiff: ");
    std::vector<std::string> input_grads = b.input_grads();
    if (fwd.domain.empty() && fwd.op_type == "Gather" && needs[0] &&
        padding_rows->count(fwd.inputs[0])) {
      const int64_t rank = static_cast<int64_t>(b.InputValue(0).shape.size());
      int64_t axis = fwd.GetInt("axis", 0);
      if (axis < 0) axis += rank;
      if (axis == 0) {  // a row lookup; a Gather along another axis is not an embedding
        ASSIGN_OR_RETURN(input_grads[0],
                         ZeroPaddingRow(b, input_grads[0], padding_rows->at(fwd.inputs[0])));
        ++stats_.padding_rows_zeroed;
      }
    }
    for (auto& e : emitted) {
      for (const auto& o : e.outputs) produced_by_rules.insert(o);
      backward.push_back(std::move(e));
    }
    for (size_t k = 0; k < fwd.inputs.size(); ++k) {
      if (!needs[k]) continue;
      const std::string& gin = input_grads[k];
      if (gin.empty())
        return Error("autodiff: gradient rule of " + fwd.Describe() +
                     " gave no gradient for input '" + fwd.inputs[k] + "'");
      contributions[fwd.inputs[k]].push_back(gin);
      ++uses[gin];
    }
  }

  // Step 6: outputs.
  std::vector<std::string> outputs = {loss};
  for (const auto& p : trainable) {
    ASSIGN_OR_RETURN(std::string gname, finalize(p));
    if (gname.empty()) {
      // The parameter does not reach the loss (unused): its gradient is zero.
      Tensor zero(g.FindValue(p)->dtype, g.FindValue(p)->shape);
      gname = g.UniqueValueName(GradName(p));
      Value& v = g.GetOrAddValue(gname);
      v.dtype = zero.dtype();
      v.shape = zero.shape();
      v.rank_known = true;
      v.data = std::make_shared<const Tensor>(std::move(zero));
      g.initializers.push_back(gname);
    } else if (!IsGradNameOf(gname, p)) {
      // A rule passed another value through (dB of an Add whose shapes match): name it anyway,
      // so that every parameter's gradient is named after it (foundry-run checks the plan's
      // pairs by this name: runtime/loaded_plan.cc).
      const std::string name = g.UniqueValueName(GradName(p));
      Node id;
      id.op_type = "Identity";
      id.name = g.UniqueNodeName(name + "/Identity");
      id.inputs = {gname};
      id.outputs = {name};
      g.GetOrAddValue(name);
      RETURN_IF_ERROR(InferAndSetTypes(g, id));
      backward.push_back(std::move(id));
      gname = name;
    }
    outputs.push_back(gname);
  }
  stats_.backward_nodes = static_cast<int>(backward.size());
  for (Node& n : g.nodes) SetPhase(n, Phase::kForward);  // the model and the loss
  for (auto& n : backward) {
    SetPhase(n, Phase::kBackward);
    g.nodes.push_back(std::move(n));
  }
  g.outputs = outputs;
  g.metadata["foundry.loss"] = loss;
  RETURN_IF_ERROR(CheckGradientShapes(g));
  return true;
}

std::string AutodiffStats::ToString() const {
  std::string s = std::to_string(trainable) + " trainable parameters; " +
                  std::to_string(forward_nodes) + " forward nodes, " +
                  std::to_string(backward_nodes) + " backward nodes";
  if (padding_rows_zeroed > 0)
    s += "; padding row zeroed in " + std::to_string(padding_rows_zeroed) + " lookup gradient" +
         (padding_rows_zeroed > 1 ? "s" : "");
  return s;
}

}  // namespace foundry
