#include "compiler/onnx_export.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "base/file_util.h"
#include "base/quote.h"
#include "compiler/onnx_import.h"
#include "compiler/onnx_proto_util.h"
#include "compiler/tensor_proto.h"

namespace foundry {

namespace {

constexpr int64_t kExternalAlign = 64;

void WriteType(const Value& v, onnx::TypeProto* type) {
  auto* tt = type->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (!v.rank_known) return;
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < v.shape.size(); ++i) {
    auto* d = shape->add_dim();
    if (i < v.dim_params.size() && !v.dim_params[i].empty())
      d->set_dim_param(v.dim_params[i]);
    else if (v.shape[i] >= 0)
      d->set_dim_value(v.shape[i]);
  }
}

void WriteValueInfo(const Graph& g, const std::string& name, onnx::ValueInfoProto* vi) {
  vi->set_name(name);
  const Value* v = g.FindValue(name);
  if (v) WriteType(*v, vi->mutable_type());
}

void WriteAttr(const std::string& name, const Attribute& a, onnx::AttributeProto* p) {
  using A = onnx::AttributeProto;
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::kInt:
      p->set_type(A::INT);
      p->set_i(a.i);
      break;
    case Attribute::Kind::kFloat:
      p->set_type(A::FLOAT);
      p->set_f(a.f);
      break;
    case Attribute::Kind::kString:
      p->set_type(A::STRING);
      p->set_s(a.s);
      break;
    case Attribute::Kind::kInts:
      p->set_type(A::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
    case Attribute::Kind::kFloats:
      p->set_type(A::FLOATS);
      for (float v : a.floats) p->add_floats(v);
      break;
    case Attribute::Kind::kStrings:
      p->set_type(A::STRINGS);
      for (const auto& v : a.strings) p->add_strings(v);
      break;
    case Attribute::Kind::kTensor:
      p->set_type(A::TENSOR);
      if (a.t) TensorToProto(*a.t, "", p->mutable_t());
      break;
  }
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string NodeDocString(const Node& n) {
  std::string doc;
  if (!n.scope.empty()) doc += "scope=" + Escape(n.scope) + "\n";
  for (const auto& [k, v] : n.marks) doc += "mark." + k + "=" + Escape(v) + "\n";
  if (!doc.empty()) doc.pop_back();
  return doc;
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Builds the model; tensors listed in `external` are left for the caller to place (their protos
// get name, type and dims only) and returned in `external_protos` in order.
StatusOr<onnx::ModelProto> BuildModel(const Graph& g, const std::set<std::string>& external,
                                      std::vector<onnx::TensorProto*>* external_protos) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("foundry");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(g.opset);
  std::set<std::string> domains;
  for (const Node& n : g.nodes)
    if (!n.domain.empty() && n.domain != "ai.onnx") domains.insert(n.domain);
  for (const auto& d : domains) {
    auto* imp = m.add_opset_import();
    imp->set_domain(d);
    imp->set_version(1);
  }

  onnx::GraphProto* graph = m.mutable_graph();
  graph->set_name(g.name);
  std::unordered_set<std::string> listed;
  for (const auto& in : g.inputs) {
    WriteValueInfo(g, in, graph->add_input());
    listed.insert(in);
  }
  for (const auto& name : g.initializers) {
    listed.insert(name);
    const Value* v = g.FindValue(name);
    if (!v) return Error("cannot export: initializer '" + name + "' has no value");
    if (!v->data) {  // declared by shape only: a typed graph input, as export_params=False writes
      WriteValueInfo(g, name, graph->add_input());
      continue;
    }
    onnx::TensorProto* t = graph->add_initializer();
    if (external.count(name)) {
      t->set_name(name);
      t->set_data_type(static_cast<int32_t>(v->data->dtype()));
      for (int64_t d : v->data->shape()) t->add_dims(d);
      external_protos->push_back(t);
    } else {
      TensorToProto(*v->data, name, t);
    }
  }
  for (const auto& out : g.outputs) {
    WriteValueInfo(g, out, graph->add_output());
    listed.insert(out);
  }
  for (const Node& n : g.nodes) {
    onnx::NodeProto* p = graph->add_node();
    p->set_name(n.name);
    p->set_op_type(n.op_type);
    if (!n.domain.empty()) p->set_domain(n.domain);
    for (const auto& in : n.inputs) p->add_input(in);
    for (const auto& out : n.outputs) p->add_output(out);
    for (const auto& [k, a] : n.attrs) WriteAttr(k, a, p->add_attribute());
    std::string doc = NodeDocString(n);
    if (!doc.empty()) p->set_doc_string(doc);
  }
  // value_info in node order, so a reader sees types where the values appear.
  for (const Node& n : g.nodes) {
    for (const auto& out : n.outputs) {
      if (out.empty() || listed.count(out)) continue;
      listed.insert(out);
      const Value* v = g.FindValue(out);
      if (!v || v->dtype == DType::kUndefined) continue;
      WriteValueInfo(g, out, graph->add_value_info());
    }
  }

  // JSON holds UTF-8 only: a name that is not (ImportOnnx rejects such files; a graph built in
  // code may still hold one) is an error here, and the dumps below never throw.
  auto check = [](const std::string& what, const std::string& name) -> Status {
    if (IsValidUtf8(name)) return Status::Ok();
    return Error("cannot export " + what + " " + QuoteName(name) +
                 ": it is not valid UTF-8, which the model's JSON metadata needs");
  };
  for (const auto& [path, mod] : g.modules) {
    RETURN_IF_ERROR(check("module path", path));
    for (const auto& c : mod.classes) RETURN_IF_ERROR(check("module class", c));
  }
  for (const auto& name : g.initializers) RETURN_IF_ERROR(check("initializer", name));
  auto dump = [](const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  std::map<std::string, std::string> meta = g.metadata;
  nlohmann::ordered_json classes = nlohmann::ordered_json::object();
  for (const auto& [path, mod] : g.modules) classes[path] = mod.classes;
  nlohmann::ordered_json params = g.parameters;
  nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
  for (const auto& name : g.initializers)
    if (!g.IsParameter(name)) buffers.push_back(name);
  meta["foundry.module_classes"] = dump(classes);
  meta["foundry.parameters"] = dump(params);
  meta["foundry.buffers"] = dump(buffers);
  meta["foundry.scope_source"] = "doc_string";
  meta.erase("foundry.initializers");
  meta.erase(kImportWarningKey);  // about the imported file, not this one
  bool any_declared = false;
  for (const auto& name : g.initializers) {
    const Value* v = g.FindValue(name);
    any_declared |= v && !v->data;
  }
  if (any_declared) meta["foundry.initializers"] = dump(nlohmann::ordered_json(g.initializers));
  for (const auto& [k, v] : meta) {
    auto* e = m.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  }
  return m;
}

StatusOr<std::string> Serialize(const onnx::ModelProto& m, const std::string& what) {
  std::string bytes;
  if (m.ByteSizeLong() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !m.SerializeToString(&bytes))
    return Error("cannot export " + what +
                 ": the model is over protobuf's 2 GiB limit even with external weights");
  return bytes;
}

// Streams the external tensors into `data_path` (via a temporary file renamed into place) and
// fills in their external_data entries.
Status WriteExternalData(const Graph& g, const std::string& data_path, const std::string& location,
                         const std::vector<onnx::TensorProto*>& protos) {
  return WriteFileAtomic(data_path, [&](std::FILE* f) {
    int64_t offset = 0;
    bool ok = true;
    static const char kZeros[kExternalAlign] = {};
    for (onnx::TensorProto* t : protos) {
      const Tensor& data = *g.FindValue(t->name())->data;
      int64_t pad = (kExternalAlign - offset % kExternalAlign) % kExternalAlign;
      ok = ok && std::fwrite(kZeros, 1, pad, f) == static_cast<size_t>(pad);
      offset += pad;
      ok = ok && std::fwrite(data.raw(), 1, data.nbytes(), f) == data.nbytes();
      t->set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const std::string& k, const std::string& v) {
        auto* e = t->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", location);
      add("offset", std::to_string(offset));
      add("length", std::to_string(data.nbytes()));
      offset += static_cast<int64_t>(data.nbytes());
    }
    return ok;
  });
}

}  // namespace

StatusOr<std::string> ExportOnnxToBytes(const Graph& graph) {
  std::vector<onnx::TensorProto*> none;
  ASSIGN_OR_RETURN(onnx::ModelProto m, BuildModel(graph, {}, &none));
  return Serialize(m, "graph '" + graph.name + "'");
}

Status ExportOnnx(const Graph& graph, const std::string& path, const ExportOptions& options) {
  int64_t total = 0;
  for (const auto& name : graph.initializers) {
    const Value* v = graph.FindValue(name);
    if (v && v->data) total += static_cast<int64_t>(v->data->nbytes());
  }
  std::set<std::string> external;
  if (total > options.external_data_threshold) {
    for (const auto& name : graph.initializers) {
      const Value* v = graph.FindValue(name);
      if (v && v->data &&
          static_cast<int64_t>(v->data->nbytes()) >= options.external_data_min_bytes)
        external.insert(name);
    }
  }
  std::vector<onnx::TensorProto*> external_protos;
  ASSIGN_OR_RETURN(onnx::ModelProto m, BuildModel(graph, external, &external_protos));
  if (!external_protos.empty()) {
    std::string location = BaseName(path) + ".data";
    // The data file goes first: a model file never refers to data that is not there yet.
    RETURN_IF_ERROR(WriteExternalData(
        graph, onnx_util::JoinPath(onnx_util::DirName(path), location), location, external_protos));
  }
  ASSIGN_OR_RETURN(std::string bytes, Serialize(m, "'" + path + "'"));
  return WriteFileAtomic(path, bytes);
}

}  // namespace foundry
