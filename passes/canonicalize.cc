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

}  // namespace

StatusOr<bool> CanonicalizePass::Run(Graph& g) {
  gelu_ = rmsnorm_ = matmul_ = dropout_ = identity_ = dead_ = 0;

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
      ++gelu_;
    }
  }

  // RMSNorm: Mul(Mul(x, Div(1, Sqrt(Add(ReduceMean(Pow(x, 2)), eps)))), w), either operand
  // order of each Mul (IEEE multiplication commutes exactly).
  {
    Matcher m(g);
    for (Node& root : g.nodes) {
      if (root.op_type != "Mul" || !root.domain.empty()) continue;
      auto [mul_x, w] = OneSide(m, root, "Mul");
      if (!mul_x) continue;
      const Value* wv = g.FindValue(w);
      auto [div, x] = OneSide(m, *mul_x, "Div");
      if (!div || !m.IsConstantScalar(div->inputs[0], 1.0f)) continue;
      const Value* xv = g.FindValue(x);
      if (!wv || !xv || wv->shape.size() != 1 || xv->shape.empty() ||
          wv->shape[0] != xv->shape.back())
        continue;
      Node* sqrt = m.SoleProducer(div->inputs[1], "Sqrt");
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
      if (!pow || pow->inputs[0] != x || !m.IsConstantScalar(pow->inputs[1], 2.0f)) continue;
      Node rms;
      rms.op_type = "SimplifiedLayerNormalization";
      rms.domain = "com.microsoft";
      rms.name = root.name + "/SimplifiedLayerNormalization";
      rms.inputs = {x, w};
      rms.attrs["axis"] = Attribute::Int(-1);
      rms.attrs["epsilon"] = Attribute::Float(eps);
      Replace(root, std::move(rms));
      ++rmsnorm_;
    }
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
      ++matmul_;
    }
  }

  // Dropout that drops nothing, then Identity removal.
  for (Node& n : g.nodes) {
    if (n.op_type != "Dropout" || !n.domain.empty()) continue;
    bool inactive = false;
    if (n.HasInput(1)) {
      const Value* r = g.FindValue(n.inputs[1]);
      inactive |= r && r->data && r->data->GetAsDouble(0) == 0.0;
    } else {
      inactive = true;  // ratio defaults to 0.5 but training_mode defaults to false
    }
    if (n.HasInput(2)) {
      const Value* t = g.FindValue(n.inputs[2]);
      inactive |= t && t->data && t->data->GetAsDouble(0) == 0.0;
    }
    if (!inactive || n.HasOutput(1)) continue;  // a consumed mask keeps the Dropout
    n.op_type = "Identity";
    n.inputs.resize(1);
    n.outputs.resize(1);
    n.attrs.clear();
    ++dropout_;
  }
  {
    std::map<std::string, std::string> forward;
    std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
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
    identity_ = static_cast<int>(forward.size());
  }

  dead_ = RemoveDeadNodes(g);
  for (Node& n : g.nodes) RETURN_IF_ERROR(InferAndSetTypes(g, n));
  return gelu_ + rmsnorm_ + matmul_ + dropout_ + identity_ + dead_ > 0;
}

std::string CanonicalizePass::Stats() const {
  return "gelu " + std::to_string(gelu_) + ", rmsnorm " + std::to_string(rmsnorm_) +
         ", transposed-weight matmul " + std::to_string(matmul_) + ", inactive dropout " +
         std::to_string(dropout_) + ", identity " + std::to_string(identity_) +
         "; removed " + std::to_string(dead_) + " dead nodes";
}

}  // namespace foundry
