// A text form of the IR that prints and parses back, so tests can write small graphs by hand:
//
//   graph tiny opset=17 {
//     module "transformer.blocks.0.attn" : llmfoundry.GroupedQueryAttention
//     input x : f32[batch,4]
//     param w : f32[4,2] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
//     const axes : i64[1] = [0]
//     y : f32[batch,2] = MatMul(x, w) @"transformer.blocks.0.attn" #"mm"
//     s = ReduceSum(y, axes) {keepdims=0}
//     g = com.microsoft::GeluGrad(y, y)
//     output s
//   }
//
// `param` is a trainable initializer, `const` any other initializer; data is optional (a param
// without data is declared by shape). Types on node outputs are optional. Names that are not
// plain identifiers are quoted. Attribute values: 3, 1.5, "s", [1,2], [1.0], ["a"],
// tensor(f32[2] = [1, 2]). Node marks: marks{recompute_of="n"}.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

std::string PrintGraph(const Graph& graph);
StatusOr<Graph> ParseGraph(std::string_view text);

}  // namespace foundry
