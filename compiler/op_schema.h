// What the compiler knows about each operator it accepts: the number of inputs and outputs, and how
// to infer output element types and shapes from the inputs (and from the values of constant inputs,
// for shape-carrying inputs like Reshape's `shape`). One table for ONNX and com.microsoft ops;
// each op family registers its rows from its own file under compiler/ops/.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/op_table.h"

namespace foundry {

struct TypeInfo {
  DType dtype = DType::kUndefined;
  Shape shape;             // -1 for a dimension that cannot be known yet
  bool rank_known = true;  // false: not even the rank is known yet
};

// What an inference function sees: the node and the current types (and constant payloads) of its
// inputs. Omitted optional inputs are null.
struct InferContext {
  const Node& node;
  std::vector<const Value*> inputs;

  size_t num_inputs() const { return inputs.size(); }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  // An omitted optional input reads as a value of unknown type and rank, never a null reference:
  // an inference function that forgets has_input() then sees "nothing known", not a crash.
  const Value& input(size_t i) const {
    static const Value kOmitted;
    return i < inputs.size() && inputs[i] ? *inputs[i] : kOmitted;
  }
  // The input's constant value, or null when it is only known at run time.
  const Tensor* constant(size_t i) const { return has_input(i) ? inputs[i]->data.get() : nullptr; }
  // An error naming the node: "Reshape node 'n' (module m): <what>".
  Status Fail(const std::string& what) const { return Error(node.Describe() + ": " + what); }
};

using InferFn = std::function<StatusOr<std::vector<TypeInfo>>(const InferContext&)>;

struct OpSchema {
  std::string domain;  // "" = ai.onnx
  std::string op_type;
  int min_inputs = 1;
  int max_inputs = 1;
  int min_outputs = 1;  // outputs beyond min_outputs are optional
  int max_outputs = 1;
  InferFn infer;
  // Memory planning (compiler/memory_plan.h). `view`: output 0 holds exactly the bytes of input 0
  // under another shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity; Expand when it keeps the
  // element count) whenever the two have the same byte count; the planner then makes it an alias
  // of input 0, and the kernel, handed the same pointer for both, copies nothing.
  // `in_place_inputs`: inputs whose buffer output 0 may take when that input dies at this node and
  // has output 0's shape and element size; the kernel must then give the same bits with the output
  // aliasing that input (every element read before its own is written; tested per op).
  bool view = false;
  std::vector<int> in_place_inputs;
};

class OpSchemaTable : public OpTable<OpSchema> {
 public:
  using OpTable<OpSchema>::Add;
  void Add(OpSchema schema) {
    schema.domain = CanonicalDomain(schema.domain);
    std::string domain = schema.domain, op_type = schema.op_type;
    Add(domain, op_type, std::move(schema));
  }
  std::vector<const OpSchema*> All() const {
    std::vector<const OpSchema*> all;
    for (const auto& row : rows()) all.push_back(&row.value);
    return all;
  }
};

// The table of every supported op (built once, on first use).
const OpSchemaTable& OpSchemas();

// Infers the node's output types from the graph's current input values. Errors name the node.
StatusOr<std::vector<TypeInfo>> InferNodeTypes(const Graph& graph, const Node& node);

// Writes the inferred types onto the node's output values.
Status InferAndSetTypes(Graph& graph, const Node& node);

// --- helpers for inference functions ---

// Numpy-style broadcast of two shapes; -1 dimensions stay unknown unless the other side decides.
StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);
// A negative axis counts from the back; errors when out of [-rank, rank).
StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank);
// Same dtype/shape as input `i`.
TypeInfo SameAs(const Value& v);

// Registration entry points, one per op family file under compiler/ops/.
void RegisterElementwiseSchemas(OpSchemaTable& table);
void RegisterShapeOpSchemas(OpSchemaTable& table);
void RegisterMathSchemas(OpSchemaTable& table);
void RegisterAttentionSchemas(OpSchemaTable& table);
void RegisterAccumulateSchemas(OpSchemaTable& table);
void RegisterCollectiveSchemas(OpSchemaTable& table);

}  // namespace foundry
