#include "compiler/text.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace foundry {

namespace {

const std::set<std::string>& Keywords() {
  static const std::set<std::string> k = {"graph", "module", "input", "param", "const",
                                          "output", "marks", "tensor"};
  return k;
}

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
         c == '+';
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string Name(const std::string& s) {
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
               !Keywords().count(s);
  for (char c : s)
    if (!IsWordChar(c) || c == '-' || c == '+') plain = false;
  return plain ? s : Quote(s);
}

std::string FormatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string FormatDouble(double v) {
  if (std::isnan(v) || std::isinf(v)) return FormatFloat(v);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string TypeOf(const Value& v) { return v.TypeString(); }

std::string TensorData(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) s += ", ";
    if (t.dtype() == DType::kFloat32)
      s += FormatFloat(t.data<float>()[i]);
    else if (t.dtype() == DType::kFloat64)
      s += FormatDouble(t.data<double>()[i]);
    else
      s += std::to_string(t.GetAsInt64(i));
  }
  return s + "]";
}

std::string TensorLiteral(const Tensor& t) {
  return std::string(DTypeName(t.dtype())) + ShapeToString(t.shape()) + " = " + TensorData(t);
}

std::string AttrText(const Attribute& a) {
  std::string s;
  switch (a.kind) {
    case Attribute::Kind::kInt: return std::to_string(a.i);
    case Attribute::Kind::kFloat: return FormatFloat(a.f);
    case Attribute::Kind::kString: return Quote(a.s);
    case Attribute::Kind::kInts:
      s = "[";
      for (size_t i = 0; i < a.ints.size(); ++i) s += (i ? ", " : "") + std::to_string(a.ints[i]);
      return s + "]";
    case Attribute::Kind::kFloats:
      s = "[";
      for (size_t i = 0; i < a.floats.size(); ++i) s += (i ? ", " : "") + FormatFloat(a.floats[i]);
      // An empty list prints as [] and parses back as ints; "[:f]" keeps its kind.
      return a.floats.empty() ? "[:f]" : s + "]";
    case Attribute::Kind::kStrings:
      s = "[";
      for (size_t i = 0; i < a.strings.size(); ++i) s += (i ? ", " : "") + Quote(a.strings[i]);
      return a.strings.empty() ? "[:s]" : s + "]";
    case Attribute::Kind::kTensor: return "tensor(" + TensorLiteral(*a.t) + ")";
  }
  return s;
}

}  // namespace

std::string PrintGraph(const Graph& g) {
  std::ostringstream out;
  out << "graph " << Name(g.name) << " opset=" << g.opset << " {\n";
  for (const auto& [path, m] : g.modules) {
    out << "  module " << Quote(path) << " :";
    for (size_t i = 0; i < m.classes.size(); ++i) out << (i ? ", " : " ") << Name(m.classes[i]);
    out << "\n";
  }
  for (const auto& in : g.inputs) out << "  input " << Name(in) << " : " << TypeOf(*g.FindValue(in)) << "\n";
  for (const auto& init : g.initializers) {
    const Value* v = g.FindValue(init);
    out << "  " << (g.IsParameter(init) ? "param " : "const ") << Name(init) << " : " << TypeOf(*v);
    if (v->data) out << " = " << TensorData(*v->data);
    out << "\n";
  }
  for (const Node& n : g.nodes) {
    out << "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (i) out << ", ";
      out << Name(n.outputs[i]);
      const Value* v = n.outputs[i].empty() ? nullptr : g.FindValue(n.outputs[i]);
      if (v && v->dtype != DType::kUndefined) out << " : " << TypeOf(*v);
    }
    out << " = ";
    if (!n.domain.empty()) out << Name(n.domain) << "::";
    out << Name(n.op_type) << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) out << (i ? ", " : "") << Name(n.inputs[i]);
    out << ")";
    if (!n.attrs.empty()) {
      out << " {";
      bool first = true;
      for (const auto& [k, a] : n.attrs) {
        out << (first ? "" : ", ") << Name(k) << "=" << AttrText(a);
        first = false;
      }
      out << "}";
    }
    if (!n.scope.empty()) out << " @" << Quote(n.scope);
    if (!n.name.empty()) out << " #" << Quote(n.name);
    if (!n.marks.empty()) {
      out << " marks{";
      bool first = true;
      for (const auto& [k, v] : n.marks) {
        out << (first ? "" : ", ") << Name(k) << "=" << Quote(v);
        first = false;
      }
      out << "}";
    }
    out << "\n";
  }
  for (const auto& o : g.outputs) out << "  output " << Name(o) << "\n";
  out << "}\n";
  return out.str();
}

namespace {

struct Token {
  enum Kind { kWord, kString, kPunct, kEnd } kind;
  std::string text;
  int line;
};

class Parser {
 public:
  explicit Parser(std::string_view src) : src_(src) {}

  StatusOr<Graph> Parse() {
    RETURN_IF_ERROR(Lex());
    Graph g;
    RETURN_IF_ERROR(ExpectWord("graph"));
    ASSIGN_OR_RETURN(g.name, ParseName());
    if (Peek().kind == Token::kWord && Peek().text == "opset") {
      Next();
      RETURN_IF_ERROR(ExpectPunct("="));
      ASSIGN_OR_RETURN(g.opset, ParseInt());
    }
    RETURN_IF_ERROR(ExpectPunct("{"));
    while (!(Peek().kind == Token::kPunct && Peek().text == "}")) {
      if (Peek().kind == Token::kEnd) return Fail("unexpected end of text; missing '}'");
      RETURN_IF_ERROR(ParseStatement(g));
    }
    Next();
    if (Peek().kind != Token::kEnd) return Fail("unexpected text after the graph's closing '}'");
    return g;
  }

 private:
  Status Lex() {
    int line = 1;
    size_t i = 0;
    while (i < src_.size()) {
      char c = src_[i];
      if (c == '\n') {
        ++line;
        ++i;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (c == '/' && i + 1 < src_.size() && src_[i + 1] == '/') {
        while (i < src_.size() && src_[i] != '\n') ++i;
      } else if (c == '"') {
        std::string s;
        ++i;
        while (i < src_.size() && src_[i] != '"') {
          if (src_[i] == '\\' && i + 1 < src_.size()) {
            ++i;
            s += src_[i] == 'n' ? '\n' : src_[i];
          } else {
            s += src_[i];
          }
          ++i;
        }
        if (i >= src_.size()) return Error("line " + std::to_string(line) + ": unterminated string");
        ++i;
        tokens_.push_back({Token::kString, s, line});
      } else if (c == ':' && i + 1 < src_.size() && src_[i + 1] == ':') {
        tokens_.push_back({Token::kPunct, "::", line});
        i += 2;
      } else if (std::string_view("{}()[],:=@#?").find(c) != std::string_view::npos) {
        tokens_.push_back({Token::kPunct, std::string(1, c), line});
        ++i;
      } else if (IsWordChar(c)) {
        size_t j = i;
        while (j < src_.size() && IsWordChar(src_[j])) ++j;
        tokens_.push_back({Token::kWord, std::string(src_.substr(i, j - i)), line});
        i = j;
      } else {
        return Error("line " + std::to_string(line) + ": unexpected character '" +
                     std::string(1, c) + "'");
      }
    }
    tokens_.push_back({Token::kEnd, "", line});
    return Status::Ok();
  }

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool PeekWord(const std::string& w) const {
    return Peek().kind == Token::kWord && Peek().text == w;
  }
  bool PeekPunct(const std::string& p) const {
    return Peek().kind == Token::kPunct && Peek().text == p;
  }
  Status Fail(const std::string& what) const {
    return Error("graph text line " + std::to_string(Peek().line) + ": " + what +
                 (Peek().kind == Token::kEnd ? "" : " (at '" + Peek().text + "')"));
  }
  Status ExpectWord(const std::string& w) {
    if (!PeekWord(w)) return Fail("expected '" + w + "'");
    Next();
    return Status::Ok();
  }
  Status ExpectPunct(const std::string& p) {
    if (!PeekPunct(p)) return Fail("expected '" + p + "'");
    Next();
    return Status::Ok();
  }
  StatusOr<std::string> ParseName() {
    if (Peek().kind != Token::kWord && Peek().kind != Token::kString)
      return Fail("expected a name");
    return Next().text;
  }
  StatusOr<int64_t> ParseInt() {
    if (Peek().kind != Token::kWord) return Fail("expected an integer");
    const std::string& s = Peek().text;
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return Fail("expected an integer");
    Next();
    return v;
  }
  static bool LooksFloat(const std::string& s) {
    return s.find_first_of(".eE") != std::string::npos || s == "inf" || s == "-inf" ||
           s == "nan";
  }
  StatusOr<double> ParseNumber() {
    if (Peek().kind != Token::kWord) return Fail("expected a number");
    std::string s = Next().text;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return Fail("bad number '" + s + "'");
    return v;
  }

  // f32[2,batch] or f32[?]
  Status ParseType(Value& v) {
    ASSIGN_OR_RETURN(std::string dt, ParseName());
    v.dtype = DTypeFromName(dt);
    if (v.dtype == DType::kUndefined) return Fail("unknown element type '" + dt + "'");
    RETURN_IF_ERROR(ExpectPunct("["));
    v.shape.clear();
    v.dim_params.clear();
    v.rank_known = true;
    bool any_param = false;
    if (PeekPunct("?") && Peek(1).kind == Token::kPunct && Peek(1).text == "]") {
      Next();
      Next();
      v.rank_known = false;
      return Status::Ok();
    }
    while (!PeekPunct("]")) {
      if (PeekPunct("?")) {
        Next();
        v.shape.push_back(-1);
        v.dim_params.push_back("");
        if (PeekPunct(",")) Next();
        continue;
      }
      if (Peek().kind != Token::kWord && Peek().kind != Token::kString)
        return Fail("expected a dimension");
      std::string d = Next().text;
      int64_t n = 0;
      auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), n);
      if (ec == std::errc() && p == d.data() + d.size()) {
        v.shape.push_back(n);
        v.dim_params.push_back("");
      } else {
        v.shape.push_back(-1);
        v.dim_params.push_back(d);
        any_param = true;
      }
      if (PeekPunct(",")) Next();
    }
    Next();
    if (!any_param) v.dim_params.clear();
    return Status::Ok();
  }

  StatusOr<Tensor> ParseData(DType dtype, const Shape& shape) {
    int line = Peek().line;
    RETURN_IF_ERROR(ExpectPunct("["));
    std::vector<double> vals;
    std::vector<int64_t> ivals;
    while (!PeekPunct("]")) {
      if (dtype == DType::kFloat32 || dtype == DType::kFloat64) {
        ASSIGN_OR_RETURN(double d, ParseNumber());
        vals.push_back(d);
      } else {
        ASSIGN_OR_RETURN(int64_t n, ParseInt());
        ivals.push_back(n);
      }
      if (PeekPunct(",")) Next();
    }
    Next();
    Tensor t(dtype, shape);
    int64_t count = static_cast<int64_t>(vals.size() + ivals.size());
    if (count != t.numel())
      return Error("graph text line " + std::to_string(line) + ": tensor of shape " +
                   ShapeToString(shape) + " needs " + std::to_string(t.numel()) +
                   " values, got " + std::to_string(count));
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (dtype) {
        case DType::kFloat32: t.data<float>()[i] = static_cast<float>(vals[i]); break;
        case DType::kFloat64: t.data<double>()[i] = vals[i]; break;
        case DType::kInt64: t.data<int64_t>()[i] = ivals[i]; break;
        case DType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(ivals[i]); break;
        case DType::kBool:
        case DType::kUint8: t.data<uint8_t>()[i] = static_cast<uint8_t>(ivals[i]); break;
        case DType::kInt8: t.data<int8_t>()[i] = static_cast<int8_t>(ivals[i]); break;
        default: return Fail("tensor literals of type " + std::string(DTypeName(dtype)) +
                             " are not supported in the text form");
      }
    }
    return t;
  }

  StatusOr<Attribute> ParseAttr() {
    if (Peek().kind == Token::kString) return Attribute::String(Next().text);
    if (PeekWord("tensor")) {
      Next();
      RETURN_IF_ERROR(ExpectPunct("("));
      Value v;
      RETURN_IF_ERROR(ParseType(v));
      RETURN_IF_ERROR(ExpectPunct("="));
      ASSIGN_OR_RETURN(Tensor t, ParseData(v.dtype, v.shape));
      RETURN_IF_ERROR(ExpectPunct(")"));
      return Attribute::FromTensor(std::move(t));
    }
    if (PeekPunct("[")) {
      Next();
      if (PeekPunct(":")) {
        Next();
        ASSIGN_OR_RETURN(std::string k, ParseName());
        RETURN_IF_ERROR(ExpectPunct("]"));
        return k == "f" ? Attribute::Floats({}) : Attribute::Strings({});
      }
      if (PeekPunct("]")) {
        Next();
        return Attribute::Ints({});
      }
      if (Peek().kind == Token::kString) {
        std::vector<std::string> ss;
        while (!PeekPunct("]")) {
          ASSIGN_OR_RETURN(std::string s, ParseName());
          ss.push_back(s);
          if (PeekPunct(",")) Next();
        }
        Next();
        return Attribute::Strings(std::move(ss));
      }
      bool is_float = false;
      for (size_t k = 0; Peek(k).kind != Token::kEnd && !(Peek(k).kind == Token::kPunct && Peek(k).text == "]"); ++k)
        if (Peek(k).kind == Token::kWord && LooksFloat(Peek(k).text)) is_float = true;
      std::vector<int64_t> ints;
      std::vector<float> floats;
      while (!PeekPunct("]")) {
        if (is_float) {
          ASSIGN_OR_RETURN(double d, ParseNumber());
          floats.push_back(static_cast<float>(d));
        } else {
          ASSIGN_OR_RETURN(int64_t n, ParseInt());
          ints.push_back(n);
        }
        if (PeekPunct(",")) Next();
      }
      Next();
      return is_float ? Attribute::Floats(std::move(floats)) : Attribute::Ints(std::move(ints));
    }
    if (Peek().kind == Token::kWord && LooksFloat(Peek().text)) {
      ASSIGN_OR_RETURN(double d, ParseNumber());
      return Attribute::Float(static_cast<float>(d));
    }
    ASSIGN_OR_RETURN(int64_t n, ParseInt());
    return Attribute::Int(n);
  }

  Status ParseStatement(Graph& g) {
    if (PeekWord("module")) {
      Next();
      ASSIGN_OR_RETURN(std::string path, ParseName());
      RETURN_IF_ERROR(ExpectPunct(":"));
      Module m;
      do {
        if (PeekPunct(",")) Next();
        ASSIGN_OR_RETURN(std::string cls, ParseName());
        m.classes.push_back(cls);
      } while (PeekPunct(","));
      g.modules[path] = m;
      return Status::Ok();
    }
    if (PeekWord("input") || PeekWord("param") || PeekWord("const")) {
      std::string kind = Next().text;
      ASSIGN_OR_RETURN(std::string name, ParseName());
      RETURN_IF_ERROR(ExpectPunct(":"));
      Value& v = g.GetOrAddValue(name);
      RETURN_IF_ERROR(ParseType(v));
      if (kind == "input") {
        g.inputs.push_back(name);
        return Status::Ok();
      }
      g.initializers.push_back(name);
      if (kind == "param") g.parameters.push_back(name);
      if (PeekPunct("=")) {
        Next();
        if (!v.dim_params.empty()) return Fail("initializer '" + name + "' has a symbolic shape");
        ASSIGN_OR_RETURN(Tensor t, ParseData(v.dtype, v.shape));
        v.data = std::make_shared<const Tensor>(std::move(t));
      }
      return Status::Ok();
    }
    if (PeekWord("output")) {
      Next();
      ASSIGN_OR_RETURN(std::string name, ParseName());
      g.outputs.push_back(name);
      return Status::Ok();
    }
    // A node: outputs '=' [domain '::'] op '(' inputs ')' [{attrs}] [@scope] [#name] [marks{...}]
    Node n;
    while (true) {
      ASSIGN_OR_RETURN(std::string out, ParseName());
      n.outputs.push_back(out);
      if (!out.empty()) {
        Value& v = g.GetOrAddValue(out);
        if (PeekPunct(":")) {
          Next();
          RETURN_IF_ERROR(ParseType(v));
        }
      }
      if (!PeekPunct(",")) break;
      Next();
    }
    RETURN_IF_ERROR(ExpectPunct("="));
    ASSIGN_OR_RETURN(std::string op, ParseName());
    if (PeekPunct("::")) {
      Next();
      n.domain = op;
      ASSIGN_OR_RETURN(op, ParseName());
    }
    n.op_type = op;
    RETURN_IF_ERROR(ExpectPunct("("));
    while (!PeekPunct(")")) {
      ASSIGN_OR_RETURN(std::string in, ParseName());
      n.inputs.push_back(in);
      if (PeekPunct(",")) Next();
    }
    Next();
    if (PeekPunct("{")) {
      Next();
      while (!PeekPunct("}")) {
        ASSIGN_OR_RETURN(std::string key, ParseName());
        RETURN_IF_ERROR(ExpectPunct("="));
        ASSIGN_OR_RETURN(Attribute a, ParseAttr());
        n.attrs[key] = std::move(a);
        if (PeekPunct(",")) Next();
      }
      Next();
    }
    if (PeekPunct("@")) {
      Next();
      ASSIGN_OR_RETURN(n.scope, ParseName());
    }
    if (PeekPunct("#")) {
      Next();
      ASSIGN_OR_RETURN(n.name, ParseName());
    }
    if (PeekWord("marks")) {
      Next();
      RETURN_IF_ERROR(ExpectPunct("{"));
      while (!PeekPunct("}")) {
        ASSIGN_OR_RETURN(std::string key, ParseName());
        RETURN_IF_ERROR(ExpectPunct("="));
        ASSIGN_OR_RETURN(std::string val, ParseName());
        n.marks[key] = val;
        if (PeekPunct(",")) Next();
      }
      Next();
    }
    if (n.name.empty()) n.name = n.op_type + "_" + std::to_string(g.nodes.size());
    g.nodes.push_back(std::move(n));
    return Status::Ok();
  }

  std::string_view src_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<Graph> ParseGraph(std::string_view text) { return Parser(text).Parse(); }

}  // namespace foundry
