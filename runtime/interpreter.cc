#include "runtime/interpreter.h"

#include <cmath>
#include <unordered_map>

#include "base/hash.h"
#include "compiler/random_seed.h"
#include "runtime/cpu_backend.h"

namespace foundry {

uint64_t NodeKey(const Node& node) {
  if (node.HasAttr("seed")) return RandomKey(node);
  auto it = node.marks.find("recompute_of");
  return Fnv1a(it != node.marks.end() ? it->second : node.name);
}

StatusOr<std::map<std::string, Tensor>> Interpret(const Graph& graph,
                                                  const std::map<std::string, Tensor>& feeds,
                                                  const InterpretOptions& options) {
  std::unordered_map<std::string, Tensor> live;
  std::unordered_map<std::string, const Tensor*> constants;
  for (const auto& [name, value] : graph.values())
    if (value.data) constants[name] = value.data.get();
  for (const auto& [name, t] : feeds) constants[name] = &t;
  for (const auto& in : graph.inputs)
    if (!constants.count(in))
      return Error("missing input '" + in + "': the graph needs it; pass it with --feed " + in +
                   "=FILE.pb");

  // Last use of each value, to free activations early.
  std::unordered_map<std::string, size_t> last_use;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& in : graph.nodes[i].inputs) last_use[in] = i;
  std::map<std::string, bool> keep;
  for (const auto& out : graph.outputs) keep[out] = true;
  for (const auto& f : options.extra_fetches) keep[f] = true;

  auto lookup = [&](const std::string& name) -> const Tensor* {
    auto c = constants.find(name);
    if (c != constants.end()) return c->second;
    auto l = live.find(name);
    return l == live.end() ? nullptr : &l->second;
  };

  Backend& backend = options.backend ? *options.backend : GetCpuBackend();
  KernelContext ctx = options.ctx;
  // Every value is allocated fresh: a gradient accumulator has nothing to add to, so it runs as
  // a step's first microbatch (gradient = grad_scale * partial).
  ctx.grad_accumulate = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    std::vector<const Tensor*> ins;
    for (const auto& in : node.inputs) {
      if (in.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      const Tensor* t = lookup(in);
      if (!t) return Error(node.Describe() + ": input '" + in + "' has not been computed");
      ins.push_back(t);
    }
    std::vector<Tensor> outs;
    std::vector<Tensor*> out_ptrs;
    outs.reserve(node.outputs.size());
    for (const auto& out : node.outputs) {
      const Value* v = out.empty() ? nullptr : graph.FindValue(out);
      if (!out.empty() && (!v || !v->ShapeKnown()))
        return Error(node.Describe() + ": output '" + out +
                     "' has no concrete shape; bind symbolic dimensions with --dim");
      StatusOr<Tensor> t = v ? Tensor::Allocate(v->dtype, v->shape) : Tensor(DType::kFloat32, {0});
      if (!t.ok())
        return Error(node.Describe() + ": output '" + out + "': " + t.status().message());
      outs.push_back(std::move(*t));
    }
    for (auto& t : outs) out_ptrs.push_back(&t);
    ctx.node_key = NodeKey(node);
    // Unplanned, so each node's scratch is an allocation of its own (a plan puts it in the arena).
    Region workspace;
    if (const int64_t ws = backend.WorkspaceBytes(graph, node); ws > 0) {
      ASSIGN_OR_RETURN(workspace, backend.Allocate(ws, CurrentMemoryClass(),
                                                   "the workspace of " + node.Describe()));
    }
    RETURN_IF_ERROR(backend.Run(node, ins, out_ptrs,
                                std::span<std::byte>(workspace.data(), workspace.bytes()), ctx));
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k].empty()) continue;
      if (options.check_finite && !AllFinite(outs[k]))
        return Error(node.Describe() + " produced a non-finite value in '" + node.outputs[k] + "'");
      live[node.outputs[k]] = std::move(outs[k]);
    }
    for (const auto& in : node.inputs) {
      if (in.empty() || keep.count(in)) continue;
      auto lu = last_use.find(in);
      if (lu != last_use.end() && lu->second == i) live.erase(in);
    }
  }

  std::map<std::string, Tensor> result;
  auto fetch = [&](const std::string& name) -> Status {
    const Tensor* t = lookup(name);
    if (!t) return Error("value '" + name + "' was not computed");
    result[name] = *t;
    return Status::Ok();
  };
  for (const auto& out : graph.outputs) RETURN_IF_ERROR(fetch(out));
  for (const auto& f : options.extra_fetches) RETURN_IF_ERROR(fetch(f));
  return result;
}

}  // namespace foundry
