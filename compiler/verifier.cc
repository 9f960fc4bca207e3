#include "compiler/verifier.h"

#include <string_view>
#include <unordered_set>

#include "compiler/op_schema.h"

namespace foundry {

// The budget search verifies every plan it makes: the names are views of the graph's own strings,
// and a node is described only in an error.
Status VerifyGraph(const Graph& graph, const VerifyOptions& options) {
  std::unordered_set<std::string_view> defined;
  defined.reserve(graph.inputs.size() + graph.initializers.size() + 2 * graph.nodes.size());
  // `by()`: who defines it, in words.
  auto define = [&](const std::string& name, const auto& by) -> Status {
    if (!defined.insert(name).second)
      return Error("verifier: value '" + name + "' is defined twice (again by " + by() + ")");
    return Status::Ok();
  };
  auto graph_input = [] { return std::string("graph input"); };
  auto initializer = [] { return std::string("initializer"); };
  for (const auto& in : graph.inputs) RETURN_IF_ERROR(define(in, graph_input));
  for (const auto& init : graph.initializers) RETURN_IF_ERROR(define(init, initializer));
  for (const auto& p : graph.parameters)
    if (!graph.IsInitializer(p))
      return Error("verifier: parameter '" + p + "' is not an initializer");
  for (const Node& n : graph.nodes) {
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      if (!defined.count(in))
        return Error("verifier: " + n.Describe() + " uses '" + in +
                     "' before it is defined (not topologically ordered)");
    }
    for (const auto& out : n.outputs)
      if (!out.empty()) RETURN_IF_ERROR(define(out, [&n] { return n.Describe(); }));
    if (!options.check_types) continue;
    auto inferred = InferNodeTypes(graph, n);
    if (!inferred.ok()) return inferred.status().Prepend("verifier: ");
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      const Value* v = graph.FindValue(n.outputs[i]);
      if (!v) return Error("verifier: output '" + n.outputs[i] + "' of " + n.Describe() +
                           " has no value entry");
      const TypeInfo& t = (*inferred)[i];
      if (v->dtype != DType::kUndefined && t.dtype != DType::kUndefined && v->dtype != t.dtype)
        return Error("verifier: " + n.Describe() + " output '" + v->name + "' is recorded as " +
                     std::string(DTypeName(v->dtype)) + " but the op gives " +
                     std::string(DTypeName(t.dtype)));
      if (v->ShapeKnown() && t.rank_known) {
        bool mismatch = t.shape.size() != v->shape.size();
        for (size_t d = 0; !mismatch && d < t.shape.size(); ++d)
          mismatch = t.shape[d] >= 0 && t.shape[d] != v->shape[d];
        if (mismatch)
          return Error("verifier: " + n.Describe() + " output '" + v->name + "' is recorded as " +
                       ShapeToString(v->shape) + " but the op gives " + ShapeToString(t.shape));
      }
    }
  }
  for (const auto& out : graph.outputs)
    if (!defined.count(out)) return Error("verifier: graph output '" + out + "' is never produced");
  return Status::Ok();
}

}  // namespace foundry
