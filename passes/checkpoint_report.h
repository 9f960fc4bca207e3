// What checkpointing did, in bytes and FLOPs: the plain training graph and
// its memory plan against the checkpointed one (RematPass applied to the same autodiff output)
// and its plan. Pure analysis.
//
// Saved for backward is memory_report.h's figure: unique arena buffers a forward node writes and
// a backward or recompute node reads, keyed by the buffer's owner value. With B = plain's saved
// buffers and A = the checkpointed graph's:
//   - bytes_freed = bytes of B \ A, values_freed = |B \ A|; per instance, the buffers whose data
//     value (memory_report.h) a node inside the instance made;
//   - bytes_added = bytes of A \ B (values the plain graph did not keep but a recompute now reads:
//     a run-time mask, a rotary table); per instance, those a clone of the instance reads;
// so saved_after == saved_before - bytes_freed + bytes_added exactly. Buffers of neither kind
// (an alias that differs between the plans) are counted in the totals only.
// nodes_recomputed / flops_recomputed: the clones marked with the instance (passes/remat.h), FLOPs
// by NodeFlops (memory_report.h).
//
// The low-freeing note: an instance gets one when bytes_freed is under kLowFreeingPercent % of
// the bytes it still keeps saved in the checkpointed plan (the saved buffers a forward node of
// the instance writes or reads: its boundary and its outputs), i.e. when checkpointing it trades
// a recompute for almost no memory. A LayerNorm frees its mean and inverse std (2 floats a row)
// against its input and output (2·d floats a row); an attention, an MLP or a block frees several
// times its boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ckpt_targets.h"
#include "compiler/ir.h"
#include "passes/memory_plan.h"

namespace foundry {

inline constexpr int64_t kLowFreeingPercent = 10;

struct CheckpointInstanceReport {
  std::string module;
  std::string class_name;  // qualified; "" when unknown
  std::string target;      // the target that selected it
  int64_t values_freed = 0;
  int64_t bytes_freed = 0;
  int64_t bytes_added = 0;
  int64_t nodes_recomputed = 0;
  int64_t flops_recomputed = 0;
  // Non-empty when checkpointing this instance frees almost nothing (a norm frees only its
  // statistics): one line saying so.
  std::string note;
};

struct CheckpointReport {
  std::vector<std::string> targets;
  std::vector<CheckpointInstanceReport> instances;  // selection order
  std::vector<CkptNesting> nested;                  // CkptSelection::nested
  // Notes of any other kind, one line each, printed as they are after the nesting notes: how
  // much the instances holding a fused attention free.
  std::vector<std::string> notes;
  int64_t values_freed = 0;
  int64_t bytes_freed = 0;
  int64_t bytes_added = 0;
  int64_t nodes_recomputed = 0;
  int64_t flops_recomputed = 0;
  int64_t saved_before_bytes = 0;  // plain saved for backward
  int64_t saved_after_bytes = 0;   // checkpointed
  int64_t step_flops = 0;          // forward + backward + recompute of the checkpointed graph
  int64_t budget_bytes = -1;       // --memory-budget, when the selection was chosen for one
};

StatusOr<CheckpointReport> BuildCheckpointReport(const Graph& plain, const MemoryPlan& plain_plan,
                                                 const Graph& checkpointed,
                                                 const MemoryPlan& checkpointed_plan,
                                                 const CkptSelection& selection);

}  // namespace foundry
