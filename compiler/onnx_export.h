// IR -> ONNX model file (`<prefix>.train.onnx`), readable by any ONNX tool and by ImportOnnx.
//
// Written: IR version 8, the graph's ai.onnx opset (plus `com.microsoft` opset 1 when such nodes
// exist, and opset 1 of any other custom domain), node names, a value_info for every typed value,
// initializers as raw_data, parameters without data as typed graph inputs (as an
// export_params=False export has them). Module annotations travel in foundry's own form, which
// ImportOnnx restores exactly (annotation format "foundry"):
//   - each node's doc_string: `scope=<module path>` and `mark.<key>=<value>` lines ('\' and
//     newlines escaped);
//   - model metadata_props: Graph::metadata, plus `foundry.module_classes` (path -> classes, all
//     of Graph::modules), `foundry.parameters`, `foundry.buffers` (the other initializers),
//     `foundry.scope_source = doc_string` and, when some initializer has no data (so it is written
//     as a graph input), `foundry.initializers` (their order), all regenerated from the IR.
// The file is written atomically (temporary file, then rename).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

struct ExportOptions {
  // When the initializers hold more than this many bytes in total, every initializer of at least
  // `external_data_min_bytes` goes to `<model file name>.data` beside the model (ONNX external
  // data, 64-byte aligned), which keeps the .onnx file under protobuf's 2 GiB limit.
  int64_t external_data_threshold = int64_t{1} << 30;
  int64_t external_data_min_bytes = 1024;
};

Status ExportOnnx(const Graph& graph, const std::string& path, const ExportOptions& options = {});

// The serialized model with every initializer inline (tests; small graphs).
StatusOr<std::string> ExportOnnxToBytes(const Graph& graph);

}  // namespace foundry
