#include "compiler/tensor_proto.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "base/file_util.h"
#include "base/quote.h"
#include "compiler/onnx_proto_util.h"

namespace foundry {

namespace {

namespace fs = std::filesystem;

std::string Describe(const onnx::TensorProto& p) {
  return p.name().empty() ? std::string("tensor") : "initializer " + QuoteName(p.name());
}

bool IsRelativeInside(const std::string& location) {
  if (location.empty() || location[0] == '/') return false;
  size_t start = 0;
  while (start <= location.size()) {
    size_t end = location.find('/', start);
    if (end == std::string::npos) end = location.size();
    if (location.compare(start, end - start, "..") == 0 && end - start == 2) return false;
    start = end + 1;
  }
  return true;
}

Status ReadExternal(const onnx::TensorProto& p, const std::string& base_dir, Tensor& t) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    const std::string& key = kv.key();
    if (key == "location") {
      location = kv.value();
    } else if (key == "offset" || key == "length") {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end != '\0' || errno != 0 || v < 0)
        return Error(Describe(p) + ": external data " + key + " '" + kv.value() +
                     "' is not a non-negative integer");
      (key == "offset" ? offset : length) = v;
    }
  }
  if (location.empty()) return Error(Describe(p) + ": external data without a location");
  if (!IsRelativeInside(location))
    return Error(Describe(p) + ": external data location " + QuoteName(location) +
                 " must be a relative path inside the model's directory");
  int64_t need = static_cast<int64_t>(t.nbytes());
  if (length >= 0 && length != need)
    return Error(Describe(p) + ": external data length " + std::to_string(length) + " but dims " +
                 ShapeToString(t.shape()) + " of " + std::string(DTypeName(t.dtype())) + " need " +
                 std::to_string(need) + " bytes");
  std::string file = onnx_util::JoinPath(base_dir, location);
  // The location names no `..`, but a symlink inside the folder may still point out of it (to
  // /etc/passwd): compare the resolved paths.
  std::error_code ec_dir, ec_file;
  fs::path dir =
      fs::weakly_canonical(base_dir.empty() ? fs::path(".") : fs::path(base_dir), ec_dir);
  fs::path real = fs::weakly_canonical(file, ec_file);
  if (!ec_dir && !ec_file) {
    fs::path rel = real.lexically_relative(dir);
    if (rel.empty() || *rel.begin() == ".." || rel == ".")
      return Error(Describe(p) + ": external data location " + QuoteName(location) +
                   " resolves to " + QuoteName(real.string()) +
                   ", outside the model's directory; copy the data file next to the model");
  }
  struct stat st;
  if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return Error("external data file " + QuoteName(file) + " for " + Describe(p) +
                 " is not a regular file (a directory, device, FIFO or socket)");
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) {
    if (errno == ENOENT)
      return Error("external data file '" + location + "' for " + Describe(p) +
                   " not found (looked in " + (base_dir.empty() ? "." : base_dir) +
                   "); keep the .onnx file next to its data files");
    return Error("cannot open external data file '" + file + "' for " + Describe(p) + ": " +
                 std::strerror(errno));
  }
  bool ok = std::fseek(f, 0, SEEK_END) == 0;
  long size = ok ? std::ftell(f) : -1;
  if (size < 0 || offset + need > size) {
    std::fclose(f);
    return Error("external data file '" + file + "' for " + Describe(p) + " is too short (" +
                 std::to_string(size) + " bytes; needs " + std::to_string(offset + need) + ")");
  }
  ok = std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0 &&
       std::fread(t.raw(), 1, static_cast<size_t>(need), f) == static_cast<size_t>(need);
  std::fclose(f);
  if (!ok) return Error("cannot read external data file '" + file + "' for " + Describe(p));
  return Status::Ok();
}

template <class Dst, class Src>
void CopyConverted(const Src& src, Tensor& t) {
  Dst* out = t.data<Dst>();
  for (int i = 0; i < src.size(); ++i) out[i] = static_cast<Dst>(src.Get(i));
}

}  // namespace

StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& base_dir) {
  if (p.data_type() == 0) return Error(Describe(p) + " has no element type");
  if (!IsKnownDType(p.data_type()))
    return Error(Describe(p) + " has element type " + onnx_util::ElemTypeName(p.data_type()) +
                 ", which foundry does not support");
  if (p.has_segment()) return Error(Describe(p) + " is segmented, which foundry does not support");
  DType dtype = static_cast<DType>(p.data_type());
  Shape shape(p.dims().begin(), p.dims().end());
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return Error(Describe(p) + " has a negative dimension " + ShapeToString(shape));
    if (d != 0 && numel > kMaxTensorBytes / d)
      return Error(Describe(p) + " is too large " + ShapeToString(shape));
    numel *= d;
  }
  int64_t need = numel * static_cast<int64_t>(DTypeSize(dtype));
  if (need > kMaxTensorBytes) return Error(Describe(p) + " is too large " + ShapeToString(shape));
  auto size_error = [&](const std::string& held) {
    return Error(Describe(p) + ": " + held + " but dims " + ShapeToString(shape) + " of " +
                 std::string(DTypeName(dtype)) + " need " + std::to_string(numel) + " values (" +
                 std::to_string(need) + " bytes)");
  };

  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    // The only case whose size the proto's own bytes do not bound: allocate checked.
    StatusOr<Tensor> allocated = Tensor::Allocate(dtype, shape);
    if (!allocated.ok()) return Error(Describe(p) + ": " + allocated.status().message());
    Tensor t = std::move(*allocated);
    RETURN_IF_ERROR(ReadExternal(p, base_dir, t));
    return t;
  }
  if (p.has_raw_data()) {
    if (static_cast<int64_t>(p.raw_data().size()) != need)
      return size_error("raw_data holds " + std::to_string(p.raw_data().size()) + " bytes");
    Tensor t(dtype, shape);
    if (need) std::memcpy(t.raw(), p.raw_data().data(), static_cast<size_t>(need));
    return t;
  }

  // Typed fields, as ONNX assigns them per element type.
  auto check_count = [&](int count) -> Status {
    if (count != numel) return size_error("holds " + std::to_string(count) + " values");
    return Status::Ok();
  };
  switch (dtype) {
    case DType::kFloat32: {
      RETURN_IF_ERROR(check_count(p.float_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<float>(p.float_data(), t);
      return t;
    }
    case DType::kFloat64: {
      RETURN_IF_ERROR(check_count(p.double_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<double>(p.double_data(), t);
      return t;
    }
    case DType::kInt64: {
      RETURN_IF_ERROR(check_count(p.int64_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<int64_t>(p.int64_data(), t);
      return t;
    }
    case DType::kUint32: {
      RETURN_IF_ERROR(check_count(p.uint64_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<uint32_t>(p.uint64_data(), t);
      return t;
    }
    case DType::kUint64: {
      RETURN_IF_ERROR(check_count(p.uint64_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<uint64_t>(p.uint64_data(), t);
      return t;
    }
    case DType::kInt32: {
      RETURN_IF_ERROR(check_count(p.int32_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<int32_t>(p.int32_data(), t);
      return t;
    }
    case DType::kInt16: {
      RETURN_IF_ERROR(check_count(p.int32_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<int16_t>(p.int32_data(), t);
      return t;
    }
    case DType::kInt8: {
      RETURN_IF_ERROR(check_count(p.int32_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<int8_t>(p.int32_data(), t);
      return t;
    }
    case DType::kUint16:
    case DType::kFloat16:
    case DType::kBFloat16: {  // 16-bit floats travel as their bit patterns
      RETURN_IF_ERROR(check_count(p.int32_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<uint16_t>(p.int32_data(), t);
      return t;
    }
    case DType::kUint8:
    case DType::kBool: {
      RETURN_IF_ERROR(check_count(p.int32_data_size()));
      Tensor t(dtype, shape);
      CopyConverted<uint8_t>(p.int32_data(), t);
      if (dtype == DType::kBool)
        for (int64_t i = 0; i < numel; ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
      return t;
    }
    default:
      break;
  }
  return Error(Describe(p) + " has element type " + onnx_util::ElemTypeName(p.data_type()) +
               ", which foundry does not support");
}

void TensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto) {
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  proto->set_raw_data(tensor.raw(), tensor.nbytes());
}

StatusOr<Tensor> ReadTensorFile(const std::string& path, std::string* name) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  if (bytes.empty())
    return Error("'" + path + "' is empty; expected a serialized ONNX TensorProto");
  onnx::TensorProto proto;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !proto.ParseFromString(bytes))
    return Error("'" + path + "' is not an ONNX TensorProto file (protobuf parse failed)");
  auto tensor = TensorFromProto(proto, onnx_util::DirName(path));
  if (!tensor.ok()) return tensor.status().Prepend("'" + path + "': ");
  if (name) *name = proto.name();
  return tensor;
}

Status WriteTensorFile(const std::string& path, const Tensor& tensor, const std::string& name) {
  onnx::TensorProto proto;
  TensorToProto(tensor, name, &proto);
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    return Error("cannot serialize tensor '" + name + "' for '" + path +
                 "' (over protobuf's 2 GiB limit?)");
  return WriteFileAtomic(path, bytes);
}

}  // namespace foundry
