// The memory report: what one training step holds, per storage class, per module and per
// kind, and what it computes, read off a scheduled training graph and its MemoryPlan. Pure
// analysis: nothing here changes the graph or the plan.
//
// Saved for backward. A buffer is saved when a forward-phase node produces a value in it and a
// backward- or recompute-phase node reads that value. The figure is the sum over unique buffers
// (views and in-place aliases resolved through MemoryPlan::alias, so each buffer counts once) of
// the owner's exact, unrounded bytes. Only arena buffers count: initializers, constants and feeds
// are excluded, and so are graph outputs (the loss and any extra output), which have storage of
// their own for the whole step whether or not the backward reads them (reported as output_bytes).
// A node without a phase mark counts as forward, as the schedule treats it. `modules` splits the
// figure by module instance (Node::scope, "" = root), so the rows sum exactly to the total: each
// buffer goes to the scope of the node that wrote the bytes the backward reads, i.e. the saved
// value with views followed back to their input (a Reshape in another module moves nothing).
// That is the buffer's owner except after an in-place alias, whose input died before it.
//
// FLOPs: each op's formula is written with its schema (OpSchema::flops, compiler/op_schema.h
// says what the model counts; compiler/ops/<family>.cc has the formulas), the one model every
// FLOP figure foundry prints uses (this report, the checkpoint report's recompute FLOPs and their
// share of the step). Nodes are summed by phase mark (unmarked = forward); optimizer-phase nodes
// are left out.
//
// Per-step kinds (the timeline): at each step, the rounded bytes (kArenaAlignment) of the live
// arena buffers split into saved activations (the saved buffers above, over their whole
// interval), gradients (a plan with gradients in the arena: from their first write to the end)
// and transients (every other arena buffer), plus that step's workspace. Their sum is
// the live rounded bytes the lower bound is the maximum of, so the curve peaks at the bound.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ir.h"
#include "compiler/memory_plan.h"
#include "compiler/phase.h"
#include "passes/checkpoint_report.h"
#include "passes/ckpt_budget.h"

namespace foundry {

struct FlopCounts {
  int64_t forward = 0;
  int64_t backward = 0;
  int64_t recompute = 0;
};

// The FLOPs of one node (its schema's formula); the graph gives the value shapes.
int64_t NodeFlops(const Graph& graph, const Node& node);
FlopCounts CountFlops(const Graph& graph);

// The buffers saved for backward (the definition above), keyed by owner, each with its data
// value: the saved value with views followed back to the node that wrote the bytes. Both this
// report and the checkpoint report (passes/checkpoint_report.h) count from it.
std::map<std::string, std::string> SavedBuffers(const Graph& graph, const MemoryPlan& plan);

struct ModuleSavedBytes {
  std::string module;      // scope path, "" = root
  std::string class_name;  // the module's qualified class, "" when the export named none
  int64_t saved_for_backward_bytes = 0;
};

// One arena buffer live at the peak step.
struct PeakValue {
  std::string value;  // the buffer's owner
  int64_t bytes = 0;  // exact
  std::string module;
  std::string phase;  // of the owner's producer
  bool saved = false;
  bool gradient = false;  // a gradient the plan keeps in the arena
  std::string dtype;      // the owner's element type (DTypeName: f32, bf16, i64, ...)
};

struct StepBytes {
  int64_t saved = 0;  // rounded bytes of live saved buffers
  int64_t transient = 0;
  int64_t workspace = 0;
  Phase phase = Phase::kForward;
  int64_t gradient = 0;  // rounded bytes of live gradients in the arena
  int64_t Total() const { return saved + transient + workspace + gradient; }
};

struct LayoutSummary {
  std::string backend;
  int64_t arena_bytes = 0;
  int64_t lower_bound_bytes = 0;
  int64_t peak_step = -1;
  std::string peak_node;
  int64_t total_bytes = 0;
};

struct MemoryReport {
  std::string model;
  std::map<std::string, int64_t> dims;
  std::string backend;  // the layout the memory figures, steps and peak values come from

  LayoutSummary layout;                // of `backend`
  std::vector<LayoutSummary> layouts;  // every backend the plan holds, in plan order
  int64_t saved_for_backward_bytes = 0;
  // The same bytes by element type ("f32", "bf16", ...): --precision amp_bf16 saves bf16.
  std::map<std::string, int64_t> saved_for_backward_by_dtype;
  BytesByClass outside;  // the plan's bytes outside the arena, per class
  // A plan with gradients in the arena: all of them (exact), and those live at the peak step.
  bool gradients_in_arena = false;
  int64_t arena_gradient_bytes = 0;
  int64_t arena_gradient_bytes_at_peak = 0;

  FlopCounts flops;
  std::vector<ModuleSavedBytes> modules;   // largest first, ties in natural order (2 < 10)
  std::vector<PeakValue> largest_at_peak;  // at most kPeakValues, largest first, then by name
  std::vector<StepBytes> steps;            // one per node of the schedule

  // What checkpointing did, against the plain plan of the same model; set by the caller (the
  // CLI with --ckpt), printed and written when set.
  std::optional<CheckpointReport> checkpoint;
  // What --memory-budget chose; set by the caller, written to the JSON when set (the text report
  // leaves it out: foundry-compile prints it as the search ends, FormatBudgetChoice).
  std::optional<BudgetChoice> budget;
};

inline constexpr int kPeakValues = 10;

// The report for `backend`'s layout (an error naming the backend when the plan has none for it).
StatusOr<MemoryReport> BuildMemoryReport(const Graph& graph, const MemoryPlan& plan,
                                         const std::string& backend, const std::string& model,
                                         const std::map<std::string, int64_t>& dims);

// flops_recomputed / step_flops · 100 (0 for an empty step).
double RecomputePercent(const CheckpointReport& checkpoint);

// The --report-json document (schema in docs/memory-report.md), pretty-printed, ending in a
// newline.
std::string MemoryReportJson(const MemoryReport& report);

// The text report foundry-compile prints: the same numbers, then the 10 largest values at the peak
// with their modules, then saved bytes by module.
std::string FormatMemoryReport(const MemoryReport& report);

}  // namespace foundry
