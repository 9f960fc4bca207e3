#include "passes/attention_fusion.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {

namespace {

// A value that varies over the scores' (query, key) grid only, evaluated element by element:
// the arithmetic exporters write for causal and sliding-window masks (Range, Unsqueeze / Reshape,
// Expand, Sub, comparisons, And / Or / Not, Where, Trilu, Cast) over constants, folded ones
// included. Every value in it has only ones before its last two axes (the mask is the same for
// every batch and head); element `flat` is row-major over those two axes.
class IndexGrid {
 public:
  IndexGrid(const Graph& g, const std::set<std::string>& params, const UseDef& ud)
      : g_(g), params_(params), ud_(ud) {}

  // False when `root` (or something it reads) is not such a value.
  bool Compile(const std::string& root) { return Add(root, 0) == 0; }

  bool At(int64_t flat, double* out) const {
    *out = Eval(0, flat);
    return !std::isnan(*out);
  }

  // What the compiled terms compute, as text: equal for two values computed alike (each layer's
  // copy of one mask), so a result can be reused instead of evaluated again. Constants enter by
  // a hash of their bytes.
  std::string Signature() const {
    std::string sig;
    for (const Term& t : terms_) {
      sig += std::to_string(static_cast<int>(t.kind)) + ":" + std::to_string(static_cast<int>(t.op)) +
             ":" + std::to_string(t.in[0]) + "," + std::to_string(t.in[1]) + "," +
             std::to_string(t.in[2]) + ":" + std::to_string(t.rows) + "x" + std::to_string(t.cols) +
             ":" + std::to_string(static_cast<int>(t.dtype)) + ":" + std::to_string(t.start) + ":" +
             std::to_string(t.delta);
      if (t.data) {
        uint64_t h = 1469598103934665603ull;  // FNV-1a
        const auto* b = static_cast<const unsigned char*>(t.data->raw());
        for (size_t k = 0; k < t.data->nbytes(); ++k) h = (h ^ b[k]) * 1099511628211ull;
        sig += ":" + std::to_string(static_cast<int>(t.data->dtype())) + ":" +
               std::to_string(h);
      }
      sig += ";";
    }
    return sig;
  }

 private:
  enum class Kind { kConstant, kRange, kView, kBroadcast, kUnary, kBinary, kWhere, kTrilu };
  // The operation of a kUnary / kBinary term (Cast: to bool, an integer, f32 or f64).
  // clang-format off
  enum class Op {
    kNone, kNeg, kAbs, kNot, kCastBool, kCastInt, kCastF32, kCastF64, kAdd, kSub, kMul, kDiv,
    kIntDiv, kGreater, kLess, kGreaterOrEqual, kLessOrEqual, kEqual, kAnd, kOr, kXor, kMax, kMin
  };
  // clang-format on
  struct Term {
    Kind kind = Kind::kConstant;
    Op op = Op::kNone;
    int in[3] = {-1, -1, -1};
    int64_t rows = 1, cols = 1;
    const Tensor* data = nullptr;  // kConstant
    double start = 0, delta = 0;   // kRange; kTrilu: start = k, delta = 1 for upper
    DType dtype = DType::kUndefined;
  };
  static constexpr int kMaxTerms = 64;

  static bool IsInteger(DType t) {
    return t == DType::kInt64 || t == DType::kInt32 || t == DType::kInt16 || t == DType::kInt8 ||
           t == DType::kUint8;
  }

  // The one number of a one-element constant, or NaN.
  double Scalar(const std::string& v) const {
    const Value* val = g_.FindValue(v);
    if (!val || !val->data || val->data->numel() != 1 || params_.count(v)) return NAN;
    return val->data->GetAsDouble(0);
  }

  // Adds the term computing `v`; its index, or -1.
  int Add(const std::string& v, int depth) {
    const Value* val = g_.FindValue(v);
    if (depth > 24 || static_cast<int>(terms_.size()) >= kMaxTerms || !val || !val->ShapeKnown() ||
        params_.count(v))
      return -1;
    Term t;
    const Shape& s = val->shape;
    for (size_t k = 0; k + 2 < s.size(); ++k)
      if (s[k] != 1) return -1;
    t.rows = s.size() >= 2 ? s[s.size() - 2] : 1;
    t.cols = s.empty() ? 1 : s.back();
    t.dtype = val->dtype;
    const int self = static_cast<int>(terms_.size());
    terms_.push_back(t);
    if (val->data) {
      terms_[self].data = val->data.get();
      return self;
    }
    const int p = ud_.Producer(v);
    if (p < 0) return -1;
    const Node& n = g_.nodes[p];
    if (!n.domain.empty()) return -1;
    const std::string& op = n.op_type;
    auto child = [&](size_t i) { return i < n.inputs.size() ? Add(n.inputs[i], depth + 1) : -1; };
    auto fits = [&](int c) {  // broadcasts to this term's grid
      if (c < 0) return false;
      const Term& ct = terms_[c];
      return (ct.rows == 1 || ct.rows == t.rows) && (ct.cols == 1 || ct.cols == t.cols);
    };
    if (op == "Range" && n.inputs.size() == 3) {
      const double start = Scalar(n.inputs[0]), delta = Scalar(n.inputs[2]);
      if (std::isnan(start) || std::isnan(delta)) return -1;
      terms_[self].kind = Kind::kRange;
      terms_[self].start = start;
      terms_[self].delta = delta;
      return self;
    }
    if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Flatten" ||
        op == "Identity") {
      const int c = child(0);
      if (c < 0 || terms_[c].rows * terms_[c].cols != t.rows * t.cols) return -1;
      terms_[self].kind = Kind::kView;
      terms_[self].in[0] = c;
      return self;
    }
    if (op == "Expand" || op == "Cast" || op == "Neg" || op == "Not" || op == "Abs") {
      const int c = child(0);
      if (!fits(c)) return -1;
      terms_[self].kind = op == "Expand" ? Kind::kBroadcast : Kind::kUnary;
      terms_[self].in[0] = c;
      Op u = op == "Neg" ? Op::kNeg : op == "Abs" ? Op::kAbs : op == "Not" ? Op::kNot : Op::kNone;
      if (op == "Cast")
        u = t.dtype == DType::kBool      ? Op::kCastBool
            : IsInteger(t.dtype)         ? Op::kCastInt
            : t.dtype == DType::kFloat32 ? Op::kCastF32
                                         : Op::kCastF64;
      terms_[self].op = u;
      return self;
    }
    // clang-format off
    static const std::map<std::string, Op> kBinary = {
        {"Add", Op::kAdd}, {"Sub", Op::kSub}, {"Mul", Op::kMul}, {"Div", Op::kDiv},
        {"Greater", Op::kGreater}, {"Less", Op::kLess}, {"GreaterOrEqual", Op::kGreaterOrEqual},
        {"LessOrEqual", Op::kLessOrEqual}, {"Equal", Op::kEqual}, {"And", Op::kAnd},
        {"Or", Op::kOr}, {"Xor", Op::kXor}, {"Max", Op::kMax}, {"Min", Op::kMin}};
    // clang-format on
    if (auto it = kBinary.find(op); it != kBinary.end() && n.inputs.size() == 2) {
      const int a = child(0);
      const int b = child(1);
      if (!fits(a) || !fits(b)) return -1;
      terms_[self].kind = Kind::kBinary;
      terms_[self].in[0] = a;
      terms_[self].in[1] = b;
      // Div of integers rounds toward zero.
      terms_[self].op =
          it->second == Op::kDiv && IsInteger(terms_[a].dtype) ? Op::kIntDiv : it->second;
      return self;
    }
    if (op == "Where" && n.inputs.size() == 3) {
      const int c = child(0), a = child(1), b = child(2);
      if (!fits(c) || !fits(a) || !fits(b)) return -1;
      terms_[self].kind = Kind::kWhere;
      terms_[self].in[0] = c;
      terms_[self].in[1] = a;
      terms_[self].in[2] = b;
      return self;
    }
    if (op == "Trilu" && s.size() >= 2) {
      const int c = child(0);
      if (!fits(c) || terms_[c].rows != t.rows || terms_[c].cols != t.cols) return -1;
      double k = 0;
      if (n.HasInput(1)) k = Scalar(n.inputs[1]);
      if (std::isnan(k)) return -1;
      terms_[self].kind = Kind::kTrilu;
      terms_[self].in[0] = c;
      terms_[self].start = k;
      terms_[self].delta = n.GetInt("upper", 1);
      return self;
    }
    return -1;
  }

  // Element `flat` of term c read at element `flat` of term `parent` (broadcast).
  int64_t ChildFlat(const Term& parent, int c, int64_t flat) const {
    const Term& ct = terms_[c];
    const int64_t r = flat / parent.cols, col = flat % parent.cols;
    return (ct.rows > 1 ? r : 0) * ct.cols + (ct.cols > 1 ? col : 0);
  }

  double Eval(int i, int64_t flat) const {
    const Term& t = terms_[i];
    auto in = [&](int k) { return Eval(t.in[k], ChildFlat(t, t.in[k], flat)); };
    switch (t.kind) {
      case Kind::kConstant:
        return t.data->GetAsDouble(flat);
      case Kind::kRange:
        return t.start + static_cast<double>(flat) * t.delta;
      case Kind::kView:
        return Eval(t.in[0], flat);
      case Kind::kBroadcast:
        return in(0);
      case Kind::kUnary: {
        const double x = in(0);
        switch (t.op) {
          case Op::kNeg:
            return -x;
          case Op::kAbs:
            return std::fabs(x);
          case Op::kNot:
          case Op::kCastBool:
            return (x == 0) == (t.op == Op::kNot);
          case Op::kCastInt:
            return std::trunc(x);
          case Op::kCastF32:
            return static_cast<float>(x);
          default:
            return x;
        }
      }
      case Kind::kBinary: {
        const double a = in(0), b = in(1);
        switch (t.op) {
          case Op::kAdd:
            return a + b;
          case Op::kSub:
            return a - b;
          case Op::kMul:
            return a * b;
          case Op::kDiv:
            return b == 0 ? NAN : a / b;
          case Op::kIntDiv:
            return b == 0 ? NAN : std::trunc(a / b);
          case Op::kGreater:
            return a > b;
          case Op::kLess:
            return a < b;
          case Op::kGreaterOrEqual:
            return a >= b;
          case Op::kLessOrEqual:
            return a <= b;
          case Op::kEqual:
            return a == b;
          case Op::kAnd:
            return a != 0 && b != 0;
          case Op::kOr:
            return a != 0 || b != 0;
          case Op::kXor:
            return (a != 0) != (b != 0);
          case Op::kMax:
            return std::max(a, b);
          case Op::kMin:
            return std::min(a, b);
          default:
            return NAN;
        }
      }
      case Kind::kWhere:
        return in(0) != 0 ? in(1) : in(2);
      case Kind::kTrilu: {
        const int64_t r = flat / t.cols, c = flat % t.cols;
        const double d = static_cast<double>(c - r);
        const bool keep = t.delta != 0 ? d >= t.start : d <= t.start;
        return keep ? in(0) : 0.0;
      }
    }
    return NAN;
  }

  const Graph& g_;
  const std::set<std::string>& params_;
  const UseDef& ud_;
  std::vector<Term> terms_;
};

// What the walk back from the softmax found.
struct Match {
  std::string q, k, v, bias, mask;
  bool k_transposed = true;
  double scale = 1;
  bool causal = false;
  int64_t window = 0;  // with causal: key j <= i - window masked too (sliding window)
  double softcap = 0;  // softcap·tanh(scores / softcap) before the bias and the mask
  bool mask_keep = false;
  bool has_fill = false;
  double fill = -std::numeric_limits<double>::infinity();
  int64_t kv_heads = 0;  // 0: as many as Q
  double dropout = 0;    // an active Dropout on the probabilities, and its Philox key
  int64_t seed = 0;
  Shape scores;          // the softmax input's shape: every step keeps it (no broadcast widening)
};

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g), ud_(BuildUseDef(g)) {
    params_.insert(g.parameters.begin(), g.parameters.end());
    outputs_.insert(g.outputs.begin(), g.outputs.end());
  }

  AttentionFusionStats Run() {
    AttentionFusionStats stats;
    std::set<int> erase;  // Transposes of O the fused ops absorbed
    std::map<size_t, std::vector<Node>> before, after;  // rank-3 views around a fused node
    // Roots first: Replace() rewrites nodes in place, so indices stay valid during the sweep.
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& root = g_.nodes[i];
      if (!IsOp(root, "MatMul") || root.inputs.size() != 2) continue;
      Match m;
      std::string probs = root.inputs[0];
      if (const Node* drop = Sole(probs, "Dropout")) {
        if (!MatchDropout(*drop, m)) {
          if (Sole(drop->inputs[0], "Softmax")) ++stats.unfused;
          continue;
        }
        probs = drop->inputs[0];
      }
      const Node* sm = Sole(probs, "Softmax");
      if (!sm) continue;
      m.v = root.inputs[1];
      if (const Value* x = Val(sm->inputs[0])) m.scores = x->shape;
      if (!MatchSoftmax(*sm) || !WalkScores(sm->inputs[0], Stage::kMask, m) || !Finish(m)) {
        ++stats.unfused;
        continue;
      }
      Node fused;
      fused.op_type = "Attention";
      fused.domain = "foundry";
      fused.name = root.name + "/Attention";
      fused.scope = root.scope;
      fused.inputs = {m.q, m.k, m.v, m.bias, m.mask};
      fused.outputs = {root.outputs[0], g_.UniqueValueName(root.outputs[0] + "_lse")};
      // Rank 3 ([batch, seq, dim]: one head, or NeoX's [batch·heads, seq, dim]): the operands are
      // viewed as rank 4 with one head (Unsqueeze at axis 1; a rank-3 bias or mask too, its
      // leading dimension being the batch) and the output squeezed back. Views: no bytes, no copy.
      std::vector<Node> lift;
      if (m.scores.size() == 3) {
        for (size_t k = 0; k < fused.inputs.size(); ++k) {
          const Value* v = Val(fused.inputs[k]);
          if (!v || (k >= 3 && v->shape.size() < 3)) continue;
          lift.push_back(AxisOneNode("Unsqueeze", fused.inputs[k], root));
          fused.inputs[k] = lift.back().outputs[0];
        }
        fused.outputs[0] = g_.UniqueValueName(root.outputs[0] + "_4d");
        g_.GetOrAddValue(fused.outputs[0]);
      }
      while (!fused.inputs.empty() && fused.inputs.back().empty()) fused.inputs.pop_back();
      // O read only by Transpose(perm=[0,2,1,3]): the op writes that layout itself.
      int transpose = -1;
      const std::vector<int>& readers = ud_.Consumers(root.outputs[0]);
      if (lift.empty() && readers.size() == 1 && !outputs_.count(root.outputs[0])) {
        const Node& t = g_.nodes[readers[0]];
        if (IsOp(t, "Transpose") && t.GetInts("perm") == std::vector<int64_t>{0, 2, 1, 3}) {
          transpose = readers[0];
          fused.outputs[0] = t.outputs[0];
          fused.attrs["o_transposed"] = Attribute::Int(1);
        }
      }
      fused.attrs["scale"] = Attribute::Float(static_cast<float>(m.scale));
      fused.attrs["causal"] = Attribute::Int(m.causal ? 1 : 0);
      fused.attrs["mask_keep"] = Attribute::Int(m.mask_keep ? 1 : 0);
      fused.attrs["mask_value"] = Attribute::Float(static_cast<float>(m.fill));
      fused.attrs["k_transposed"] = Attribute::Int(m.k_transposed ? 1 : 0);
      if (m.window > 0) fused.attrs["window"] = Attribute::Int(m.window);
      if (m.softcap > 0) fused.attrs["softcap"] = Attribute::Float(static_cast<float>(m.softcap));
      if (m.dropout > 0) {
        // The Dropout's key moves to the fused op (NodeKey reads `seed`), so its mask is the one
        // the Dropout drew, and the backward and any recompute clone draw it again.
        fused.attrs["dropout_ratio"] = Attribute::Float(static_cast<float>(m.dropout));
        fused.attrs["seed"] = Attribute::Int(m.seed);
      }
      g_.GetOrAddValue(fused.outputs[1]);
      // The replacement must type-check to exactly the root's output; otherwise leave it alone.
      auto types = InferNodeTypes(g_, fused);
      const Value* out = g_.FindValue(root.outputs[0]);
      Shape want = out ? out->shape : Shape{};
      if (transpose >= 0) want = Val(g_.nodes[transpose].outputs[0])->shape;
      if (!lift.empty() && want.size() == 3) want.insert(want.begin() + 1, 1);
      if (!types.ok() || !out || (*types)[0].shape != want || (*types)[0].dtype != out->dtype) {
        g_.EraseValue(fused.outputs[1]);
        for (const Node& n : lift) g_.EraseValue(n.outputs[0]);
        if (!lift.empty()) g_.EraseValue(fused.outputs[0]);
        ++stats.unfused;
        continue;
      }
      if (!lift.empty()) {
        Node squeeze = AxisOneNode("Squeeze", fused.outputs[0], root);
        squeeze.outputs[0] = root.outputs[0];
        before[i] = std::move(lift);
        after[i] = {std::move(squeeze)};
      }
      root = std::move(fused);
      if (transpose >= 0) erase.insert(transpose);
      ++stats.fused;
      stats.causal += m.causal;
      stats.bias += !m.bias.empty();
      stats.mask += !m.mask.empty();
      stats.grouped += m.kv_heads > 0;
      stats.dropout += m.dropout > 0;
      stats.window += m.window > 0;
      stats.softcap += m.softcap > 0;
    }
    if (!erase.empty() || !before.empty()) {
      std::vector<Node> kept;
      for (size_t i = 0; i < g_.nodes.size(); ++i) {
        if (erase.count(static_cast<int>(i))) continue;
        if (auto b = before.find(i); b != before.end())
          for (Node& n : b->second) kept.push_back(std::move(n));
        kept.push_back(std::move(g_.nodes[i]));
        if (auto a = after.find(i); a != after.end())
          for (Node& n : a->second) kept.push_back(std::move(n));
      }
      g_.nodes = std::move(kept);
    }
    return stats;
  }

 private:
  enum class Stage { kMask, kBias, kScale };  // what may still come, walking back

  static bool IsOp(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

  // Unsqueeze / Squeeze of `x` at axis 1 (a view), named and scoped after `root`; its output's
  // type is set.
  Node AxisOneNode(const char* op, const std::string& x, const Node& root) {
    if (axes_.empty()) {
      axes_ = g_.UniqueValueName("attention_fusion/axis_1");
      Value& a = g_.GetOrAddValue(axes_);
      Tensor t = Tensor::FromVector<int64_t>(DType::kInt64, {1}, {1});
      a.dtype = t.dtype();
      a.shape = t.shape();
      a.rank_known = true;
      a.data = std::make_shared<const Tensor>(std::move(t));
      g_.initializers.push_back(axes_);
    }
    Node n;
    n.op_type = op;
    n.name = g_.UniqueNodeName(root.name + "/" + op);
    n.scope = root.scope;
    n.inputs = {x, axes_};
    n.outputs = {g_.UniqueValueName(x + (std::string(op) == "Unsqueeze" ? "_4d" : "_3d"))};
    if (std::string(op) == "Unsqueeze") {
      g_.GetOrAddValue(n.outputs[0]);
      (void)InferAndSetTypes(g_, n);
    }
    return n;
  }

  // The producer of `v` when it is `op` and `v` is read only by one node and is no graph output.
  const Node* Sole(const std::string& v, const char* op) const {
    const Node* n = Producer(v);
    if (!n || !IsOp(*n, op) || ud_.Consumers(v).size() != 1 || outputs_.count(v)) return nullptr;
    return n;
  }
  const Node* Producer(const std::string& v) const {
    int p = ud_.Producer(v);
    return p < 0 ? nullptr : &g_.nodes[p];
  }
  const Value* Val(const std::string& v) const { return g_.FindValue(v); }

  // The number a one-element constant holds (following CastLike / Cast of a constant), or NaN.
  double Scalar(const std::string& v) const {
    const Value* val = Val(v);
    if (val && val->data && val->data->numel() == 1 && !params_.count(v) &&
        val->dtype != DType::kBool)
      return val->data->GetAsDouble(0);
    const Node* p = Producer(v);
    if (p && (IsOp(*p, "CastLike") || IsOp(*p, "Cast")) && !p->inputs.empty())
      return Scalar(p->inputs[0]);
    return NAN;
  }

  // An active Dropout(P, ratio, training=true) with constant operands, whose mask nobody reads,
  // and the `seed` import gave it (compiler/random_seed.h).
  bool MatchDropout(const Node& drop, Match& m) const {
    if (drop.HasOutput(1) && (!ud_.Consumers(drop.outputs[1]).empty() ||
                              outputs_.count(drop.outputs[1])))
      return false;
    if (!drop.HasAttr("seed")) return false;
    double ratio = drop.GetFloat("ratio", 0.5f);
    if (drop.HasInput(1)) ratio = Scalar(drop.inputs[1]);
    double training = 0;
    if (drop.HasInput(2)) {
      const Value* t = Val(drop.inputs[2]);
      if (!t || !t->data || t->data->numel() != 1) return false;
      training = t->data->GetAsDouble(0);
    }
    // Inactive ones were made Identity by canonicalize before this runs.
    if (!(ratio > 0 && ratio < 1) || training != 1) return false;
    m.dropout = ratio;
    m.seed = drop.GetInt("seed", 0);
    return true;
  }

  bool MatchSoftmax(const Node& sm) const {
    const Value* x = Val(sm.inputs[0]);
    if (!x || !x->rank_known || (x->shape.size() != 4 && x->shape.size() != 3)) return false;
    int64_t axis = sm.GetInt("axis", -1);
    return axis == -1 || axis == static_cast<int64_t>(x->shape.size()) - 1;
  }

  // True when no trainable parameter reaches `v`.
  bool Constant(const std::string& v) {
    if (auto it = reaches_.find(v); it != reaches_.end()) return !it->second;
    bool reaches = params_.count(v) > 0;
    if (!reaches)
      if (const Node* p = Producer(v))
        for (const auto& in : p->inputs)
          if (!in.empty() && !Constant(in)) {
            reaches = true;
            break;
          }
    reaches_[v] = reaches;
    return !reaches;
  }

  // The causal band a bool condition over the scores' Sq x Sk grid (square) spells, however it
  // was built (a folded constant, Range / comparison arithmetic, scatters folded to a constant):
  // form +1 when cond[i, j] == (key j > query i) || (j <= i - window) (true masks), -1 for the
  // complement (true keeps), 0 when it is neither; window 0 is the plain causal rule. The
  // condition is evaluated element by element (IndexGrid) and checked everywhere.
  struct Band {
    int form = 0;
    int64_t window = 0;
  };
  Band BandForm(const std::string& cond, int64_t sq, int64_t sk) {
    if (sq != sk || sq <= 0) return {};
    const Value* c = Val(cond);
    if (!c || c->dtype != DType::kBool || !c->ShapeKnown()) return {};
    const Shape& s = c->shape;
    if (s.size() < 2 || s[s.size() - 1] != sk || s[s.size() - 2] != sq) return {};
    IndexGrid grid(g_, params_, ud_);
    if (!grid.Compile(cond)) return {};
    // Every layer computes its own copy of the mask: evaluated once per distinct computation.
    const std::string key = grid.Signature() + "/" + std::to_string(sq);
    if (auto it = bands_.find(key); it != bands_.end()) return it->second;
    return bands_[key] = ReadBand(grid, sq);
  }

  // The band of a compiled square condition (see BandForm).
  static Band ReadBand(IndexGrid& grid, int64_t n) {
    double v;
    if (!grid.At(0, &v)) return {};
    const bool masks = v == 0;  // (0, 0) is never masked: false there means true masks
    const Band band = ReadMasked(grid, n, [&](double x) { return (x != 0) == masks ? 1 : 0; });
    return band.form == 0 ? Band{} : Band{masks ? 1 : -1, band.window};
  }

  // Reads a causal band off a square grid whose elements `classify` calls masked (1), kept (0) or
  // neither (-1): form 1 and the window (0: none) when the masked elements are exactly
  // (key > query) || (key <= query - window), form 0 otherwise. The last row's masked keys give
  // the window; every element is checked.
  template <class F>
  static Band ReadMasked(IndexGrid& grid, int64_t n, F classify) {
    double v;
    int64_t masked = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (!grid.At((n - 1) * n + j, &v)) return {};
      const int c = classify(v);
      if (c < 0) return {};
      masked += c;
    }
    const Band band{1, masked > 0 ? n - masked : 0};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        if (!grid.At(i * n + j, &v)) return {};
        const bool want = j > i || (band.window > 0 && j <= i - band.window);
        if (classify(v) != (want ? 1 : 0)) return {};
      }
    return band;
  }

  // A float value over the scores' square grid that is 0 inside a causal band and one fill
  // outside it, the fill -inf or at most -1e30 (torch.finfo.min): an additive mask (litgpt's
  // sliding-window and causal masks; an SDPA attn_mask made float), folded or computed. Adding it
  // is what masking with that fill does (a kept diagonal score is finite, exp(fill - it) is 0).
  // The band (form 1, or 0 for none) and the fill.
  struct FloatBand {
    Band band;
    double fill = 0;
  };
  FloatBand FloatBandOf(const std::string& v, int64_t sq, int64_t sk) {
    if (sq != sk || sq <= 1) return {};
    const Value* c = Val(v);
    if (!c || (c->dtype != DType::kFloat32 && c->dtype != DType::kFloat64) || !c->ShapeKnown())
      return {};
    const Shape& s = c->shape;
    if (s.size() < 2 || s[s.size() - 1] != sk || s[s.size() - 2] != sq) return {};
    IndexGrid grid(g_, params_, ud_);
    if (!grid.Compile(v)) return {};
    const std::string key = grid.Signature() + "/" + std::to_string(sq);
    if (auto it = float_bands_.find(key); it != float_bands_.end()) return it->second;
    FloatBand out;
    double fill;
    // Element (0, n - 1) is above the diagonal: masked in any causal band.
    if (grid.At(sq - 1, &fill) && fill <= -1e30) {
      out.band = ReadMasked(grid, sq, [&](double x) { return x == fill ? 1 : x == 0 ? 0 : -1; });
      out.fill = fill;
    }
    float_bands_[key] = out;
    return out;
  }

  // A value that is all zeros: a zero constant, or Expand / ConstantOfShape of a zero.
  bool Zeros(const std::string& v) const {
    const Value* val = Val(v);
    if (val && val->data && !params_.count(v)) {
      for (int64_t i = 0; i < val->data->numel(); ++i)
        if (val->data->GetAsDouble(i) != 0) return false;
      return true;
    }
    const Node* p = Producer(v);
    if (p && IsOp(*p, "Expand")) return Scalar(p->inputs[0]) == 0;
    return false;
  }

  // Sets the fill; a second fill must be the same number.
  static bool SetFill(Match& m, double fill) {
    if (std::isnan(fill)) return false;
    if (m.has_fill && m.fill != fill) return false;
    m.has_fill = true;
    m.fill = fill;
    return true;
  }

  // Splits Where(causal, fill, 0) out of a bias; returns the rest ("" when none is left) or
  // `bias` itself.
  std::string SplitCausalBias(const std::string& bias, int64_t sq, int64_t sk, Match& m) {
    auto causal_zero = [&](const std::string& w) {
      const Node* p = Producer(w);
      if (!p || !IsOp(*p, "Where") || p->inputs.size() != 3) return false;
      if (BandForm(p->inputs[0], sq, sk).form != 1 || !Zeros(p->inputs[2])) return false;
      const double fill = Scalar(p->inputs[1]);
      if (std::isnan(fill) || (m.has_fill && m.fill != fill)) return false;
      return true;
    };
    auto take = [&](const std::string& w) {
      m.causal = true;
      m.window = BandForm(Producer(w)->inputs[0], sq, sk).window;
      SetFill(m, Scalar(Producer(w)->inputs[1]));
    };
    // An additive band mask: 0 in the band, one very negative fill outside.
    auto float_band = [&](const std::string& w) {
      const FloatBand f = FloatBandOf(w, sq, sk);
      return f.band.form == 1 && (!m.has_fill || m.fill == f.fill);
    };
    auto take_float = [&](const std::string& w) {
      const FloatBand f = FloatBandOf(w, sq, sk);
      m.causal = true;
      m.window = f.band.window;
      SetFill(m, f.fill);
    };
    if (causal_zero(bias)) {
      take(bias);
      return "";
    }
    if (float_band(bias)) {
      take_float(bias);
      return "";
    }
    const Node* add = Producer(bias);
    if (add && IsOp(*add, "Add") && add->inputs.size() == 2)
      for (int side = 0; side < 2; ++side) {
        const bool zero_form = causal_zero(add->inputs[side]);
        if (!zero_form && !float_band(add->inputs[side])) continue;
        const Value* rest = Val(add->inputs[1 - side]);
        const Value* whole = Val(bias);
        // The rest must broadcast to what the sum did over the scores.
        if (!rest || !whole || !rest->rank_known) return bias;
        if (zero_form) {
          take(add->inputs[side]);
        } else {
          take_float(add->inputs[side]);
        }
        return add->inputs[1 - side];
      }
    return bias;
  }

  // Walks back from the softmax input `s`.
  bool WalkScores(const std::string& s, Stage stage, Match& m) {
    const Value* sv = Val(s);
    if (!sv || !sv->ShapeKnown() || sv->shape.size() < 3 || sv->shape != m.scores) return false;
    const int64_t sq = sv->shape[sv->shape.size() - 2], sk = sv->shape.back();
    const Node* p = Producer(s);
    if (!p || !p->domain.empty() || ud_.Consumers(s).size() != 1 || outputs_.count(s))
      return false;
    const std::string& op = p->op_type;
    if (op == "MatMul" && p->inputs.size() == 2) return MatchProduct(*p, m);
    if (op == "Mul" && p->inputs.size() == 2 && stage != Stage::kScale && m.softcap == 0 &&
        m.scale == 1)
      if (MatchSoftcap(*p, m)) return true;
    if ((op == "Mul" || op == "Div") && p->inputs.size() == 2) {
      for (int side = 0; side < 2; ++side) {
        if (op == "Div" && side == 1) break;  // c / s is no scale
        double c = Scalar(p->inputs[1 - side]);
        if (std::isnan(c) || c == 0) continue;
        Match trial = m;
        trial.scale *= op == "Mul" ? c : 1.0 / c;
        if (WalkScores(p->inputs[side], Stage::kScale, trial)) {
          m = trial;
          return true;
        }
      }
      return false;
    }
    if (op == "Add" && p->inputs.size() == 2 && stage != Stage::kScale) {
      for (int side = 0; side < 2; ++side) {
        const std::string& other = p->inputs[1 - side];
        const Value* ov = Val(other);
        if (!ov || ov->dtype != sv->dtype || !Constant(other)) continue;
        Match trial = m;
        std::string bias = SplitCausalBias(other, sq, sk, trial);
        if (!bias.empty()) {
          if (!trial.bias.empty()) continue;
          trial.bias = bias;
        }
        if (WalkScores(p->inputs[side], Stage::kBias, trial)) {
          m = trial;
          return true;
        }
      }
      return false;
    }
    // OPT's clamp torch.max(scores + mask, finfo.min): Max with the lowest finite float is the
    // identity on every finite score; it only turns a -inf (an overflowed masked score) into
    // finfo.min, whose exp is 0 as well unless a whole row is masked.
    if (op == "Max" && p->inputs.size() == 2 && stage != Stage::kScale &&
        sv->dtype == DType::kFloat32) {
      for (int side = 0; side < 2; ++side)
        if (Scalar(p->inputs[1 - side]) == static_cast<double>(std::numeric_limits<float>::lowest()))
          return WalkScores(p->inputs[side], stage, m);
      return false;
    }
    if (op == "Where" && p->inputs.size() == 3 && stage == Stage::kMask) {
      const std::string& cond = p->inputs[0];
      for (int side = 1; side <= 2; ++side) {  // the side the scores come through
        const double fill = Scalar(p->inputs[side == 1 ? 2 : 1]);
        if (std::isnan(fill)) continue;
        Match trial = m;
        if (!SetFill(trial, fill)) continue;
        const bool keep = side == 1;  // Where(m, s, fill): true keeps the score
        const Band band = BandForm(cond, sq, sk);
        if (!trial.causal && band.form == (keep ? -1 : 1)) {
          trial.causal = true;
          trial.window = band.window;
        } else {
          if (!trial.mask.empty() || !Constant(cond)) continue;
          trial.mask = cond;
          trial.mask_keep = keep;
        }
        if (WalkScores(p->inputs[side], Stage::kMask, trial)) {
          m = trial;
          return true;
        }
      }
      return false;
    }
    return false;
  }

  // Soft-capping, c·tanh(x / c) (Gemma-2's attention logits): Mul(Tanh(Div(x, c)), c) in either
  // operand order, or Mul(x, r) inside with r·c = 1 (to float rounding). Walking back, no scale
  // may have come yet (one after the cap would scale the capped scores); only the scale may come
  // before it.
  bool MatchSoftcap(const Node& mul, Match& m) {
    for (int side = 0; side < 2; ++side) {
      const double cap = Scalar(mul.inputs[1 - side]);
      const Node* tanh = Sole(mul.inputs[side], "Tanh");
      if (std::isnan(cap) || !(cap > 0) || !tanh) continue;
      std::string x;
      if (const Node* div = Sole(tanh->inputs[0], "Div"); div && Scalar(div->inputs[1]) == cap) {
        x = div->inputs[0];
      } else if (const Node* inv = Sole(tanh->inputs[0], "Mul")) {
        for (int k = 0; k < 2 && x.empty(); ++k)
          if (std::fabs(Scalar(inv->inputs[1 - k]) * cap - 1) < 1e-6) x = inv->inputs[k];
      }
      if (x.empty()) continue;
      Match trial = m;
      trial.softcap = cap;
      if (WalkScores(x, Stage::kScale, trial)) {
        m = trial;
        return true;
      }
    }
    return false;
  }

  // Peels Mul/Div by a one-element constant off an operand of the product.
  std::string PeelScale(std::string x, Match& m) const {
    for (;;) {
      const Node* p = Producer(x);
      if (!p || !p->domain.empty() || p->inputs.size() != 2 || ud_.Consumers(x).size() != 1 ||
          outputs_.count(x))
        return x;
      if (p->op_type == "Mul") {
        double c0 = Scalar(p->inputs[0]), c1 = Scalar(p->inputs[1]);
        if (!std::isnan(c1)) {
          m.scale *= c1;
          x = p->inputs[0];
        } else if (!std::isnan(c0)) {
          m.scale *= c0;
          x = p->inputs[1];
        } else {
          return x;
        }
      } else if (p->op_type == "Div") {
        double c = Scalar(p->inputs[1]);
        if (std::isnan(c) || c == 0) return x;
        m.scale /= c;
        x = p->inputs[0];
      } else {
        return x;
      }
    }
  }

  bool MatchProduct(const Node& mm, Match& m) {
    m.q = PeelScale(mm.inputs[0], m);
    m.k = PeelScale(mm.inputs[1], m);
    // Kt = Transpose(K, [0, 1, 3, 2]): read K itself.
    const Node* t = Producer(m.k);
    if (t && IsOp(*t, "Transpose") && ud_.Consumers(m.k).size() == 1 && !outputs_.count(m.k) &&
        t->GetInts("perm") == std::vector<int64_t>{0, 1, 3, 2}) {
      m.k = t->inputs[0];
      m.k_transposed = false;
    }
    return true;
  }

  // repeat_kv: Reshape(Concat([Unsqueeze(x, 2)] * n, axis=2) or Expand(Unsqueeze(x, 2), ...)) of
  // a rank-4 x [B, Hkv, a, c] into [B, Hkv * n, a, c]. Returns x, or "" when `y` is not that.
  std::string Unrepeat(const std::string& y) const {
    const Node* r = Producer(y);
    const Value* yv = Val(y);
    if (!r || !IsOp(*r, "Reshape") || !yv || !yv->ShapeKnown() || yv->shape.size() != 4) return "";
    const Node* c = Producer(r->inputs[0]);
    if (!c) return "";
    std::string u;
    if (IsOp(*c, "Concat")) {
      if (c->GetInt("axis", 0) != 2 || c->inputs.empty()) return "";
      for (const auto& in : c->inputs)
        if (in != c->inputs[0]) return "";
      u = c->inputs[0];
    } else if (IsOp(*c, "Expand")) {
      u = c->inputs[0];
    } else {
      return "";
    }
    const Node* un = Producer(u);
    if (!un || !IsOp(*un, "Unsqueeze")) return "";
    const Value* x = Val(un->inputs[0]);
    const Value* uv = Val(u);
    const Value* cv = Val(c->outputs[0]);
    if (!x || !uv || !cv || !x->ShapeKnown() || !cv->ShapeKnown() || x->shape.size() != 4 ||
        uv->shape.size() != 5 || cv->shape.size() != 5 || uv->shape[2] != 1)
      return "";
    // [B, Hkv, n, a, c] -> [B, Hkv * n, a, c]
    const Shape& xs = x->shape;
    const Shape& cs = cv->shape;
    if (cs[0] != xs[0] || cs[1] != xs[1] || cs[3] != xs[2] || cs[4] != xs[3]) return "";
    if (yv->shape != Shape{xs[0], xs[1] * cs[2], xs[2], xs[3]}) return "";
    return un->inputs[0];
  }

  // A causal mask with a finite fill (torch.finfo.min) gives what -inf gives unless some row is
  // masked everywhere, which cannot happen without a mask input when the bias is finite (the
  // diagonal score stays a real number, and exp(fill - it) is exactly 0 either way); -inf then lets
  // the kernels skip the tiles above the diagonal.
  void PreferInfiniteFill(Match& m) const {
    if (!m.causal || !m.mask.empty() || !m.has_fill || m.fill > -1e30) return;
    if (!m.bias.empty()) {
      const Value* b = Val(m.bias);
      if (!b || !b->data) return;
      for (int64_t i = 0; i < b->data->numel(); ++i)
        if (!(std::fabs(b->data->GetAsDouble(i)) < 1e30)) return;
    }
    m.fill = -std::numeric_limits<double>::infinity();
  }

  bool Finish(Match& m) {
    PreferInfiniteFill(m);
    if (!m.has_fill) m.fill = -std::numeric_limits<double>::infinity();
    const Value* q = Val(m.q);
    if (!q || !q->ShapeKnown() || q->shape.size() != m.scores.size()) return false;
    if (q->dtype != DType::kFloat32 && q->dtype != DType::kFloat64) return false;
    if (q->shape.size() == 3) return true;  // one head: no repeat_kv to look through
    // GQA / MQA: K and V both widened by repeat_kv from the same head count.
    std::string k = Unrepeat(m.k), v = Unrepeat(m.v);
    if (!k.empty() && !v.empty()) {
      const Value* kv = Val(k);
      const Value* vv = Val(v);
      if (kv && vv && kv->shape[1] == vv->shape[1] && kv->shape[1] < q->shape[1]) {
        m.k = k;
        m.v = v;
        m.kv_heads = kv->shape[1];
      }
    }
    return true;
  }

  Graph& g_;
  UseDef ud_;
  std::set<std::string> params_, outputs_;
  std::map<std::string, bool> reaches_;
  // BandForm's and FloatBandOf's answers by what was evaluated (IndexGrid::Signature) and size.
  std::map<std::string, Band> bands_;
  std::map<std::string, FloatBand> float_bands_;
  std::string axes_;  // the [1] constant the rank-3 views use
};

}  // namespace

AttentionFusionStats FuseAttention(Graph& g) { return Fuser(g).Run(); }

}  // namespace foundry
