// The executable plan foundry-compile writes beside the training graph (<prefix>.plan): what the
// runtime needs to run the graph in <prefix>.train.onnx without re-deriving it — which input is
// what, which output is the loss, which gradient belongs to which parameter, and (format 2) the
// memory plan: schedule, aliases, and per backend the arena offsets and workspace. Versioned JSON;
// kernel choices join it as a later format version.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/output_set.h"
#include "base/status.h"
#include "compiler/ir.h"
#include "compiler/memory_plan.h"

namespace foundry {

// One sharded parameter of a plan compiled for several ranks (passes/shard.h): its full shape,
// and the elements of one rank's shard (ceil(numel / ranks)).
struct ShardedParameter {
  std::vector<int64_t> shape;
  int64_t shard = 0;
};

// What a plan compiled with foundry-compile --world-size N --sharding S says about its ranks.
struct ShardingPlan {
  int64_t world_size = 1;
  std::string strategy;     // ShardingName of the strategy (compiler/sharding.h)
  int64_t shard_group = 0;  // ranks a parameter is sharded over (HYBRID_SHARD: a node's)
  // SHARD_GRAD_OP / FULL_SHARD / HYBRID_SHARD: every trainable parameter, sharded; the graph
  // holds each as the rank's f32 [shard] without data. Empty for NO_SHARD.
  std::map<std::string, ShardedParameter> parameters;
  // The full initial values of the sharded parameters (safetensors, ONNX names, f32), beside the
  // plan; "" when the export had no weights (the runtime draws them whole, then shards).
  std::string init_file;
};

struct Plan {
  static constexpr int kVersion = 2;
  int version = kVersion;
  std::string graph_file;  // relative to the plan's directory
  // The digest of the graph file (and its .data file) this plan was written with (GraphDigest):
  // a plan paired with another compile's graph is refused. Optional in the file (plans written
  // before it have none).
  std::string graph_digest;
  std::string source_model;             // the model foundry-compile read (as given)
  std::string loss;                     // value name of the scalar loss
  bool loss_in_model = true;            // false: foundry appended the loss (labels are not shifted)
  std::vector<std::string> inputs;      // run-time data inputs, e.g. input_ids, labels
  std::vector<std::string> parameters;  // trainable, in optimizer order
  std::map<std::string, std::string> gradients;  // parameter -> its gradient value
  std::map<std::string, int64_t> dims;           // the bindings it was compiled with
  // Which dimension each axis of an input bound, as the exported model named them ("" for a
  // fixed axis): {"input_ids": ["batch", "seq"]}. Lets the runtime check `dims` against the
  // graph's input shapes. Optional in the file (plans written before it have none).
  std::map<std::string, std::vector<std::string>> input_dims;
  // Microbatches per optimizer step (foundry-compile --grad-accum K): above 1, each gradient is
  // written by a foundry::AccumulateGradient node (passes/grad_accumulate.h). Written as
  // "grad_accumulation" only when above 1 (a plan without it is K = 1, byte for byte as before).
  int64_t grad_accumulation = 1;
  // Written as "memory": {"schedule": [node, ...], "alias": {value: {"owner": o, "kind": "view" |
  // "in_place"}}, "layouts": {backend: {"arena_bytes", "lower_bound_bytes", "peak_step",
  // "offsets": {owner: offset}, "workspace": {node: [offset, bytes]}}}, "parameter_bytes",
  // "gradient_bytes", "output_bytes", "input_bytes", "constant_bytes", "optimizer_state_bytes"}.
  // Only nodes with workspace appear under "workspace". ReadPlan checks what it can without the
  // graph; LoadPlan runs CheckMemoryPlan against the graph.
  MemoryPlan memory;
  // The forward-only eval graph's memory (compiler/eval_graph.h: EvalGraph(graph, loss)), in the
  // same form, under "eval_memory". Optional in the file (plans written before it have none;
  // foundry-run --eval-data then asks for a recompile).
  std::optional<MemoryPlan> eval_memory;
  // Written as "sharding" only for a plan of several ranks (foundry-compile --world-size N > 1);
  // the memory plan is then one rank's.
  std::optional<ShardingPlan> sharding;
};

// The JSON text of a plan file.
StatusOr<std::string> PlanToJson(const Plan& plan);
// Atomic write (base/file_util.h).
Status WritePlan(const Plan& plan, const std::string& path);
// Reads a plan and checks what it can without the graph (a hand-edited plan is as likely as a
// damaged one): parameters and inputs are unique, every parameter has a gradient and every
// gradient belongs to a parameter, no value plays two roles, dims are positive; the memory
// section is well-formed (alias kinds known, schedule nodes unique, workspace names scheduled
// nodes). A plan of another format version is refused with a "recompile" message.
StatusOr<Plan> ReadPlan(const std::string& path);
// The same checks on the text of a plan file; `path` names it in errors.
StatusOr<Plan> ParsePlan(std::string_view text, const std::string& path);

// ---- foundry-compile's outputs -------------------------------------------------------------

// The files foundry-compile writes for -o PREFIX: PREFIX.train.onnx, PREFIX.train.onnx.data (only
// when ExportOnnx moves the weights out of a large model), PREFIX.plan, and PREFIX.init.safetensors
// (only for a sharded plan of a model with weights).
struct CompiledOutputs {
  std::string graph;  // PREFIX.train.onnx
  std::string data;   // PREFIX.train.onnx.data
  std::string plan;   // PREFIX.plan
  // PREFIX.init.safetensors: a sharded plan's full initial parameters (ShardingPlan::init_file),
  // written by foundry-compile only for such a plan.
  std::string init;
};
// Error for a PREFIX without a file-name stem ("", "out/", "out/.", "out/..").
StatusOr<CompiledOutputs> CompiledOutputPaths(const std::string& prefix);

// "fnv1a64:<16 hex digits>" over the graph file's bytes, then the data file's when there is one.
StatusOr<std::string> GraphDigest(const std::string& graph_path, const std::string& data_path);

// Stages `graph` (and `plan`, when not null, its graph_digest set from the staged graph) in
// `outputs`, where the caller declared the three files of -o PREFIX (CompiledOutputPaths); the
// caller commits them with its other outputs, as one set (base/output_set.h).
Status StageCompiledOutputs(const Graph& graph, Plan* plan, const CompiledOutputs& paths,
                            OutputSet& outputs);

// Writes `graph` (and `plan`) for -o PREFIX alone, as one set: afterwards either every file is the
// new one or, on any error, every file is as it was before (a file that did not exist still does
// not; folders this call created are removed again). Missing folders above PREFIX are made.
Status WriteCompiledOutputs(const Graph& graph, const Plan* plan, const std::string& prefix);

}  // namespace foundry
