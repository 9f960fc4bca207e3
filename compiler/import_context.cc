#include "compiler/import_context.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/quote.h"
#include "compiler/tensor_proto.h"

namespace foundry {
namespace import_internal {

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

std::string StripVariant(const std::string& op_type) {
  size_t dot = op_type.rfind('.');
  if (dot == std::string::npos || dot + 1 == op_type.size()) return op_type;
  for (size_t i = dot + 1; i < op_type.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(op_type[i]))) return op_type;
  return op_type.substr(0, dot);
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

const std::vector<std::string>* ClassTable::Find(const std::string& path) const {
  auto it = classes.find(path);
  return it == classes.end() ? nullptr : &it->second;
}

bool ClassTable::HasClass(const std::string& path, const std::string& bare) const {
  const auto* cls = Find(path);
  if (!cls) return false;
  for (const auto& c : *cls)
    if (BareClassName(c) == bare) return true;
  return false;
}

std::string ImportContext::NewValueName(const std::string& base) {
  std::string name = base;
  for (int i = 1; used_names.count(name); ++i) name = base + "_" + std::to_string(i);
  used_names.insert(name);
  return name;
}

void ImportContext::RecordChain(const std::vector<std::string>& chain) {
  for (const auto& p : chain) module_paths.insert(p);
}

StatusOr<Attribute> ImportContext::ConvertAttr(const onnx::AttributeProto& a,
                                               const std::string& node) const {
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
      return Fail("attribute " + QuoteName(a.name()) + " of " + node + " has no type");
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
      auto t = TensorFromProto(a.t(), dir);
      if (!t.ok())
        return Fail("attribute " + QuoteName(a.name()) + " of " + node + ": " +
                    t.status().message());
      return Attribute::FromTensor(std::move(t).value());
    }
    case A::GRAPH:
    case A::GRAPHS:
      return Fail(node + " has a subgraph attribute '" + a.name() +
                  "'; control flow (If, Loop, Scan) is not supported: export a model without "
                  "data-dependent control flow");
    default:
      return Fail("attribute " + QuoteName(a.name()) + " of " + node + " has type " +
                  A::AttributeType_Name(type) + ", which is not supported");
  }
}

namespace {

StatusOr<nlohmann::ordered_json> ParseJson(const ImportContext& ctx, const std::string& key) {
  auto j = nlohmann::ordered_json::parse(ctx.g.metadata.at(key), nullptr, false);
  if (j.is_discarded()) return ctx.Fail("model metadata " + QuoteName(key) + " is not valid JSON");
  return j;
}

}  // namespace

StatusOr<std::vector<std::string>> ImportContext::MetadataStringList(const std::string& key) const {
  ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseJson(*this, key));
  std::vector<std::string> out;
  if (!j.is_array())
    return Fail("model metadata " + QuoteName(key) + " is not a JSON list of names");
  for (const auto& item : j) {
    if (!item.is_string())
      return Fail("model metadata " + QuoteName(key) + " is not a JSON list of names");
    out.push_back(item.get<std::string>());
  }
  return out;
}

Status ReadModuleTables(ImportContext& ctx) {
  for (const auto& p : ctx.m.metadata_props())
    if (p.key() != kImportWarningKey) ctx.g.metadata[p.key()] = p.value();
  if (ctx.g.metadata.count(kModuleClassesKey)) {
    ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseJson(ctx, kModuleClassesKey));
    if (!j.is_object())
      return ctx.Fail(std::string("model metadata '") + kModuleClassesKey +
                      "' is not a JSON object of module path -> [class, bases...]");
    ctx.table.present = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::vector<std::string> classes;
      if (it.value().is_string()) {
        classes.push_back(it.value().get<std::string>());
      } else if (it.value().is_array()) {
        for (const auto& c : it.value())
          if (c.is_string()) classes.push_back(c.get<std::string>());
      } else {
        return ctx.Fail(std::string("model metadata '") + kModuleClassesKey + "': module '" +
                        it.key() + "' has no class list");
      }
      ctx.table.order.push_back(it.key());
      ctx.table.classes[it.key()] = std::move(classes);
    }
  }
  if (ctx.g.metadata.count(kScopesKey)) {
    ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseJson(ctx, kScopesKey));
    if (!j.is_object())
      return ctx.Fail(std::string("model metadata '") + kScopesKey +
                      "' is not a JSON object of scope -> module path");
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.value().is_string()) ctx.scopes[it.key()] = it.value().get<std::string>();
  }
  return Status::Ok();
}

}  // namespace import_internal
}  // namespace foundry
