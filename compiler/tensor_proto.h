// Tensors in and out of ONNX's TensorProto: initializers, Constant values, and the `.pb` files of
// the ONNX backend tests (input_0.pb, output_0.pb), which foundry-run also reads as inputs.
//
// The proto types are only forward-declared here, so a caller that reads or writes tensor files
// does not pull protobuf headers in; code that holds a TensorProto includes <onnx/onnx_pb.h>.
#pragma once

#include <string>

#include "base/status.h"
#include "base/tensor.h"

namespace onnx {
class TensorProto;
}  // namespace onnx

namespace foundry {

// Decodes `proto` (raw_data, or the typed fields float_data/int32_data/int64_data/double_data/
// uint64_data, or external data) into a Tensor. External data `location`s are relative to
// `base_dir`, the directory of the model file. Every size is checked against the dims before any
// byte is copied, so a malformed proto is an error naming the tensor, never a crash.
StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir);

// Encodes `tensor` as raw_data (little-endian, as ONNX specifies) under `name`.
void TensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);

// Reads a serialized TensorProto file; `name` (optional) receives the tensor's name.
StatusOr<Tensor> ReadTensorFile(const std::string& path, std::string* name = nullptr);

// Writes `tensor` as a serialized TensorProto, atomically (a temporary file renamed into place).
Status WriteTensorFile(const std::string& path, const Tensor& tensor, const std::string& name);

}  // namespace foundry
