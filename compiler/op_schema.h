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

// What a FLOP formula sees: the node and the graph that holds its values' shapes.
struct FlopContext {
  const Graph& graph;
  const Node& node;

  // Input i's value; null when omitted.
  const Value* input(size_t i) const;
  // The elements of output 0 / of input i; 0 when omitted or the shape is not known.
  int64_t output_elements() const;
  int64_t input_elements(size_t i) const;
  // Dimension `axis` (negative counts from the back) of input i; 0 when not known.
  int64_t input_dim(size_t i, int64_t axis) const;
};

// A node's FLOPs: a model, not a measurement, the one every FLOP figure foundry prints uses. A
// formula counts the arithmetic operations and elementary-function calls (exp, log, sqrt, erf,
// tanh, a comparison, a select: one each) of the op's defining formula per element, as in the
// ONNX / onnxruntime contrib op definitions (per-row work of a normalization, a mean's divide or
// a sqrt per row, is left out as small against the per-element terms); data movement counts 0.
// Counts of this model, not of any kernel: a vectorized kernel and a GPU one do the same
// arithmetic differently. Each op family writes its ops' formulas beside their inference.
using FlopsFn = std::function<int64_t(const FlopContext&)>;
// `flops` per element of output 0.
FlopsFn FlopsPerOutput(int64_t flops);
// `flops` per element of input `input` (a reduction: the input it reduces; a scatter-add: the
// values it adds).
FlopsFn FlopsPerInput(size_t input, int64_t flops);

struct OpSchema {
  std::string domain;  // "" = ai.onnx
  std::string op_type;
  int min_inputs = 1;
  int max_inputs = 1;
  int min_outputs = 1;  // outputs beyond min_outputs are optional
  int max_outputs = 1;
  InferFn infer;
  FlopsFn flops;  // the node's FLOPs; every op has one (NodeFlops, passes/memory_report.h)
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
