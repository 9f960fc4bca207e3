#include "compiler/import_sequences.h"

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "base/quote.h"

namespace foundry {
namespace {

// The integers of a constant value: an initializer or a Constant node's `value`.
class Constants {
 public:
  explicit Constants(const Graph& g) : g_(g) {
    for (const Node& n : g.nodes) {
      if (!n.domain.empty() || n.op_type != "Constant" || !n.HasOutput(0)) continue;
      if (n.HasAttr("value") && n.attrs.at("value").kind == Attribute::Kind::kTensor)
        by_node_[n.outputs[0]] = n.attrs.at("value").t.get();
      else if (n.HasAttr("value_int"))
        own_[n.outputs[0]] = Tensor::ScalarInt64(n.GetInt("value_int", 0));
      else if (n.HasAttr("value_ints")) {
        auto v = n.GetInts("value_ints");
        own_[n.outputs[0]] =
            Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(v.size())}, v);
      }
    }
    for (const auto& [name, t] : own_) by_node_[name] = &t;
  }

  // nullptr when `name` is no constant (or has no data).
  const Tensor* Find(const std::string& name) const {
    auto it = by_node_.find(name);
    if (it != by_node_.end()) return it->second;
    const Value* v = g_.FindValue(name);
    return v && v->data ? v->data.get() : nullptr;
  }

  std::optional<std::vector<int64_t>> Ints(const std::string& name) const {
    const Tensor* t = Find(name);
    if (!t || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32)) return std::nullopt;
    std::vector<int64_t> out;
    for (int64_t i = 0; i < t->numel(); ++i) out.push_back(t->GetAsInt64(i));
    return out;
  }

 private:
  const Graph& g_;
  std::unordered_map<std::string, const Tensor*> by_node_;
  std::unordered_map<std::string, Tensor> own_;
};

class Lowering {
 public:
  explicit Lowering(Graph& g) : g_(g), constants_(g) {
    for (const auto& [name, v] : g.values()) used_.insert(name);
    for (const Node& n : g.nodes) {
      used_.insert(n.inputs.begin(), n.inputs.end());
      used_.insert(n.outputs.begin(), n.outputs.end());
    }
  }

  Status Run() {
    std::vector<Node> out;
    out.reserve(g_.nodes.size());
    // SequenceAt rewrites, keyed by the SequenceAt's output: the nodes that replace it.
    std::unordered_map<std::string, std::vector<Node>> replacement;
    for (const Node& n : g_.nodes) {
      if (IsOp(n, "SplitToSequence")) {
        RETURN_IF_ERROR(Lower(n, out, replacement));
        continue;
      }
      if (IsOp(n, "SequenceAt") && n.HasOutput(0) && replacement.count(n.outputs[0])) {
        for (Node& r : replacement.at(n.outputs[0])) out.push_back(std::move(r));
        continue;
      }
      for (const auto& in : n.inputs)
        if (sequences_.count(in))
          return Error(n.Describe() + " reads the sequence " + QuoteName(in) +
                       "; foundry lowers SplitToSequence only when each use is a SequenceAt at a "
                       "constant position (torch's Tensor.split / chunk)");
      if (IsSequenceOp(n))
        return Error(n.Describe() +
                     ": sequences are not supported (only SplitToSequence read "
                     "by SequenceAt at constant positions)");
      out.push_back(n);
    }
    for (const auto& o : g_.outputs)
      if (sequences_.count(o))
        return Error("the graph output " + QuoteName(o) +
                     " is a sequence; foundry handles tensor outputs only");
    g_.nodes = std::move(out);
    for (const auto& s : sequences_) g_.EraseValue(s);
    return Status::Ok();
  }

 private:
  static bool IsOp(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }
  static bool IsSequenceOp(const Node& n) {
    static const std::unordered_set<std::string> kOps = {
        "SequenceAt",    "SequenceConstruct",  "SequenceEmpty",
        "SequenceErase", "SequenceInsert",     "SequenceLength",
        "SequenceMap",   "ConcatFromSequence", "SplitToSequence"};
    return n.domain.empty() && kOps.count(n.op_type) > 0;
  }

  std::string Fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; used_.count(name); ++i) name = base + "_" + std::to_string(i);
    used_.insert(name);
    return name;
  }

  // A Constant node for `values` (int64, 1-D), placed in `out` with `like`'s scope.
  std::string IntsConstant(const std::vector<int64_t>& values, const Node& like,
                           const std::string& base, std::vector<Node>& out) {
    Node c;
    c.op_type = "Constant";
    c.name = g_.UniqueNodeName(like.name + "/" + base);
    c.scope = like.scope;
    c.outputs = {Fresh(like.outputs[0] + "_" + base)};
    c.attrs["value"] = Attribute::FromTensor(
        Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(values.size())}, values));
    out.push_back(c);
    return c.outputs[0];
  }

  // Each SequenceAt of `seq`, with its position, in graph order; an error for any other use.
  StatusOr<std::vector<std::pair<const Node*, int64_t>>> Uses(const Node& split) {
    const std::string& seq = split.outputs[0];
    std::vector<std::pair<const Node*, int64_t>> uses;
    for (const Node& n : g_.nodes) {
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (n.inputs[k] != seq) continue;
        if (!IsOp(n, "SequenceAt") || k != 0 || !n.HasOutput(0))
          return Error(split.Describe() + ": its sequence " + QuoteName(seq) + " is read by " +
                       n.Describe() +
                       "; foundry lowers SplitToSequence only when each use is a SequenceAt at "
                       "a constant position (torch's Tensor.split / chunk)");
        auto pos = n.HasInput(1) ? constants_.Ints(n.inputs[1]) : std::nullopt;
        if (!pos || pos->size() != 1)
          return Error(n.Describe() +
                       ": the position is not a constant integer; foundry "
                       "lowers SequenceAt only at constant positions");
        uses.emplace_back(&n, (*pos)[0]);
      }
    }
    return uses;
  }

  Status Lower(const Node& split, std::vector<Node>& out,
               std::unordered_map<std::string, std::vector<Node>>& replacement) {
    if (!split.HasInput(0) || !split.HasOutput(0))
      return Error(split.Describe() + ": needs an input and an output");
    const std::string& x = split.inputs[0];
    sequences_.insert(split.outputs[0]);
    ASSIGN_OR_RETURN(auto uses, Uses(split));
    const Value* xv = g_.FindValue(x);
    int64_t axis = split.GetInt("axis", 0);
    const bool keepdims = split.GetInt("keepdims", 1) != 0;
    std::optional<int64_t> dim;  // the split axis' size, when the file says it
    if (xv && xv->rank_known) {
      const int64_t rank = static_cast<int64_t>(xv->shape.size());
      if (axis < -rank || axis >= rank)
        return Error(split.Describe() + ": axis " + std::to_string(axis) + " is outside rank " +
                     std::to_string(rank) + " of " + QuoteName(x));
      if (axis < 0) axis += rank;
      if (xv->shape[axis] >= 0) dim = xv->shape[axis];
    } else if (axis < 0) {
      return Error(split.Describe() + ": a negative axis needs the rank of " + QuoteName(x) +
                   ", which the file does not give (value_info)");
    }

    std::vector<int64_t> sizes;  // empty: pieces of unknown count (Slice mode)
    int64_t chunk = 1;
    const bool has_split = split.HasInput(1);
    if (has_split) {
      const Tensor* t = constants_.Find(split.inputs[1]);
      auto values = constants_.Ints(split.inputs[1]);
      if (!t || !values)
        return Error(split.Describe() + ": the split sizes " + QuoteName(split.inputs[1]) +
                     " are not a constant integer tensor; foundry needs them fixed");
      if (t->shape().empty()) {
        chunk = (*values)[0];
        if (chunk <= 0)
          return Error(split.Describe() + ": the chunk size is " + std::to_string(chunk) +
                       "; it must be positive");
      } else {
        sizes = *values;
        int64_t total = 0;
        for (int64_t s : sizes) {
          if (s < 0)
            return Error(split.Describe() + ": a split size is negative (" + std::to_string(s) +
                         ")");
          total += s;
        }
        if (dim && total != *dim)
          return Error(split.Describe() + ": the split sizes add up to " + std::to_string(total) +
                       " but axis " + std::to_string(axis) + " of " + QuoteName(x) + " has " +
                       std::to_string(*dim));
      }
    }
    if (sizes.empty() && dim) {
      for (int64_t at = 0; at < *dim; at += chunk) sizes.push_back(std::min(chunk, *dim - at));
    }
    const bool squeeze = !has_split && !keepdims;

    if (!sizes.empty()) {
      const int64_t count = static_cast<int64_t>(sizes.size());
      Node s;
      s.op_type = "Split";
      s.name = split.name;
      s.scope = split.scope;
      s.marks = split.marks;
      s.attrs["axis"] = Attribute::Int(axis);
      s.inputs = {x, ""};
      for (int64_t i = 0; i < count; ++i)
        s.outputs.push_back(Fresh(split.outputs[0] + "_" + std::to_string(i)));
      s.inputs[1] = IntsConstant(sizes, split, "sizes", out);
      const std::vector<std::string> pieces = s.outputs;
      out.push_back(std::move(s));
      for (const auto& [use, position] : uses) {
        int64_t p = position < 0 ? position + count : position;
        if (p < 0 || p >= count)
          return Error(use->Describe() + ": position " + std::to_string(position) +
                       " is outside the " + std::to_string(count) + " pieces of " +
                       split.Describe());
        std::vector<Node> nodes;
        Node r;
        r.name = use->name;
        r.scope = use->scope;
        r.marks = use->marks;
        r.outputs = {use->outputs[0]};
        if (squeeze) {
          r.op_type = "Squeeze";
          r.inputs = {pieces[p], IntsConstant({axis}, *use, "axes", nodes)};
        } else {
          r.op_type = "Identity";
          r.inputs = {pieces[p]};
        }
        nodes.push_back(std::move(r));
        replacement[use->outputs[0]] = std::move(nodes);
      }
      return Status::Ok();
    }
    // The axis' size is unknown: one Slice per piece used.
    for (const auto& [use, position] : uses) {
      if (position < 0)
        return Error(use->Describe() + ": position " + std::to_string(position) +
                     " counts from the end of a split whose size the file does not give; bind "
                     "the dimension (--dim) or export with a static shape");
      std::vector<Node> nodes;
      Node r;
      r.op_type = "Slice";
      r.name = use->name;
      r.scope = use->scope;
      r.marks = use->marks;
      r.inputs = {x, IntsConstant({position * chunk}, *use, "starts", nodes),
                  IntsConstant({position * chunk + chunk}, *use, "ends", nodes),
                  IntsConstant({axis}, *use, "axes", nodes)};
      if (squeeze) {
        r.outputs = {Fresh(use->outputs[0] + "_piece")};
        Node q;
        q.op_type = "Squeeze";
        q.name = g_.UniqueNodeName(use->name + "/Squeeze");
        q.scope = use->scope;
        q.inputs = {r.outputs[0], IntsConstant({axis}, *use, "squeeze_axes", nodes)};
        q.outputs = {use->outputs[0]};
        nodes.push_back(std::move(r));
        nodes.push_back(std::move(q));
      } else {
        r.outputs = {use->outputs[0]};
        nodes.push_back(std::move(r));
      }
      replacement[use->outputs[0]] = std::move(nodes);
    }
    return Status::Ok();
  }

  Graph& g_;
  Constants constants_;
  std::unordered_set<std::string> used_;
  std::unordered_set<std::string> sequences_;
};

}  // namespace

Status LowerSplitToSequence(Graph& g) { return Lowering(g).Run(); }

const std::vector<LoweredOp>& ImportLoweredOps() {
  static const std::vector<LoweredOp> ops = {
      {"SplitToSequence",
       "lowered at import to Split (or Slice per piece) when only SequenceAt reads it"},
      {"SequenceAt", "lowered at import with its SplitToSequence, at constant positions"},
  };
  return ops;
}

}  // namespace foundry
