#include "passes/canonicalize.h"

#include <cmath>
#include <optional>
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

// ---- GELU, tanh GELU ---------------------------------------------------------------------------
// The operand of the two-input node `n` that is not a constant equal to `c` (on either side), or
// "" when neither is. For Mul and Add, whose IEEE results do not depend on operand order.
std::string OtherThanConstant(const Matcher& m, const Node& n, float c) {
  if (n.inputs.size() != 2) return "";
  if (m.IsConstantScalar(n.inputs[1], c)) return n.inputs[0];
  if (m.IsConstantScalar(n.inputs[0], c)) return n.inputs[1];
  return "";
}

// The outside of 0.5·x·A, A = Add(f, 1), as exporters write it, any operand order in each Mul:
//   half last    Mul(Mul(x, A), 0.5)   torch 1.13 TorchScript
//   half first   Mul(x, Mul(0.5, A))   torch 2.6 dynamo
//                Mul(Mul(x, 0.5), A)   Hugging Face (gelu_new); the same bits as the line above:
//                                      0.5·A and 0.5·x are exact wherever it matters (GeluBlock,
//                                      kernels/cpu/elementwise.cc)
// Returns the candidates (x, the f that A adds 1 to, which form); the caller checks that f reads
// the same x. More than one when a product could be read both ways.
struct GeluOutside {
  std::string x;
  Node* f_add = nullptr;  // A
  bool half_first = false;
};
std::vector<GeluOutside> MatchGeluOutside(Matcher& m, const Node& root) {
  std::vector<GeluOutside> found;
  if (root.op_type != "Mul" || !root.domain.empty() || root.inputs.size() != 2) return found;
  auto add_of = [&](const std::string& v) -> Node* {
    Node* a = m.SoleProducer(v, "Add");
    return a && !OtherThanConstant(m, *a, 1.0f).empty() ? a : nullptr;
  };
  // Half last: root = Mul(P, 0.5), P = Mul(x, A).
  if (std::string p = OtherThanConstant(m, root, 0.5f); !p.empty()) {
    if (Node* pm = m.SoleProducer(p, "Mul"); pm && pm->inputs.size() == 2)
      for (int side = 0; side < 2; ++side)
        if (Node* a = add_of(pm->inputs[side])) found.push_back({pm->inputs[1 - side], a, false});
    return found;
  }
  // Half first: root = Mul(x, Q), Q = Mul(0.5, A); or root = Mul(H, A), H = Mul(x, 0.5).
  for (int side = 0; side < 2; ++side) {
    Node* h = m.SoleProducer(root.inputs[side], "Mul");
    std::string halved = h ? OtherThanConstant(m, *h, 0.5f) : "";
    if (halved.empty()) continue;
    const std::string& other = root.inputs[1 - side];
    if (Node* a = add_of(halved)) found.push_back({other, a, true});
    if (Node* a = add_of(other)) found.push_back({halved, a, true});
  }
  return found;
}

// Erf GELU: A = Add(Erf(Div(x, 1.4142135)), 1) => com.microsoft::Gelu(x), with {form="half_first"}
// when the 0.5 is applied first (GeluBlock reproduces both rounding sequences). Returns how many.
int FuseErfGelu(Graph& g) {
  Matcher m(g);
  int fused = 0;
  for (Node& root : g.nodes) {
    for (const GeluOutside& o : MatchGeluOutside(m, root)) {
      Node* erf = m.SoleProducer(OtherThanConstant(m, *o.f_add, 1.0f), "Erf");
      Node* div = erf ? m.SoleProducer(erf->inputs[0], "Div") : nullptr;
      if (!div || div->inputs[0] != o.x || !m.IsConstantScalar(div->inputs[1], 1.4142135381698608f))
        continue;
      Node gelu;
      gelu.op_type = "Gelu";
      gelu.domain = "com.microsoft";
      gelu.name = root.name + "/Gelu";
      gelu.inputs = {o.x};
      if (o.half_first) gelu.attrs["form"] = Attribute::String("half_first");
      Replace(root, std::move(gelu));
      ++fused;
      break;
    }
  }
  return fused;
}

// Tanh GELU: A = Add(Tanh(Mul(Add(x, Mul(cube, c)), k)), 1), c = 0.044715 and k = sqrt(2/pi) as
// f32 constants, in the two rounding sequences FastGeluBlock (kernels/cpu/elementwise.cc)
// reproduces:
//   gelu_new    cube Pow(x, 3), the 0.5 first (Hugging Face's gelu_new, torch 2.6 dynamo's
//               F.gelu(approximate='tanh'))
//   torch_tanh  cube Mul(x, Mul(x, x)), the 0.5 last (torch 1.13 TorchScript's)
// Other mixes are left alone. Returns how many.
int FuseTanhGelu(Graph& g) {
  Matcher m(g);
  const float kC = 0.044715f;
  const float kK = static_cast<float>(0.7978845608028654);
  int fused = 0;
  for (Node& root : g.nodes) {
    for (const GeluOutside& o : MatchGeluOutside(m, root)) {
      const std::string& x = o.x;
      Node* tanh = m.SoleProducer(OtherThanConstant(m, *o.f_add, 1.0f), "Tanh");
      Node* w = tanh ? m.SoleProducer(tanh->inputs[0], "Mul") : nullptr;            // k·v
      Node* v = w ? m.SoleProducer(OtherThanConstant(m, *w, kK), "Add") : nullptr;  // x + u
      Node* u = v ? m.SoleProducer(OtherOperand(*v, x), "Mul") : nullptr;           // c·cube
      const std::string cube_name = u ? OtherThanConstant(m, *u, kC) : "";
      if (cube_name.empty()) continue;
      if (o.half_first) {
        Node* pow = m.SoleProducer(cube_name, "Pow");
        if (!pow || pow->inputs[0] != x || m.ScalarConstant(pow->inputs[1]) != 3.0) continue;
      } else {
        Node* cube = m.SoleProducer(cube_name, "Mul");
        Node* sq = cube ? m.SoleProducer(OtherOperand(*cube, x), "Mul") : nullptr;
        if (!sq || sq->inputs[0] != x || sq->inputs[1] != x) continue;
      }
      const Value* xv = g.FindValue(x);
      if (!xv || xv->dtype != DType::kFloat32) continue;
      Node fast;
      fast.op_type = "FastGelu";
      fast.domain = "com.microsoft";
      fast.name = root.name + "/FastGelu";
      fast.inputs = {x};
      fast.attrs["form"] = Attribute::String(o.half_first ? "gelu_new" : "torch_tanh");
      Replace(root, std::move(fast));
      ++fused;
      break;
    }
  }
  return fused;
}
// ---- end GELU ---------------------------------------------------------------------------------

// ---- RMSNorm ----------------------------------------------------------------------------------
// Mul(Mul(x, R), w) with R = 1/Sqrt(Add(ReduceMean(S, axes=[-1], keepdims=1), eps)), in the
// spellings of torch 1.13 TorchScript, torch 2.6 dynamo and Hugging Face:
//   R   Div(1, Sqrt(.)) or Reciprocal(Sqrt(.)): the same IEEE division
//   S   Pow(x, 2) (f32 or int exponent) or Mul(x, x): the Pow kernel squares as a * a
//   the ReduceMean's axes an attribute or a constant input, -1 or rank - 1
//   any operand order in each Mul and in the Add (IEEE addition and multiplication commute)
//   w   any [D] value: a parameter, or Gemma's Add(weight, 1), which stays and feeds the scale
//       (its gradient reaches the weight through the Add)
// The no-op Casts litgpt and Hugging Face wrap around it are gone by then (RemoveIdentities).
// => com.microsoft::SimplifiedLayerNormalization(x, w) {axis=-1, epsilon=eps}, whose kernel
// computes these very f32 steps (kernels/cpu/math.cc). Returns how many.
struct RmsBody {
  std::string x;
  float eps = 0;
};
std::optional<RmsBody> MatchRmsBody(Matcher& m, const Graph& g, const Node& mul_x) {
  for (int side = 0; side < 2; ++side) {
    const std::string& x = mul_x.inputs[1 - side];
    const std::string& r = mul_x.inputs[side];
    std::string root_mean_sq;
    if (Node* div = m.SoleProducer(r, "Div"); div && m.IsConstantScalar(div->inputs[0], 1.0f))
      root_mean_sq = div->inputs[1];
    else if (Node* reciprocal = m.SoleProducer(r, "Reciprocal"))
      root_mean_sq = reciprocal->inputs[0];
    Node* sqrt = root_mean_sq.empty() ? nullptr : m.SoleProducer(root_mean_sq, "Sqrt");
    Node* add = sqrt ? m.SoleProducer(sqrt->inputs[0], "Add") : nullptr;
    if (!add || add->inputs.size() != 2) continue;
    for (int eps_side = 0; eps_side < 2; ++eps_side) {
      const Value* eps = g.FindValue(add->inputs[eps_side]);
      if (!eps || eps->dtype != DType::kFloat32 ||
          std::isnan(m.ScalarConstant(add->inputs[eps_side])))
        continue;
      Node* mean = m.SoleProducer(add->inputs[1 - eps_side], "ReduceMean");
      if (!mean || mean->GetInt("keepdims", 1) != 1) continue;
      std::vector<int64_t> axes = mean->GetInts("axes");
      if (mean->HasInput(1)) {
        const Value* a = g.FindValue(mean->inputs[1]);
        if (!a || !a->data) continue;
        axes = a->data->ToInt64Vector();
      }
      const Value* xv = g.FindValue(x);
      if (!xv || xv->dtype != DType::kFloat32 || xv->shape.empty()) continue;
      const int64_t rank = static_cast<int64_t>(xv->shape.size());
      if (axes.size() != 1 || (axes[0] != -1 && axes[0] != rank - 1)) continue;
      const Node* pow = m.SoleProducer(mean->inputs[0], "Pow");
      const Node* sq = m.SoleProducer(mean->inputs[0], "Mul");
      const bool squares_x =
          (pow && pow->inputs[0] == x && m.IsConstantNumber(pow->inputs[1], 2.0)) ||
          (sq && sq->inputs.size() == 2 && sq->inputs[0] == x && sq->inputs[1] == x);
      if (squares_x) return RmsBody{x, eps->data->data<float>()[0]};
    }
  }
  return std::nullopt;
}

int FuseRmsNorm(Graph& g) {
  Matcher m(g);
  int fused = 0;
  for (Node& root : g.nodes) {
    if (root.op_type != "Mul" || !root.domain.empty() || root.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      Node* mul_x = m.SoleProducer(root.inputs[side], "Mul");
      std::optional<RmsBody> body = mul_x ? MatchRmsBody(m, g, *mul_x) : std::nullopt;
      if (!body) continue;
      const std::string w = root.inputs[1 - side];
      const Value* wv = g.FindValue(w);
      const Value* xv = g.FindValue(body->x);
      if (!wv || wv->dtype != DType::kFloat32 || wv->shape.size() != 1 ||
          wv->shape[0] != xv->shape.back())
        continue;
      Node rms;
      rms.op_type = "SimplifiedLayerNormalization";
      rms.domain = "com.microsoft";
      rms.name = root.name + "/SimplifiedLayerNormalization";
      rms.inputs = {body->x, w};
      rms.attrs["axis"] = Attribute::Int(-1);
      rms.attrs["epsilon"] = Attribute::Float(body->eps);
      Replace(root, std::move(rms));
      ++fused;
      break;
    }
  }
  return fused;
}
// ---- end RMSNorm ------------------------------------------------------------------------------

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

  stats_.gelu += FuseErfGelu(g);
  stats_.fast_gelu += FuseTanhGelu(g);
  stats_.rmsnorm = FuseRmsNorm(g);
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
