#include "passes/fold.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"

namespace foundry {

namespace {

// "input_ids i64[batch,seq], labels i64[batch,seq]": the graph inputs with a symbolic dimension,
// each with its axes as the model names them, so the user sees every name --dim takes.
std::string SymbolicInputs(const Graph& graph) {
  std::string out;
  for (const auto& name : graph.inputs) {
    const Value* v = graph.FindValue(name);
    if (!v || v->dim_params.empty()) continue;
    out += (out.empty() ? "" : ", ") + name + " " + v->TypeString();
  }
  return out;
}

}  // namespace

Status BindDims(Graph& graph, const std::map<std::string, int64_t>& dims) {
  const std::string symbolic = SymbolicInputs(graph);  // before any is bound
  for (const auto& [name, v] : graph.values()) {
    Value& value = *graph.FindValue(name);
    for (size_t i = 0; i < value.dim_params.size() && i < value.shape.size(); ++i) {
      const std::string& p = value.dim_params[i];
      if (p.empty()) continue;
      auto it = dims.find(p);
      if (it != dims.end()) {
        value.shape[i] = it->second;
      } else if (graph.IsInitializer(name) ||
                 std::find(graph.inputs.begin(), graph.inputs.end(), name) != graph.inputs.end()) {
        return Error("symbolic dimension '" + p + "' of input '" + name +
                     "' is not bound; pass --dim " + p + "=N (the inputs' dimensions: " +
                     (symbolic.empty() ? name + " " + value.TypeString() : symbolic) + ")");
      }
    }
    value.dim_params.clear();
  }
  for (const auto& [p, n] : dims)
    if (n <= 0)
      return Error("--dim " + p + "=" + std::to_string(n) + ": dimensions must be positive");
  return Status::Ok();
}

StatusOr<std::map<std::string, int64_t>> ParseDimSpecs(const std::vector<std::string>& specs) {
  std::map<std::string, int64_t> dims;
  for (const auto& s : specs) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return Error("--dim " + s + ": expected NAME=VALUE, e.g. --dim seq=2048");
    std::string value = s.substr(eq + 1);
    char* end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v <= 0)
      return Error("--dim " + s + ": VALUE must be a positive integer");
    dims[s.substr(0, eq)] = v;
  }
  return dims;
}

namespace {

bool IsRandom(const Node& n) {
  return n.op_type == "Dropout" || n.op_type == "RandomNormal" || n.op_type == "RandomUniform" ||
         n.op_type == "RandomNormalLike" || n.op_type == "RandomUniformLike";
}

}  // namespace

StatusOr<bool> FoldPass::Run(Graph& graph) {
  stats_ = {};
  stats_.max_folded_bytes = options_.max_folded_bytes;
  RETURN_IF_ERROR(BindDims(graph, options_.dims));
  // Inputs and shape-only parameters carry the sizes the model declares; inference checks what
  // nodes produce, this checks what they start from, before any pass sizes a buffer after it.
  for (const auto& [name, v] : graph.values()) {
    if (v.data || !v.ShapeKnown()) continue;
    StatusOr<int64_t> bytes = CheckTensorSize(v.dtype, v.shape);
    if (!bytes.ok())
      return Error("fold: " +
                   std::string(graph.IsParameter(name)     ? "parameter"
                               : graph.IsInitializer(name) ? "initializer"
                                                           : "value") +
                   " '" + name + "' " + bytes.status().message());
  }
  std::set<std::string> params(graph.parameters.begin(), graph.parameters.end());
  auto is_constant = [&](const std::string& name) {
    if (name.empty()) return true;
    const Value* v = graph.FindValue(name);
    return v && v->data && !params.count(name);
  };

  std::vector<Node> kept;
  std::vector<std::string> new_constants;
  for (Node& node : graph.nodes) {
    RETURN_IF_ERROR(InferAndSetTypes(graph, node));
    bool all_constant = true;
    for (const auto& in : node.inputs) all_constant &= is_constant(in);
    bool shape_only = (node.op_type == "Shape" || node.op_type == "Size") && node.domain.empty() &&
                      graph.FindValue(node.inputs[0])->ShapeKnown();
    int64_t out_bytes = 0;
    bool outputs_known = true;
    for (const auto& out : node.outputs) {
      if (out.empty()) continue;
      int64_t b = graph.FindValue(out)->NumBytes();
      if (b < 0) outputs_known = false;
      // Each output is at most kMaxTensorBytes (inference checked it), but a node may have many.
      if (__builtin_add_overflow(out_bytes, std::max<int64_t>(b, 0), &out_bytes))
        out_bytes = INT64_MAX;
    }
    bool foldable = (all_constant || shape_only) && !IsRandom(node) && outputs_known;
    if (foldable && out_bytes > options_.max_folded_bytes && node.op_type != "Constant") {
      ++stats_.kept_large;
      foldable = false;
    }
    if (!foldable) {
      kept.push_back(std::move(node));
      continue;
    }
    std::vector<const Tensor*> ins;
    Tensor placeholder;  // Shape/Size read only the shape of an activation input
    for (const auto& in : node.inputs) {
      if (in.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      const Value* v = graph.FindValue(in);
      if (v->data) {
        ins.push_back(v->data.get());
      } else {
        placeholder = Tensor(v->dtype, Shape(v->shape.size(), 0));
        placeholder.Reshape(v->shape);
        ins.push_back(&placeholder);
      }
    }
    std::vector<Tensor> outs;
    for (const auto& out : node.outputs) {
      const Value* v = out.empty() ? nullptr : graph.FindValue(out);
      if (!v) {
        outs.emplace_back();
        continue;
      }
      StatusOr<Tensor> t = Tensor::Allocate(v->dtype, v->shape);
      if (!t.ok())
        return Error("fold: " + node.Describe() + ": output '" + out + "': " +
                     t.status().message() + "; a smaller --fold-limit leaves it to run time");
      outs.push_back(std::move(*t));
    }
    std::vector<Tensor*> out_ptrs;
    for (auto& t : outs) out_ptrs.push_back(&t);
    // Outputs with no elements need no kernel, and their other axes may be huge ([0, 2^30]):
    // a kernel's per-axis index tables would be sized by them.
    bool all_empty = std::all_of(node.outputs.begin(), node.outputs.end(), [&](const auto& o) {
      return o.empty() || NumElements(graph.FindValue(o)->shape) == 0;
    });
    KernelContext ctx;
    Tensor workspace;  // folding runs unplanned: the node's scratch is an allocation of its own
    if (const int64_t ws = CpuWorkspaceBytesFor(node, ins, out_ptrs); ws > 0 && !all_empty) {
      StatusOr<Tensor> w = Tensor::Allocate(DType::kUint8, {ws});
      if (!w.ok())
        return Error("fold: " + node.Describe() + ": workspace: " + w.status().message());
      workspace = std::move(*w);
    }
    ctx.workspace = {static_cast<std::byte*>(workspace.raw()), workspace.nbytes()};
    Status st = all_empty ? Status::Ok() : RunCpuKernel(node, ins, out_ptrs, ctx);
    if (!st.ok()) return st.Prepend("fold: ");
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i].empty()) continue;
      graph.FindValue(node.outputs[i])->data = std::make_shared<const Tensor>(std::move(outs[i]));
      new_constants.push_back(node.outputs[i]);
    }
    ++stats_.folded;
  }
  graph.nodes = std::move(kept);

  // Folded results become initializers; initializers nothing uses any more are dropped (but
  // never a parameter: it keeps its place in the optimizer state even when unused).
  std::set<std::string> used(graph.outputs.begin(), graph.outputs.end());
  for (const Node& n : graph.nodes) used.insert(n.inputs.begin(), n.inputs.end());
  std::vector<std::string> inits;
  for (const auto& name : graph.initializers)
    if (used.count(name) || params.count(name)) inits.push_back(name);
  for (const auto& name : new_constants)
    if (used.count(name)) inits.push_back(name);
  graph.initializers = std::move(inits);
  // A graph input whose only consumers folded away (a tracing artefact) stays an input.
  graph.PruneUnusedValues();

  for (const Node& n : graph.nodes)
    for (const auto& out : n.outputs) {
      if (out.empty()) continue;
      const Value* v = graph.FindValue(out);
      if (!v->ShapeKnown())
        return Error("fold: could not infer a concrete shape for '" + out + "' (" +
                     v->TypeString() + ") produced by " + n.Describe());
    }
  stats_.remaining = static_cast<int>(graph.nodes.size());
  return stats_.folded > 0;
}

std::string FoldStats::ToString() const {
  return "folded " + std::to_string(folded) + " nodes, " + std::to_string(remaining) + " remain (" +
         std::to_string(kept_large) + " kept at run time: result above " +
         std::to_string(max_folded_bytes) + " bytes)";
}

}  // namespace foundry
