// The "metadata" format: the dynamo exporter's NodeProto.metadata_props.
#include <cstdint>
#include <optional>

#include "base/quote.h"
#include "compiler/import_annotation.h"
#include "compiler/onnx_proto_util.h"

namespace foundry {
namespace import_internal {

namespace {

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

// "transformer.blocks.0.attn@1" -> "transformer.blocks.0.attn": torch.export marks repeated calls
// of one module with "@N".
std::string StripCallSuffix(const std::string& path) {
  size_t at = path.rfind('@');
  if (at == std::string::npos) return path;
  for (size_t i = at + 1; i < path.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(path[i]))) return path;
  return path.substr(0, at);
}

// Scope names torch.export writes that are no module: its placeholder for nodes created without
// an nn_module_stack (the size lookups of dynamic shapes). Their nodes belong to the caller.
bool IsTorchInternalScope(const std::string& path) {
  return path == "_empty_nn_module_stack_from_metadata_hook";
}

class MetadataReader : public AnnotationReader {
 public:
  MetadataReader(ImportContext& ctx, std::unique_ptr<AnnotationReader> fallback)
      : ctx_(ctx), fallback_(std::move(fallback)) {}
  const char* format() const override { return "metadata"; }

  Status Read(const onnx::NodeProto& n, NodeAnnotation& out) override {
    out.chain.clear();
    std::string scopes_text, classes_text;
    for (const auto& [k, v] : onnx_util::NodeMetadataProps(n)) {
      if (k == kNameScopesKey) scopes_text = v;
      if (k == kClassHierarchyKey) classes_text = v;
    }
    if (scopes_text.empty()) return fallback_ ? fallback_->Read(n, out) : Status::Ok();
    auto scopes = ParsePyStringList(scopes_text);
    if (!scopes)
      return ctx_.Fail("node " + QuoteName(n.name()) + ": cannot parse " + kNameScopesKey + " " +
                       scopes_text);
    std::vector<std::string> classes;
    if (!classes_text.empty()) {
      auto parsed = ParsePyStringList(classes_text);
      if (!parsed)
        return ctx_.Fail("node " + QuoteName(n.name()) + ": cannot parse " + kClassHierarchyKey +
                         " " + classes_text);
      classes = std::move(*parsed);
    }
    // The last entry names the op itself, not a module.
    for (size_t i = 0; i + 1 < scopes->size(); ++i) {
      std::string path = StripCallSuffix((*scopes)[i]);
      if (IsTorchInternalScope(path)) continue;
      if (!out.chain.empty() && path == out.chain.back()) continue;
      out.chain.push_back(path);
      if (i < classes.size() && !classes[i].empty()) ctx_.annotated_class.emplace(path, classes[i]);
    }
    if (out.chain.empty()) out.chain.push_back("");
    return Status::Ok();
  }

  void Finish(ImportContext& ctx) override { FinishDerivedModules(ctx); }

 private:
  ImportContext& ctx_;
  std::unique_ptr<AnnotationReader> fallback_;
};

}  // namespace

std::unique_ptr<AnnotationReader> MakeMetadataReader(ImportContext& ctx,
                                                     std::unique_ptr<AnnotationReader> fallback) {
  return std::make_unique<MetadataReader>(ctx, std::move(fallback));
}

}  // namespace import_internal
}  // namespace foundry
