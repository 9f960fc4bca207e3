// Binds symbolic dimensions, infers every value's type and folds compile-time computation.
//
// Exports are full of shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, or
// ConstantOfShape/Equal/Where/Expand chains from repeat_interleave). Once `batch` and `seq` are
// bound, all of it has constant inputs: the pass walks nodes in order, infers each node's output
// types from its (now typed, possibly constant) inputs, and evaluates every node whose inputs are
// all constants on the CPU kernels, replacing it by an initializer.
//
// What is never folded:
//  - anything depending on a trainable parameter (its value changes every step), even though the
//    parameter's initial value is known;
//  - random ops (Dropout in training mode);
//  - a result larger than `max_folded_bytes`: a causal mask or ALiBi bias over S x S is a run-time
//    computation, not a 17 GB constant (the arithmetic that computes it stays in the graph).
// Shape and Size need only their input's type, so they fold even on activations.
//
// Run it first; everything after relies on concrete shapes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace foundry {

// What one run folded; ToString() is the pipeline's line.
struct FoldStats {
  int folded = 0;                // nodes replaced by initializers
  int kept_large = 0;            // foldable, kept because the result is above max_folded_bytes
  int remaining = 0;             // nodes left in the graph
  int64_t max_folded_bytes = 0;  // the limit that run used
  std::string ToString() const;
};

class FoldPass : public Pass {
 public:
  struct Options {
    std::map<std::string, int64_t> dims;  // symbolic dimension bindings (--dim seq=2048)
    int64_t max_folded_bytes = 1 << 20;
  };
  explicit FoldPass(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "fold"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const FoldStats& stats() const { return stats_; }

 private:
  Options options_;
  FoldStats stats_;
};

// Binds the symbolic dimensions of the graph inputs (and of any other value carrying them) from
// `dims`. An unbound one is an error naming it and showing --dim.
Status BindDims(Graph& graph, const std::map<std::string, int64_t>& dims);

// Parses command-line bindings ["batch=8", "seq=2048"]; errors quote the --dim option.
StatusOr<std::map<std::string, int64_t>> ParseDimSpecs(const std::vector<std::string>& specs);

}  // namespace foundry
