#include "runtime/loaded_plan.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "base/quote.h"
#include "compiler/eval_graph.h"
#include "compiler/memory_plan.h"
#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace {

namespace fs = std::filesystem;

constexpr const char* kRecompile = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";

// Whether `grad` is a name autodiff gives the gradient of parameter `p` (passes/autodiff.h
// GradName): "<p>_grad", or "<p>_grad_<n>" when the model already had a value of that name. The
// runtime does not link the passes; the rule is repeated here and tested on both sides.
bool IsGradNameOf(const std::string& grad, const std::string& p) {
  const std::string base = p + "_grad";
  if (grad == base) return true;
  if (grad.size() <= base.size() + 1 || grad.compare(0, base.size() + 1, base + "_") != 0)
    return false;
  return std::all_of(grad.begin() + static_cast<std::ptrdiff_t>(base.size()) + 1, grad.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool DeclaredDiffers(const Value& declared, const TypeInfo& t) {
  if (declared.dtype != DType::kUndefined && declared.dtype != t.dtype) return true;
  if (!declared.rank_known) return false;
  if (declared.shape.size() != t.shape.size()) return true;
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (declared.shape[d] >= 0 && declared.shape[d] != t.shape[d]) return true;
  return false;
}

}  // namespace

// The graph's file says each value's type (value_info), but the kernels write what their inputs
// and attributes give: a declared type that disagrees would size a buffer the kernel overruns. So
// every node's output types are inferred again from its inputs (the initializers' types come from
// their data, the inputs' from the graph's input list, checked against `dims` by CheckPlan), in
// order, and must agree with what the file declares; inference also validates every attribute.
// The inferred types replace the declared ones. The message is the part in parentheses of the
// "damaged plan" error.
Status CheckTypesByInference(Graph& g, const std::string& graph_file) {
  std::unordered_set<std::string> defined(g.inputs.begin(), g.inputs.end());
  defined.insert(g.initializers.begin(), g.initializers.end());
  for (const Node& n : g.nodes) {
    for (const auto& in : n.inputs)
      if (!in.empty() && !defined.count(in))
        return Error(n.Describe() + " in " + QuoteName(graph_file) + " reads " + QuoteName(in) +
                     " before any node computes it");
    StatusOr<std::vector<TypeInfo>> types = InferNodeTypes(g, n);
    if (!types.ok()) return types.status();
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const std::string& out = n.outputs[i];
      if (out.empty()) continue;
      if (!defined.insert(out).second)
        return Error("value " + QuoteName(out) + " is computed again by " + n.Describe() + " in " +
                     QuoteName(graph_file));
      const TypeInfo& t = (*types)[i];
      Value inferred;
      inferred.dtype = t.dtype;
      inferred.shape = t.shape;
      inferred.rank_known = t.rank_known;
      if (t.dtype == DType::kUndefined || !inferred.ShapeKnown())
        return Error("the type of value " + QuoteName(out) + " of " + n.Describe() + " in " +
                     QuoteName(graph_file) + " does not follow from its inputs (inference gives " +
                     inferred.TypeString() + ")");
      Value& v = g.GetOrAddValue(out);
      if (DeclaredDiffers(v, t))
        return Error("value " + QuoteName(out) + " of " + n.Describe() + " is declared " +
                     EscapeName(v.TypeString()) + " in " + QuoteName(graph_file) +
                     " but its inputs give " + inferred.TypeString());
      v.dtype = t.dtype;
      v.rank_known = true;
      v.shape = t.shape;
      v.dim_params.clear();
    }
  }
  return Status::Ok();
}

Status CheckPlan(const Plan& plan, const Graph& g, const std::string& plan_path) {
  auto damaged = [&](const std::string& why) {
    return Error("'" + plan_path + "' is a damaged foundry plan (" + why + ")" + kRecompile);
  };
  auto is_output = [&](const std::string& v) {
    return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
  };
  if (!is_output(plan.loss))
    return damaged("the loss '" + plan.loss + "' is not an output of the graph '" +
                   plan.graph_file + "'");
  if (const Value* loss = g.FindValue(plan.loss);
      loss && loss->ShapeKnown() && (!IsFloat(loss->dtype) || NumElements(loss->shape) != 1))
    return damaged("the loss '" + plan.loss + "' is " + EscapeName(loss->TypeString()) +
                   ", not a float scalar");
  for (const auto& in : plan.inputs)
    if (std::find(g.inputs.begin(), g.inputs.end(), in) == g.inputs.end())
      return damaged("input '" + in + "' is not among the inputs of '" + plan.graph_file +
                     "': " + EscapeName(JoinNames(g.inputs)));
  for (const auto& p : plan.parameters) {
    if (!g.IsInitializer(p))
      return damaged("parameter '" + p + "' is not an initializer of the graph '" +
                     plan.graph_file + "'");
    auto it = plan.gradients.find(p);
    if (it == plan.gradients.end()) return damaged("no gradient for parameter '" + p + "'");
    if (!is_output(it->second))
      return damaged("the gradient '" + it->second + "' of parameter '" + p +
                     "' is not an output of the graph '" + plan.graph_file + "'");
    // Autodiff names the gradient after its parameter: a plan that pairs them otherwise (two
    // gradients swapped between parameters of one shape) would train each by the other's.
    if (!IsGradNameOf(it->second, p))
      return damaged("the gradient of parameter '" + p + "' is '" + it->second + "', not '" + p +
                     "_grad', the gradient foundry-compile computes for it");
    const Value* pv = g.FindValue(p);
    const Value* gv = g.FindValue(it->second);
    if (pv && gv && pv->ShapeKnown() && gv->ShapeKnown() &&
        (pv->dtype != gv->dtype || pv->shape != gv->shape))
      return damaged("the gradient '" + it->second + "' is " + EscapeName(gv->TypeString()) +
                     " but parameter '" + p + "' is " + EscapeName(pv->TypeString()));
  }
  for (const auto& [input, axes] : plan.input_dims) {
    const Value* v = g.FindValue(input);
    if (!v || !v->ShapeKnown()) continue;
    if (v->shape.size() != axes.size())
      return damaged("input '" + input + "' is " + EscapeName(v->TypeString()) +
                     " in the graph but has " + std::to_string(axes.size()) +
                     " axes in input_dims");
    for (size_t i = 0; i < axes.size(); ++i)
      if (!axes[i].empty() && plan.dims.at(axes[i]) != v->shape[i])
        return damaged("dims gives '" + axes[i] + "' = " + std::to_string(plan.dims.at(axes[i])) +
                       " but input '" + input + "' is " + EscapeName(v->TypeString()) +
                       " in the graph");
  }
  return Status::Ok();
}

namespace {

// LoadPlan's checks once the plan is read and its graph imported.
StatusOr<LoadedPlan> CheckLoaded(LoadedPlan lp, StatusOr<Graph> graph) {
  if (!graph.ok())
    return graph.status().Prepend("cannot load the training graph of '" + lp.plan_path + "': ");
  lp.graph = std::move(graph).value();
  Status st = CheckTypesByInference(lp.graph, lp.plan.graph_file);
  if (!st.ok())
    return Error("'" + lp.plan_path + "' is a damaged foundry plan (" + st.message() + ")" +
                 kRecompile);
  RETURN_IF_ERROR(CheckPlan(lp.plan, lp.graph, lp.plan_path));
  // The plan says what is trained (the importer's guess may differ under --freeze/--trainable);
  // the memory plan's classes follow it.
  lp.graph.parameters = lp.plan.parameters;
  st = CheckMemoryPlan(lp.graph, lp.plan.memory);
  if (!st.ok())
    return Error("'" + lp.plan_path + "' is a damaged foundry plan (" + st.message() + ")" +
                 kRecompile);
  if (lp.plan.eval_memory) {
    StatusOr<Graph> eval = EvalGraph(lp.graph, lp.plan.loss);
    st = eval.ok() ? CheckMemoryPlan(*eval, *lp.plan.eval_memory) : eval.status();
    if (!st.ok())
      return Error("'" + lp.plan_path +
                   "' is a damaged foundry plan (eval_memory: " + st.message() + ")" + kRecompile);
  }
  return lp;
}

}  // namespace

StatusOr<LoadedPlan> LoadPlan(const std::string& prefix_or_plan_path) {
  LoadedPlan lp;
  lp.plan_path =
      EndsWith(prefix_or_plan_path, ".plan") ? prefix_or_plan_path : prefix_or_plan_path + ".plan";
  ASSIGN_OR_RETURN(lp.plan, ReadPlan(lp.plan_path));
  fs::path graph_path = fs::path(lp.plan.graph_file);
  if (graph_path.is_relative()) graph_path = fs::path(lp.plan_path).parent_path() / graph_path;
  // Two compiles to one prefix, or a graph copied from elsewhere: the pair must be one compile's.
  if (!lp.plan.graph_digest.empty()) {
    auto digest = GraphDigest(graph_path.string(), graph_path.string() + ".data");
    if (!digest.ok())
      return digest.status().Prepend("cannot load the training graph of '" + lp.plan_path + "': ");
    if (*digest != lp.plan.graph_digest)
      return Error("'" + lp.plan_path + "' and its graph '" + graph_path.string() +
                   "' come from different compiles (the graph's digest is " + *digest +
                   ", the plan was written with " + lp.plan.graph_digest + ")" + kRecompile);
  }
  ImportOptions io;
  io.load_weights = true;
  StatusOr<Graph> graph = ImportOnnx(graph_path.string(), io);
  return CheckLoaded(std::move(lp), std::move(graph));
}

StatusOr<LoadedPlan> LoadPlanFromBytes(std::string_view plan_text, std::string_view graph_bytes,
                                       const std::string& plan_path, const std::string& graph_dir) {
  LoadedPlan lp;
  lp.plan_path = plan_path;
  ASSIGN_OR_RETURN(lp.plan, ParsePlan(plan_text, plan_path));
  ImportOptions io;
  io.load_weights = true;
  StatusOr<Graph> graph = ImportOnnxFromBytes(graph_bytes, io, graph_dir, lp.plan.graph_file);
  return CheckLoaded(std::move(lp), std::move(graph));
}

}  // namespace foundry
