#include "tests/support/grad_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "compiler/op_schema.h"
#include "passes/grad/grad_rule.h"
#include "runtime/interpreter.h"

namespace foundry {

Tensor RandomTensor(Shape shape, uint64_t seed, float lo, float hi) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

namespace {

StatusOr<Graph> SingleNodeGraph(const Node& node, const std::map<std::string, Tensor>& inputs,
                                const std::map<std::string, Tensor>& constants) {
  Graph g;
  for (const auto& [name, t] : constants) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.rank_known = true;
    v.data = std::make_shared<const Tensor>(t);
    g.initializers.push_back(name);
  }
  for (const auto& [name, t] : inputs) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.rank_known = true;
    g.inputs.push_back(name);
  }
  g.nodes.push_back(node);
  RETURN_IF_ERROR(InferAndSetTypes(g, g.nodes[0]));
  for (const auto& out : node.outputs)
    if (!out.empty()) g.outputs.push_back(out);
  return g;
}

// L = sum_i <dY_i, Y_i> in double.
double Objective(const std::map<std::string, Tensor>& outs, const std::vector<std::string>& names,
                 const std::map<std::string, Tensor>& dys) {
  double l = 0;
  for (const auto& name : names) {
    auto d = dys.find(name + "_grad");
    if (d == dys.end()) continue;
    const Tensor& y = outs.at(name);
    for (int64_t i = 0; i < y.numel(); ++i)
      l += static_cast<double>(y.data<float>()[i]) * d->second.data<float>()[i];
  }
  return l;
}

}  // namespace

double GradientErrorRatio(double analytic, double numeric, const GradCheckOptions& options) {
  if (!std::isfinite(analytic) || !std::isfinite(numeric))
    return std::numeric_limits<double>::infinity();
  return std::fabs(analytic - numeric) / (options.atol + options.rtol * std::fabs(numeric));
}

StatusOr<std::vector<Tensor>> RunSingleNode(const Node& node,
                                            const std::map<std::string, Tensor>& inputs,
                                            const std::map<std::string, Tensor>& constants) {
  ASSIGN_OR_RETURN(Graph g, SingleNodeGraph(node, inputs, constants));
  ASSIGN_OR_RETURN(auto outs, Interpret(g, inputs));
  std::vector<Tensor> result;
  for (const auto& out : node.outputs) result.push_back(out.empty() ? Tensor() : outs.at(out));
  return result;
}

Status CheckGradients(const Node& node, const std::map<std::string, Tensor>& inputs,
                      const std::map<std::string, Tensor>& constants,
                      const GradCheckOptions& options) {
  ASSIGN_OR_RETURN(Graph fwd, SingleNodeGraph(node, inputs, constants));
  Graph g = fwd;
  const Node n = g.nodes[0];  // a copy: g.nodes grows (and reallocates) below

  // Random incoming gradients for every float output.
  std::map<std::string, Tensor> dys;
  std::vector<std::string> output_grads;
  uint64_t seed = options.seed * 7919;
  for (const auto& out : n.outputs) {
    const Value* v = out.empty() ? nullptr : g.FindValue(out);
    bool no_grad = std::find(options.no_grad_outputs.begin(), options.no_grad_outputs.end(), out) !=
                   options.no_grad_outputs.end();
    if (!v || v->dtype != DType::kFloat32 || no_grad) {
      output_grads.push_back("");
      continue;
    }
    std::string name = out + "_grad";
    dys[name] = RandomTensor(v->shape, ++seed);
    Value& dv = g.GetOrAddValue(name);
    dv.dtype = DType::kFloat32;
    dv.shape = v->shape;
    dv.rank_known = true;
    g.inputs.push_back(name);
    output_grads.push_back(name);
  }

  std::vector<std::string> wrt = options.wrt;
  if (wrt.empty())
    for (const auto& [name, t] : inputs)
      if (t.dtype() == DType::kFloat32) wrt.push_back(name);
  std::vector<bool> needs(n.inputs.size(), false);
  for (size_t i = 0; i < n.inputs.size(); ++i)
    for (const auto& w : wrt)
      if (n.inputs[i] == w) needs[i] = true;

  const GradFn* rule = GradRules().Find(n.domain, n.op_type);
  if (!rule) return Error("no gradient rule for " + n.op_type);
  std::vector<Node> emitted;
  GradBuilder b(g, n, output_grads, needs, emitted);
  RETURN_IF_ERROR((*rule)(b));
  std::map<std::string, std::string> grad_of;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!needs[i]) continue;
    if (b.input_grads()[i].empty())
      return Error("rule of " + n.op_type + " gave no gradient for input " + std::to_string(i));
    grad_of[n.inputs[i]] = b.input_grads()[i];
  }
  for (auto& e : emitted) g.nodes.push_back(e);
  g.outputs.clear();
  for (const auto& [in, gname] : grad_of) {
    if (g.FindValue(gname)->shape != g.FindValue(in)->shape)
      return Error("gradient of " + in + " has shape " + ShapeToString(g.FindValue(gname)->shape) +
                   ", input has " + ShapeToString(g.FindValue(in)->shape));
    g.outputs.push_back(gname);
  }
  std::map<std::string, Tensor> feeds = inputs;
  for (const auto& [k, t] : dys) feeds[k] = t;
  // A rule may read an input value that is also a gradient output name; outputs may be fed
  // directly if a rule just forwards dY (Identity): Interpret handles both.
  ASSIGN_OR_RETURN(auto analytic, Interpret(g, feeds));

  std::ostringstream report;
  double worst = 0;
  for (const auto& [in, gname] : grad_of) {
    const Tensor& ga = analytic.at(gname);
    int64_t n_el = inputs.at(in).numel();
    int64_t stride = std::max<int64_t>(1, n_el / options.max_elements);
    for (int64_t e = 0; e < n_el; e += stride) {
      std::map<std::string, Tensor> plus = inputs, minus = inputs;
      plus[in].data<float>()[e] += static_cast<float>(options.eps);
      minus[in].data<float>()[e] -= static_cast<float>(options.eps);
      // The actual perturbation after fp32 rounding.
      double h = static_cast<double>(plus[in].data<float>()[e]) - minus[in].data<float>()[e];
      ASSIGN_OR_RETURN(auto op, Interpret(fwd, plus));
      ASSIGN_OR_RETURN(auto om, Interpret(fwd, minus));
      double numeric = (Objective(op, fwd.outputs, dys) - Objective(om, fwd.outputs, dys)) / h;
      double a = ga.data<float>()[e];
      double err = std::fabs(a - numeric);
      double allowed = options.atol + options.rtol * std::fabs(numeric);
      double ratio = GradientErrorRatio(a, numeric, options);
      if (ratio > worst) {
        worst = ratio;
        report.str("");
        report << n.op_type << ": d/d" << in << "[" << e << "] analytic " << a << " vs numeric "
               << numeric << " (error " << err << ", allowed " << allowed << ")";
      }
    }
  }
  if (worst > 1.0) return Error(report.str());
  return Status::Ok();
}

}  // namespace foundry
