#include "compiler/op_schema.h"

#include <algorithm>

namespace foundry {

const OpSchemaTable& OpSchemas() {
  static const OpSchemaTable table = [] {
    OpSchemaTable t;
    RegisterElementwiseSchemas(t);
    RegisterShapeOpSchemas(t);
    RegisterMathSchemas(t);
    RegisterAttentionSchemas(t);
    RegisterAccumulateSchemas(t);
    RegisterCollectiveSchemas(t);
    return t;
  }();
  return table;
}

StatusOr<std::vector<TypeInfo>> InferNodeTypes(const Graph& graph, const Node& node) {
  const OpSchema* schema = OpSchemas().Find(node.domain, node.op_type);
  if (!schema) {
    // The op and domain come from the file: control characters (a newline splits the error
    // over lines) are written as \xNN, as names are elsewhere.
    auto escape = [](const std::string& s) {
      std::string out;
      for (unsigned char c : s) {
        if (c >= 0x20 && c != 0x7f) {
          out += static_cast<char>(c);
          continue;
        }
        static constexpr char kHex[] = "0123456789abcdef";
        out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
      }
      return out;
    };
    std::string d = node.domain.empty() ? "" : " (domain " + escape(node.domain) + ")";
    return Error(node.Describe() + ": operator " + escape(node.op_type) + d +
                 " is not supported by foundry; supported ops are listed by "
                 "`foundry-compile --list-ops`");
  }
  int n_in = static_cast<int>(node.inputs.size());
  if (n_in < schema->min_inputs || n_in > schema->max_inputs)
    return Error(node.Describe() + ": expects " + std::to_string(schema->min_inputs) + ".." +
                 std::to_string(schema->max_inputs) + " inputs, has " + std::to_string(n_in));
  int n_out = static_cast<int>(node.outputs.size());
  if (n_out < schema->min_outputs || n_out > schema->max_outputs)
    return Error(node.Describe() + ": expects " + std::to_string(schema->min_outputs) + ".." +
                 std::to_string(schema->max_outputs) + " outputs, has " + std::to_string(n_out));
  for (int i = 0; i < schema->min_inputs; ++i)
    if (node.inputs[i].empty())
      return Error(node.Describe() + ": input " + std::to_string(i) +
                   " is required but the node leaves it empty");
  InferContext ctx{node, {}};
  for (const auto& in : node.inputs) {
    if (in.empty()) {
      ctx.inputs.push_back(nullptr);
      continue;
    }
    const Value* v = graph.FindValue(in);
    if (!v) return Error(node.Describe() + ": input '" + in + "' is not defined");
    ctx.inputs.push_back(v);
  }
  ASSIGN_OR_RETURN(std::vector<TypeInfo> types, schema->infer(ctx));
  if (types.size() < node.outputs.size())
    return Error(node.Describe() + ": shape inference produced " + std::to_string(types.size()) +
                 " outputs for " + std::to_string(node.outputs.size()));
  types.resize(node.outputs.size());
  // One checked size test for every op: a shape of 2^62 elements, or one whose product wraps
  // (even to 0), stops here, before fold or the runtime sizes a buffer from it.
  for (size_t i = 0; i < types.size(); ++i) {
    const TypeInfo& t = types[i];
    if (!t.rank_known ||
        std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; }))
      continue;
    StatusOr<int64_t> bytes = CheckTensorSize(t.dtype, t.shape);
    if (!bytes.ok())
      return Error(node.Describe() + ": output '" + node.outputs[i] + "' " +
                   bytes.status().message());
  }
  return types;
}

Status InferAndSetTypes(Graph& graph, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<TypeInfo> types, InferNodeTypes(graph, node));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i].empty()) continue;
    Value& v = graph.GetOrAddValue(node.outputs[i]);
    v.dtype = types[i].dtype;
    v.rank_known = types[i].rank_known;
    v.shape = types[i].shape;
    v.dim_params.clear();
  }
  return Status::Ok();
}

StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == 1) {
      out[i] = db;
    } else if (db == 1) {
      out[i] = da;
    } else if (da < 0 || db < 0) {
      out[i] = da < 0 ? db : da;
    } else if (da == db) {
      out[i] = da;
    } else {
      return Error("shapes " + ShapeToString(a) + " and " + ShapeToString(b) + " do not broadcast");
    }
  }
  return out;
}

StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return Error("axis " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

TypeInfo SameAs(const Value& v) { return TypeInfo{v.dtype, v.shape, v.rank_known}; }

namespace {

int64_t ElementsOf(const Value* v) {
  return v && v->ShapeKnown() ? std::max<int64_t>(NumElements(v->shape), 0) : 0;
}

}  // namespace

const Value* FlopContext::input(size_t i) const {
  return node.HasInput(i) ? graph.FindValue(node.inputs[i]) : nullptr;
}

int64_t FlopContext::output_elements() const {
  return ElementsOf(node.HasOutput(0) ? graph.FindValue(node.outputs[0]) : nullptr);
}

int64_t FlopContext::input_elements(size_t i) const { return ElementsOf(input(i)); }

int64_t FlopContext::input_dim(size_t i, int64_t axis) const {
  const Value* v = input(i);
  if (!v || !v->ShapeKnown()) return 0;
  const int64_t rank = static_cast<int64_t>(v->shape.size());
  if (axis < 0) axis += rank;
  return axis < 0 || axis >= rank ? 0 : v->shape[axis];
}

FlopsFn FlopsPerOutput(int64_t flops) {
  return [flops](const FlopContext& c) { return flops * c.output_elements(); };
}

FlopsFn FlopsPerInput(size_t input, int64_t flops) {
  return [input, flops](const FlopContext& c) { return flops * c.input_elements(input); };
}

}  // namespace foundry
