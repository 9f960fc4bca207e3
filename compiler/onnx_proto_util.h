// Internal to the ONNX edges (onnx_import, onnx_export, tensor_proto): the only header besides
// their .cc files that includes the ONNX protobuf types. Nothing above compiler/ includes it.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace foundry {
namespace onnx_util {

// The static size a dim_param spells when it is a decimal integer ("2", "16": torch.export writes
// the sizes it specialised so), else nullopt (a symbol such as "batch" or "s0").
std::optional<int64_t> DecimalDimParam(std::string_view dim_param);

// "dir/model.onnx" -> "dir"; "model.onnx" -> "".
std::string DirName(const std::string& path);
// `base_dir` joined with a relative `name` ("" base -> name itself).
std::string JoinPath(const std::string& base_dir, const std::string& name);

// "FLOAT (1)", "STRING (8)": a TensorProto element type for messages.
std::string ElemTypeName(int32_t elem_type);

// NodeProto.metadata_props (field 9, ONNX >= 1.16). Debian's ONNX 1.12 does not know the field and
// keeps it among the message's unknown fields; a newer ONNX knows it. Both are read here.
std::vector<std::pair<std::string, std::string>> NodeMetadataProps(const onnx::NodeProto& node);
// ValueInfoProto.metadata_props (field 4, ONNX >= 1.16), read the same way: where torch.export
// says what a graph input is (pkg.torch.export.graph_signature.InputSpec.kind).
std::vector<std::pair<std::string, std::string>> ValueInfoMetadataProps(
    const onnx::ValueInfoProto& value);

}  // namespace onnx_util
}  // namespace foundry
