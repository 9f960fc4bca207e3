#include "compiler/ir.h"

#include <set>
#include <sstream>

#include "base/quote.h"

namespace foundry {

Attribute Attribute::Int(int64_t v) {
  Attribute a;
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
Attribute Attribute::Float(float v) {
  Attribute a;
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
Attribute Attribute::String(std::string v) {
  Attribute a;
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::Ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::Floats(std::vector<float> v) {
  Attribute a;
  a.kind = Kind::kFloats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::Strings(std::vector<std::string> v) {
  Attribute a;
  a.kind = Kind::kStrings;
  a.strings = std::move(v);
  return a;
}
Attribute Attribute::FromTensor(Tensor v) {
  Attribute a;
  a.kind = Kind::kTensor;
  a.t = std::make_shared<const Tensor>(std::move(v));
  return a;
}

bool Attribute::operator==(const Attribute& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::kInt:
      return i == o.i;
    case Kind::kFloat:
      return std::memcmp(&f, &o.f, sizeof f) == 0;
    case Kind::kString:
      return s == o.s;
    case Kind::kInts:
      return ints == o.ints;
    case Kind::kFloats:
      return floats.size() == o.floats.size() &&
             std::memcmp(floats.data(), o.floats.data(), floats.size() * sizeof(float)) == 0;
    case Kind::kStrings:
      return strings == o.strings;
    case Kind::kTensor:
      return t && o.t && t->BitwiseEqual(*o.t);
  }
  return false;
}

int64_t Node::GetInt(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.i;
}
float Node::GetFloat(const std::string& key, float fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.f;
}
std::string Node::GetString(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.s;
}
std::vector<int64_t> Node::GetInts(const std::string& key, std::vector<int64_t> fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.ints;
}

std::string Node::Describe() const {
  // Names come from input files: control characters and invalid UTF-8 are escaped (\xNN).
  std::string d = EscapeName(op_type) + " node " + QuoteName(name);
  if (!scope.empty()) d += " (module " + EscapeName(scope) + ")";
  return d;
}

bool Value::ShapeKnown() const {
  if (!rank_known) return false;
  for (int64_t d : shape)
    if (d < 0) return false;
  return true;
}

int64_t Value::NumBytes() const {
  if (!ShapeKnown()) return -1;
  return NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype));
}

std::string Value::TypeString() const {
  std::string s(DTypeName(dtype));
  if (!rank_known) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    if (i < dim_params.size() && !dim_params[i].empty())
      s += dim_params[i];
    else if (shape[i] < 0)
      s += "?";
    else
      s += std::to_string(shape[i]);
  }
  return s + "]";
}

Value* Graph::FindValue(const std::string& name) {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}
const Value* Graph::FindValue(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}
Value& Graph::GetOrAddValue(const std::string& name) {
  Value& v = values_[name];
  v.name = name;
  return v;
}

std::string Graph::UniqueValueName(const std::string& base) {
  if (!values_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string candidate = base + "_" + std::to_string(i);
    if (!values_.count(candidate)) return candidate;
  }
}

std::string Graph::UniqueNodeName(const std::string& base) {
  if (node_name_counter_.empty())
    for (const Node& n : nodes) node_name_counter_[n.name] = 0;
  if (!node_name_counter_.count(base)) {
    node_name_counter_[base] = 0;
    return base;
  }
  for (int& i = node_name_counter_[base];;) {
    std::string candidate = base + "_" + std::to_string(++i);
    if (!node_name_counter_.count(candidate)) {
      node_name_counter_[candidate] = 0;
      return candidate;
    }
  }
}

bool Graph::IsParameter(const std::string& value) const {
  for (const auto& p : parameters)
    if (p == value) return true;
  return false;
}
bool Graph::IsInitializer(const std::string& value) const {
  for (const auto& p : initializers)
    if (p == value) return true;
  return false;
}

std::string BareClassName(const std::string& qualified) {
  size_t dot = qualified.rfind('.');
  return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
}

std::vector<std::string> Graph::ClassChain(const std::string& scope) const {
  std::vector<std::string> chain;
  auto add = [&](const std::string& path) {
    auto it = modules.find(path);
    if (it != modules.end() && !it->second.classes.empty())
      chain.push_back(BareClassName(it->second.classes.front()));
  };
  add("");
  for (size_t pos = 0; !scope.empty() && pos != std::string::npos;) {
    pos = scope.find('.', pos + 1);
    add(scope.substr(0, pos));
  }
  return chain;
}

void Graph::PruneUnusedValues() {
  std::set<std::string> used(inputs.begin(), inputs.end());
  used.insert(outputs.begin(), outputs.end());
  used.insert(initializers.begin(), initializers.end());
  for (const Node& n : nodes) {
    used.insert(n.inputs.begin(), n.inputs.end());
    used.insert(n.outputs.begin(), n.outputs.end());
  }
  for (auto it = values_.begin(); it != values_.end();)
    it = used.count(it->first) ? std::next(it) : values_.erase(it);
}

int UseDef::Producer(const std::string& v) const {
  auto it = producer.find(v);
  return it == producer.end() ? -1 : it->second;
}

const std::vector<int>& UseDef::Consumers(const std::string& v) const {
  static const std::vector<int> kNone;
  auto it = consumers.find(v);
  return it == consumers.end() ? kNone : it->second;
}

UseDef BuildUseDef(const Graph& graph) {
  UseDef ud;
  for (int i = 0; i < static_cast<int>(graph.nodes.size()); ++i) {
    const Node& n = graph.nodes[i];
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      auto& list = ud.consumers[in];
      if (list.empty() || list.back() != i) list.push_back(i);
    }
    for (const auto& out : n.outputs)
      if (!out.empty()) ud.producer.emplace(out, i);
  }
  return ud;
}

int64_t ValueBytes(const Graph& g, const std::string& value) {
  const Value* v = g.FindValue(value);
  if (!v || !v->ShapeKnown()) return 0;
  int64_t n = NumElements(v->shape);
  return n < 0 ? 0 : n * static_cast<int64_t>(DTypeSize(v->dtype));
}

}  // namespace foundry
