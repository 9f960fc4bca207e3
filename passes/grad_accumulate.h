// Gradient accumulation in the plan (llm-foundry's device_train_microbatch_size and
// global_train_batch_size): an optimizer step runs K microbatches of the compiled batch through
// the same training graph, and each parameter's gradient adds up in its own output storage.
//
// The rewrite, for every trainable parameter P whose gradient G = graph.outputs[i + 1]:
//   before:  X = Op(...) -> G                          (G: a graph output, storage of its own)
//   after:   X = Op(...) -> G/microbatch               (a transient, planned in the arena)
//            foundry::AccumulateGradient(G/microbatch) -> G
// The new node runs right after the partial's producer (the schedule picks it as soon as the
// partial exists: it frees the partial and allocates nothing in the arena). Its kernel reads the
// microbatch's scale and whether to write or add from the kernel context, which the trainer sets
// per microbatch (runtime/trainer.h): G = s_k * partial on the first microbatch, G += s_k *
// partial on the others, s_k = n_k / N as Composer scales a microbatch's loss. The gradient
// keeps its output storage across the microbatches, so the graph's memory is one microbatch's
// plus the partials the arena holds at once.
//
// Order: after autodiff, before remat, the autocast recast and the schedule (the pipeline runs
// it right after autodiff, so the checkpointing search and the plain plan it compares with see
// the same accumulating graph). Nothing after it may fold the node away or move a gradient's
// producer onto G again.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "passes/pass.h"

namespace foundry {

struct GradAccumulateStats {
  int64_t steps = 1;          // microbatches per optimizer step (K)
  int gradients = 0;          // AccumulateGradient nodes added
  int64_t partial_bytes = 0;  // the partials' bytes, summed (each lives briefly in the arena)
  std::string ToString() const;
};

class GradAccumulatePass : public Pass {
 public:
  struct Options {
    int64_t steps = 1;  // K; 1 leaves the graph unchanged
  };
  explicit GradAccumulatePass(Options options) : options_(options) {}

  std::string_view name() const override { return "grad_accumulate"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const GradAccumulateStats& stats() const { return stats_; }

 private:
  Options options_;
  GradAccumulateStats stats_;
};

// The value name of a gradient's per-microbatch partial: "<gradient>/microbatch".
std::string MicrobatchPartialName(const std::string& gradient);

}  // namespace foundry
