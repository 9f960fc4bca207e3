#include "compiler/onnx_import.h"

#include <onnx/checker.h>

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/onnx_proto_util.h"
#include "compiler/tensor_proto.h"

namespace foundry {

namespace {

using onnx_util::ElemTypeName;

constexpr const char* kModuleClassesKey = "foundry.module_classes";
constexpr const char* kParametersKey = "foundry.parameters";
constexpr const char* kBuffersKey = "foundry.buffers";
constexpr const char* kScopesKey = "foundry.scopes";
constexpr const char* kInitializerOrderKey = "foundry.initializers";
constexpr const char* kScopeSourceKey = "foundry.scope_source";
constexpr const char* kFormatKey = "foundry.annotation_format";
constexpr const char* kGraphSignatureKey = "pkg.torch.export.ExportedProgram.graph_signature";
constexpr const char* kNameScopesKey = "pkg.torch.onnx.name_scopes";
constexpr const char* kClassHierarchyKey = "pkg.torch.onnx.class_hierarchy";
constexpr const char* kExportHint = "pass a .onnx file exported with torch.onnx.export";
constexpr int kMaxFunctionDepth = 64;
// Inlining is exponential in the nesting of calls; a file that expands past this is rejected.
constexpr int64_t kMaxInlinedNodes = 20'000'000;

// ---------------------------------------------------------------------------------------------
// Small parsers.

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A Python repr() of a list of str: "['', 'transformer', \"it's\", 'a\\'b']".
std::optional<std::vector<std::string>> ParsePyStringList(std::string_view s) {
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  auto hex = [&](int digits) -> std::optional<uint32_t> {
    if (i + digits > s.size()) return std::nullopt;
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      char c = s[i + k];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        return std::nullopt;
    }
    i += digits;
    return v;
  };
  std::vector<std::string> out;
  skip_ws();
  if (i >= s.size() || s[i] != '[') return std::nullopt;
  ++i;
  for (;;) {
    skip_ws();
    if (i < s.size() && s[i] == ']') {
      ++i;
      break;
    }
    if (i < s.size() && (s[i] == 'u' || s[i] == 'U')) ++i;  // u'...' from Python 2 reprs
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return std::nullopt;
    char quote = s[i++];
    std::string item;
    for (;;) {
      if (i >= s.size()) return std::nullopt;
      char c = s[i++];
      if (c == quote) break;
      if (c != '\\') {
        item += c;
        continue;
      }
      if (i >= s.size()) return std::nullopt;
      char e = s[i++];
      switch (e) {
        case 'n':
          item += '\n';
          break;
        case 't':
          item += '\t';
          break;
        case 'r':
          item += '\r';
          break;
        case '0':
          item += '\0';
          break;
        case '\\':
          item += '\\';
          break;
        case '\'':
          item += '\'';
          break;
        case '"':
          item += '"';
          break;
        case 'x':
        case 'u':
        case 'U': {
          auto cp = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (!cp) return std::nullopt;
          AppendUtf8(*cp, item);
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          item += '\\';
          item += e;
      }
    }
    out.push_back(std::move(item));
    skip_ws();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == ']') {
      ++i;
      break;
    }
    return std::nullopt;
  }
  skip_ws();
  if (i != s.size()) return std::nullopt;
  return out;
}

// "transformer.blocks.0.attn.Wqkv.weight" -> "transformer.blocks.0.attn.Wqkv"; "w" -> "".
std::string ParentPath(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

bool IsInside(const std::string& path, const std::string& module) {
  if (module.empty()) return true;
  return path.size() > module.size() && path.compare(0, module.size(), module) == 0 &&
         path[module.size()] == '.';
}

int Depth(const std::string& path) {
  return path.empty() ? 0 : 1 + static_cast<int>(std::count(path.begin(), path.end(), '.'));
}

std::string CommonModulePrefix(const std::vector<std::string>& paths) {
  std::string prefix = paths.front();
  for (const std::string& p : paths) {
    while (!(p == prefix || IsInside(p, prefix))) prefix = ParentPath(prefix);
  }
  return prefix;
}

// "MultiheadAttention.1" -> "MultiheadAttention": torch's call-site variants of one class.
std::string StripVariant(const std::string& op_type) {
  size_t dot = op_type.rfind('.');
  if (dot == std::string::npos || dot + 1 == op_type.size()) return op_type;
  for (size_t i = dot + 1; i < op_type.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(op_type[i]))) return op_type;
  return op_type.substr(0, dot);
}

// "transformer.blocks.0.attn@1" -> "transformer.blocks.0.attn": torch.export marks repeated calls
// of one module with "@N".
std::string StripCallSuffix(const std::string& path) {
  size_t at = path.rfind('@');
  if (at == std::string::npos) return path;
  for (size_t i = at + 1; i < path.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(path[i]))) return path;
  return path.substr(0, at);
}

// "/transformer/blocks.0/attn/MatMul_1" -> "/transformer/blocks.0/attn"; unscoped -> "".
std::string NodeNameScope(const std::string& name) {
  if (name.empty() || name[0] != '/') return "";
  return name.substr(0, name.rfind('/'));
}

// torch.onnx's scope segment for a module path: the last non-numeric atom and what follows
// ("transformer.blocks.0" -> "blocks.0").
std::string UnqualifiedName(const std::string& path) {
  size_t end = path.size();
  for (;;) {
    size_t dot = path.rfind('.', end == 0 ? 0 : end - 1);
    size_t start = dot == std::string::npos ? 0 : dot + 1;
    std::string atom = path.substr(start, end - start);
    bool numeric = !atom.empty() && std::all_of(atom.begin(), atom.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!numeric || start == 0) return path.substr(start);
    end = dot;
  }
}

std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Module class table (`foundry.module_classes`), in the exporter's named_modules() order.

struct ClassTable {
  bool present = false;
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<std::string>> classes;

  const std::vector<std::string>* Find(const std::string& path) const {
    auto it = classes.find(path);
    return it == classes.end() ? nullptr : &it->second;
  }
  bool HasClass(const std::string& path, const std::string& bare) const {
    const auto* cls = Find(path);
    if (!cls) return false;
    for (const auto& c : *cls)
      if (BareClassName(c) == bare) return true;
    return false;
  }
};

// TorchScript scope strings ("/transformer/blocks.0/attn") -> chains of module paths
// (["", "transformer", "transformer.blocks.0", "transformer.blocks.0.attn"]). torch names each
// segment after the called module relative to its *caller*, which is not always its parent
// (`self.transformer.wte(x)` called from the root is "/wte"); `foundry.scopes` records the answer,
// the class table lets us search for it, and without either the segments are joined with '.'.
class ScopeResolver {
 public:
  ScopeResolver(const ClassTable& table, std::map<std::string, std::string> scopes)
      : table_(table), scopes_(std::move(scopes)) {
    cache_[""] = {""};
  }

  const std::vector<std::string>& Chain(const std::string& scope) {
    auto it = cache_.find(scope);
    if (it != cache_.end()) return it->second;
    size_t slash = scope.rfind('/');
    std::string parent_scope = slash == std::string::npos ? "" : scope.substr(0, slash);
    std::string seg = slash == std::string::npos ? scope : scope.substr(slash + 1);
    std::vector<std::string> chain = Chain(parent_scope);
    const std::string& cur = chain.back();
    std::string path;
    auto known = scopes_.find(scope);
    if (known != scopes_.end()) {
      path = known->second;
    } else {
      path = Search(cur, seg);
      if (path.empty()) path = cur.empty() ? seg : cur + "." + seg;
    }
    chain.push_back(path);
    return cache_[scope] = std::move(chain);
  }

 private:
  std::string Search(const std::string& cur, const std::string& seg) const {
    if (!table_.present) return "";
    std::vector<std::string> found;
    int best = std::numeric_limits<int>::max();
    for (const std::string& p : table_.order) {
      if (p.empty() || p == cur || !IsInside(p, cur) || UnqualifiedName(p) != seg) continue;
      int d = Depth(p);
      if (d < best) {
        best = d;
        found.clear();
      }
      if (d == best) found.push_back(p);
    }
    return found.size() == 1 ? found[0] : "";
  }

  const ClassTable& table_;
  std::map<std::string, std::string> scopes_;
  std::map<std::string, std::vector<std::string>> cache_;
};

// ---------------------------------------------------------------------------------------------

// What a function body is inlined under.
struct CallFrame {
  std::unordered_map<std::string, std::string> rename;       // body name -> graph name
  std::unordered_map<std::string, std::string> out_map;      // formal output -> graph name
  std::map<std::string, const onnx::AttributeProto*> attrs;  // the call's attributes
  std::vector<std::string> chain;              // module paths from the root to this instance
  std::string prefix;                          // for names of inlined nodes and values
  std::map<std::string, int> paramless_calls;  // per class, for matching modules in order
};

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const ImportOptions& options, std::string model_dir,
           std::string display)
      : m_(model), opts_(options), dir_(std::move(model_dir)), display_(std::move(display)) {}

  StatusOr<Graph> Run() {
    RETURN_IF_ERROR(CheckModel());
    RETURN_IF_ERROR(ReadMetadata());
    RETURN_IF_ERROR(ReadInitializersAndInputs());
    RETURN_IF_ERROR(RunChecker());
    RETURN_IF_ERROR(ReadValueInfo());
    RETURN_IF_ERROR(ReadNodes());
    RETURN_IF_ERROR(Validate());
    RETURN_IF_ERROR(BindDims());
    BuildModules();
    for (Node& n : g_.nodes)
      if (n.name.empty()) n.name = g_.UniqueNodeName(n.op_type);
    return std::move(g_);
  }

 private:
  Status Fail(const std::string& what) const { return Error("'" + display_ + "': " + what); }

  // --- versions, checker -----------------------------------------------------------------------

  Status CheckModel() {
    const onnx::GraphProto& graph = m_.graph();
    int64_t ir = m_.ir_version();
    bool have_default = false;
    int64_t opset = 0;
    for (const auto& imp : m_.opset_import()) {
      if (imp.domain().empty() || imp.domain() == "ai.onnx") {
        have_default = true;
        opset = imp.version();
      }
    }
    if (opts_.check_versions) {
      if (ir < 7 || ir > 10)
        return Error("'" + display_ + "' has ONNX IR version " + std::to_string(ir) +
                     "; foundry reads IR versions 7 to 10 (torch.onnx.export writes 7 or 8)");
    } else if (ir < 3) {
      return Error("'" + display_ + "' has ONNX IR version " + std::to_string(ir) +
                   "; foundry reads IR versions 3 to 10");
    }
    if (!have_default) return Error("'" + display_ + "' imports no ai.onnx opset; " + kExportHint);
    if (opts_.check_versions && (opset < 13 || opset > 18))
      return Error("'" + display_ + "' uses ai.onnx opset " + std::to_string(opset) +
                   "; foundry supports opsets 13 to 18 (export with torch.onnx.export(..., "
                   "opset_version=17))");
    if (graph.node_size() == 0) return Error("'" + display_ + "' has a graph with no nodes");
    if (graph.sparse_initializer_size() > 0) return Fail("sparse initializers are not supported");
    g_.ir_version = ir;
    g_.opset = opset;
    g_.name = graph.name().empty() ? "graph" : graph.name();

    return Status::Ok();
  }

  // After the importer's own checks of the initializers, whose messages are more specific.
  Status RunChecker() {
    if (!opts_.run_checker || g_.ir_version > 8 || g_.opset > 17) return Status::Ok();
    // Not check_model(): it looks for external data relative to the working directory.
    try {
      onnx::checker::CheckerContext ctx;
      ctx.set_ir_version(static_cast<int>(g_.ir_version));
      std::unordered_map<std::string, int> imports;
      for (const auto& imp : m_.opset_import())
        imports[imp.domain()] = static_cast<int>(imp.version());
      ctx.set_opset_imports(imports);
      ctx.set_model_dir(dir_);
      onnx::checker::LexicalScopeContext lex;
      onnx::checker::check_graph(m_.graph(), ctx, lex);
      if (m_.functions_size() > 0) onnx::checker::check_model_local_functions(m_, ctx, lex);
    } catch (const std::exception& e) {
      return Error("'" + display_ + "' failed the ONNX checker: " + OneLine(e.what()));
    }
    return Status::Ok();
  }

  // --- model metadata ------------------------------------------------------------------------

  StatusOr<nlohmann::ordered_json> ParseJson(const std::string& key) const {
    auto j = nlohmann::ordered_json::parse(g_.metadata.at(key), nullptr, false);
    if (j.is_discarded()) return Fail("model metadata '" + key + "' is not valid JSON");
    return j;
  }

  StatusOr<std::vector<std::string>> StringList(const std::string& key) const {
    ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseJson(key));
    std::vector<std::string> out;
    if (!j.is_array()) return Fail("model metadata '" + key + "' is not a JSON list of names");
    for (const auto& item : j) {
      if (!item.is_string())
        return Fail("model metadata '" + key + "' is not a JSON list of names");
      out.push_back(item.get<std::string>());
    }
    return out;
  }

  Status ReadMetadata() {
    for (const auto& p : m_.metadata_props()) g_.metadata[p.key()] = p.value();
    if (g_.metadata.count(kModuleClassesKey)) {
      ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseJson(kModuleClassesKey));
      if (!j.is_object())
        return Fail(std::string("model metadata '") + kModuleClassesKey +
                    "' is not a JSON object of module path -> [class, bases...]");
      table_.present = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        std::vector<std::string> classes;
        if (it.value().is_string()) {
          classes.push_back(it.value().get<std::string>());
        } else if (it.value().is_array()) {
          for (const auto& c : it.value())
            if (c.is_string()) classes.push_back(c.get<std::string>());
        } else {
          return Fail(std::string("model metadata '") + kModuleClassesKey + "': module '" +
                      it.key() + "' has no class list");
        }
        table_.order.push_back(it.key());
        table_.classes[it.key()] = std::move(classes);
      }
    }
    if (g_.metadata.count(kScopesKey)) {
      ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseJson(kScopesKey));
      if (!j.is_object())
        return Fail(std::string("model metadata '") + kScopesKey +
                    "' is not a JSON object of scope -> module path");
      for (auto it = j.begin(); it != j.end(); ++it)
        if (it.value().is_string()) scopes_[it.key()] = it.value().get<std::string>();
    }
    if (g_.metadata.count(kParametersKey)) {
      ASSIGN_OR_RETURN(listed_params_, StringList(kParametersKey));
      have_param_list_ = true;
    }
    if (g_.metadata.count(kBuffersKey)) {
      ASSIGN_OR_RETURN(auto buffers, StringList(kBuffersKey));
      listed_buffers_.insert(buffers.begin(), buffers.end());
    }
    if (!have_param_list_ && g_.metadata.count(kGraphSignatureKey)) ParseGraphSignature();
    doc_string_scopes_ =
        g_.metadata.count(kScopeSourceKey) && g_.metadata.at(kScopeSourceKey) == "doc_string";
    return Status::Ok();
  }

  // torch.export's `str(ExportGraphSignature)`, one input per line:
  //   p_transformer_wte_weight: PARAMETER target='transformer.wte.weight'
  //   b_mask: BUFFER target='mask' persistent=True
  void ParseGraphSignature() {
    const std::string& text = g_.metadata.at(kGraphSignatureKey);
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      size_t colon = line.find(':');
      size_t target = line.find("target='");
      if (colon == std::string::npos || target == std::string::npos) continue;
      size_t close = line.find('\'', target + 8);
      if (close == std::string::npos) continue;
      std::string placeholder = line.substr(0, colon);
      placeholder.erase(0, placeholder.find_first_not_of(" \t"));
      std::string kind = line.substr(colon + 1, target - colon - 1);
      std::string name = line.substr(target + 8, close - target - 8);
      if (kind.find("PARAMETER") != std::string::npos) {
        have_signature_ = true;
        signature_params_.insert(name);
        signature_params_.insert(placeholder);
      } else if (kind.find("BUFFER") != std::string::npos ||
                 kind.find("CONSTANT_TENSOR") != std::string::npos) {
        have_signature_ = true;
        signature_buffers_.insert(name);
        signature_buffers_.insert(placeholder);
      }
    }
  }

  // --- values ----------------------------------------------------------------------------------

  Status ReadType(const onnx::TypeProto& type, Value& v) {
    if (type.value_case() == onnx::TypeProto::VALUE_NOT_SET) return Status::Ok();
    if (!type.has_tensor_type())
      return Fail("value '" + v.name +
                  "' is not a tensor (a sequence, map or optional); foundry handles tensors only");
    const auto& tt = type.tensor_type();
    if (tt.elem_type() != 0) {
      if (!IsKnownDType(tt.elem_type()))
        return Fail("value '" + v.name + "' has element type " + ElemTypeName(tt.elem_type()) +
                    ", which foundry does not support");
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
      } else {
        v.shape.push_back(-1);
        params.push_back(d.has_dim_param() ? d.dim_param() : "");
        any_param |= d.has_dim_param() && !d.dim_param().empty();
      }
    }
    if (any_param) v.dim_params = std::move(params);
    return Status::Ok();
  }

  bool IsDeclaredInitializer(const std::string& name) const {
    if (listed_buffers_.count(name) || signature_params_.count(name) ||
        signature_buffers_.count(name))
      return true;
    if (std::find(listed_params_.begin(), listed_params_.end(), name) != listed_params_.end())
      return true;
    // `transformer.alibi_slopes`: named as an attribute of a module the exporter listed. A run-time
    // input is never named so.
    std::string owner = ParentPath(name);
    return table_.present && !owner.empty() && table_.Find(owner) != nullptr;
  }

  Status ReadInitializersAndInputs() {
    const onnx::GraphProto& graph = m_.graph();
    std::unordered_set<std::string> seen;
    for (const auto& init : graph.initializer()) {
      if (init.name().empty()) return Fail("an initializer has no name");
      if (!seen.insert(init.name()).second)
        return Fail("initializer '" + init.name() + "' appears twice");
      g_.initializers.push_back(init.name());
      init_protos_[init.name()] = &init;
    }
    std::vector<const onnx::ValueInfoProto*> declared;
    for (const auto& in : graph.input()) {
      if (in.name().empty()) return Fail("a graph input has no name");
      if (seen.count(in.name())) continue;  // an initializer also listed as input (IR < 4 style)
      seen.insert(in.name());
      if (IsDeclaredInitializer(in.name())) {
        g_.initializers.push_back(in.name());
        declared.push_back(&in);
      } else {
        g_.inputs.push_back(in.name());
        RETURN_IF_ERROR(ReadType(in.type(), g_.GetOrAddValue(in.name())));
      }
    }
    // foundry's export keeps data-less initializers as graph inputs; it records the original order.
    if (g_.metadata.count(kInitializerOrderKey)) {
      ASSIGN_OR_RETURN(auto order, StringList(kInitializerOrderKey));
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
    std::unordered_set<std::string> trainable;
    if (have_param_list_) {
      trainable.insert(listed_params_.begin(), listed_params_.end());
    } else if (have_signature_) {
      trainable = signature_params_;
    }
    for (const std::string& name : g_.initializers) {
      bool is_param;
      if (have_param_list_ || have_signature_) {
        is_param = trainable.count(name) != 0;
      } else {
        auto it = init_protos_.find(name);
        int32_t dt = it != init_protos_.end() ? it->second->data_type() : 0;
        if (it == init_protos_.end())
          for (const auto* in : declared)
            if (in->name() == name) dt = in->type().tensor_type().elem_type();
        is_param = IsFloat(static_cast<DType>(dt));
      }
      if (is_param) g_.parameters.push_back(name);
    }
    param_set_.insert(g_.parameters.begin(), g_.parameters.end());
    init_names_.insert(g_.initializers.begin(), g_.initializers.end());
    const auto& params = param_set_;
    for (const auto& init : graph.initializer()) {
      Value& v = g_.GetOrAddValue(init.name());
      if (!opts_.load_weights && params.count(init.name())) {
        if (!IsKnownDType(init.data_type()))
          return Fail("initializer '" + init.name() + "' has element type " +
                      ElemTypeName(init.data_type()) + ", which foundry does not support");
        v.dtype = static_cast<DType>(init.data_type());
        v.shape.assign(init.dims().begin(), init.dims().end());
        v.rank_known = true;
        for (int64_t d : v.shape)
          if (d < 0) return Fail("initializer '" + init.name() + "' has a negative dimension");
        continue;
      }
      auto t = TensorFromProto(init, dir_);
      if (!t.ok()) return t.status().Prepend("'" + display_ + "': ");
      v.dtype = t->dtype();
      v.shape = t->shape();
      v.rank_known = true;
      v.data = std::make_shared<const Tensor>(std::move(t).value());
    }
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

  Status ReadValueInfo() {
    for (const auto& vi : m_.graph().value_info()) {
      if (vi.name().empty() || init_protos_.count(vi.name())) continue;
      Value* existing = g_.FindValue(vi.name());
      if (existing && existing->data) continue;
      RETURN_IF_ERROR(ReadType(vi.type(), g_.GetOrAddValue(vi.name())));
    }
    return Status::Ok();
  }

  // --- nodes -----------------------------------------------------------------------------------

  StatusOr<Attribute> ConvertAttr(const onnx::AttributeProto& a, const std::string& node) {
    using A = onnx::AttributeProto;
    A::AttributeType type = a.type();
    if (type == A::UNDEFINED) {  // old exporters leave the type out; infer it from the payload
      if (a.has_f())
        type = A::FLOAT;
      else if (a.has_i())
        type = A::INT;
      else if (a.has_s())
        type = A::STRING;
      else if (a.has_t())
        type = A::TENSOR;
      else if (a.has_g())
        type = A::GRAPH;
      else if (a.floats_size())
        type = A::FLOATS;
      else if (a.ints_size())
        type = A::INTS;
      else if (a.strings_size())
        type = A::STRINGS;
      else if (a.graphs_size())
        type = A::GRAPHS;
      else
        return Fail("attribute '" + a.name() + "' of " + node + " has no type");
    }
    switch (type) {
      case A::FLOAT:
        return Attribute::Float(a.f());
      case A::INT:
        return Attribute::Int(a.i());
      case A::STRING:
        return Attribute::String(a.s());
      case A::FLOATS:
        return Attribute::Floats({a.floats().begin(), a.floats().end()});
      case A::INTS:
        return Attribute::Ints({a.ints().begin(), a.ints().end()});
      case A::STRINGS:
        return Attribute::Strings({a.strings().begin(), a.strings().end()});
      case A::TENSOR: {
        auto t = TensorFromProto(a.t(), dir_);
        if (!t.ok())
          return Fail("attribute '" + a.name() + "' of " + node + ": " + t.status().message());
        return Attribute::FromTensor(std::move(t).value());
      }
      case A::GRAPH:
      case A::GRAPHS:
        return Fail(node + " has a subgraph attribute '" + a.name() +
                    "'; control flow (If, Loop, Scan) is not supported: export a model without "
                    "data-dependent control flow");
      default:
        return Fail("attribute '" + a.name() + "' of " + node + " has type " +
                    A::AttributeType_Name(type) + ", which is not supported");
    }
  }

  std::string NewValueName(const std::string& base) {
    std::string name = base;
    for (int i = 1; used_names_.count(name); ++i) name = base + "_" + std::to_string(i);
    used_names_.insert(name);
    return name;
  }

  const onnx::FunctionProto* FindFunction(const onnx::NodeProto& n) const {
    auto it = functions_.find({n.domain(), n.op_type()});
    return it == functions_.end() ? nullptr : it->second;
  }

  // Scope of a node outside any function: doc string (our export), dynamo metadata, or name.
  Status TopLevelChain(const onnx::NodeProto& n, std::vector<std::string>& chain) {
    chain.clear();
    if (have_metadata_) {
      auto props = onnx_util::NodeMetadataProps(n);
      std::string scopes_text, classes_text;
      for (const auto& [k, v] : props) {
        if (k == kNameScopesKey) scopes_text = v;
        if (k == kClassHierarchyKey) classes_text = v;
      }
      if (!scopes_text.empty()) {
        auto scopes = ParsePyStringList(scopes_text);
        if (!scopes)
          return Fail("node '" + n.name() + "': cannot parse " + kNameScopesKey + " " +
                      scopes_text);
        std::vector<std::string> classes;
        if (!classes_text.empty()) {
          auto parsed = ParsePyStringList(classes_text);
          if (!parsed)
            return Fail("node '" + n.name() + "': cannot parse " + kClassHierarchyKey + " " +
                        classes_text);
          classes = std::move(*parsed);
        }
        // The last entry names the op itself, not a module.
        for (size_t i = 0; i + 1 < scopes->size(); ++i) {
          std::string path = StripCallSuffix((*scopes)[i]);
          if (!chain.empty() && path == chain.back()) continue;
          chain.push_back(path);
          if (i < classes.size() && !classes[i].empty()) annotated_class_.emplace(path, classes[i]);
        }
        if (chain.empty()) chain.push_back("");
        return Status::Ok();
      }
    }
    if (have_scoped_names_) chain = resolver_->Chain(NodeNameScope(n.name()));
    return Status::Ok();
  }

  void RecordChain(const std::vector<std::string>& chain) {
    for (const auto& p : chain) module_paths_.insert(p);
  }

  Status ReadNodes() {
    const onnx::GraphProto& graph = m_.graph();
    for (const auto& f : m_.functions()) functions_[{f.domain(), f.name()}] = &f;
    for (const auto& in : graph.input()) used_names_.insert(in.name());
    for (const auto& init : graph.initializer()) used_names_.insert(init.name());
    for (const auto& out : graph.output()) used_names_.insert(out.name());
    for (const auto& vi : graph.value_info()) used_names_.insert(vi.name());
    bool any_call = false;
    for (const auto& n : graph.node()) {
      for (const auto& o : n.output()) used_names_.insert(o);
      if (!n.name().empty() && n.name()[0] == '/') have_scoped_names_ = true;
      if (FindFunction(n)) any_call = true;
      if (!have_metadata_)
        for (const auto& [k, v] : onnx_util::NodeMetadataProps(n))
          if (k == kNameScopesKey) have_metadata_ = true;
    }
    resolver_ = std::make_unique<ScopeResolver>(table_, scopes_);
    if (doc_string_scopes_)
      format_ = "foundry";
    else if (any_call)
      format_ = "functions";
    else if (have_metadata_)
      format_ = "metadata";
    else if (have_scoped_names_)
      format_ = "scopes";
    else
      format_ = "none";
    g_.metadata[kFormatKey] = format_;

    for (const auto& n : graph.node()) {
      std::string desc = n.op_type() + " node '" + n.name() + "'";
      std::map<std::string, const onnx::AttributeProto*> attrs;
      for (const auto& a : n.attribute()) {
        if (!a.ref_attr_name().empty())
          return Fail(desc + ": attribute '" + a.name() +
                      "' refers to a function attribute outside a function");
        attrs[a.name()] = &a;
      }
      if (const onnx::FunctionProto* f = FindFunction(n)) {
        std::set<const onnx::FunctionProto*> visiting;
        int64_t size = ExpandedSize(f, visiting);
        if (size < 0) return Fail(desc + ": function " + f->name() + " calls itself");
        if (size > kMaxInlinedNodes ||
            static_cast<int64_t>(g_.nodes.size()) + size > kMaxInlinedNodes)
          return Fail(desc + ": inlining its functions makes more than " +
                      std::to_string(kMaxInlinedNodes) + " nodes");
        std::vector<std::string> chain;
        if (doc_string_scopes_)
          chain = {ParseDocString(n).scope};
        else
          RETURN_IF_ERROR(TopLevelChain(n, chain));
        if (chain.empty()) chain.push_back("");
        // A top-level call's scoped name already names its own module; its caller is the parent.
        CallFrame root;
        root.chain = chain;
        root.prefix = "";
        std::vector<std::string> inputs(n.input().begin(), n.input().end());
        std::vector<std::string> outputs(n.output().begin(), n.output().end());
        RETURN_IF_ERROR(Inline(*f, n, inputs, outputs, attrs, root, /*top_level=*/true, 0));
        continue;
      }
      Node node;
      node.name = n.name();
      node.op_type = n.op_type();
      node.domain = n.domain() == "ai.onnx" ? "" : n.domain();
      node.inputs.assign(n.input().begin(), n.input().end());
      node.outputs.assign(n.output().begin(), n.output().end());
      for (const auto& a : n.attribute()) {
        ASSIGN_OR_RETURN(node.attrs[a.name()], ConvertAttr(a, desc));
      }
      if (doc_string_scopes_) {
        DocString d = ParseDocString(n);
        node.scope = d.scope;
        node.marks = std::move(d.marks);
      } else if (format_ != "none") {
        std::vector<std::string> chain;
        RETURN_IF_ERROR(TopLevelChain(n, chain));
        if (!chain.empty()) {
          RecordChain(chain);
          node.scope = chain.back();
        }
      }
      g_.nodes.push_back(std::move(node));
    }
    if (format_ != "none" && format_ != "foundry") AttachRootConstants();
    return Status::Ok();
  }

  // TorchScript gives many Constant nodes no scope ("Constant_54" inside an attention block), and
  // exports derived from its names inherit that. A constant belongs to whoever reads it: a root
  // Constant whose readers all sit in one module moves to the deepest module containing them all
  // (what the functions export, which keeps constants inside the bodies, says too).
  void AttachRootConstants() {
    std::unordered_map<std::string, std::vector<const Node*>> readers;
    for (const Node& n : g_.nodes)
      for (const auto& in : n.inputs)
        if (!in.empty()) readers[in].push_back(&n);
    for (Node& n : g_.nodes) {
      if (n.op_type != "Constant" || !n.domain.empty() || !n.scope.empty() || n.outputs.size() != 1)
        continue;
      auto it = readers.find(n.outputs[0]);
      if (it == readers.end()) continue;
      std::vector<std::string> scopes;
      for (const Node* r : it->second) scopes.push_back(r->scope);
      std::string common = CommonModulePrefix(scopes);
      while (!common.empty() && !module_paths_.count(common)) common = ParentPath(common);
      n.scope = common;
    }
  }

  struct DocString {
    std::string scope;
    std::map<std::string, std::string> marks;
  };

  // foundry's export: one "key=value" per line, "scope=<path>" and "mark.<key>=<value>"; values
  // escape '\' and newlines.
  static DocString ParseDocString(const onnx::NodeProto& n) {
    DocString d;
    const std::string& text = n.doc_string();
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key = line.substr(0, eq), raw = line.substr(eq + 1), value;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '\\' && i + 1 < raw.size()) {
          ++i;
          value += raw[i] == 'n' ? '\n' : raw[i];
        } else {
          value += raw[i];
        }
      }
      if (key == "scope")
        d.scope = value;
      else if (key.rfind("mark.", 0) == 0)
        d.marks[key.substr(5)] = value;
    }
    return d;
  }

  // The number of nodes a call of `f` inlines to (saturating past kMaxInlinedNodes); -1 when `f`
  // (transitively) calls itself.
  int64_t ExpandedSize(const onnx::FunctionProto* f,
                       std::set<const onnx::FunctionProto*>& visiting) {
    auto memo = expanded_size_.find(f);
    if (memo != expanded_size_.end()) return memo->second;
    if (!visiting.insert(f).second) return -1;
    int64_t total = 0;
    for (const auto& n : f->node()) {
      int64_t add = 1;
      if (const onnx::FunctionProto* nested = FindFunction(n)) {
        add = ExpandedSize(nested, visiting);
        if (add < 0) return -1;
      }
      total = std::min(total + add, kMaxInlinedNodes + 1);
    }
    visiting.erase(f);
    return expanded_size_[f] = total;
  }

  // Where the parameters a call consumes live: `ParentPath(p)` for each parameter its body reads
  // directly, and the parent of the instance of each nested call that consumes parameters (that
  // instance is a child of this one). `use_buffers` counts every initializer, not only the
  // trainable ones.
  void DeriveOwners(const onnx::FunctionProto& f, const std::vector<std::string>& inputs,
                    bool use_buffers, int depth, std::vector<std::string>& owners) {
    if (depth >= kMaxFunctionDepth) return;
    const auto& pool = use_buffers ? init_names_ : param_set_;
    std::unordered_map<std::string, std::string> bound;
    for (int i = 0; i < f.input_size() && i < static_cast<int>(inputs.size()); ++i)
      bound[f.input(i)] = inputs[i];
    auto actual = [&](const std::string& name) {
      auto it = bound.find(name);
      return it == bound.end() ? std::string() : it->second;
    };
    for (const auto& n : f.node()) {
      if (const onnx::FunctionProto* nested = FindFunction(n)) {
        std::vector<std::string> nested_inputs;
        for (const auto& in : n.input()) nested_inputs.push_back(actual(in));
        std::vector<std::string> nested_owners;
        DeriveOwners(*nested, nested_inputs, use_buffers, depth + 1, nested_owners);
        if (!nested_owners.empty())
          owners.push_back(ParentPath(ResolveInstance(*nested, CommonModulePrefix(nested_owners))));
        continue;
      }
      for (const auto& in : n.input()) {
        std::string a = actual(in);
        if (!a.empty() && pool.count(a)) owners.push_back(ParentPath(a));
      }
    }
  }

  // With a class table: the path itself or its nearest ancestor of the function's class.
  std::string ResolveInstance(const onnx::FunctionProto& f, const std::string& path) const {
    if (!table_.present) return path;
    std::string cls = StripVariant(f.name());
    for (std::string p = path;; p = ParentPath(p)) {
      if (table_.HasClass(p, cls)) return p;
      if (p.empty()) break;
    }
    return path;
  }

  // Which module instance a call is: see the header comment ("functions"). Sets `identified`
  // false when nothing names the instance and the caller's path is returned.
  std::string InstancePath(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                           const std::vector<std::string>& inputs, CallFrame& caller,
                           bool top_level, bool& identified) {
    identified = true;
    std::string cls = StripVariant(f.name());
    std::vector<std::string> owners;
    DeriveOwners(f, inputs, /*use_buffers=*/false, 0, owners);
    if (owners.empty()) DeriveOwners(f, inputs, /*use_buffers=*/true, 0, owners);
    if (!owners.empty()) return ResolveInstance(f, CommonModulePrefix(owners));
    if (top_level && have_scoped_names_ && !call.name().empty() && call.name()[0] == '/')
      return caller.chain.back();
    const std::string& base = caller.chain.back();
    if (table_.present) {
      std::vector<std::string> found;
      int best = std::numeric_limits<int>::max();
      for (const std::string& p : table_.order) {
        if (!IsInside(p, base) || !table_.HasClass(p, cls)) continue;
        int d = Depth(p);
        if (d < best) {
          best = d;
          found.clear();
        }
        if (d == best) found.push_back(p);
      }
      int k = caller.paramless_calls[cls]++;
      if (k < static_cast<int>(found.size())) return found[k];
    }
    identified = false;
    return base;
  }

  Status Inline(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                const std::map<std::string, const onnx::AttributeProto*>& attrs, CallFrame& caller,
                bool top_level, int depth) {
    std::string call_desc = call.op_type() + " node '" + call.name() + "'";
    if (depth >= kMaxFunctionDepth)
      return Fail(call_desc + ": functions nest deeper than " + std::to_string(kMaxFunctionDepth) +
                  " calls (a recursive function?)");
    std::pair<std::string, std::string> key{f.domain(), f.name()};
    if (std::find(call_stack_.begin(), call_stack_.end(), key) != call_stack_.end())
      return Fail("function " + f.domain() + "::" + f.name() + " calls itself");
    call_stack_.push_back(key);

    CallFrame frame;
    bool identified = true;
    std::string path = InstancePath(f, call, inputs, caller, top_level, identified);
    frame.chain = caller.chain;
    auto pos = std::find(frame.chain.begin(), frame.chain.end(), path);
    if (pos != frame.chain.end())
      frame.chain.erase(pos + 1, frame.chain.end());
    else
      frame.chain.push_back(path);
    RecordChain(frame.chain);
    std::string cls = StripVariant(f.name());
    if (identified && !annotated_class_.count(path))
      annotated_class_[path] = f.domain().empty() ? cls : f.domain() + "." + cls;
    std::string call_name = call.name().empty() ? call.op_type() : call.name();
    frame.prefix = caller.prefix.empty() ? call_name : caller.prefix + "/" + call_name;
    frame.attrs = attrs;
    for (int i = 0; i < f.input_size(); ++i)
      frame.rename[f.input(i)] = i < static_cast<int>(inputs.size()) ? inputs[i] : "";
    for (int j = 0; j < f.output_size(); ++j) {
      std::string actual = j < static_cast<int>(outputs.size()) ? outputs[j] : "";
      if (actual.empty()) actual = NewValueName(frame.prefix + "/" + f.output(j));
      frame.out_map[f.output(j)] = actual;
    }
    std::unordered_set<std::string> produced;

    for (const auto& inner : f.node()) {
      std::string desc = inner.op_type() + " node '" + inner.name() + "' in function " + f.name();
      std::vector<std::string> in_names;
      for (const auto& in : inner.input()) {
        auto it = frame.rename.find(in);
        in_names.push_back(in.empty() ? "" : it != frame.rename.end() ? it->second : in);
      }
      // Attributes, with references to the call's attributes resolved.
      std::vector<onnx::AttributeProto> resolved;
      for (const auto& a : inner.attribute()) {
        if (a.ref_attr_name().empty()) {
          resolved.push_back(a);
          continue;
        }
        auto it = frame.attrs.find(a.ref_attr_name());
        if (it == frame.attrs.end()) continue;  // not given at the call: the op's default
        onnx::AttributeProto copy = *it->second;
        copy.set_name(a.name());
        resolved.push_back(std::move(copy));
      }
      std::vector<std::string> out_names;
      for (const auto& out : inner.output()) {
        if (out.empty()) {
          out_names.push_back("");
          continue;
        }
        auto formal = frame.out_map.find(out);
        std::string name =
            formal != frame.out_map.end() ? formal->second : NewValueName(frame.prefix + "/" + out);
        if (formal != frame.out_map.end()) produced.insert(out);
        frame.rename[out] = name;
        out_names.push_back(name);
      }
      std::string inner_name = inner.name().empty() ? inner.op_type() : inner.name();
      if (const onnx::FunctionProto* nested = FindFunction(inner)) {
        std::map<std::string, const onnx::AttributeProto*> nested_attrs;
        for (const auto& a : resolved) nested_attrs[a.name()] = &a;
        onnx::NodeProto named = inner;
        named.set_name(inner_name);
        RETURN_IF_ERROR(
            Inline(*nested, named, in_names, out_names, nested_attrs, frame, false, depth + 1));
        continue;
      }
      Node node;
      node.name = frame.prefix + "/" + inner_name;
      node.op_type = inner.op_type();
      node.domain = inner.domain() == "ai.onnx" ? "" : inner.domain();
      node.inputs = std::move(in_names);
      node.outputs = std::move(out_names);
      node.scope = frame.chain.back();
      for (const auto& a : resolved) {
        ASSIGN_OR_RETURN(node.attrs[a.name()], ConvertAttr(a, desc));
      }
      g_.nodes.push_back(std::move(node));
    }
    // A formal output no body node produced passes a value through (or an input) unchanged.
    for (int j = 0; j < f.output_size(); ++j) {
      if (produced.count(f.output(j))) continue;
      auto src = frame.rename.find(f.output(j));
      if (src == frame.rename.end() || src->second.empty())
        return Fail(call_desc + ": function " + f.name() + " never produces its output '" +
                    f.output(j) + "'");
      Node id;
      id.name = frame.prefix + "/Identity_" + std::to_string(j);
      id.op_type = "Identity";
      id.inputs = {src->second};
      id.outputs = {frame.out_map[f.output(j)]};
      id.scope = frame.chain.back();
      g_.nodes.push_back(std::move(id));
    }
    call_stack_.pop_back();
    return Status::Ok();
  }

  // --- checks ----------------------------------------------------------------------------------

  Status Validate() {
    std::unordered_set<std::string> defined(g_.inputs.begin(), g_.inputs.end());
    defined.insert(g_.initializers.begin(), g_.initializers.end());
    std::unordered_map<std::string, const Node*> producer;
    for (const Node& n : g_.nodes) {
      if (n.op_type.empty()) return Fail("node '" + n.name + "' has no op_type");
      for (const auto& in : n.inputs) {
        if (in.empty()) continue;
        g_.GetOrAddValue(in);
        if (!defined.count(in))
          return Fail(n.Describe() + " reads '" + in +
                      "', which is not a graph input, an initializer or an earlier node's "
                      "output (nodes must be in topological order)");
      }
      for (const auto& out : n.outputs) {
        if (out.empty()) continue;
        if (defined.count(out)) {
          auto p = producer.find(out);
          return Fail(n.Describe() + " writes '" + out + "', which is already " +
                      (p != producer.end() ? "written by " + p->second->Describe()
                                           : std::string("a graph input or an initializer")));
        }
        defined.insert(out);
        producer[out] = &n;
        g_.GetOrAddValue(out);
      }
    }
    for (const auto& out : g_.outputs)
      if (!defined.count(out))
        return Fail("graph output '" + out + "' is not produced by any node");
    return Status::Ok();
  }

  Status BindDims() {
    std::set<std::string> seen;
    for (const auto& [name, value] : g_.values())
      for (const auto& p : value.dim_params)
        if (!p.empty()) seen.insert(p);
    for (const auto& [name, size] : opts_.dims) {
      if (seen.count(name)) continue;
      std::string have;
      for (const auto& s : seen) have += (have.empty() ? "" : ", ") + s;
      return Fail("--dim " + name + "=" + std::to_string(size) +
                  ": the model has no symbolic dimension '" + name + "' (it has " +
                  (have.empty() ? std::string("none") : have) + ")");
    }
    for (const auto& [name, size] : opts_.dims)
      if (size <= 0)
        return Fail("--dim " + name + "=" + std::to_string(size) + ": sizes must be positive");
    if (opts_.dims.empty()) return Status::Ok();
    std::vector<std::string> names;
    for (const auto& [name, value] : g_.values()) names.push_back(name);
    for (const auto& name : names) {
      Value& v = *g_.FindValue(name);
      bool any_left = false;
      for (size_t i = 0; i < v.dim_params.size(); ++i) {
        auto it = opts_.dims.find(v.dim_params[i]);
        if (it != opts_.dims.end()) {
          v.shape[i] = it->second;
          v.dim_params[i].clear();
        }
        any_left |= !v.dim_params[i].empty();
      }
      if (!any_left) v.dim_params.clear();
    }
    return Status::Ok();
  }

  void BuildModules() {
    if (doc_string_scopes_) {
      for (const auto& path : table_.order) g_.modules[path].classes = table_.classes.at(path);
      return;
    }
    if (format_ == "none") return;
    for (const auto& path : module_paths_) {
      Module m;
      if (const auto* cls = table_.Find(path)) {
        m.classes = *cls;
      } else {
        auto it = annotated_class_.find(path);
        if (it != annotated_class_.end()) m.classes = {it->second};
      }
      g_.modules[path] = std::move(m);
    }
  }

  const onnx::ModelProto& m_;
  const ImportOptions& opts_;
  std::string dir_;
  std::string display_;
  Graph g_;

  ClassTable table_;
  std::map<std::string, std::string> scopes_;
  std::vector<std::string> listed_params_;
  bool have_param_list_ = false;
  std::unordered_set<std::string> listed_buffers_;
  bool have_signature_ = false;
  std::unordered_set<std::string> signature_params_, signature_buffers_;
  bool doc_string_scopes_ = false;

  std::unordered_map<std::string, const onnx::TensorProto*> init_protos_;
  std::unordered_set<std::string> param_set_, init_names_;
  std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*> functions_;
  std::vector<std::pair<std::string, std::string>> call_stack_;
  std::map<const onnx::FunctionProto*, int64_t> expanded_size_;
  std::unordered_set<std::string> used_names_;
  bool have_scoped_names_ = false;
  bool have_metadata_ = false;
  std::string format_;
  std::unique_ptr<ScopeResolver> resolver_;
  std::set<std::string> module_paths_;
  std::map<std::string, std::string> annotated_class_;
};

}  // namespace

StatusOr<Graph> ImportOnnxFromBytes(std::string_view bytes, const ImportOptions& options,
                                    const std::string& model_dir, const std::string& display_name) {
  if (bytes.empty()) return Error("'" + display_name + "' is empty; " + kExportHint);
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return Error("'" + display_name +
                 "' is larger than 2 GiB, protobuf's limit; export the weights as external data "
                 "(torch.onnx.export does so for models over 2 GiB)");
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Error("'" + display_name + "' is not an ONNX model (protobuf parse failed); " +
                 kExportHint);
  // Random bytes can parse as a message of unknown fields: without a graph or version it is not
  // a model.
  if (!model.has_graph() || model.ir_version() == 0)
    return Error("'" + display_name + "' is not an ONNX model (no graph or IR version); " +
                 kExportHint);
  Importer importer(model, options, model_dir, display_name);
  auto graph = importer.Run();
  if (graph.ok()) return graph;
  // Names come from the file: keep the message on one line whatever they hold.
  std::string message;
  for (char c : graph.status().message()) {
    if (c == '\n')
      message += "\\n";
    else if (c == '\r')
      message += "\\r";
    else
      message += c;
  }
  return Error(message);
}

StatusOr<Graph> ImportOnnx(const std::string& path, const ImportOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, onnx_util::ReadFile(path));
  return ImportOnnxFromBytes(bytes, options, onnx_util::DirName(path), path);
}

}  // namespace foundry
