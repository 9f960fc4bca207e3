#include "compiler/onnx_import.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "base/file_util.h"
#include "base/quote.h"
#include "compiler/import_annotation.h"
#include "compiler/import_checks.h"
#include "compiler/import_context.h"
#include "compiler/import_functions.h"
#include "compiler/import_params.h"
#include "compiler/import_sequences.h"
#include "compiler/onnx_proto_util.h"
#include "compiler/padding_rows.h"
#include "compiler/random_seed.h"
#include "compiler/tensor_proto.h"

namespace foundry {

namespace import_internal {
namespace {

using onnx_util::ElemTypeName;

// Reads the graph in the order its parts depend on: versions, metadata and parameter lists,
// initializers and inputs, ONNX's checker, value types, nodes (each format's reader and the
// function inliner), then the structural checks and --dim bindings.
class Importer {
 public:
  Importer(const onnx::ModelProto& model, const ImportOptions& options, std::string model_dir,
           std::string display)
      : ctx_(model, options, std::move(model_dir), std::move(display)),
        m_(model),
        opts_(options),
        g_(ctx_.g) {}

  StatusOr<Graph> Run() {
    RETURN_IF_ERROR(CheckVersions(ctx_));
    RETURN_IF_ERROR(CheckUtf8(ctx_));
    RETURN_IF_ERROR(ReadModuleTables(ctx_));
    RETURN_IF_ERROR(params_.Read(ctx_));
    RETURN_IF_ERROR(ReadInitializersAndInputs());
    if (auto rows = PaddingRows(g_, /*require_present=*/true); !rows.ok())
      return Fail(rows.status().message());
    RETURN_IF_ERROR(RunOnnxChecker(ctx_));
    RETURN_IF_ERROR(ReadValueInfo());
    RETURN_IF_ERROR(ReadNodes());
    if (Status st = LowerSplitToSequence(g_); !st.ok()) return Fail(st.message());
    RETURN_IF_ERROR(ValidateGraph(ctx_));
    RETURN_IF_ERROR(BindDims(ctx_));
    reader_->Finish(ctx_);
    for (Node& n : g_.nodes)
      if (n.name.empty()) n.name = g_.UniqueNodeName(n.op_type);
    return std::move(g_);
  }

 private:
  Status Fail(const std::string& what) const { return ctx_.Fail(what); }

  Status ReadType(const onnx::TypeProto& type, Value& v) {
    if (type.value_case() == onnx::TypeProto::VALUE_NOT_SET) return Status::Ok();
    if (!type.has_tensor_type())
      return Fail("value '" + v.name +
                  "' is not a tensor (a sequence, map or optional); foundry handles tensors only");
    const auto& tt = type.tensor_type();
    if (tt.elem_type() != 0) {
      if (!IsKnownDType(tt.elem_type()))
        return Fail("value " + QuoteName(v.name) + " has element type " +
                    ElemTypeName(tt.elem_type()) + ", which foundry does not support");
      v.dtype = static_cast<DType>(tt.elem_type());
    }
    if (!tt.has_shape()) return Status::Ok();
    v.rank_known = true;
    v.shape.clear();
    v.dim_params.clear();
    bool any_param = false;
    std::vector<std::string> params;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() >= 0) {
        v.shape.push_back(d.dim_value());
        params.push_back("");
      } else if (auto size = onnx_util::DecimalDimParam(d.dim_param());
                 size && !opts_.dims.count(d.dim_param())) {
        v.shape.push_back(*size);  // a size the exporter specialised, written as a name
        params.push_back("");
      } else {  // a symbol (a specialised size the user rebinds is one too: BindDims)
        v.shape.push_back(-1);
        params.push_back(d.has_dim_param() ? d.dim_param() : "");
        any_param |= d.has_dim_param() && !d.dim_param().empty();
      }
    }
    if (any_param) v.dim_params = std::move(params);
    return Status::Ok();
  }

  Status ReadInitializersAndInputs() {
    const onnx::GraphProto& graph = m_.graph();
    std::unordered_set<std::string> seen;
    for (const auto& init : graph.initializer()) {
      if (init.name().empty()) return Fail("an initializer has no name");
      if (!seen.insert(init.name()).second)
        return Fail("initializer " + QuoteName(init.name()) + " appears twice");
      g_.initializers.push_back(init.name());
      init_protos_[init.name()] = &init;
    }
    std::vector<const onnx::ValueInfoProto*> declared;
    for (const auto& in : graph.input()) {
      if (in.name().empty()) return Fail("a graph input has no name");
      if (seen.count(in.name())) continue;  // an initializer also listed as input (IR < 4 style)
      seen.insert(in.name());
      if (params_.IsDeclaredInitializer(in.name(), ctx_.table)) {
        g_.initializers.push_back(in.name());
        declared.push_back(&in);
      } else {
        g_.inputs.push_back(in.name());
        RETURN_IF_ERROR(ReadType(in.type(), g_.GetOrAddValue(in.name())));
      }
    }
    // foundry's export keeps data-less initializers as graph inputs; it records the original order.
    if (g_.metadata.count(kInitializerOrderKey)) {
      ASSIGN_OR_RETURN(auto order, ctx_.MetadataStringList(kInitializerOrderKey));
      std::unordered_map<std::string, size_t> rank;
      for (size_t i = 0; i < order.size(); ++i) rank.emplace(order[i], i);
      std::stable_sort(g_.initializers.begin(), g_.initializers.end(),
                       [&](const std::string& a, const std::string& b) {
                         auto ra = rank.find(a), rb = rank.find(b);
                         size_t ia = ra == rank.end() ? order.size() : ra->second;
                         size_t ib = rb == rank.end() ? order.size() : rb->second;
                         return ia < ib;
                       });
    }
    // Trainable parameters, in initializer order.
    auto elem_type = [&](const std::string& name) {
      auto it = init_protos_.find(name);
      int32_t dt = it != init_protos_.end() ? it->second->data_type() : 0;
      if (it == init_protos_.end())
        for (const auto* in : declared)
          if (in->name() == name) dt = in->type().tensor_type().elem_type();
      return dt;
    };
    g_.parameters = params_.Trainable(g_.initializers, elem_type);
    ctx_.param_set.insert(g_.parameters.begin(), g_.parameters.end());
    ctx_.init_names.insert(g_.initializers.begin(), g_.initializers.end());
    const auto& params = ctx_.param_set;
    for (const auto& init : graph.initializer()) {
      Value& v = g_.GetOrAddValue(init.name());
      if (!opts_.load_weights && params.count(init.name())) {
        if (!IsKnownDType(init.data_type()))
          return Fail("initializer " + QuoteName(init.name()) + " has element type " +
                      ElemTypeName(init.data_type()) + ", which foundry does not support");
        v.dtype = static_cast<DType>(init.data_type());
        v.shape.assign(init.dims().begin(), init.dims().end());
        v.rank_known = true;
        for (int64_t d : v.shape)
          if (d < 0)
            return Fail("initializer " + QuoteName(init.name()) + " has a negative dimension");
        continue;
      }
      auto t = TensorFromProto(init, ctx_.dir);
      if (!t.ok()) return t.status().Prepend(QuoteName(ctx_.display) + ": ");
      v.dtype = t->dtype();
      v.shape = t->shape();
      v.rank_known = true;
      v.data = std::make_shared<const Tensor>(std::move(t).value());
    }
    if (!params_.declares_parameters()) ClassifyByNameAndValue(elem_type);
    for (const auto* in : declared) {
      Value& v = g_.GetOrAddValue(in->name());
      RETURN_IF_ERROR(ReadType(in->type(), v));
      if (!v.ShapeKnown() || v.dtype == DType::kUndefined)
        return Fail("'" + in->name() +
                    "' is a parameter exported by shape only (export_params=False) but its "
                    "type is not fully known: " +
                    v.TypeString());
    }
    for (const auto& out : graph.output()) {
      if (out.name().empty()) return Fail("a graph output has no name");
      g_.outputs.push_back(out.name());
      Value& v = g_.GetOrAddValue(out.name());
      if (!g_.IsInitializer(out.name())) RETURN_IF_ERROR(ReadType(out.type(), v));
    }
    return Status::Ok();
  }

  // Without a declared trainable set: a parameter holding a non-finite value is a buffer (a -inf
  // mask) and does not train; the warning names what does not.
  void ClassifyByNameAndValue(const std::function<int32_t(const std::string&)>& elem_type) {
    std::vector<std::string> trained, frozen, non_finite;
    for (const auto& name : g_.parameters) {
      const Value* v = g_.FindValue(name);
      if (v && v->data && !AllFinite(*v->data))
        non_finite.push_back(name);
      else
        trained.push_back(name);
    }
    for (const auto& name : g_.initializers)
      if (IsFloat(static_cast<DType>(elem_type(name))) && !ctx_.param_set.count(name))
        frozen.push_back(name);
    frozen.insert(frozen.end(), non_finite.begin(), non_finite.end());
    for (const auto& name : non_finite) ctx_.param_set.erase(name);
    g_.parameters = trained;
    std::string warning = params_.FallbackWarning(ctx_.display, trained, frozen, non_finite);
    if (!warning.empty()) g_.metadata[kImportWarningKey] = warning;
  }

  Status ReadValueInfo() {
    for (const auto& vi : m_.graph().value_info()) {
      if (vi.name().empty() || init_protos_.count(vi.name())) continue;
      // A sequence (torch's SplitToSequence) is lowered to tensors after the nodes are read;
      // LowerSplitToSequence refuses any use it cannot lower.
      if (vi.type().has_sequence_type()) continue;
      Value* existing = g_.FindValue(vi.name());
      if (existing && existing->data) continue;
      RETURN_IF_ERROR(ReadType(vi.type(), g_.GetOrAddValue(vi.name())));
    }
    return Status::Ok();
  }

  Status ReadNodes() {
    const onnx::GraphProto& graph = m_.graph();
    FunctionInliner inliner(ctx_);
    for (const auto& in : graph.input()) ctx_.used_names.insert(in.name());
    for (const auto& init : graph.initializer()) ctx_.used_names.insert(init.name());
    for (const auto& out : graph.output()) ctx_.used_names.insert(out.name());
    for (const auto& vi : graph.value_info()) ctx_.used_names.insert(vi.name());
    AnnotationSignals signals;
    signals.doc_string_scopes =
        g_.metadata.count(kScopeSourceKey) && g_.metadata.at(kScopeSourceKey) == "doc_string";
    for (const auto& n : graph.node()) {
      for (const auto& o : n.output()) ctx_.used_names.insert(o);
      if (!n.name().empty() && n.name()[0] == '/') signals.have_scoped_names = true;
      if (inliner.Find(n)) signals.any_call = true;
      if (!signals.have_metadata)
        for (const auto& [k, v] : onnx_util::NodeMetadataProps(n))
          if (k == kNameScopesKey) signals.have_metadata = true;
    }
    ctx_.have_scoped_names = signals.have_scoped_names;
    reader_ = MakeAnnotationReader(ctx_, signals);
    g_.metadata[kFormatKey] = reader_->format();

    NodeAnnotation annotation;
    for (const auto& n : graph.node()) {
      std::string desc = n.op_type() + " node " + QuoteName(n.name());
      std::map<std::string, const onnx::AttributeProto*> attrs;
      for (const auto& a : n.attribute()) {
        if (!a.ref_attr_name().empty())
          return Fail(desc + ": attribute '" + a.name() +
                      "' refers to a function attribute outside a function");
        attrs[a.name()] = &a;
      }
      if (const onnx::FunctionProto* f = inliner.Find(n)) {
        RETURN_IF_ERROR(inliner.CheckExpansion(*f, n));
        RETURN_IF_ERROR(reader_->Read(n, annotation));
        RETURN_IF_ERROR(inliner.InlineTopLevel(*f, n, attrs, annotation.chain));
        continue;
      }
      Node node;
      node.name = n.name();
      node.op_type = n.op_type();
      node.domain = n.domain() == "ai.onnx" ? "" : n.domain();
      node.inputs.assign(n.input().begin(), n.input().end());
      node.outputs.assign(n.output().begin(), n.output().end());
      for (const auto& a : n.attribute()) {
        ASSIGN_OR_RETURN(node.attrs[a.name()], ctx_.ConvertAttr(a, desc));
      }
      RETURN_IF_ERROR(reader_->Read(n, annotation));
      if (!annotation.chain.empty()) {
        ctx_.RecordChain(annotation.chain);
        node.scope = annotation.chain.back();
        node.marks = std::move(annotation.marks);
      }
      g_.nodes.push_back(std::move(node));
    }
    return inliner.ResolveUndefinedOutputs();
  }

  ImportContext ctx_;
  const onnx::ModelProto& m_;
  const ImportOptions& opts_;
  Graph& g_;
  ParameterClassifier params_;
  std::unique_ptr<AnnotationReader> reader_;
  std::unordered_map<std::string, const onnx::TensorProto*> init_protos_;
};

}  // namespace
}  // namespace import_internal

StatusOr<Graph> ImportOnnxFromBytes(std::string_view bytes, const ImportOptions& options,
                                    const std::string& model_dir, const std::string& display_name) {
  onnx::ModelProto model;
  RETURN_IF_ERROR(import_internal::ParseModelBytes(bytes, display_name, model));
  import_internal::Importer importer(model, options, model_dir, display_name);
  auto graph = importer.Run();
  if (graph.ok()) {
    AssignRandomSeeds(*graph);
    return graph;
  }
  // Names come from the file and are quoted with QuoteName; this catches any other path by which
  // a control character reaches the message, so it stays one line.
  std::string message;
  for (char c : graph.status().message()) {
    unsigned char u = static_cast<unsigned char>(c);
    message += u < 0x20 || u == 0x7F ? EscapeName(std::string_view(&c, 1)) : std::string(1, c);
  }
  return Error(message);
}

StatusOr<Graph> ImportOnnx(const std::string& path, const ImportOptions& options) {
  RETURN_IF_ERROR(import_internal::CheckModelFileSize(path));
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ImportOnnxFromBytes(bytes, options, onnx_util::DirName(path), path);
}

}  // namespace foundry
