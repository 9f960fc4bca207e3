// Collectives of sharded data parallelism (domain "foundry"): the ops passes/shard.h puts into
// the training graph of a plan compiled for N ranks (foundry-compile --world-size N --sharding S).
// Every one carries the attribute `world_size` (N >= 2). A parameter P of numel n is sharded in
// c = ceil(n / N) elements per rank: rank r holds flat(P)[r*c, (r+1)*c), zero past n.
//
// foundry::AllGather (shard_1, ..., shard_k) -> (full_1, ..., full_k)
//   shard_i  f32 or bf16 [c_i], this rank's shard of parameter P_i (the shards of one node may
//            differ in type)
//   full_i   shard_i's type, P_i's shape: the concatenation of every rank's shard_i, in rank
//            order, cut to n_i elements (bytes moved, no arithmetic). Attribute `shapes` (ints):
//            for each output its rank, then its dimensions ([2, 64, 32, 1, 64] = a [64, 32] and
//            a [64]).
// foundry::ReduceScatterGradient (partial) -> gradient
//   partial   f32 or bf16, this rank's (microbatch's) gradient of P, P's shape
//   gradient  f32 [c]: this rank's shard of the step's gradient, in the graph output's storage.
//   With s_r = KernelContext::grad_scale on rank r. An f32 partial: every rank's scaled partial
//   s_r * partial (each product rounded to f32) is summed into the shard in rank order, one
//   rounded add per rank:
//     first microbatch (grad_accumulate false):  g = s_0 p_0, then g = g + s_r p_r for r = 1..N-1
//     the others       (grad_accumulate true):   g = g + s_r p_r for r = 0..N-1
//   which is exactly the order of foundry::AccumulateGradient over the N*K microbatches of a single
//   process when rank r's microbatch k is the single process's microbatch k*N + r.
//   A bf16 partial: the reduction runs in bf16 (FSDP's MixedPrecision with reduce_dtype bf16):
//   q_r = bf16(s_r p_r) (the product in f32, rounded to nearest even), summed in rank order in
//   bf16, t = q_0, t = bf16(t + q_r) for r = 1..N-1 (each add in f32, then rounded); then
//   g = f32(t) on the first microbatch, g = g + f32(t) (in f32) on the others.
// foundry::AllReduceGradient (partial) -> gradient
//   The same sum, every rank holding all of it: gradient f32 of P's shape (NO_SHARD, DDP).
// Like AccumulateGradient, the gradient ops read their own output while they accumulate: no
// in_place_inputs.
#include <string>
#include <vector>

#include "compiler/op_schema.h"
#include "compiler/sharding.h"

namespace foundry {

namespace {

constexpr int kAnyCount = 1 << 20;

StatusOr<int64_t> WorldSize(const InferContext& ctx) {
  const int64_t n = ctx.node.GetInt("world_size", 0);
  if (n < 2)
    return ctx.Fail("world_size " + std::to_string(n) + "; a collective needs 2 or more ranks");
  return n;
}

// A collective moves and sums f32 or bf16 (docs/design.md §10); unknown types pass until known.
Status CheckF32OrBf16(const InferContext& ctx, size_t i, const std::string& what) {
  const Value& v = ctx.input(i);
  if (v.dtype != DType::kUndefined && v.dtype != DType::kFloat32 && v.dtype != DType::kBFloat16)
    return ctx.Fail(what + " is " + v.TypeString() + "; a collective takes f32 or bf16");
  return Status::Ok();
}

StatusOr<std::vector<TypeInfo>> InferAllGather(const InferContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t n, WorldSize(ctx));
  const std::vector<int64_t> spec = ctx.node.GetInts("shapes");
  std::vector<TypeInfo> out;
  size_t at = 0;
  while (at < spec.size()) {
    const int64_t rank = spec[at++];
    if (rank < 0 || at + static_cast<size_t>(rank) > spec.size())
      return ctx.Fail(
          "attribute 'shapes' is malformed (a rank, then that many dimensions, per output)");
    TypeInfo t;
    t.shape.assign(spec.begin() + static_cast<std::ptrdiff_t>(at),
                   spec.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(rank)));
    at += static_cast<size_t>(rank);
    out.push_back(std::move(t));
  }
  if (out.size() != ctx.node.outputs.size() || out.size() != ctx.num_inputs())
    return ctx.Fail("gathers " + std::to_string(ctx.num_inputs()) + " shards into " +
                    std::to_string(ctx.node.outputs.size()) + " outputs with " +
                    std::to_string(out.size()) + " shapes; give one shard, output and shape each");
  for (size_t i = 0; i < out.size(); ++i) {
    RETURN_IF_ERROR(CheckF32OrBf16(ctx, i, "shard " + std::to_string(i)));
    // Each full tensor has its shard's type (f32 until that is known).
    out[i].dtype = ctx.input(i).dtype == DType::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
    int64_t numel = 1;
    for (int64_t d : out[i].shape) {
      if (d < 0) return ctx.Fail("output " + std::to_string(i) + " has an unknown dimension");
      numel *= d;
    }
    const Value& shard = ctx.input(i);
    const int64_t c = ShardElements(numel, n);
    if (shard.ShapeKnown() && (shard.shape.size() != 1 || shard.shape[0] != c))
      return ctx.Fail("shard " + std::to_string(i) + " is " + shard.TypeString() + " but a " +
                      std::to_string(numel) + "-element tensor over " + std::to_string(n) +
                      " ranks has shards of [" + std::to_string(c) + "]");
  }
  return out;
}

StatusOr<std::vector<TypeInfo>> InferReduceScatter(const InferContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t n, WorldSize(ctx));
  RETURN_IF_ERROR(CheckF32OrBf16(ctx, 0, "the partial gradient"));
  const Value& p = ctx.input(0);
  TypeInfo t;
  t.dtype = DType::kFloat32;
  if (!p.ShapeKnown()) {
    t.shape = {-1};
    return std::vector<TypeInfo>{t};
  }
  int64_t numel = 1;
  for (int64_t d : p.shape) numel *= d;
  t.shape = {ShardElements(numel, n)};
  return std::vector<TypeInfo>{t};
}

StatusOr<std::vector<TypeInfo>> InferAllReduce(const InferContext& ctx) {
  RETURN_IF_ERROR(WorldSize(ctx).status());
  RETURN_IF_ERROR(CheckF32OrBf16(ctx, 0, "the partial gradient"));
  TypeInfo t = SameAs(ctx.input(0));
  t.dtype = DType::kFloat32;  // whatever the partial's type, the gradient is f32
  return std::vector<TypeInfo>{t};
}

}  // namespace

// FLOPs: a gather moves bytes only; a gradient reduction multiplies and adds each of this rank's
// partial elements once (its scale, then its sum in rank order), as foundry::AccumulateGradient
// does.
void RegisterCollectiveSchemas(OpSchemaTable& table) {
  table.Add(
      {"foundry", "AllGather", 1, kAnyCount, 1, kAnyCount, InferAllGather, FlopsPerOutput(0)});
  table.Add(
      {"foundry", "ReduceScatterGradient", 1, 1, 1, 1, InferReduceScatter, FlopsPerInput(0, 2)});
  table.Add({"foundry", "AllReduceGradient", 1, 1, 1, 1, InferAllReduce, FlopsPerInput(0, 2)});
}

}  // namespace foundry
