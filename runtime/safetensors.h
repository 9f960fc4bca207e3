// Weights in the safetensors format (Hugging Face's; what `safetensors.torch.load_file` reads), and
// the PyTorch names of a plan's parameters.
//
// The format (github.com/huggingface/safetensors, README "Format"):
//   [8 bytes: N, unsigned little-endian][N bytes: a UTF-8 JSON object][the data]
//   {"__metadata__": {"k": "v", ...},                            (optional; strings only)
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// Offsets count from the first byte after the header; the tensors are dense, row-major,
// little-endian, and tile the data exactly: sorted by begin, the first begins at 0, each begins
// where the one before ends, the last ends at the end of the file. The header may end in spaces;
// the Rust writer pads it to a multiple of 8 so that the data is aligned, and so does
// WriteSafetensors. Readers refuse headers over 100,000,000 bytes (the Rust reader's limit).
//
// A file is untrusted input: ReadSafetensors checks every rule above and that each tensor's
// bytes are exactly its shape times its dtype's size, and refuses duplicate names. Each failure is
// one line naming the file and what is wrong in it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry {

// "F32", "BF16", "I64", ... for the dtypes foundry has (every DType but kUndefined); "" otherwise.
std::string_view SafetensorsDTypeName(DType dtype);

// Writes `tensors` in this order (names must be distinct and valid UTF-8), with `metadata` as
// "__metadata__" (omitted when empty), atomically (base/file_util.h: WriteFileAtomic).
Status WriteSafetensors(const std::string& path,
                        const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                        const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};
// Reads and checks a whole file.
StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);
// The same checks on a file's bytes (`path` names it in messages): the fuzz target's entry.
StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& path);

// ---- PyTorch names ----
//
// A plan's parameters carry the names of the ONNX initializers they came from. The TorchScript
// exporter names an initializer by its state_dict key ("transformer.blocks.0.attn.Wqkv.weight")
// unless constant folding made a new tensor of it ("onnx::MatMul_123": a Linear's weight,
// transposed); models/foundry_export.py refuses such exports, and records the parameters'
// state_dict names in the model's "foundry.parameters". torch.export's ONNX exporter may name a
// parameter by its placeholder ("p_transformer_wte_weight"); its graph signature (model metadata)
// gives the state_dict key. So: a placeholder the signature lists is its target; a name made of
// '.'-separated identifiers or indices is the state_dict key itself; anything else has no PyTorch
// name that foundry can know, and keeps its ONNX name.
struct TorchNames {
  std::map<std::string, std::string> torch_name;  // every parameter -> the name written for it
  std::vector<std::string> unmapped;              // parameters that kept their ONNX name
};
TorchNames MapTorchNames(const Graph& graph, const std::vector<std::string>& parameters);

// foundry-run --init-from: every parameter in `params` (f32, the plan's shapes) takes the values of
// the tensor MapTorchNames names for it in the safetensors file at `path`, F32 as it is, BF16 and
// F16 widened (exactly). The file must hold exactly those tensors: a missing or extra name, a
// shape that differs, or another dtype is an error that counts them and names the first few.
// Nothing in `params` changes unless all of them load.
Status LoadSafetensorsInto(const std::string& path, const Graph& graph,
                           const std::vector<std::string>& parameters,
                           std::map<std::string, Tensor>& params);

}  // namespace foundry
