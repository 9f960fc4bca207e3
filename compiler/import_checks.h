// Internal to the ONNX importer: what a file must be before and after its nodes are read. The
// protobuf and version checks, ONNX's own checker, the importer's structural checks of the graph,
// and the --dim bindings.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/import_context.h"

namespace foundry {
namespace import_internal {

// The bytes parse as an ONNX model with a graph and an IR version.
Status ParseModelBytes(std::string_view bytes, const std::string& display, onnx::ModelProto& model);

// IR version, ai.onnx opset, a non-empty graph, no sparse initializers. Sets the graph's
// ir_version, opset and name.
Status CheckVersions(ImportContext& ctx);

// ONNX 1.12's graph and function checks where they understand the model (IR <= 8, opset <= 17).
// Run after the importer's own checks of the initializers, whose messages are more specific.
Status RunOnnxChecker(const ImportContext& ctx);

// Every node has an op_type, reads only values defined before it, writes values nobody else
// writes; every graph output is produced.
Status ValidateGraph(ImportContext& ctx);

// Applies ImportOptions::dims to every value's symbolic dimensions.
Status BindDims(ImportContext& ctx);

}  // namespace import_internal
}  // namespace foundry
