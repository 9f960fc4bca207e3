// Element type dispatch of the elementwise kernels, shared by both backends
// (kernels/cpu/elementwise.cc, kernels/cuda/elementwise.cu): each set calls fn(Tag<T>{}) with the
// C++ element type of a DType in the set, and fails with an error naming the node and the
// backend otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry {

template <class T>
struct Tag {
  using type = T;
};

struct ElementTypes {
  std::string_view backend;  // "cpu", "cuda": named in Unsupported's message

  Status Unsupported(const Node& node, DType t) const {
    return Error(node.Describe() + ": the " + std::string(backend) +
                 " kernel does not support element type " + std::string(DTypeName(t)));
  }

  // f32, f64.
  template <class Fn>
  Status Float(const Node& node, DType t, Fn&& fn) const {
    switch (t) {
      case DType::kFloat32:
        return fn(Tag<float>{});
      case DType::kFloat64:
        return fn(Tag<double>{});
      default:
        return Unsupported(node, t);
    }
  }

  // f32, f64, int32, int64.
  template <class Fn>
  Status Numeric(const Node& node, DType t, Fn&& fn) const {
    switch (t) {
      case DType::kInt32:
        return fn(Tag<int32_t>{});
      case DType::kInt64:
        return fn(Tag<int64_t>{});
      default:
        return Float(node, t, fn);
    }
  }

  // The numeric types and bool, uint8, int8: what Cast converts between.
  template <class Fn>
  Status Castable(const Node& node, DType t, Fn&& fn) const {
    switch (t) {
      case DType::kBool:
        return fn(Tag<bool>{});
      case DType::kUint8:
        return fn(Tag<uint8_t>{});
      case DType::kInt8:
        return fn(Tag<int8_t>{});
      default:
        return Numeric(node, t, fn);
    }
  }

  // Ops that only move elements dispatch on the element size, as an unsigned integer of it.
  template <class Fn>
  Status BySize(const Node& node, DType t, Fn&& fn) const {
    switch (DTypeSize(t)) {
      case 1:
        return fn(Tag<uint8_t>{});
      case 2:
        return fn(Tag<uint16_t>{});
      case 4:
        return fn(Tag<uint32_t>{});
      case 8:
        return fn(Tag<uint64_t>{});
      default:
        return Unsupported(node, t);
    }
  }
};

}  // namespace foundry
