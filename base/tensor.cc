#include "base/tensor.h"

#include "base/bfloat16.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <sstream>

namespace foundry {

namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, 4, "f32"},   {DType::kUint8, 1, "u8"},   {DType::kInt8, 1, "i8"},
    {DType::kUint16, 2, "u16"},    {DType::kInt16, 2, "i16"},  {DType::kInt32, 4, "i32"},
    {DType::kInt64, 8, "i64"},     {DType::kBool, 1, "bool"},  {DType::kFloat16, 2, "f16"},
    {DType::kFloat64, 8, "f64"},   {DType::kUint32, 4, "u32"}, {DType::kUint64, 8, "u64"},
    {DType::kBFloat16, 2, "bf16"},
};

const DTypeInfo* Find(DType t) {
  for (const auto& info : kDTypes)
    if (info.dtype == t) return &info;
  return nullptr;
}

}  // namespace

size_t DTypeSize(DType t) {
  const DTypeInfo* info = Find(t);
  return info ? info->size : 0;
}

std::string_view DTypeName(DType t) {
  const DTypeInfo* info = Find(t);
  return info ? info->name : "undefined";
}

DType DTypeFromName(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  return DType::kUndefined;
}

bool IsKnownDType(int32_t code) { return Find(static_cast<DType>(code)) != nullptr; }

bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

int64_t NumElements(std::span<const int64_t> shape) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) return -1;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

StatusOr<int64_t> CheckTensorSize(DType dtype, std::span<const int64_t> shape) {
  auto type = [&] { return std::string(DTypeName(dtype)) + ShapeToString(shape); };
  for (int64_t d : shape)
    if (d < 0) return Error(type() + " has a negative dimension");
  // A zero anywhere makes an empty tensor whatever the other dimensions are; only then does the
  // product of the rest not matter (it may not even fit int64).
  for (int64_t d : shape)
    if (d == 0) return int64_t{0};
  const int64_t elem = std::max<int64_t>(static_cast<int64_t>(DTypeSize(dtype)), 1);
  int64_t bytes = elem;
  bool overflow = false;
  for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
  if (overflow)
    return Error(type() + " needs more than " + std::to_string(INT64_MAX) +
                 " bytes; one tensor may hold at most " + std::to_string(kMaxTensorBytes) +
                 " (1 TiB)");
  if (bytes > kMaxTensorBytes)
    return Error(type() + " needs " + std::to_string(bytes) +
                 " bytes; one tensor may hold at most " + std::to_string(kMaxTensorBytes) +
                 " (1 TiB)");
  return bytes;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
  out << "]";
  return out.str();
}

StatusOr<Tensor> Tensor::Allocate(DType dtype, Shape shape) {
  ASSIGN_OR_RETURN(int64_t n, CheckTensorSize(dtype, shape));
  // n <= kMaxTensorBytes, so the allocator's rounding cannot overflow.
  const MemoryClass c = CurrentMemoryClass();
  auto* p = static_cast<uint8_t*>(AllocateAccounted(static_cast<size_t>(n), 64, c));
  if (!p)
    return Error("cannot allocate " + std::to_string(n) + " bytes for " +
                 std::string(DTypeName(dtype)) + ShapeToString(shape) + ": out of memory");
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = NumElements(shape);
  t.shape_ = std::move(shape);
  t.data_ = p;
  t.owns_ = true;
  t.owned_bytes_ = static_cast<size_t>(n);
  t.class_ = c;
  return t;
}

Tensor Tensor::View(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = NumElements(shape);
  t.shape_ = std::move(shape);
  t.data_ = static_cast<uint8_t*>(data);
  return t;
}

void Tensor::SetMemoryClass(MemoryClass c) const {
  if (!owns_) return;
  ReclassAccounted(owned_bytes_, class_, c);
  class_ = c;
}

void Tensor::Release() {
  if (owns_) FreeAccounted(data_, owned_bytes_, class_);
  data_ = nullptr;
  owns_ = false;
  owned_bytes_ = 0;
}

Tensor::~Tensor() { Release(); }

// Members start as an empty tensor (tensor.h), so the assignment below takes over `other`.
Tensor::Tensor(Tensor&& other) noexcept { *this = std::move(other); }

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this == &other) return *this;
  Release();
  dtype_ = other.dtype_;
  shape_ = std::move(other.shape_);
  numel_ = other.numel_;
  data_ = other.data_;
  owns_ = other.owns_;
  owned_bytes_ = other.owned_bytes_;
  class_ = other.class_;
  other.data_ = nullptr;
  other.owns_ = false;
  other.owned_bytes_ = 0;
  other.dtype_ = DType::kUndefined;
  other.shape_.clear();
  other.numel_ = 0;
  return *this;
}

Tensor::Tensor(DType dtype, Shape shape) {
  StatusOr<Tensor> t = Allocate(dtype, std::move(shape));
  if (!t.ok()) throw std::bad_alloc();
  *this = std::move(*t);
}

Tensor::Tensor(const Tensor& other) {
  if (!other.data_) {  // a default or moved-from tensor: nothing to copy
    dtype_ = other.dtype_;
    shape_ = other.shape_;
    numel_ = other.numel_;
    return;
  }
  *this = Tensor(other.dtype_, other.shape_);
  if (other.nbytes()) std::memcpy(raw(), other.raw(), other.nbytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void Tensor::Reshape(Shape shape) { shape_ = std::move(shape); }

double Tensor::GetAsDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat32:
      return data<float>()[i];
    case DType::kFloat64:
      return data<double>()[i];
    case DType::kInt64:
      return static_cast<double>(data<int64_t>()[i]);
    case DType::kInt32:
      return data<int32_t>()[i];
    case DType::kInt16:
      return data<int16_t>()[i];
    case DType::kInt8:
      return data<int8_t>()[i];
    case DType::kUint8:
      return data<uint8_t>()[i];
    case DType::kUint16:
      return data<uint16_t>()[i];
    case DType::kUint32:
      return data<uint32_t>()[i];
    case DType::kUint64:
      return static_cast<double>(data<uint64_t>()[i]);
    case DType::kBool:
      return data<uint8_t>()[i] ? 1.0 : 0.0;
    case DType::kBFloat16:
      return Bf16ToFloat(data<uint16_t>()[i]);
    default:
      return 0.0;
  }
}

int64_t Tensor::GetAsInt64(int64_t i) const {
  switch (dtype_) {
    case DType::kInt64:
      return data<int64_t>()[i];
    case DType::kInt32:
      return data<int32_t>()[i];
    case DType::kUint64:
      return static_cast<int64_t>(data<uint64_t>()[i]);
    default: {
      // Saturating: converting NaN or an out-of-range double to int64 is undefined behaviour,
      // and these values come from models (a float tensor used as a shape).
      double d = GetAsDouble(i);
      if (!(d == d)) return 0;
      if (d >= 9223372036854775807.0) return INT64_MAX;
      if (d <= -9223372036854775808.0) return INT64_MIN;
      return static_cast<int64_t>(d);
    }
  }
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> v(numel_);
  for (int64_t i = 0; i < numel_; ++i) v[i] = GetAsInt64(i);
  return v;
}

bool Tensor::BitwiseEqual(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(raw(), other.raw(), nbytes()) == 0;
}

namespace {

// True when no element has its exponent bits all ones (Inf or NaN). Branch-free within blocks so
// the loop vectorizes: the check runs on every gradient and parameter of every training step.
template <class Bits, Bits kExponent>
bool NoAllOnesExponent(const void* data, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  constexpr int64_t kBlock = 4096;
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t end = std::min(n, i + kBlock);
    Bits bad = 0;
    for (int64_t k = i; k < end; ++k) {
      Bits b;
      std::memcpy(&b, p + k * sizeof(Bits), sizeof(Bits));
      bad |= static_cast<Bits>((b & kExponent) == kExponent);
    }
    if (bad) return false;
  }
  return true;
}

}  // namespace

bool AllFinite(const Tensor& t) { return AllFinite(t.dtype(), t.raw(), t.numel()); }

bool AllFinite(DType dtype, const void* data, int64_t n) {
  switch (dtype) {
    case DType::kFloat32:
      return NoAllOnesExponent<uint32_t, 0x7F800000u>(data, n);
    case DType::kFloat64:
      return NoAllOnesExponent<uint64_t, 0x7FF0000000000000ull>(data, n);
    case DType::kFloat16:
      return NoAllOnesExponent<uint16_t, 0x7C00>(data, n);
    case DType::kBFloat16:
      return NoAllOnesExponent<uint16_t, 0x7F80>(data, n);
    default:
      return true;
  }
}

}  // namespace foundry
