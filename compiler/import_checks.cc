#include "compiler/import_checks.h"

#include <onnx/checker.h>
#include <sys/stat.h>

#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/quote.h"
#include "compiler/onnx_import.h"
#include "compiler/onnx_proto_util.h"

namespace foundry {
namespace import_internal {

namespace {

Status TooLarge(const std::string& display) {
  return Error(QuoteName(display) +
               " is larger than 2 GiB, protobuf's limit; export the weights as external data "
               "(torch.onnx.export does so for models over 2 GiB)");
}

}  // namespace

Status CheckModelFileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size > std::numeric_limits<int>::max())
    return TooLarge(path);
  return Status::Ok();  // ReadFile reports anything else
}

Status ParseModelBytes(std::string_view bytes, const std::string& display,
                       onnx::ModelProto& model) {
  if (bytes.empty()) return Error(QuoteName(display) + " is empty; " + kExportHint);
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return TooLarge(display);
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Error(QuoteName(display) + " is not an ONNX model (protobuf parse failed); " +
                 kExportHint);
  // Random bytes can parse as a message of unknown fields: without a graph or version it is not
  // a model.
  if (!model.has_graph() || model.ir_version() == 0)
    return Error(QuoteName(display) + " is not an ONNX model (no graph or IR version); " +
                 kExportHint);
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
      return Error(QuoteName(display) + " has ONNX IR version " + std::to_string(ir) +
                   "; foundry reads IR versions 7 to 10 (torch.onnx.export writes 7 or 8)");
  } else if (ir < 3) {
    return Error(QuoteName(display) + " has ONNX IR version " + std::to_string(ir) +
                 "; foundry reads IR versions 3 to 10");
  }
  if (!have_default) return Error(QuoteName(display) + " imports no ai.onnx opset; " + kExportHint);
  // Opsets 19 and 20 changed no op foundry runs on the types it supports: 19 added float8 types
  // and Pad's 'wrap' mode (the Pad schema rejects it), 20 added Gelu and bool ReduceMax/Min (the
  // Reduce schemas reject bool).
  if (ctx.opts.check_versions && (opset < 13 || opset > 20))
    return Error(QuoteName(display) + " uses ai.onnx opset " + std::to_string(opset) +
                 "; foundry supports opsets 13 to 20 (export with torch.onnx.export(..., "
                 "opset_version=17))");
  if (graph.node_size() == 0) return Error(QuoteName(display) + " has a graph with no nodes");
  if (graph.sparse_initializer_size() > 0) return ctx.Fail("sparse initializers are not supported");
  ctx.g.ir_version = ir;
  ctx.g.opset = opset;
  ctx.g.name = graph.name().empty() ? "graph" : graph.name();
  return Status::Ok();
}

namespace {

class Utf8Checker {
 public:
  explicit Utf8Checker(const ImportContext& ctx) : ctx_(ctx) {}

  Status Check(const std::string& s, const std::string& field) const {
    if (IsValidUtf8(s)) return Status::Ok();
    return ctx_.Fail(field + " " + QuoteName(s) +
                     " is not valid UTF-8 (ONNX strings are UTF-8; re-export the model)");
  }

  template <class NodeList>
  Status Nodes(const NodeList& nodes, const std::string& where, bool doc_strings) const {
    for (const onnx::NodeProto& n : nodes) {
      RETURN_IF_ERROR(Check(n.name(), "node name" + where));
      std::string node = " of node " + QuoteName(n.name()) + where;
      RETURN_IF_ERROR(Check(n.op_type(), "op_type" + node));
      RETURN_IF_ERROR(Check(n.domain(), "domain" + node));
      for (const auto& in : n.input()) RETURN_IF_ERROR(Check(in, "input name" + node));
      for (const auto& out : n.output()) RETURN_IF_ERROR(Check(out, "output name" + node));
      for (const auto& a : n.attribute()) {
        RETURN_IF_ERROR(Check(a.name(), "attribute name" + node));
        RETURN_IF_ERROR(Check(a.ref_attr_name(), "attribute reference" + node));
      }
      for (const auto& [k, v] : onnx_util::NodeMetadataProps(n)) {
        RETURN_IF_ERROR(Check(k, "metadata key" + node));
        RETURN_IF_ERROR(Check(v, "metadata value" + node));
      }
      if (doc_strings) RETURN_IF_ERROR(Check(n.doc_string(), "doc_string" + node));
    }
    return Status::Ok();
  }

 private:
  const ImportContext& ctx_;
};

}  // namespace

Status CheckUtf8(const ImportContext& ctx) {
  Utf8Checker c(ctx);
  bool doc_strings = false;
  for (const auto& p : ctx.m.metadata_props()) {
    RETURN_IF_ERROR(c.Check(p.key(), "model metadata key"));
    RETURN_IF_ERROR(c.Check(p.value(), "model metadata " + QuoteName(p.key()) + " value"));
    doc_strings |= p.key() == kScopeSourceKey;
  }
  const onnx::GraphProto& graph = ctx.m.graph();
  RETURN_IF_ERROR(c.Check(graph.name(), "graph name"));
  for (const auto& v : graph.input()) RETURN_IF_ERROR(c.Check(v.name(), "graph input name"));
  for (const auto& v : graph.output()) RETURN_IF_ERROR(c.Check(v.name(), "graph output name"));
  for (const auto& v : graph.value_info()) RETURN_IF_ERROR(c.Check(v.name(), "value_info name"));
  for (const auto& t : graph.initializer()) RETURN_IF_ERROR(c.Check(t.name(), "initializer name"));
  RETURN_IF_ERROR(c.Nodes(graph.node(), "", doc_strings));
  for (const auto& f : ctx.m.functions()) {
    RETURN_IF_ERROR(c.Check(f.name(), "function name"));
    std::string where = " in function " + QuoteName(f.name());
    RETURN_IF_ERROR(c.Check(f.domain(), "domain of function " + QuoteName(f.name())));
    for (const auto& in : f.input()) RETURN_IF_ERROR(c.Check(in, "input name" + where));
    for (const auto& out : f.output()) RETURN_IF_ERROR(c.Check(out, "output name" + where));
    for (const auto& a : f.attribute()) RETURN_IF_ERROR(c.Check(a, "attribute name" + where));
    RETURN_IF_ERROR(c.Nodes(f.node(), where, false));
  }
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
    return Error(QuoteName(ctx.display) + " failed the ONNX checker: " + OneLine(e.what()));
  }
  return Status::Ok();
}

Status ValidateGraph(ImportContext& ctx) {
  Graph& g = ctx.g;
  std::unordered_set<std::string> defined(g.inputs.begin(), g.inputs.end());
  defined.insert(g.initializers.begin(), g.initializers.end());
  std::unordered_map<std::string, const Node*> producer;
  for (const Node& n : g.nodes) {
    if (n.op_type.empty()) return ctx.Fail("node " + QuoteName(n.name) + " has no op_type");
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
        return ctx.Fail(n.Describe() + " writes " + QuoteName(out) + ", which is already " +
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
      return ctx.Fail("graph output " + QuoteName(out) + " is not produced by any node");
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
                    ": the model has no symbolic dimension " + QuoteName(name) + " (it has " +
                    (have.empty() ? std::string("none") : have) + ")");
  }
  for (const auto& [name, size] : dims)
    if (size <= 0)
      return ctx.Fail("--dim " + name + "=" + std::to_string(size) + ": sizes must be positive");
  // Sizes torch specialised (a decimal dim_param) that the bindings change: a warning, and the
  // note a later shape error carries (kRespecialisedDimsKey).
  std::string changed;
  for (const auto& [name, size] : dims) {
    const auto exported = onnx_util::DecimalDimParam(name);
    if (!exported || *exported == size) continue;
    changed += (changed.empty() ? "" : ", ") + QuoteName(name) + " -> " + std::to_string(size);
  }
  if (!changed.empty()) {
    g.metadata[kRespecialisedDimsKey] = changed;
    std::string& w = g.metadata[kImportWarningKey];
    w += (w.empty() ? "" : "; ") + std::string("torch specialised dimension ") + changed +
         " at export (it wrote the traced size as the axis' name); the new size is right only if "
         "no constant of the graph holds the traced one (where one does, a shape error names its "
         "node: re-export with a dynamic torch.export.Dim)";
  }
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
