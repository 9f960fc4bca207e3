// Shape arithmetic of the shape-op family (Reshape, Slice, Split, Transpose, Pad, Range,
// Constant, Shape, GatherND), shared by the schemas (compiler/ops/shape_ops.cc), the CPU and CUDA
// kernels (kernels/cpu/shape_ops.cc, kernels/cuda/shape_index.cuh) and the gradient rules
// (passes/grad/shape_ops.cc) so that inference and execution cannot disagree. Errors carry no node prefix: callers add Node::Describe().
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry::shape_ops {

// The tensor a Constant node produces, from whichever of value / value_float / value_floats /
// value_int / value_ints it carries.
StatusOr<Tensor> ConstantAttrTensor(const Node& node);
// The same value without a copy, for the kernels that write it straight into their output: its
// type and its bytes, which are the node's attribute storage (as long-lived as the graph), except
// value_float's one float, held here (the attribute may spell it as an int).
struct ConstantValue {
  DType dtype = DType::kUndefined;
  Shape shape;
  const void* bytes = nullptr;
  bool in_scalar = false;  // the bytes are `scalar`
  float scalar = 0;
  const void* data() const { return in_scalar ? &scalar : bytes; }
};
StatusOr<ConstantValue> ConstantAttrValue(const Node& node);

// The dimensions [start, end) of an input of rank `rank` that Shape (opset 15) returns: its start
// and end attributes, negative ones counted from the back, clamped to [0, rank]; end >= start.
struct DimRange {
  int64_t start = 0;
  int64_t end = 0;
};
DimRange ShapeOpRange(const Node& node, int64_t rank);

// Reshape's output shape: a 0 in `requested` copies the input's dimension (unless allowzero), one
// -1 is inferred from the element count. `in` may hold -1 (unknown) dimensions: the result then
// holds -1 wherever it cannot be decided, and a copied -1 stays -1.
StatusOr<Shape> ReshapeOutputShape(const Shape& in, const std::vector<int64_t>& requested,
                                   bool allowzero);

// Transpose's permutation for a rank: the node's `perm`, or the reversed axes when it has none.
StatusOr<std::vector<int64_t>> TransposePerm(const Node& node, int64_t rank);

// One axis of a resolved Slice: elements start, start + step, ... (len of them).
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t len = 0;  // -1 when the input dimension is unknown
};
// Resolves ONNX Slice bounds for every axis of `in` (axes not named are taken whole): negative
// starts/ends count from the back, out-of-range bounds (INT64_MAX, INT64_MIN) are clamped as the
// spec says for the step's sign. Empty `axes` means 0..n-1, empty `steps` means all 1.
StatusOr<std::vector<SliceDim>> ResolveSlice(const Shape& in, const std::vector<int64_t>& starts,
                                             const std::vector<int64_t>& ends,
                                             std::vector<int64_t> axes, std::vector<int64_t> steps);

// Split sizes of a dimension of size `dim` into `num_outputs` pieces when no `split` is given:
// ceil(dim / n) each, the last one smaller (opset 18). Errors when the pieces cannot cover `dim`.
StatusOr<std::vector<int64_t>> EqualSplitSizes(int64_t dim, int64_t num_outputs);

// Number of elements of Range(start, limit, delta): max(ceil((limit - start) / delta), 0).
StatusOr<int64_t> RangeLength(const Tensor& start, const Tensor& limit, const Tensor& delta);

// Pad amounts as [begin_0..begin_{r-1}, end_0..end_{r-1}] over every axis, from the `pads` values
// and the optional `axes` (opset 18) they apply to.
StatusOr<std::vector<int64_t>> FullPads(int64_t rank, const std::vector<int64_t>& pads,
                                        const std::vector<int64_t>* axes);

// GatherND (opset 13) with `batch_dims` b: data [B..., D_0..D_{k-1}, S...] and indices
// [B..., M..., k] share their b leading (batch) axes; each index tuple of k values picks one
// data[b..., d_0..d_{k-1}] slice of shape S. Checks the ranks, b, k and the batch axes (a -1
// dimension matches anything) and returns the output shape, indices.shape[:-1] + data.shape[b+k:].
// k must be known (not -1).
StatusOr<Shape> GatherNDShape(const Shape& data, const Shape& indices, int64_t batch_dims);

// Squeeze/Unsqueeze axes normalized against `rank` (negative count from the back), sorted;
// duplicates are an error.
StatusOr<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank);

}  // namespace foundry::shape_ops
