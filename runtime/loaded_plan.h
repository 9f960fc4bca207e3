// A compiled plan loaded for running: the plan file and its training graph, cross-checked.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/ir.h"
#include "compiler/plan.h"

namespace foundry {

// A plan and its training graph, cross-checked: every plan input is a graph input, every parameter
// an initializer, every gradient and the loss a graph output.
struct LoadedPlan {
  std::string plan_path;
  Plan plan;
  Graph graph;
};

// `prefix_or_plan_path`: "out/mpt" (reads out/mpt.plan) or a path ending in ".plan". The graph
// file is resolved relative to the plan's directory.
StatusOr<LoadedPlan> LoadPlan(const std::string& prefix_or_plan_path);

// The same from the bytes of a plan file and of its training graph (the fuzz target's loader):
// `plan_path` names the plan in errors, `graph_dir` is where the graph's external data would lie.
StatusOr<LoadedPlan> LoadPlanFromBytes(std::string_view plan_text, std::string_view graph_bytes,
                                       const std::string& plan_path, const std::string& graph_dir);

// Re-infers every node's output types from its inputs, in order, and refuses a graph whose file
// declares another type for a value (or computes a value twice, or reads one before it is
// computed); the inferred types replace the declared ones. Inference also validates attributes
// (an enum attribute outside its values is refused). The message is the part in parentheses of
// LoadPlan's "damaged plan" error; `graph_file` names the graph in it.
Status CheckTypesByInference(Graph& graph, const std::string& graph_file);

// The same checks LoadPlan makes, for a plan and graph built in memory (ReadPlan's own checks
// aside): the loss is a scalar float output of the graph; every input is a graph input; every
// parameter is an initializer whose gradient is a graph output of its dtype and shape; each
// dimension in `input_dims` is the size `dims` gives it in the graph's input shapes.
Status CheckPlan(const Plan& plan, const Graph& graph, const std::string& plan_path);

}  // namespace foundry
