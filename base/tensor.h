// A dense tensor: constants, initializers, run-time buffers on the CPU backend. Element types use
// ONNX's TensorProto codes so import/export is a cast.
//
// Storage. An owning tensor allocates its bytes through the accounting allocator
// (base/memory_accounting.h) under the thread's current memory class, and frees them there. A view
// (Tensor::View) points at bytes someone else owns (an arena region, another tensor) and owns
// nothing: it must not outlive them. Copying any tensor, a view included, makes an owning copy
// (a copy has bytes of its own, counted under the copier's current class); moving keeps what the
// source was (a moved view is still a view of the same bytes). The view of a device's memory
// (a CUDA arena) may only be moved, never copied or read on the host: copies go through the
// backend (runtime/backend.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/memory_accounting.h"
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
  // A non-owning tensor over `data`, which holds at least the bytes dtype and shape need (the
  // caller checked the size) and outlives the view.
  static Tensor View(DType dtype, Shape shape, void* data);

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

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(data_);
  }

  // True for a non-owning view (View), false for an owning tensor (and an empty default one).
  bool is_view() const { return data_ != nullptr && !owns_; }
  // Bytes this tensor's own storage holds in the accounting (0 for a view).
  int64_t owned_bytes() const { return owns_ ? static_cast<int64_t>(owned_bytes_) : 0; }
  MemoryClass memory_class() const { return class_; }
  // Re-classes an owning tensor's storage in the accounting (a view: nothing to do). Const because
  // it changes what the bytes are counted as, never the tensor's value: shared constant tensors
  // (Value::data) are re-classed when their role becomes known.
  void SetMemoryClass(MemoryClass c) const;

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
  // Owning storage is 64-byte aligned (BLAS and vector loops like it) and counted as owned_bytes_
  // under class_.
  uint8_t* data_ = nullptr;
  bool owns_ = false;
  size_t owned_bytes_ = 0;
  mutable MemoryClass class_ = MemoryClass::kOther;
  void Release();

 public:
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();
};

// False when a floating-point tensor (f32, f64, f16, bf16) holds a NaN or an infinity; true for
// every other dtype.
bool AllFinite(const Tensor& t);
// The same over n elements of `dtype` at data (a part of a tensor; no Tensor made).
bool AllFinite(DType dtype, const void* data, int64_t n);

}  // namespace foundry
