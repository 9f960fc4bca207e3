#include "passes/canonicalize.h"

#include <cmath>
#include <set>

#include "compiler/op_schema.h"

namespace foundry {

int RemoveDeadNodes(Graph& g) {
  int removed = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    std::set<std::string> used(g.outputs.begin(), g.outputs.end());
    for (const Node& n : g.nodes) used.insert(n.inputs.begin(), n.inputs.end());
    std::vector<Node> kept;
    for (Node& n : g.nodes) {
      bool live = false;
      for (const auto& o : n.outputs) live |= !o.empty() && used.count(o);
      if (live) {
        kept.push_back(std::move(n));
      } else {
        ++removed;
        changed = true;
      }
    }
    g.nodes = std::move(kept);
  }
  g.PruneUnusedValues();
  return removed;
}

namespace {

class Matcher {
 public:
  explicit Matcher(Graph& g) : g_(g), ud_(BuildUseDef(g)) {}

  // The node producing `value` if it is `op` (default domain) and `value` has exactly one
  // consumer; otherwise null.
  Node* SoleProducer(const std::string& value, const std::string& op) {
    int p = ud_.Producer(value);
    if (p < 0) return nullptr;
    Node& n = g_.nodes[p];
    if (n.op_type != op || !n.domain.empty()) return nullptr;
    if (ud_.Consumers(value).size() != 1 || IsGraphOutput(value)) return nullptr;
    return &n;
  }
  bool IsGraphOutput(const std::string& v) const {
    return std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end();
  }
  // The float value of a one-element constant, or NaN.
  double ScalarConstant(const std::string& v) const {
    const Value* val = g_.FindValue(v);
    if (!val || !val->data || val->data->numel() != 1 || g_.IsParameter(v)) return NAN;
    return val->data->GetAsDouble(0);
  }
  bool IsConstantScalar(const std::string& v, float expected) const {
    const Value* val = g_.FindValue(v);
    if (!val || !val->data || val->data->numel() != 1 || val->dtype != DType::kFloat32 ||
        g_.IsParameter(v))
      return false;
    return val->data->data<float>()[0] == expected;
  }
  // A one-element constant equal to `expected`, in any float or integer type (torch's dynamo
  // exporter writes x.pow(2) with an int64 exponent; Pow squares either exactly: a * a).
  bool IsConstantNumber(const std::string& v, double expected) const {
    const Value* val = g_.FindValue(v);
    if (!val || !val->data || val->data->numel() != 1 || g_.IsParameter(v)) return false;
    if (val->dtype == DType::kBool || val->dtype == DType::kUndefined) return false;
    return val->data->GetAsDouble(0) == expected;
  }
  const UseDef& ud() const { return ud_; }

 private:
  Graph& g_;
  UseDef ud_;
};

// Replaces `root` (the last node of a pattern) with `replacement`, keeping root's outputs and
// scope; the other pattern nodes become dead and are removed later.
void Replace(Node& root, Node replacement) {
  replacement.outputs.resize(std::max(replacement.outputs.size(), size_t{1}));
  replacement.outputs[0] = root.outputs[0];
  replacement.scope = root.scope;
  root = std::move(replacement);
}

// Mul(a, b) where one side is produced by `op`: returns (the op node, the other operand).
std::pair<Node*, std::string> OneSide(Matcher& m, const Node& mul, const std::string& op) {
  for (int side = 0; side < 2; ++side)
    if (Node* p = m.SoleProducer(mul.inputs[side], op)) return {p, mul.inputs[1 - side]};
  return {nullptr, ""};
}

// Dropout's ratio (input 1, default 0.5) and training_mode (input 2, default false) when both
// are known: constants or absent. `known` is false when either is a run-time value.
struct DropoutMode {
  bool known = false;
  bool inactive = false;
};
DropoutMode DropoutModeOf(const Graph& g, const Node& n) {
  double ratio = n.GetFloat("ratio", 0.5f);
  bool training = false;
  if (n.HasInput(1)) {
    const Value* r = g.FindValue(n.inputs[1]);
    if (!r || !r->data || r->data->numel() != 1) return {};
    ratio = r->data->GetAsDouble(0);
  }
  if (n.HasInput(2)) {
    const Value* t = g.FindValue(n.inputs[2]);
    if (!t || !t->data || t->data->numel() != 1) return {};
    training = t->data->GetAsDouble(0) != 0;
  }
  return {true, !training || ratio == 0.0};
}

// Step 1: nodes that compute their input: Dropout that drops nothing (and whose mask nobody
// reads), Cast to the dtype the value already has. They become Identity, and every Identity
// that does not produce a graph output is bypassed. Done first so that the fusions below see
// through them (Hugging Face's RMSNorm wraps its body in a Cast pair that is a no-op in f32).
void RemoveIdentities(Graph& g, int& dropouts, int& casts, int& identities) {
  const UseDef ud = BuildUseDef(g);
  std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
  for (Node& n : g.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "Dropout") {
      const DropoutMode mode = DropoutModeOf(g, n);
      if (!mode.known || !mode.inactive) continue;
      // A mask that something reads (or that is a graph output) keeps the Dropout.
      if (n.HasOutput(1) && (!ud.Consumers(n.outputs[1]).empty() || outputs.count(n.outputs[1])))
        continue;
      ++dropouts;
    } else if (n.op_type == "Cast") {
      const Value* in = g.FindValue(n.inputs[0]);
      const Value* out = g.FindValue(n.outputs[0]);
      if (!in || !out || in->dtype == DType::kUndefined || in->dtype != out->dtype) continue;
      ++casts;
    } else if (n.op_type == "CastLike" && n.inputs.size() == 2) {
      // CastLike(x, like) reads only like's element type (torch's dynamo exporter writes one per
      // masked_fill, reading the scores): a Cast to that type, or nothing when x has it already,
      // so the scores' producer does not look read twice to the fusions below.
      const Value* in = g.FindValue(n.inputs[0]);
      const Value* out = g.FindValue(n.outputs[0]);
      if (!in || !out || in->dtype == DType::kUndefined || out->dtype == DType::kUndefined)
        continue;
      if (in->dtype != out->dtype) {
        n.op_type = "Cast";
        n.inputs.resize(1);
        n.attrs.clear();
        n.attrs["to"] = Attribute::Int(static_cast<int64_t>(out->dtype));
        continue;
      }
      ++casts;
    } else {
      continue;
    }
    n.op_type = "Identity";
    n.inputs.resize(1);
    n.outputs.resize(1);
    n.attrs.clear();
  }
  std::map<std::string, std::string> forward;
  for (Node& n : g.nodes)
    if (n.op_type == "Identity" && n.domain.empty() && !outputs.count(n.outputs[0]))
      forward[n.outputs[0]] = n.inputs[0];
  auto resolve = [&](std::string v) {
    for (auto it = forward.find(v); it != forward.end(); it = forward.find(v)) v = it->second;
    return v;
  };
  for (Node& n : g.nodes)
    for (auto& in : n.inputs)
      if (forward.count(in)) in = resolve(in);
  identities = static_cast<int>(forward.size());
}

// The product `a * b` written as Mul: either operand order (IEEE multiplication commutes
// exactly). Returns the operand that is not `known`, or "" when neither is.
std::string OtherOperand(const Node& mul, const std::string& known) {
  if (mul.inputs.size() != 2) return "";
  if (mul.inputs[0] == known) return mul.inputs[1];
  if (mul.inputs[1] == known) return mul.inputs[0];
  return "";
}

// ---- SiLU (gradmin) --------------------------------------------------------------------------
// Mul(x, Sigmoid(x)) or Mul(Sigmoid(x), x) => com.microsoft::QuickGelu(x) {alpha=1}. Exact: the
// QuickGelu kernel computes the Sigmoid kernel's steps and then the product (1·x is x), and IEEE
// multiplication commutes. The Sigmoid's output must have no other consumer. Returns how many.
int FuseSilu(Graph& g) {
  Matcher m(g);
  int fused = 0;
  for (Node& root : g.nodes) {
    if (root.op_type != "Mul" || !root.domain.empty() || root.inputs.size() != 2) continue;
    std::string x;
    for (int side = 0; side < 2 && x.empty(); ++side) {
      const Node* sigmoid = m.SoleProducer(root.inputs[side], "Sigmoid");
      if (sigmoid && sigmoid->inputs[0] == root.inputs[1 - side]) x = root.inputs[1 - side];
    }
    const Value* xv = x.empty() ? nullptr : g.FindValue(x);
    if (!xv || (xv->dtype != DType::kFloat32 && xv->dtype != DType::kFloat64)) continue;
    Node quick;
    quick.op_type = "QuickGelu";
    quick.domain = "com.microsoft";
    quick.name = root.name + "/QuickGelu";
    quick.inputs = {x};
    quick.attrs["alpha"] = Attribute::Float(1.0f);
    Replace(root, std::move(quick));
    ++fused;
  }
  return fused;
}
// ---- end SiLU ---------------------------------------------------------------------------------

}  // namespace

StatusOr<bool> CanonicalizePass::Run(Graph& g) {
  stats_ = {};
  RemoveIdentities(g, stats_.dropout, stats_.cast, stats_.identity);
  // The bypassed Identity nodes still read the values they forwarded; drop them before matching
  // so that they do not count as extra consumers of a pattern's intermediate values.
  stats_.dead = RemoveDeadNodes(g);

  // ai.onnx Gelu (opset 20): its kernel computes com.microsoft Gelu's or FastGelu gelu_new's
  // element function (kernels/cpu/elementwise.cc, OnnxGeluKernel), so renaming it changes no bits.
  for (Node& n : g.nodes) {
    if (n.op_type != "Gelu" || !n.domain.empty()) continue;
    const std::string approximate = n.GetString("approximate", "none");
    if (approximate != "none" && approximate != "tanh") continue;  // inference reports it
    n.domain = "com.microsoft";
    n.attrs.clear();
    if (approximate == "tanh") {
      n.op_type = "FastGelu";
      n.attrs["form"] = Attribute::String("gelu_new");
      ++stats_.fast_gelu;
    } else {
      ++stats_.gelu;
    }
  }

  // GELU: the root is Mul(_, 0.5).
  {
    Matcher m(g);
    for (Node& root : g.nodes) {
      if (root.op_type != "Mul" || !root.domain.empty() || root.inputs.size() != 2) continue;
      if (!m.IsConstantScalar(root.inputs[1], 0.5f)) continue;
      Node* mul_x = m.SoleProducer(root.inputs[0], "Mul");
      if (!mul_x) continue;
      // Mul(x, Add(Erf(Div(x, sqrt2)), 1))
      auto [add, x] = OneSide(m, *mul_x, "Add");
      if (!add || !m.IsConstantScalar(add->inputs[1], 1.0f)) continue;
      Node* erf = m.SoleProducer(add->inputs[0], "Erf");
      if (!erf) continue;
      int div_idx = m.ud().Producer(erf->inputs[0]);
      if (div_idx < 0) continue;
      Node& div = g.nodes[div_idx];
      if (div.op_type != "Div" || m.ud().Consumers(erf->inputs[0]).size() != 1) continue;
      if (div.inputs[0] != x || !m.IsConstantScalar(div.inputs[1], 1.4142135381698608f)) continue;
      if (mul_x->inputs[0] != x) continue;  // the decomposition's operand order, for exactness
      Node gelu;
      gelu.op_type = "Gelu";
      gelu.domain = "com.microsoft";
      gelu.name = root.name + "/Gelu";
      gelu.inputs = {x};
      Replace(root, std::move(gelu));
      ++stats_.gelu;
    }
  }

  // Tanh GELU, in the two decompositions FastGeluValue (kernels/cpu/elementwise.cc) reproduces:
  //   gelu_new    Mul(Mul(x, 0.5), A),  A = Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), c)), k)), 1)
  //   torch_tanh  Mul(Mul(x, A), 0.5),  with Mul(x, Mul(x, x)) for the cube
  // with c = 0.044715 and k = sqrt(2/pi) as f32 constants; any operand order in each Add/Mul.
  {
    Matcher m(g);
    const float kC = 0.044715f;
    const float kK = static_cast<float>(0.7978845608028654);
    for (Node& root : g.nodes) {
      if (root.op_type != "Mul" || !root.domain.empty() || root.inputs.size() != 2) continue;
      // Outer shape: which form, the x it multiplies, and the Add(Tanh(..), 1) it scales.
      std::string form, x, a;
      int half_side = m.IsConstantScalar(root.inputs[0], 0.5f)   ? 0
                      : m.IsConstantScalar(root.inputs[1], 0.5f) ? 1
                                                                 : -1;
      if (half_side >= 0) {
        Node* p = m.SoleProducer(root.inputs[1 - half_side], "Mul");
        if (!p) continue;
        auto [add, other] = OneSide(m, *p, "Add");
        if (!add) continue;
        form = "torch_tanh";
        x = other;
        a = add->outputs[0];
      } else {
        auto [add, h_name] = OneSide(m, root, "Add");
        if (!add) continue;
        Node* h = m.SoleProducer(h_name, "Mul");
        if (!h || h->inputs.size() != 2) continue;
        if (m.IsConstantScalar(h->inputs[1], 0.5f)) {
          x = h->inputs[0];
        } else if (m.IsConstantScalar(h->inputs[0], 0.5f)) {
          x = h->inputs[1];
        } else {
          continue;
        }
        form = "gelu_new";
        a = add->outputs[0];
      }
      // A = Add(Tanh(w), 1).
      Node* add = m.SoleProducer(a, "Add");
      if (!add || add->inputs.size() != 2) continue;
      std::string t_name = m.IsConstantScalar(add->inputs[1], 1.0f)   ? add->inputs[0]
                           : m.IsConstantScalar(add->inputs[0], 1.0f) ? add->inputs[1]
                                                                      : "";
      Node* tanh = t_name.empty() ? nullptr : m.SoleProducer(t_name, "Tanh");
      if (!tanh) continue;
      // w = Mul(v, k), v = Add(x, u), u = Mul(cube, c).
      Node* w = m.SoleProducer(tanh->inputs[0], "Mul");
      if (!w || w->inputs.size() != 2) continue;
      std::string v_name = m.IsConstantScalar(w->inputs[1], kK)   ? w->inputs[0]
                           : m.IsConstantScalar(w->inputs[0], kK) ? w->inputs[1]
                                                                  : "";
      Node* v = v_name.empty() ? nullptr : m.SoleProducer(v_name, "Add");
      if (!v) continue;
      std::string u_name = OtherOperand(*v, x);
      Node* u = u_name.empty() ? nullptr : m.SoleProducer(u_name, "Mul");
      if (!u || u->inputs.size() != 2) continue;
      std::string cube_name = m.IsConstantScalar(u->inputs[1], kC)   ? u->inputs[0]
                              : m.IsConstantScalar(u->inputs[0], kC) ? u->inputs[1]
                                                                     : "";
      if (cube_name.empty()) continue;
      if (form == "gelu_new") {
        Node* pow = m.SoleProducer(cube_name, "Pow");
        if (!pow || pow->inputs[0] != x || m.ScalarConstant(pow->inputs[1]) != 3.0) continue;
      } else {
        Node* cube = m.SoleProducer(cube_name, "Mul");
        if (!cube) continue;
        std::string sq_name = OtherOperand(*cube, x);
        Node* sq = sq_name.empty() ? nullptr : m.SoleProducer(sq_name, "Mul");
        if (!sq || sq->inputs[0] != x || sq->inputs[1] != x) continue;
      }
      const Value* xv = g.FindValue(x);
      if (!xv || xv->dtype != DType::kFloat32) continue;
      Node fast;
      fast.op_type = "FastGelu";
      fast.domain = "com.microsoft";
      fast.name = root.name + "/FastGelu";
      fast.inputs = {x};
      fast.attrs["form"] = Attribute::String(form);
      Replace(root, std::move(fast));
      ++stats_.fast_gelu;
    }
  }

  // RMSNorm: Mul(Mul(x, Div(1, Sqrt(Add(ReduceMean(Pow(x, 2)), eps)))), w), or Reciprocal for
  // the Div, either operand order of each Mul (IEEE multiplication commutes exactly).
  {
    Matcher m(g);
    for (Node& root : g.nodes) {
      if (root.op_type != "Mul" || !root.domain.empty()) continue;
      auto [mul_x, w] = OneSide(m, root, "Mul");
      if (!mul_x) continue;
      const Value* wv = g.FindValue(w);
      // 1/sqrt as Div(1, .) (TorchScript) or Reciprocal(.) (dynamo): the same IEEE division.
      auto [div, x] = OneSide(m, *mul_x, "Div");
      std::string root_sum_sq;
      if (div && m.IsConstantScalar(div->inputs[0], 1.0f)) {
        root_sum_sq = div->inputs[1];
      } else {
        auto [reciprocal, x_of_reciprocal] = OneSide(m, *mul_x, "Reciprocal");
        if (!reciprocal) continue;
        root_sum_sq = reciprocal->inputs[0];
        x = x_of_reciprocal;
      }
      const Value* xv = g.FindValue(x);
      if (!wv || !xv || wv->shape.size() != 1 || xv->shape.empty() ||
          wv->shape[0] != xv->shape.back())
        continue;
      Node* sqrt = m.SoleProducer(root_sum_sq, "Sqrt");
      if (!sqrt) continue;
      Node* add = m.SoleProducer(sqrt->inputs[0], "Add");
      if (!add) continue;
      const Value* eps_value = g.FindValue(add->inputs[1]);
      if (!eps_value || eps_value->dtype != DType::kFloat32 ||
          std::isnan(m.ScalarConstant(add->inputs[1])))
        continue;
      float eps = eps_value->data->data<float>()[0];
      Node* mean = m.SoleProducer(add->inputs[0], "ReduceMean");
      if (!mean || mean->GetInt("keepdims", 1) != 1) continue;
      std::vector<int64_t> axes = mean->GetInts("axes");
      if (mean->HasInput(1)) {
        const Value* a = g.FindValue(mean->inputs[1]);
        if (!a || !a->data) continue;
        axes = a->data->ToInt64Vector();
      }
      int64_t rank = static_cast<int64_t>(xv->shape.size());
      if (axes.size() != 1 || (axes[0] != -1 && axes[0] != rank - 1)) continue;
      Node* pow = m.SoleProducer(mean->inputs[0], "Pow");
      if (!pow || pow->inputs[0] != x || !m.IsConstantNumber(pow->inputs[1], 2.0)) continue;
      Node rms;
      rms.op_type = "SimplifiedLayerNormalization";
      rms.domain = "com.microsoft";
      rms.name = root.name + "/SimplifiedLayerNormalization";
      rms.inputs = {x, w};
      rms.attrs["axis"] = Attribute::Int(-1);
      rms.attrs["epsilon"] = Attribute::Float(eps);
      Replace(root, std::move(rms));
      ++stats_.rmsnorm;
    }
  }

  stats_.silu = FuseSilu(g);

  if (options_.fuse_attention) {
    const AttentionFusionStats& a = stats_.attention = FuseAttention(g);
    g.metadata[kAttentionFusionKey] =
        "fused=" + std::to_string(a.fused) + " unfused=" + std::to_string(a.unfused) +
        " causal=" + std::to_string(a.causal) + " bias=" + std::to_string(a.bias) +
        " mask=" + std::to_string(a.mask) + " grouped=" + std::to_string(a.grouped) +
        " dropout=" + std::to_string(a.dropout) + " window=" + std::to_string(a.window) +
        " softcap=" + std::to_string(a.softcap);
  }

  // MatMul(x, Transpose(W)) -> FusedMatMul(x, W, transB=1).
  {
    Matcher m(g);
    for (Node& mm : g.nodes) {
      if (mm.op_type != "MatMul" || !mm.domain.empty()) continue;
      int t = m.ud().Producer(mm.inputs[1]);
      if (t < 0) continue;
      Node& tr = g.nodes[t];
      if (tr.op_type != "Transpose" || !tr.domain.empty()) continue;
      const Value* w = g.FindValue(tr.inputs[0]);
      if (!w || w->shape.size() != 2 || !g.IsParameter(tr.inputs[0])) continue;
      std::vector<int64_t> perm = tr.GetInts("perm", {1, 0});
      if (perm != std::vector<int64_t>{1, 0}) continue;
      Node fused;
      fused.op_type = "FusedMatMul";
      fused.domain = "com.microsoft";
      fused.name = mm.name;
      fused.inputs = {mm.inputs[0], tr.inputs[0]};
      fused.attrs["transA"] = Attribute::Int(0);
      fused.attrs["transB"] = Attribute::Int(1);
      fused.attrs["alpha"] = Attribute::Float(1.0f);
      Replace(mm, std::move(fused));
      ++stats_.matmul;
    }
  }

  stats_.dead += RemoveDeadNodes(g);
  for (Node& n : g.nodes) RETURN_IF_ERROR(InferAndSetTypes(g, n));
  const CanonicalizeStats& c = stats_;
  return c.gelu + c.fast_gelu + c.rmsnorm + c.silu + c.matmul + c.dropout + c.cast + c.identity +
             c.dead + c.attention.fused >
         0;
}

std::string CanonicalizeStats::ToString() const {
  return "gelu " + std::to_string(gelu) + ", tanh gelu " + std::to_string(fast_gelu) +
         ", rmsnorm " + std::to_string(rmsnorm) + ", silu " + std::to_string(silu) +
         ", transposed-weight matmul " +
         std::to_string(matmul) + ", inactive dropout " + std::to_string(dropout) +
         ", no-op cast " + std::to_string(cast) + ", identity " + std::to_string(identity) +
         ", attention fused " + std::to_string(attention.fused) + ", attention unfused " +
         std::to_string(attention.unfused) +
         "; removed " + std::to_string(dead) + " dead nodes";
}

}  // namespace foundry
