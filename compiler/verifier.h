// Structural checks every pass must leave true: each value has one producer, every node input is
// defined before it is used, graph outputs exist, and each node's recorded output types agree with
// what its op's inference gives (when both are known). Run by the pipeline after every pass that
// changed the graph.
#pragma once

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

struct VerifyOptions {
  bool check_types = true;
};

Status VerifyGraph(const Graph& graph, const VerifyOptions& options = {});

}  // namespace foundry
