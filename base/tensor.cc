#include "base/tensor.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace foundry {

namespace {

struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view name;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, 4, "f32"},  {DType::kUint8, 1, "u8"},     {DType::kInt8, 1, "i8"},
    {DType::kUint16, 2, "u16"},   {DType::kInt16, 2, "i16"},    {DType::kInt32, 4, "i32"},
    {DType::kInt64, 8, "i64"},    {DType::kBool, 1, "bool"},    {DType::kFloat16, 2, "f16"},
    {DType::kFloat64, 8, "f64"},  {DType::kUint32, 4, "u32"},   {DType::kUint64, 8, "u64"},
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
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
  out << "]";
  return out.str();
}

void Tensor::Free::operator()(void* p) const { std::free(p); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = NumElements(shape_);
  size_t n = nbytes();
  size_t alloc = (n + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  bytes_.ptr.reset(static_cast<uint8_t*>(std::aligned_alloc(64, alloc)));
  bytes_.size = n;
  std::memset(bytes_.data(), 0, alloc);
}

Tensor::Tensor(const Tensor& other) : Tensor(other.dtype_, other.shape_) {
  if (other.nbytes()) std::memcpy(raw(), other.raw(), other.nbytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void Tensor::Reshape(Shape shape) { shape_ = std::move(shape); }

double Tensor::GetAsDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kFloat32: return data<float>()[i];
    case DType::kFloat64: return data<double>()[i];
    case DType::kInt64: return static_cast<double>(data<int64_t>()[i]);
    case DType::kInt32: return data<int32_t>()[i];
    case DType::kInt16: return data<int16_t>()[i];
    case DType::kInt8: return data<int8_t>()[i];
    case DType::kUint8: return data<uint8_t>()[i];
    case DType::kUint16: return data<uint16_t>()[i];
    case DType::kUint32: return data<uint32_t>()[i];
    case DType::kUint64: return static_cast<double>(data<uint64_t>()[i]);
    case DType::kBool: return data<uint8_t>()[i] ? 1.0 : 0.0;
    default: return 0.0;
  }
}

int64_t Tensor::GetAsInt64(int64_t i) const {
  switch (dtype_) {
    case DType::kInt64: return data<int64_t>()[i];
    case DType::kInt32: return data<int32_t>()[i];
    case DType::kUint64: return static_cast<int64_t>(data<uint64_t>()[i]);
    default: return static_cast<int64_t>(GetAsDouble(i));
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

bool AllFinite(const Tensor& t) {
  auto all = [&](auto finite, auto* p) {
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!finite(p[i])) return false;
    return true;
  };
  auto finite = [](auto x) { return std::isfinite(x); };
  switch (t.dtype()) {
    case DType::kFloat32:
      return all(finite, t.data<float>());
    case DType::kFloat64:
      return all(finite, t.data<double>());
    case DType::kFloat16:  // exponent bits all ones: Inf or NaN
      return all([](uint16_t h) { return (h & 0x7C00) != 0x7C00; }, t.data<uint16_t>());
    case DType::kBFloat16:
      return all([](uint16_t h) { return (h & 0x7F80) != 0x7F80; }, t.data<uint16_t>());
    default:
      return true;
  }
}

}  // namespace foundry
