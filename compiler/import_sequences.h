// Sequences never enter foundry's IR. torch's dynamo exporter writes `Tensor.split` / `chunk` as
// SplitToSequence followed by one SequenceAt per piece used; the importer rewrites each such
// group into tensor ops before anything else sees it:
//  - the pieces' sizes are known (a 1-D `split`, or a scalar chunk size or no `split` on an
//    axis of known size): one Split with explicit sizes at the SplitToSequence's place, and each
//    SequenceAt becomes an Identity of its piece (a Squeeze for keepdims=0 without `split`);
//  - a scalar chunk size on an axis of unknown size: each SequenceAt at position p becomes a
//    Slice of [p*s, (p+1)*s) on that axis (a piece past the end would be empty, as in ONNX).
// Anything else that touches a sequence (another consumer, a non-constant position, a graph
// output) is an error naming the node.
#pragma once

#include <vector>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

Status LowerSplitToSequence(Graph& g);

// The operators the importer accepts without a schema of their own, because it rewrites them
// into ops that have one, each with how (what `foundry-compile --list-ops` prints beside them).
struct LoweredOp {
  const char* op_type;
  const char* how;
};
const std::vector<LoweredOp>& ImportLoweredOps();

}  // namespace foundry
