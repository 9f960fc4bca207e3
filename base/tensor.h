// A dense tensor that owns its bytes: constants, initializers, run-time buffers on the CPU backend.
// Element types use ONNX's TensorProto codes so import/export is a cast.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace foundry {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUint32 = 12,
  kUint64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for kUndefined or a code we do not know.
size_t DTypeSize(DType t);
// Short name used by the IR text form: f32, i64, bool, ...
std::string_view DTypeName(DType t);
// Inverse of DTypeName; kUndefined when the name is unknown.
DType DTypeFromName(std::string_view name);
bool IsKnownDType(int32_t code);
bool IsFloat(DType t);

using Shape = std::vector<int64_t>;

// The most bytes one tensor may hold (1 TiB). Far beyond any real activation or weight, and small
// enough that element counts, byte sizes and the offsets kernels compute from them never overflow
// int64 (it is also AddressSanitizer's largest allocation, so sanitizer builds fail the same way).
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;

// Product of the dimensions; -1 when a dimension is negative or the product overflows int64.
// Shapes that passed CheckTensorSize (every inferred and every allocated shape) never give -1.
int64_t NumElements(std::span<const int64_t> shape);
// Bytes a tensor of this type and shape needs, or an error when a dimension is negative or the
// size exceeds kMaxTensorBytes (checked arithmetic: a product that wraps, even to 0, is caught).
// The error names the type ("f32[4294967296,4294967296]") and the bytes; callers prefix the node.
StatusOr<int64_t> CheckTensorSize(DType dtype, std::span<const int64_t> shape);
std::string ShapeToString(std::span<const int64_t> shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled. For sizes known to be sane (the library's own small tensors); throws
  // std::bad_alloc when the size is invalid or the memory is not there. Sizes that come from a
  // model or a plan go through Allocate instead.
  Tensor(DType dtype, Shape shape);
  // Zero-filled; an error (naming the type and the bytes asked for) instead of a throw when the
  // shape is invalid, exceeds kMaxTensorBytes, or the allocator has no memory for it.
  static StatusOr<Tensor> Allocate(DType dtype, Shape shape);

  template <class T>
  static Tensor FromVector(DType dtype, Shape shape, const std::vector<T>& values) {
    Tensor t(dtype, std::move(shape));
    if (t.nbytes()) std::memcpy(t.raw(), values.data(), t.nbytes());  // data() may be null
    return t;
  }
  static Tensor Scalar(float v) { return FromVector<float>(DType::kFloat32, {}, {v}); }
  static Tensor ScalarInt64(int64_t v) { return FromVector<int64_t>(DType::kInt64, {}, {v}); }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype_); }

  void* raw() { return bytes_.data(); }
  const void* raw() const { return bytes_.data(); }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  // Same bytes, new shape (element count must match; caller checks).
  void Reshape(Shape shape);
  // Element i converted to double / int64 regardless of dtype (for shape arithmetic).
  double GetAsDouble(int64_t i) const;
  int64_t GetAsInt64(int64_t i) const;
  std::vector<int64_t> ToInt64Vector() const;

  bool BitwiseEqual(const Tensor& other) const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  int64_t numel_ = 0;
  // 64-byte aligned storage: BLAS and vector loops like it.
  struct Free {
    void operator()(void* p) const;
  };
  struct Buffer {
    std::unique_ptr<uint8_t, Free> ptr;
    size_t size = 0;
    uint8_t* data() const { return ptr.get(); }
  };
  Buffer bytes_;

 public:
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
};

// False when a floating-point tensor (f32, f64, f16, bf16) holds a NaN or an infinity; true for
// every other dtype.
bool AllFinite(const Tensor& t);

}  // namespace foundry
