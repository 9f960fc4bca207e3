#include "passes/autocast.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "compiler/phase.h"
#include "passes/remat.h"

namespace foundry {

std::string_view PrecisionName(Precision p) {
  return p == Precision::kAmpBf16 ? "amp_bf16" : "fp32";
}

StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "amp_bf16") return Precision::kAmpBf16;
  if (name == "amp_fp16")
    return Error(
        "precision amp_fp16 is not supported: fp16 training needs loss scaling, which "
        "foundry does not have; use amp_bf16 (llm-foundry's default) or fp32");
  return Error("unknown precision '" + std::string(name) + "'; use amp_bf16 or fp32");
}

std::string AutocastStats::ToString() const {
  return (low_params ? std::to_string(low_params) + " parameters computed in bf16 (FSDP), " : "") +
         std::to_string(low) + " nodes in bf16, " + std::to_string(fp32) +
         " fp32-list nodes given f32, " + std::to_string(promoted) +
         " promoted; casts: " + std::to_string(parameter_casts) + " parameters, " +
         std::to_string(activation_casts) + " activations, " + std::to_string(constants) +
         " constants converted";
}

namespace {

enum class Policy { kLow, kFp32, kPromote };

// The normalizations, which FSDP's bf16 parameters run in their input's type.
bool IsNorm(const Node& n) {
  return (n.domain.empty() && n.op_type == "LayerNormalization") ||
         (n.domain == "com.microsoft" && n.op_type == "SimplifiedLayerNormalization");
}

Policy PolicyOf(const Node& n, bool low_params) {
  if (low_params && IsNorm(n)) return Policy::kPromote;
  static const std::set<std::pair<std::string, std::string>> kLow = {
      {"", "MatMul"},
      {"", "Gemm"},
      {"", "Conv"},
      {"", "ConvTranspose"},
      {"", "Einsum"},
      {"", "PRelu"},
      {"com.microsoft", "FusedMatMul"},
      {"foundry", "Attention"}};
  static const std::set<std::pair<std::string, std::string>> kFp32 = {
      {"", "Softmax"},
      {"", "LogSoftmax"},
      {"", "LayerNormalization"},
      {"com.microsoft", "SimplifiedLayerNormalization"},
      {"", "GroupNormalization"},
      {"", "Exp"},
      {"", "Log"},
      {"", "Pow"},
      {"", "Reciprocal"},
      {"", "Softplus"},
      {"", "Acos"},
      {"", "Asin"},
      {"", "Cosh"},
      {"", "Sinh"},
      {"", "Tan"},
      {"", "ReduceSum"},
      {"", "ReduceProd"},
      {"", "ReduceLogSumExp"},
      {"", "ReduceL1"},
      {"", "ReduceL2"},
      {"", "CumSum"},
      {"", "SoftmaxCrossEntropyLoss"},
      {"", "NegativeLogLikelihoodLoss"}};
  const std::pair<std::string, std::string> key{n.domain, n.op_type};
  if (kLow.count(key)) return Policy::kLow;
  if (kFp32.count(key)) return Policy::kFp32;
  return Policy::kPromote;
}

// Inputs whose type ONNX lets differ from the data's (Dropout's ratio, Pow's exponent): never cast.
bool KeepsItsType(const Node& n, size_t i) {
  if (n.domain.empty() && n.op_type == "Dropout") return i == 1;
  if (n.domain.empty() && n.op_type == "Pow") return i == 1;
  return false;
}

bool IsAutocastFloat(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16; }

Tensor Converted(const Tensor& t, DType to) {
  Tensor out(to, t.shape());
  const int64_t n = t.numel();
  if (to == DType::kBFloat16)
    FloatToBf16(t.data<float>(), out.data<uint16_t>(), n);
  else
    Bf16ToFloat(t.data<uint16_t>(), out.data<float>(), n);
  return out;
}

class Autocast {
 public:
  Autocast(Graph& g, const AutocastPass::Options& options, AutocastStats& stats)
      : g_(g), options_(options), stats_(stats) {}

  Status Run() {
    std::vector<Node> nodes = std::move(g_.nodes);
    g_.nodes.clear();
    std::set<std::string> low_products;  // outputs of lower-precision products (linear biases)
    const bool low_params = options_.param_dtype == DType::kBFloat16;
    std::set<std::string> low_param_names;
    for (Node& n : nodes) {
      const Policy policy = PolicyOf(n, low_params);
      for (size_t i = 0; low_params && i < n.inputs.size(); ++i) {
        const std::string& in = n.inputs[i];
        const Value* v = n.HasInput(i) ? g_.FindValue(in) : nullptr;
        if (!v || !g_.IsParameter(in) || v->dtype != DType::kFloat32) continue;
        low_param_names.insert(in);
        n.inputs[i] = CastOf(in, DType::kBFloat16, n);
      }
      if (options_.buffer_dtype == DType::kBFloat16 && policy == Policy::kPromote) LowerBuffers(n);
      std::vector<size_t> floats;  // float inputs that may be cast
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (!n.HasInput(i) || KeepsItsType(n, i)) continue;
        const Value* v = g_.FindValue(n.inputs[i]);
        if (v && IsAutocastFloat(v->dtype)) floats.push_back(i);
      }
      if (policy == Policy::kLow) {
        for (size_t i : floats) CastInput(n, i, DType::kBFloat16);
        ++stats_.low;
        for (const std::string& o : n.outputs)
          if (!o.empty()) low_products.insert(o);
      } else if (policy == Policy::kFp32) {
        bool any = false;
        for (size_t i : floats) any |= CastInput(n, i, DType::kFloat32);
        stats_.fp32 += any;
      } else if (IsLinearBias(n, floats, low_products)) {
        for (size_t i : floats) CastInput(n, i, DType::kBFloat16);
        ++stats_.low;
      } else if (!floats.empty()) {
        const DType to = Widest(n, floats);
        bool any = false;
        for (size_t i : floats) any |= CastInput(n, i, to);
        stats_.promoted += any;
      }
      // Output types follow the new input types (shapes do not change).
      ASSIGN_OR_RETURN(std::vector<TypeInfo> types, InferNodeTypes(g_, n));
      for (size_t k = 0; k < n.outputs.size() && k < types.size(); ++k) {
        if (n.outputs[k].empty()) continue;
        Value& v = g_.GetOrAddValue(n.outputs[k]);
        if (v.dtype != types[k].dtype) {
          if (!original_.count(v.name)) original_[v.name] = v.dtype;
          v.dtype = types[k].dtype;
        }
      }
      g_.nodes.push_back(std::move(n));
    }
    RestoreOutputTypes();
    DropReplacedConstants();
    stats_.low_params = static_cast<int>(low_param_names.size());
    return Status::Ok();
  }

 private:
  // FSDP's bf16 buffer_dtype: the f32 constants of rank >= 1 this node reads, converted.
  void LowerBuffers(Node& n) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!n.HasInput(i) || KeepsItsType(n, i)) continue;
      const Value* v = g_.FindValue(n.inputs[i]);
      if (v && v->data && !g_.IsParameter(n.inputs[i]) && v->dtype == DType::kFloat32 &&
          v->rank_known && !v->shape.empty())
        n.inputs[i] = CastOf(n.inputs[i], DType::kBFloat16, n);
    }
  }

  // The widest type of the node's float inputs: rank >= 1 inputs decide; zero-dimensional ones
  // only when nothing else is floating (torch's promotion of dimensioned over 0-d tensors).
  DType Widest(const Node& n, const std::vector<size_t>& floats) const {
    bool dimensioned = false, any_f32 = false, dim_f32 = false;
    for (size_t i : floats) {
      const Value* v = g_.FindValue(n.inputs[i]);
      const bool scalar = v->rank_known && v->shape.empty();
      dimensioned |= !scalar;
      any_f32 |= v->dtype == DType::kFloat32;
      dim_f32 |= !scalar && v->dtype == DType::kFloat32;
    }
    const bool f32 = dimensioned ? dim_f32 : any_f32;
    return f32 ? DType::kFloat32 : DType::kBFloat16;
  }

  // Add(product, bias): a lower-precision product's output plus a rank-1 initializer.
  bool IsLinearBias(const Node& n, const std::vector<size_t>& floats,
                    const std::set<std::string>& low_products) const {
    if (!n.domain.empty() || n.op_type != "Add" || floats.size() != 2) return false;
    for (int p = 0; p < 2; ++p) {
      const std::string& prod = n.inputs[floats[p]];
      const std::string& bias = n.inputs[floats[1 - p]];
      const Value* b = g_.FindValue(bias);
      if (low_products.count(prod) && g_.IsInitializer(bias) && b->rank_known &&
          b->shape.size() == 1)
        return true;
    }
    return false;
  }

  // Points input i of n at a `to` version of its value; false when it already is `to`.
  bool CastInput(Node& n, size_t i, DType to) {
    const Value* v = g_.FindValue(n.inputs[i]);
    if (v->dtype == to) return false;
    n.inputs[i] = CastOf(n.inputs[i], to, n);
    return true;
  }

  std::string CastOf(const std::string& name, DType to, const Node& consumer) {
    const auto key = std::make_pair(name, to);
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    const Value src = *g_.FindValue(name);  // a copy: adding values may move the map's nodes
    const std::string suffix = to == DType::kBFloat16 ? "_bf16" : "_f32";
    const std::string out = g_.UniqueValueName(name + suffix);
    Value& v = g_.GetOrAddValue(out);
    v.dtype = to;
    v.shape = src.shape;
    v.dim_params = src.dim_params;
    v.rank_known = src.rank_known;
    if (src.data && !g_.IsParameter(name)) {
      v.data = std::make_shared<const Tensor>(Converted(*src.data, to));
      g_.initializers.push_back(out);
      replaced_constants_.insert(name);
      ++stats_.constants;
    } else {
      Node cast;
      cast.name = g_.UniqueNodeName(name + "/autocast" + suffix);
      cast.op_type = "Cast";
      cast.inputs = {name};
      cast.outputs = {out};
      cast.attrs["to"] = Attribute::Int(static_cast<int64_t>(to));
      cast.scope = consumer.scope;
      g_.nodes.push_back(std::move(cast));
      ++(g_.IsParameter(name) ? stats_.parameter_casts : stats_.activation_casts);
    }
    casts_[key] = out;
    return out;
  }

  // A graph output whose type changed gets it back: its producer writes a renamed value and a
  // Cast restores the output under its own name.
  void RestoreOutputTypes() {
    for (const std::string& out : g_.outputs) {
      auto it = original_.find(out);
      if (it == original_.end()) continue;
      const DType want = it->second;
      const Value produced = *g_.FindValue(out);
      const std::string renamed =
          g_.UniqueValueName(out + (produced.dtype == DType::kBFloat16 ? "_bf16" : "_autocast"));
      Value& r = g_.GetOrAddValue(renamed);
      r = produced;
      r.name = renamed;
      std::string scope;
      for (Node& n : g_.nodes) {
        for (std::string& i : n.inputs)
          if (i == out) i = renamed;
        for (std::string& o : n.outputs)
          if (o == out) {
            o = renamed;
            scope = n.scope;
          }
      }
      g_.GetOrAddValue(out).dtype = want;
      Node cast;
      cast.name = g_.UniqueNodeName(out + "/autocast_output");
      cast.op_type = "Cast";
      cast.inputs = {renamed};
      cast.outputs = {out};
      cast.attrs["to"] = Attribute::Int(static_cast<int64_t>(want));
      cast.scope = scope;
      g_.nodes.push_back(std::move(cast));
      ++stats_.activation_casts;
    }
  }

  // Constants that every consumer now reads converted are dropped (parameters never are).
  void DropReplacedConstants() {
    std::set<std::string> used;
    for (const Node& n : g_.nodes)
      for (const std::string& i : n.inputs) used.insert(i);
    for (const std::string& o : g_.outputs) used.insert(o);
    std::vector<std::string> kept;
    for (const std::string& init : g_.initializers) {
      if (replaced_constants_.count(init) && !used.count(init)) {
        g_.EraseValue(init);
        continue;
      }
      kept.push_back(init);
    }
    g_.initializers = std::move(kept);
  }

  Graph& g_;
  const AutocastPass::Options& options_;
  AutocastStats& stats_;
  std::map<std::pair<std::string, DType>, std::string> casts_;
  std::map<std::string, DType> original_;  // values whose type the pass changed: their old type
  std::set<std::string> replaced_constants_;
};

}  // namespace

StatusOr<bool> AutocastPass::Run(Graph& graph) {
  stats_ = {};
  if (options_.precision == Precision::kFp32) return false;
  RETURN_IF_ERROR(Autocast(graph, options_, stats_).Run());
  return true;
}

StatusOr<bool> AutocastRecastPass::Run(Graph& graph) {
  recast_ = 0;
  // Each clone goes just before its first reader (the verifier wants topological order; the
  // schedule then moves it next to its first backward reader).
  std::map<size_t, std::vector<Node>> before;  // node index -> clones to insert before it
  const size_t n = graph.nodes.size();
  for (size_t k = 0; k < n; ++k) {
    const Node& cast = graph.nodes[k];
    if (!cast.domain.empty() || cast.op_type != "Cast" || cast.inputs.empty() ||
        !graph.IsParameter(cast.inputs[0]) || PhaseOf(cast) != Phase::kForward)
      continue;
    const std::string copy = cast.outputs[0];
    // Saving the forward's copy: a weight read inside a checkpointed region (a recompute clone
    // reads the copy) is cast again by the recompute, as torch.utils.checkpoint runs autocast
    // again; the backward then reads that cast. Any other weight's backward reads the copy.
    if (options_.save_forward_copies) {
      bool recomputed = false;
      for (const Node& consumer : graph.nodes)
        for (const std::string& in : consumer.inputs)
          recomputed |= in == copy && PhaseOf(consumer) == Phase::kRecompute;
      if (!recomputed) continue;
    }
    std::string fresh;
    size_t first = n;
    for (size_t c = 0; c < n; ++c) {
      Node& consumer = graph.nodes[c];
      const std::optional<Phase> p = PhaseOf(consumer);
      if (p != Phase::kBackward && p != Phase::kRecompute) continue;
      for (std::string& in : consumer.inputs) {
        if (in != copy) continue;
        if (fresh.empty()) fresh = graph.UniqueValueName(copy + "_recompute");
        in = fresh;
        first = std::min(first, c);
      }
    }
    if (fresh.empty()) continue;
    Node clone = graph.nodes[k];
    clone.name = graph.UniqueNodeName(clone.name + "_recompute");
    clone.outputs = {fresh};
    clone.marks[kRecomputeOfMark] = graph.nodes[k].name;
    SetPhase(clone, Phase::kRecompute);
    Value v = *graph.FindValue(copy);
    v.name = fresh;
    graph.GetOrAddValue(fresh) = v;
    before[first].push_back(std::move(clone));
    ++recast_;
  }
  if (recast_ == 0) return false;
  std::vector<Node> nodes;
  nodes.reserve(n + static_cast<size_t>(recast_));
  for (size_t k = 0; k < n; ++k) {
    if (auto it = before.find(k); it != before.end())
      for (Node& c : it->second) nodes.push_back(std::move(c));
    nodes.push_back(std::move(graph.nodes[k]));
  }
  graph.nodes = std::move(nodes);
  return true;
}

}  // namespace foundry
