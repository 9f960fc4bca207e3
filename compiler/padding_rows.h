// Embedding padding rows: model metadata `foundry.padding_idx`, JSON {"<parameter>": row}, written
// by models/foundry_export.py for every nn.Embedding with a padding_idx (BERT's word embeddings).
// torch's embedding backward gives that row no gradient from the lookup; an ONNX Gather cannot say
// so, hence the key. Import checks it against the model; autodiff applies it (passes/autodiff.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

inline constexpr const char* kPaddingIdxKey = "foundry.padding_idx";

// The table, parameter -> row; empty without the key. Errors (callers prefix them): the value is
// not a JSON object of integers, or a row is outside its table's first dimension. A name that is
// not an initializer of `graph` is an error with `require_present`, and skipped without (a pass
// may have folded a frozen table away).
StatusOr<std::map<std::string, int64_t>> PaddingRows(const Graph& graph, bool require_present);

}  // namespace foundry
