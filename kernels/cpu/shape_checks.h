// The host-side checks of the shape-op kernels, one set for the CPU kernels
// (kernels/cpu/shape_ops.cc) and the CUDA launchers (kernels/cuda/shape_index.cuh): the same
// operands refused with the same messages, each naming the node. The shape arithmetic itself is
// compiler/ops/shape_ops.h.
#pragma once

#include <string>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry {

inline Status ShapeOpError(const Node& node, const std::string& what) {
  return Error(node.Describe() + ": " + what);
}

// `r`, or its error prefixed with the node (compiler/ops/shape_ops.h's errors name none).
template <class T>
StatusOr<T> NamedStatus(const Node& node, StatusOr<T> r) {
  if (!r.ok()) return ShapeOpError(node, r.status().message());
  return r;
}

// The caller allocated outputs from shape inference; a kernel that computes a different type from
// the actual input values must not write past them.
inline Status CheckOutputType(const Node& node, const Tensor& out, DType dtype,
                              const Shape& shape) {
  if (out.dtype() == dtype && out.shape() == shape) return Status::Ok();
  return ShapeOpError(node, "output was allocated as " + std::string(DTypeName(out.dtype())) +
                                ShapeToString(out.shape()) + " but the inputs give " +
                                std::string(DTypeName(dtype)) + ShapeToString(shape));
}

// Two operands of one element type that a kernel moves by its byte size.
inline Status CheckSameElementType(const Node& node, const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype() && DTypeSize(a.dtype()) != 0) return Status::Ok();
  return ShapeOpError(node, "element types " + std::string(DTypeName(a.dtype())) + " and " +
                                std::string(DTypeName(b.dtype())) + " do not match");
}

}  // namespace foundry
