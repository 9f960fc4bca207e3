#include "runtime/loaded_plan.h"

#include <algorithm>
#include <filesystem>

#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/memory_plan.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace {

namespace fs = std::filesystem;

constexpr const char* kRecompile = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";

// value_info); values that already have one keep it.
Status EnsureShapes(Graph& g) {
  bool missing = false;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && (!g.FindValue(o) || !g.FindValue(o)->ShapeKnown())) missing = true;
  if (!missing) return Status::Ok();
  for (const Node& n : g.nodes) RETURN_IF_ERROR(InferAndSetTypes(g, n));
  return Status::Ok();
}

}  // namespace

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
    return damaged("the loss '" + plan.loss + "' is " + loss->TypeString() +
                   ", not a float scalar");
  for (const auto& in : plan.inputs)
    if (std::find(g.inputs.begin(), g.inputs.end(), in) == g.inputs.end())
      return damaged("input '" + in + "' is not among the inputs of '" + plan.graph_file +
                     "': " + JoinNames(g.inputs));
  for (const auto& p : plan.parameters) {
    if (!g.IsInitializer(p))
      return damaged("parameter '" + p + "' is not an initializer of the graph '" +
                     plan.graph_file + "'");
    auto it = plan.gradients.find(p);
    if (it == plan.gradients.end()) return damaged("no gradient for parameter '" + p + "'");
    if (!is_output(it->second))
      return damaged("the gradient '" + it->second + "' of parameter '" + p +
                     "' is not an output of the graph '" + plan.graph_file + "'");
    const Value* pv = g.FindValue(p);
    const Value* gv = g.FindValue(it->second);
    if (pv && gv && pv->ShapeKnown() && gv->ShapeKnown() &&
        (pv->dtype != gv->dtype || pv->shape != gv->shape))
      return damaged("the gradient '" + it->second + "' is " + gv->TypeString() +
                     " but parameter '" + p + "' is " + pv->TypeString());
  }
  for (const auto& [input, axes] : plan.input_dims) {
    const Value* v = g.FindValue(input);
    if (!v || !v->ShapeKnown()) continue;
    if (v->shape.size() != axes.size())
      return damaged("input '" + input + "' is " + v->TypeString() + " in the graph but has " +
                     std::to_string(axes.size()) + " axes in input_dims");
    for (size_t i = 0; i < axes.size(); ++i)
      if (!axes[i].empty() && plan.dims.at(axes[i]) != v->shape[i])
        return damaged("dims gives '" + axes[i] + "' = " + std::to_string(plan.dims.at(axes[i])) +
                       " but input '" + input + "' is " + v->TypeString() + " in the graph");
  }
  return Status::Ok();
}

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
  auto graph = ImportOnnx(graph_path.string(), io);
  if (!graph.ok())
    return graph.status().Prepend("cannot load the training graph of '" + lp.plan_path + "': ");
  lp.graph = std::move(graph).value();
  RETURN_IF_ERROR(CheckPlan(lp.plan, lp.graph, lp.plan_path));
  Status st = EnsureShapes(lp.graph);
  // The plan says what is trained (the importer's guess may differ under --freeze/--trainable);
  // the memory plan's classes follow it.
  lp.graph.parameters = lp.plan.parameters;
  if (st.ok()) st = CheckMemoryPlan(lp.graph, lp.plan.memory);
  if (!st.ok())
    return Error("'" + lp.plan_path + "' is a damaged foundry plan (" + st.message() + ")" +
                 kRecompile);
  return lp;
}

}  // namespace foundry
