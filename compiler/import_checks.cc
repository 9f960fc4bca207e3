#include "compiler/import_checks.h"

#include <onnx/checker.h>

#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace foundry {
namespace import_internal {

Status ParseModelBytes(std::string_view bytes, const std::string& display,
                       onnx::ModelProto& model) {
  if (bytes.empty()) return Error("'" + display + "' is empty; " + kExportHint);
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return Error("'" + display +
                 "' is larger than 2 GiB, protobuf's limit; export the weights as external data "
                 "(torch.onnx.export does so for models over 2 GiB)");
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Error("'" + display + "' is not an ONNX model (protobuf parse failed); " + kExportHint);
  // Random bytes can parse as a message of unknown fields: without a graph or version it is not
  // a model.
  if (!model.has_graph() || model.ir_version() == 0)
    return Error("'" + display + "' is not an ONNX model (no graph or IR version); " + kExportHint);
  return Status::Ok();
}

Status CheckVersions(ImportContext& ctx) {
  const onnx::GraphProto& graph = ctx.m.graph();
  const std::string& display = ctx.display;
  int64_t ir = ctx.m.ir_version();
  bool have_default = false;
  int64_t opset = 0;
  for (const auto& imp : ctx.m.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") {
      have_default = true;
      opset = imp.version();
    }
  }
  if (ctx.opts.check_versions) {
    if (ir < 7 || ir > 10)
      return Error("'" + display + "' has ONNX IR version " + std::to_string(ir) +
                   "; foundry reads IR versions 7 to 10 (torch.onnx.export writes 7 or 8)");
  } else if (ir < 3) {
    return Error("'" + display + "' has ONNX IR version " + std::to_string(ir) +
                 "; foundry reads IR versions 3 to 10");
  }
  if (!have_default) return Error("'" + display + "' imports no ai.onnx opset; " + kExportHint);
  if (ctx.opts.check_versions && (opset < 13 || opset > 18))
    return Error("'" + display + "' uses ai.onnx opset " + std::to_string(opset) +
                 "; foundry supports opsets 13 to 18 (export with torch.onnx.export(..., "
                 "opset_version=17))");
  if (graph.node_size() == 0) return Error("'" + display + "' has a graph with no nodes");
  if (graph.sparse_initializer_size() > 0) return ctx.Fail("sparse initializers are not supported");
  ctx.g.ir_version = ir;
  ctx.g.opset = opset;
  ctx.g.name = graph.name().empty() ? "graph" : graph.name();
  return Status::Ok();
}

Status RunOnnxChecker(const ImportContext& ctx) {
  if (!ctx.opts.run_checker || ctx.g.ir_version > 8 || ctx.g.opset > 17) return Status::Ok();
  // Not check_model(): it looks for external data relative to the working directory.
  try {
    onnx::checker::CheckerContext checker;
    checker.set_ir_version(static_cast<int>(ctx.g.ir_version));
    std::unordered_map<std::string, int> imports;
    for (const auto& imp : ctx.m.opset_import())
      imports[imp.domain()] = static_cast<int>(imp.version());
    checker.set_opset_imports(imports);
    checker.set_model_dir(ctx.dir);
    onnx::checker::LexicalScopeContext lex;
    onnx::checker::check_graph(ctx.m.graph(), checker, lex);
    if (ctx.m.functions_size() > 0) onnx::checker::check_model_local_functions(ctx.m, checker, lex);
  } catch (const std::exception& e) {
    return Error("'" + ctx.display + "' failed the ONNX checker: " + OneLine(e.what()));
  }
  return Status::Ok();
}

Status ValidateGraph(ImportContext& ctx) {
  Graph& g = ctx.g;
  std::unordered_set<std::string> defined(g.inputs.begin(), g.inputs.end());
  defined.insert(g.initializers.begin(), g.initializers.end());
  std::unordered_map<std::string, const Node*> producer;
  for (const Node& n : g.nodes) {
    if (n.op_type.empty()) return ctx.Fail("node '" + n.name + "' has no op_type");
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      g.GetOrAddValue(in);
      if (!defined.count(in))
        return ctx.Fail(n.Describe() + " reads '" + in +
                        "', which is not a graph input, an initializer or an earlier node's "
                        "output (nodes must be in topological order)");
    }
    for (const auto& out : n.outputs) {
      if (out.empty()) continue;
      if (defined.count(out)) {
        auto p = producer.find(out);
        return ctx.Fail(n.Describe() + " writes '" + out + "', which is already " +
                        (p != producer.end() ? "written by " + p->second->Describe()
                                             : std::string("a graph input or an initializer")));
      }
      defined.insert(out);
      producer[out] = &n;
      g.GetOrAddValue(out);
    }
  }
  for (const auto& out : g.outputs)
    if (!defined.count(out))
      return ctx.Fail("graph output '" + out + "' is not produced by any node");
  return Status::Ok();
}

Status BindDims(ImportContext& ctx) {
  Graph& g = ctx.g;
  const auto& dims = ctx.opts.dims;
  std::set<std::string> seen;
  for (const auto& [name, value] : g.values())
    for (const auto& p : value.dim_params)
      if (!p.empty()) seen.insert(p);
  for (const auto& [name, size] : dims) {
    if (seen.count(name)) continue;
    std::string have;
    for (const auto& s : seen) have += (have.empty() ? "" : ", ") + s;
    return ctx.Fail("--dim " + name + "=" + std::to_string(size) +
                    ": the model has no symbolic dimension '" + name + "' (it has " +
                    (have.empty() ? std::string("none") : have) + ")");
  }
  for (const auto& [name, size] : dims)
    if (size <= 0)
      return ctx.Fail("--dim " + name + "=" + std::to_string(size) + ": sizes must be positive");
  if (dims.empty()) return Status::Ok();
  std::vector<std::string> names;
  for (const auto& [name, value] : g.values()) names.push_back(name);
  for (const auto& name : names) {
    Value& v = *g.FindValue(name);
    bool any_left = false;
    for (size_t i = 0; i < v.dim_params.size(); ++i) {
      auto it = dims.find(v.dim_params[i]);
      if (it != dims.end()) {
        v.shape[i] = it->second;
        v.dim_params[i].clear();
      }
      any_left |= !v.dim_params[i].empty();
    }
    if (!any_left) v.dim_params.clear();
  }
  return Status::Ok();
}

}  // namespace import_internal
}  // namespace foundry
