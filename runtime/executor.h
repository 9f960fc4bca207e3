// The planned executor (docs/design.md §6): runs one training step of a scheduled graph on a backend with
// every byte placed by the memory plan, allocated once, up front.
//
// At Create, from (graph, MemoryPlan, backend):
//  - the plan's layout for the backend is checked (CheckLayout with the backend's workspace
//    figures: a plan made for other kernels is refused);
//  - the arena: ONE region of layout.arena_bytes (class arena). Every transient value is a view at
//    arena + offset of its buffer's owner (aliases, views and in-place outputs, at their owner's
//    offset, under their own shape); each node's workspace a span at its workspace offset;
//  - each graph output (the loss, the gradients) its own region (class output / gradient); each
//    graph input its own region (class input), which the caller writes before Run (through
//    backend.CopyIn when the backend's memory is not host memory);
//  - parameters are bound: views of the caller's tensors (class parameter), which must stay put
//    (same storage) for the executor's life; constants are views of the graph's data, re-classed
//    as constant (on a device backend: copied once into regions of class constant; kernels get the
//    host data too, as KernelContext::constant_inputs).
// Run() executes the schedule: no allocation at all (the per-node input/output lists are built at
// Create). Views a node's kernel writes through (out == in) are the schema's view/in-place cases.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/memory_plan.h"
#include "kernels/cpu/kernel.h"
#include "runtime/backend.h"

namespace foundry {

class Executor {
 public:
  // `graph` and `backend` must outlive the executor and stay unchanged; `parameters` holds a
  // tensor in the backend's memory for every graph.parameters entry (dtype and shape as in the
  // graph). Every other initializer must carry data (a constant).
  //
  // `lender` (an executor on the same backend that is never run at the same time as this one,
  // e.g. the training step's for the eval graph): this executor runs in the lender's arena when
  // its own fits there, and uses the lender's storage of every input, constant and output that
  // has the same name and type; it allocates only what the lender lacks. The lender must outlive
  // it.
  static StatusOr<std::unique_ptr<Executor>> Create(
      const Graph& graph, const MemoryPlan& plan, Backend& backend,
      const std::map<std::string, Tensor*>& parameters, const Executor* lender = nullptr);

  // One pass over the schedule. ctx.node_key and ctx.workspace are set per node.
  Status Run(const KernelContext& ctx);

  // The storage of a graph input (write the batch here before Run), of a graph output (read the
  // loss and gradients here after Run, in place), or of any value of the graph (a transient's view
  // holds its value only until its arena bytes are reused: valid after Run for the outputs, the
  // inputs, parameters and constants). Null when the graph has no such value.
  Tensor* input(const std::string& name);
  const Tensor* value(const std::string& name) const;

  const BackendLayout& layout() const { return *layout_; }
  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }
  Backend& backend() const { return backend_; }
  // Bytes of the regions this executor allocated (arena, inputs, outputs), as counted.
  int64_t allocated_bytes() const;

  // With profiling on, Run adds each node's wall time (seconds, the backend's Run call: on a
  // device backend that is the launch, not the kernel) to node_seconds()[i], i its position in
  // graph.nodes. Off by default: then Run reads no clock.
  void set_profile(bool on);
  const std::vector<double>& node_seconds() const { return node_seconds_; }

 private:
  Executor(const Graph& graph, const MemoryPlan& plan, Backend& backend)
      : graph_(graph), plan_(plan), backend_(backend) {}

  struct Step {
    const Node* node;
    const void* prepared;  // Backend::Prepare(*node)
    std::vector<const Tensor*> inputs;
    std::vector<Tensor*> outputs;
    std::span<std::byte> workspace;
    uint64_t node_key;
    std::vector<const Tensor*> constants;  // host data of constant inputs (null: computed)
  };

  const Graph& graph_;
  MemoryPlan plan_;
  Backend& backend_;
  const BackendLayout* layout_ = nullptr;
  Region arena_;  // empty when the arena is a lender's
  std::byte* arena_base_ = nullptr;
  int64_t arena_bytes_ = 0;
  std::vector<Region> regions_;  // inputs and outputs
  std::unordered_map<std::string, Tensor> views_;
  std::unordered_map<std::string, const Tensor*> host_constants_;  // the graph's data
  Tensor omitted_output_;  // what a node's omitted ("") output is written to: empty
  std::vector<Step> steps_;
  bool profile_ = false;
  std::vector<double> node_seconds_;
};

}  // namespace foundry
