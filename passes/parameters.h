// Decides the trainable set before anything else runs, so that no pass treats a trainable value
// as a constant: fold must never fold a buffer that --trainable made trainable into its
// consumers (it would vanish, and autodiff could not give it a gradient).
//
// Trainable = graph.parameters (the exporter's list; see compiler/onnx_import.h for stock
// exports), minus --freeze globs, plus --trainable globs over float initializers. Buffers stay
// untrainable unless named. A glob that matches nothing is an error (almost always a typo). An
// empty set is autodiff's error, reported after fold and canonicalize have had their say.
#pragma once

#include <string>
#include <vector>

#include "passes/pass.h"

namespace foundry {

// What one run decided; ToString() is the pipeline's line.
struct ParametersStats {
  int trainable = 0;  // parameters after the pass
  int frozen = 0;     // parameters --freeze took away
  int added = 0;      // initializers --trainable made parameters
  std::string ToString() const;
};

class ParametersPass : public Pass {
 public:
  struct Options {
    std::vector<std::string> freeze;     // globs over parameter names
    std::vector<std::string> trainable;  // globs over float initializer names
  };
  explicit ParametersPass(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "parameters"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const ParametersStats& stats() const { return stats_; }

 private:
  Options options_;
  ParametersStats stats_;
};

// fnmatch-style glob: '*' any run of characters, '?' one character.
bool GlobMatch(std::string_view pattern, std::string_view text);

}  // namespace foundry
