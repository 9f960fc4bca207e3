#include "compiler/onnx_proto_util.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

namespace foundry {
namespace onnx_util {

std::optional<int64_t> DecimalDimParam(std::string_view dim_param) {
  if (dim_param.empty() || dim_param.size() > 18) return std::nullopt;  // 18 digits fit int64
  int64_t size = 0;
  for (char c : dim_param) {
    if (c < '0' || c > '9') return std::nullopt;
    size = size * 10 + (c - '0');
  }
  return size;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string JoinPath(const std::string& base_dir, const std::string& name) {
  if (base_dir.empty()) return name;
  if (base_dir.back() == '/') return base_dir + name;
  return base_dir + "/" + name;
}

std::string ElemTypeName(int32_t elem_type) {
  std::string name =
      onnx::TensorProto_DataType_IsValid(elem_type)
          ? onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type))
          : "UNKNOWN";
  return name + " (" + std::to_string(elem_type) + ")";
}

namespace {

// A repeated StringStringEntryProto field `number` of `message`: by reflection when this ONNX
// knows the field, else from the unknown fields (Debian's ONNX 1.12 knows neither
// NodeProto.metadata_props nor ValueInfoProto.metadata_props).
std::vector<std::pair<std::string, std::string>> MetadataProps(
    const google::protobuf::Message& message, int number) {
  std::vector<std::pair<std::string, std::string>> entries;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::FieldDescriptor* known =
      message.GetDescriptor()->FindFieldByNumber(number);
  if (known && known->is_repeated() &&
      known->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
    for (int i = 0; i < reflection->FieldSize(message, known); ++i) {
      onnx::StringStringEntryProto entry;
      entry.ParseFromString(reflection->GetRepeatedMessage(message, known, i).SerializeAsString());
      entries.emplace_back(entry.key(), entry.value());
    }
    return entries;
  }
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& field = unknown.field(i);
    if (field.number() != number ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (!entry.ParseFromString(field.length_delimited())) continue;
    entries.emplace_back(entry.key(), entry.value());
  }
  return entries;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> NodeMetadataProps(const onnx::NodeProto& node) {
  return MetadataProps(node, 9);
}

std::vector<std::pair<std::string, std::string>> ValueInfoMetadataProps(
    const onnx::ValueInfoProto& value) {
  return MetadataProps(value, 4);
}

}  // namespace onnx_util
}  // namespace foundry
