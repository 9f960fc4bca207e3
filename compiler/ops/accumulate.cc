// Gradient accumulation (domain "foundry"): the op passes/grad_accumulate.h puts after each
// parameter gradient when an optimizer step runs several microbatches.
//
// foundry::AccumulateGradient (partial) -> gradient
//   partial   f32, this microbatch's gradient of the parameter (any shape)
//   gradient  f32, partial's shape: the gradient a step's optimizer update reads, in the graph
//             output's own storage (never the arena), which persists across the microbatches
//   Per element, with s = KernelContext::grad_scale (the microbatch's share n_k / N of the
//   step's loss tokens):
//     first microbatch (grad_accumulate false):  gradient = s * partial
//     the others       (grad_accumulate true):   gradient = gradient + s * partial
//   The one kernel that reads its own output: it is never scheduled in place of an input (no
//   in_place_inputs), and the output poisoning of the tests skips it while it accumulates.
#include <string>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {

namespace {

StatusOr<std::vector<TypeInfo>> InferAccumulateGradient(const InferContext& ctx) {
  const Value& partial = ctx.input(0);
  if (partial.dtype != DType::kUndefined && partial.dtype != DType::kFloat32)
    return ctx.Fail("the partial gradient is " + partial.TypeString() +
                    "; gradients are accumulated in f32");
  return std::vector<TypeInfo>{SameAs(partial)};
}

}  // namespace

void RegisterAccumulateSchemas(OpSchemaTable& table) {
  // FLOPs: one per element, the add (the scale by the microbatch's share is left uncounted).
  table.Add(
      {"foundry", "AccumulateGradient", 1, 1, 1, 1, InferAccumulateGradient, FlopsPerOutput(1)});
}

}  // namespace foundry
