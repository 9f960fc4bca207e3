#include "passes/shard.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "compiler/memory_plan.h"
#include "compiler/module_tree.h"
#include "compiler/phase.h"

namespace foundry {

std::string ShardStats::ToString() const {
  if (world_size <= 1) return "1 rank, nothing sharded";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s over %lld ranks%s: %zu units, %d gathers, %d gradient reductions, parameters "
                "%lld B whole, %lld B per rank",
                std::string(ShardingName(strategy)).c_str(), static_cast<long long>(world_size),
                group != world_size ? (" (groups of " + std::to_string(group) + ")").c_str() : "",
                units.size(), gathers, reductions, static_cast<long long>(full_param_bytes),
                static_cast<long long>(shard_param_bytes));
  return buf;
}

CommVolume CommunicationPerStep(const Graph& graph, int64_t world_size, int64_t runs) {
  CommVolume v;
  v.runs = runs;
  for (const Node& n : graph.nodes) {
    if (n.domain != "foundry") continue;
    const int64_t group = n.GetInt("world_size", 1);
    if (group < 2) continue;
    auto shard_bytes = [&](const std::string& name) {
      const Value* val = graph.FindValue(name);
      int64_t numel = 1;
      if (val)
        for (int64_t d : val->shape) numel *= d;
      return ShardElements(numel, group) * static_cast<int64_t>(val ? DTypeSize(val->dtype) : 4);
    };
    if (n.op_type == "AllGather") {
      ++v.gathers;
      for (const auto& out : n.outputs) v.gather_bytes += (group - 1) * shard_bytes(out);
    } else if (n.op_type == "ReduceScatterGradient" || n.op_type == "AllReduceGradient") {
      ++v.reductions;
      const int64_t c = shard_bytes(n.inputs[0]);
      v.reduce_bytes += (n.op_type == "AllReduceGradient" ? 2 : 1) * (group - 1) * c;
      const int64_t replicas = world_size / group;
      if (n.op_type == "ReduceScatterGradient" && replicas > 1)  // HYBRID_SHARD
        v.reduce_bytes += 2 * (replicas - 1) * ShardElements(c / 4, replicas) * 4;
    }
  }
  return v;
}

namespace {

bool IsForward(const Node& n) {
  const auto p = PhaseOf(n);
  return !p || *p == Phase::kForward;
}

// The innermost block containing module `scope` ("" when none).
std::string BlockOf(const std::vector<std::string>& blocks, const std::string& scope) {
  std::string best;
  for (const auto& b : blocks)
    if ((scope == b || (scope.size() > b.size() && scope.compare(0, b.size(), b) == 0 &&
                        scope[b.size()] == '.')) &&
        b.size() > best.size())
      best = b;
  return best;
}

int64_t NumelOf(const Value& v) {
  int64_t n = 1;
  for (int64_t d : v.shape) n *= d;
  return n;
}

bool IsCastTo(const Node& n, DType to) {
  return n.domain.empty() && n.op_type == "Cast" && n.GetInt("to", 0) == static_cast<int64_t>(to);
}

// Under a bf16 reduce_dtype: when the collective's partial is written by node `producer`, a Cast
// of a bf16 gradient to f32 that nothing else reads (`only_reader`), the collective reduces the
// bf16 gradient as it is (returned) and the Cast goes (added to `dropped`); "" otherwise.
std::string LowPrecisionPartial(const Graph& graph, int producer, bool only_reader,
                                std::set<std::string>& dropped) {
  if (producer < 0 || !only_reader) return "";
  const Node& cast = graph.nodes[static_cast<size_t>(producer)];
  if (!IsCastTo(cast, DType::kFloat32)) return "";
  const Value* in = graph.FindValue(cast.inputs[0]);
  if (!in || in->dtype != DType::kBFloat16) return "";
  dropped.insert(cast.name);
  return cast.inputs[0];
}

// Every reader of parameter p among `readers` is a Cast of it to bf16 (FSDP's bf16 param_dtype,
// passes/autocast.h), so the gather may move bf16.
bool ReadAsBf16(const Graph& graph, const std::string& p, const std::vector<int>& readers) {
  for (int c : readers) {
    const Node& n = graph.nodes[static_cast<size_t>(c)];
    if (!IsCastTo(n, DType::kBFloat16) || n.inputs.size() != 1 || n.inputs[0] != p) return false;
  }
  return !readers.empty();
}

// Marks the node that makes each gradient of a unit (in the parameters' compute type: through
// the Casts that widen it for the reduction) with the unit's gathered values (kHoldsMark), so
// that they stay live until the unit's last gradient exists. FSDP reshards a unit at the start of
// its post-backward hook, which runs once every gradient of the unit is made, and reduces after.
void HoldGatheredUntilGradientsAreMade(
    Graph& graph, const std::map<std::string, std::string>& unit_of,
    const std::map<std::string, std::vector<std::string>>& held) {
  std::map<std::string, std::string> param_of_grad;
  for (size_t i = 0; i < graph.parameters.size(); ++i)
    param_of_grad[graph.outputs[i + 1]] = graph.parameters[i];
  std::map<std::string, size_t> producer;
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    for (const auto& o : graph.nodes[k].outputs) producer.emplace(o, k);
  std::map<size_t, std::set<std::string>> holds;
  for (const Node& n : graph.nodes) {
    if (n.domain != "foundry" || n.op_type != "ReduceScatterGradient" || n.outputs.empty())
      continue;
    auto p = param_of_grad.find(n.outputs[0]);
    if (p == param_of_grad.end()) continue;
    auto values = held.find(unit_of.at(p->second));
    if (values == held.end()) continue;
    auto made = producer.find(n.inputs[0]);
    while (made != producer.end() && graph.nodes[made->second].op_type == "Cast" &&
           graph.nodes[made->second].domain.empty())
      made = producer.find(graph.nodes[made->second].inputs[0]);
    if (made == producer.end()) continue;  // a constant gradient
    holds[made->second].insert(values->second.begin(), values->second.end());
  }
  for (const auto& [k, values] : holds) {
    std::string mark;
    for (const std::string& v : values) mark += (mark.empty() ? "" : "\n") + v;
    graph.nodes[k].marks[kHoldsMark] = mark;
  }
}

}  // namespace

StatusOr<bool> ShardPass::Run(Graph& graph) {
  stats_ = {};
  full_shapes_.clear();
  initial_values_.clear();
  const int64_t world = options_.world_size;
  if (world < 1)
    return Error("shard: world size " + std::to_string(world) + "; give 1 or more ranks");
  stats_.world_size = world;
  stats_.strategy = options_.strategy;
  stats_.group = world;
  if (world == 1) return false;
  if (options_.strategy == ShardingStrategy::kHybridShard) {
    if (options_.shard_group < 2 || world % options_.shard_group != 0)
      return Error("HYBRID_SHARD over " + std::to_string(world) + " ranks needs a shard group of " +
                   "2 or more ranks that divides the world size; give --shard-group G with " +
                   std::to_string(world) + " % G == 0 (G = GPUs per node)");
    stats_.group = options_.shard_group;
  }
  const int64_t group = stats_.group;
  if (graph.outputs.size() < graph.parameters.size() + 1)
    return Error("shard: the graph has " + std::to_string(graph.outputs.size()) + " outputs for " +
                 std::to_string(graph.parameters.size()) +
                 " parameters; run autodiff first (loss, then one gradient per parameter)");
  for (const auto& p : graph.parameters) {
    const Value* v = graph.FindValue(p);
    if (!v || !v->ShapeKnown()) return Error("shard: parameter '" + p + "' has no known shape");
    if (v->dtype != DType::kFloat32)
      return Error(
          "shard: parameter '" + p + "' is " + v->TypeString() +
          "; sharded training keeps f32 parameters (amp_bf16 casts them after the gather)");
  }

  // ---- units ----
  std::vector<std::string> blocks;
  for (const ModuleInfo& m : ListModules(graph))
    if (m.is_block) blocks.push_back(m.path);
  const UseDef use = BuildUseDef(graph);
  std::map<std::string, ShardUnit> units;
  std::map<std::string, std::string> unit_of;
  for (const auto& p : graph.parameters) {
    std::set<std::string> owners;
    for (int c : use.Consumers(p)) {
      const Node& n = graph.nodes[static_cast<size_t>(c)];
      if (IsForward(n)) owners.insert(BlockOf(blocks, n.scope));
    }
    const std::string unit = owners.size() == 1 ? *owners.begin() : "";
    unit_of[p] = unit;
    ShardUnit& u = units[unit];
    u.path = unit;
    u.parameters.push_back(p);
    u.bytes += NumelOf(*graph.FindValue(p)) * 4;
  }
  std::vector<std::string> unit_order;
  for (const auto& [path, u] : units) unit_order.push_back(path);
  std::sort(unit_order.begin(), unit_order.end(), ModulePathLess);
  for (const auto& path : unit_order) stats_.units.push_back(units[path]);

  // Nodes to insert before / after a node index (-1: at the front), and nodes that go.
  std::map<int, std::vector<Node>> before, after;
  std::set<std::string> dropped;
  const bool low_reduce = options_.reduce_dtype == DType::kBFloat16;

  // ---- gradients ----
  const bool sharded = options_.strategy != ShardingStrategy::kNoShard;
  const char* reduce_op = sharded ? "ReduceScatterGradient" : "AllReduceGradient";
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    const std::string grad = graph.outputs[i + 1];
    Value* g = graph.FindValue(grad);
    if (!g) return Error("shard: gradient '" + grad + "' is not a value of the graph");
    const int64_t numel = NumelOf(*graph.FindValue(graph.parameters[i]));
    const int producer = use.Producer(grad);
    Node* acc = producer >= 0 ? &graph.nodes[static_cast<size_t>(producer)] : nullptr;
    if (acc && acc->domain == "foundry" && acc->op_type == "AccumulateGradient") {
      acc->op_type = reduce_op;  // the collective accumulates itself
      acc->attrs["world_size"] = Attribute::Int(group);
      if (low_reduce) {
        const std::string& in = acc->inputs[0];
        const std::string low =
            LowPrecisionPartial(graph, use.Producer(in), use.Consumers(in).size() == 1, dropped);
        if (!low.empty()) {
          graph.EraseValue(acc->inputs[0]);
          acc->inputs[0] = low;
        }
      }
    } else {
      const std::string partial = graph.UniqueValueName(grad + "/partial");
      Value renamed = *g;
      renamed.name = partial;
      graph.GetOrAddValue(partial) = renamed;
      g = graph.FindValue(grad);
      g->data = nullptr;  // a constant gradient's bytes stay with the partial
      for (Node& n : graph.nodes) {
        for (auto& out : n.outputs)
          if (out == grad) out = partial;
        for (auto& in : n.inputs)
          if (in == grad) in = partial;
      }
      Node red;
      red.name = graph.UniqueNodeName(grad + "/" + (sharded ? "reduce_scatter" : "all_reduce"));
      red.domain = "foundry";
      red.op_type = reduce_op;
      red.inputs = {partial};
      if (low_reduce) {
        const std::string low =
            LowPrecisionPartial(graph, producer, use.Consumers(grad).empty(), dropped);
        if (!low.empty()) {
          red.inputs[0] = low;
          graph.EraseValue(partial);
        }
      }
      red.outputs = {grad};
      red.attrs["world_size"] = Attribute::Int(group);
      if (producer >= 0) red.scope = graph.nodes[static_cast<size_t>(producer)].scope;
      SetPhase(red, Phase::kBackward);
      after[producer].push_back(std::move(red));
    }
    ++stats_.reductions;
    if (sharded) {
      g->shape = {ShardElements(numel, group)};
      g->dim_params.clear();
      g->rank_known = true;
    }
  }

  // ---- parameters and gathers ----
  // Per unit, the values of its last gather (the backward's under FULL_SHARD, the only one under
  // SHARD_GRAD_OP and for the root): FSDP frees them in the unit's post-backward hook
  // (HoldGatheredUntilGradientsAreMade).
  std::map<std::string, std::vector<std::string>> held;
  for (const auto& p : graph.parameters) {
    const int64_t numel = NumelOf(*graph.FindValue(p));
    stats_.full_param_bytes += numel * 4;
    stats_.shard_param_bytes += (sharded ? ShardElements(numel, group) : numel) * 4;
  }
  if (sharded) {
    const bool full = options_.strategy != ShardingStrategy::kShardGradOp;
    for (const auto& path : unit_order) {
      const ShardUnit& unit = units[path];
      // Passes: {phase of the gather, which consumers it serves}.
      struct Gather {
        bool backward;
        std::vector<std::string> params;
        std::vector<std::vector<int>> readers;
      };
      std::vector<Gather> gathers;
      const bool split = full && !path.empty();
      for (int pass = 0; pass < (split ? 2 : 1); ++pass) {
        Gather gt{pass == 1, {}, {}};
        for (const auto& p : unit.parameters) {
          std::vector<int> readers;
          for (int c : use.Consumers(p))
            if (!split || IsForward(graph.nodes[static_cast<size_t>(c)]) == (pass == 0))
              readers.push_back(c);
          if (readers.empty()) continue;
          gt.params.push_back(p);
          gt.readers.push_back(std::move(readers));
        }
        if (!gt.params.empty()) gathers.push_back(std::move(gt));
      }
      const std::string label = path.empty() ? "root" : path;
      for (Gather& gt : gathers) {
        Node n;
        n.name =
            graph.UniqueNodeName(label + (gt.backward ? "/all_gather_backward" : "/all_gather"));
        n.domain = "foundry";
        n.op_type = "AllGather";
        n.scope = path;
        n.attrs["world_size"] = Attribute::Int(group);
        std::vector<int64_t> shapes;
        std::vector<Node> shard_casts;
        int first = static_cast<int>(graph.nodes.size());
        for (size_t k = 0; k < gt.params.size(); ++k) {
          const std::string& p = gt.params[k];
          const Value pv = *graph.FindValue(p);  // a copy: adding values may move the map's nodes
          const bool low =
              options_.param_dtype == DType::kBFloat16 && ReadAsBf16(graph, p, gt.readers[k]);
          const std::string suffix = gt.backward ? "_backward" : "";
          const std::string out = graph.UniqueValueName(p + "/gathered" + suffix);
          Value& ov = graph.GetOrAddValue(out);
          ov.name = out;
          ov.dtype = low ? DType::kBFloat16 : DType::kFloat32;
          ov.shape = pv.shape;
          ov.dim_params = pv.dim_params;
          ov.rank_known = true;
          shapes.push_back(static_cast<int64_t>(pv.shape.size()));
          shapes.insert(shapes.end(), pv.shape.begin(), pv.shape.end());
          std::string input = p;
          if (low) {  // FSDP's low-precision shard, gathered straight into the casts' copy
            Node cast;
            cast.name = graph.UniqueNodeName(p + "/shard_bf16" + suffix);
            cast.op_type = "Cast";
            cast.scope = path;
            cast.attrs["to"] = Attribute::Int(static_cast<int64_t>(DType::kBFloat16));
            input = graph.UniqueValueName(p + "/shard_bf16" + suffix);
            Value& sv = graph.GetOrAddValue(input);
            sv.name = input;
            sv.dtype = DType::kBFloat16;
            sv.shape = {ShardElements(NumelOf(pv), group)};
            sv.rank_known = true;
            cast.inputs = {p};
            cast.outputs = {input};
            cast.marks[kGatherInputMark] = "1";
            SetPhase(cast, gt.backward ? Phase::kBackward : Phase::kForward);
            shard_casts.push_back(std::move(cast));
          }
          n.inputs.push_back(input);
          n.outputs.push_back(out);
          for (int c : gt.readers[k]) {
            first = std::min(first, c);
            Node& reader = graph.nodes[static_cast<size_t>(c)];
            if (!low) {
              for (auto& in : reader.inputs)
                if (in == p) in = out;
              continue;
            }
            const std::string copy = reader.outputs[0];
            for (Node& m : graph.nodes)
              for (auto& in : m.inputs)
                if (in == copy) in = out;
            dropped.insert(reader.name);
            graph.EraseValue(copy);
          }
        }
        n.attrs["shapes"] = Attribute::Ints(std::move(shapes));
        SetPhase(n, gt.backward ? Phase::kBackward : Phase::kForward);
        held[path] = n.outputs;  // the last gather of the unit wins
        for (Node& cast : shard_casts) before[first].push_back(std::move(cast));
        before[first].push_back(std::move(n));
        ++stats_.gathers;
      }
    }
    for (const auto& p : graph.parameters) {
      Value& v = *graph.FindValue(p);
      full_shapes_[p] = v.shape;
      if (v.data) initial_values_[p] = v.data;
      v.shape = {ShardElements(NumelOf(v), group)};
      v.dim_params.clear();
      v.data = nullptr;
    }
  }

  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + static_cast<size_t>(stats_.gathers + stats_.reductions));
  auto emit = [&](std::map<int, std::vector<Node>>& m, int k) {
    if (auto it = m.find(k); it != m.end())
      for (Node& n : it->second) nodes.push_back(std::move(n));
  };
  emit(after, -1);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    emit(before, static_cast<int>(k));
    if (!dropped.count(graph.nodes[k].name)) nodes.push_back(std::move(graph.nodes[k]));
    emit(after, static_cast<int>(k));
  }
  emit(before, static_cast<int>(graph.nodes.size()));
  graph.nodes = std::move(nodes);
  HoldGatheredUntilGradientsAreMade(graph, unit_of, held);
  return true;
}

}  // namespace foundry
