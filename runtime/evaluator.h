// Eval: the loss of a trained plan on held-out tokens (foundry-run --eval-data, --eval-interval,
// --eval-only). The forward-only eval graph (compiler/eval_graph.h: the nodes the loss needs)
// runs with the plan's "eval_memory" layout, bound to the trainer's own parameters (no copy), in
// the training step's arena and input/loss storage (Executor's lender: eval never runs during a
// step, and a step rewrites everything it reads), so evaluating adds no planned bytes unless the
// eval arena is larger than the training one (then it has its own, counted in
// extra_arena_bytes()). Dropout is off (KernelContext::training = false), as model.eval().
//
// The eval set: the eval file's windows of seq + 1 tokens, read in order from the start, `batch`
// windows per batch (the training plan's batch), inputs and labels formed as for training
// (runtime/trainer.h step 1); every whole batch, or the first `max_batches`. Each batch's loss is
// the mean over its tokens and every batch has the same number of tokens, so the mean of the
// batch losses is the mean over every token of the eval set; perplexity = exp(loss).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "runtime/data.h"
#include "runtime/executor.h"

namespace foundry {

class Trainer;

struct EvalOptions {
  std::string data_path;
  TokenDType data_dtype = TokenDType::kUint16;
  int64_t max_batches = -1;  // -1: every whole batch of the file
  MdsReadOptions mds;        // an MDS folder: how it is read (in index order unless shuffled)
};

struct EvalReport {
  int64_t step = 0;  // the trainer's step when it ran
  int64_t batches = 0;
  int64_t tokens = 0;  // labels scored
  double loss = 0;
  double perplexity = 0;
  double seconds = 0;
};

class Evaluator {
 public:
  // Errors: the plan has no eval plan (compiled before foundry planned one), the eval graph's
  // token input is fed (--feed) in training, the file holds less than one batch.
  static StatusOr<std::unique_ptr<Evaluator>> Create(const Trainer& trainer,
                                                     const EvalOptions& options);
  StatusOr<EvalReport> Run();

  int64_t batches() const { return batches_; }
  // Bytes of eval arena beside the training one (0: it runs in the training arena).
  int64_t extra_arena_bytes() const { return extra_arena_bytes_; }
  // "--eval-data FILE (uint16, 1000 tokens): 4 batches of 2 x 16"
  std::string Describe() const;

 private:
  Evaluator() = default;

  const Trainer* trainer_ = nullptr;
  EvalOptions options_;
  Graph graph_;
  MemoryPlan memory_;
  DataSource data_;
  std::unique_ptr<Executor> executor_;
  std::vector<int64_t> windows_;
  Tensor staged_ids_, staged_labels_;
  Tensor loss_;  // the host copy of each batch's loss
  int64_t batches_ = 0;
  int64_t extra_arena_bytes_ = 0;
};

}  // namespace foundry
