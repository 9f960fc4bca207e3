// The collective ops of data-parallel training on the CPU (the contract is
// docs/design.md §10 and the schemas in compiler/ops): they move bytes through ctx.comm
// (kernels/cpu/communicator.h; MPI on the host) and add in rank order themselves, so the sums
// never depend on the transport. N = ctx.comm->size() (it must equal the node's world_size), r its
// rank, c = ceil(numel / N) a shard's elements; rank r's shard of a flat tensor x is
// x[r*c, (r+1)*c), zero-padded past numel.
//
// The workspace is sliced as kernels/cpu/collective_workspace.cc plans it
// (CollectiveWorkspaceBytes): regions in order, each R(x) = x bytes rounded up to kArenaAlignment
// (256).
//
//  - foundry::AllGather(shard_1..shard_k) -> (full_1..full_k): full_i = concat over ranks of
//    shard_i, its first numel_i elements. Gathered straight into the output when numel_i = N*c_i;
//    otherwise into the output's own region (R(N*c_i*4) bytes; the regions of the uneven outputs
//    in output order), then the first numel_i copied out.
//  - foundry::ReduceScatterGradient(partial) -> grad [c]: send_j = s * pad(partial)[j*c, (j+1)*c)
//    (s = ctx.grad_scale, the product rounded to f32), exchanged (AllToAll), then
//        grad = recv_0 (or grad + recv_0 when ctx.grad_accumulate); grad = grad + recv_r', r' = 1..
//    element by element, each sum rounded (no FMA: the build contracts nothing). With global
//    microbatch j = k*N + r this is, bit for bit, foundry::AccumulateGradient over N*K
//    microbatches in one process. Workspace: send at 0, recv at R(N*c*4).
//  - foundry::AllReduceGradient(partial) -> grad (full shape): the same exchange and rank-order
//    sum for this rank's shard (accumulating onto this rank's shard of the old grad, which every
//    rank holds whole and equal), then the summed shards all-gathered and the first numel written
//    to grad. Workspace: send at 0 (its first c floats then hold the summed shard), recv at
//    R(N*c*4), gathered at 2*R(N*c*4).
// With N = 1 (no plan has such nodes) nothing is exchanged: the same arithmetic runs without the
// workspace.
#include <algorithm>
#include <cstring>
#include <string>

#include "compiler/sharding.h"
#include "kernels/cpu/collective.h"
#include "kernels/cpu/communicator.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"

namespace foundry {

StatusOr<int64_t> CheckWorldSize(const Node& node, const Communicator& comm) {
  const int64_t world = node.GetInt("world_size", 0);
  if (world != comm.size())
    return Error(node.Describe() + ": compiled for world_size " + std::to_string(world) +
                 " but the run has " + std::to_string(comm.size()) + " ranks");
  return world;
}

Status CheckAllGather(const Node& node, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs, int64_t world) {
  if (inputs.size() != outputs.size())
    return Error(node.Describe() + ": one output per input shard, not " +
                 std::to_string(outputs.size()) + " for " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& shard = *inputs[i];
    const Tensor& full = *outputs[i];
    const int64_t numel = full.numel(), c = shard.numel();
    if (shard.dtype() != DType::kFloat32 || full.dtype() != DType::kFloat32 ||
        c != ShardElements(numel, world))
      return Error(node.Describe() + ": input " + std::to_string(i) + " is " + std::to_string(c) +
                   " elements for an output of " + std::to_string(numel) +
                   "; an f32 shard holds ceil(numel / " + std::to_string(world) + ")");
  }
  return Status::Ok();
}

Status CheckReduceScatter(const Node& node, const Tensor& partial, const Tensor& grad,
                          int64_t world) {
  const int64_t c = grad.numel();
  if (partial.dtype() != DType::kFloat32 || grad.dtype() != DType::kFloat32 ||
      c != ShardElements(partial.numel(), world))
    return Error(node.Describe() + ": reduces an f32 partial of " +
                 std::to_string(partial.numel()) + " elements into an f32 shard of ceil(numel / " +
                 std::to_string(world) + "), not " + std::to_string(c));
  return Status::Ok();
}

Status CheckAllReduce(const Node& node, const Tensor& partial, const Tensor& grad) {
  if (partial.dtype() != DType::kFloat32 || grad.dtype() != DType::kFloat32 ||
      partial.numel() != grad.numel())
    return Error(node.Describe() + ": reduces an f32 partial into an f32 gradient of its size");
  return Status::Ok();
}

namespace {

// The node's world_size against the communicator the run gives it.
StatusOr<int64_t> WorldOf(const Node& node, const KernelContext& ctx) {
  if (!ctx.comm)
    return Error(node.Describe() +
                 ": a collective op needs the run's communicator (a plan compiled with "
                 "--world-size runs under mpirun with foundry-run)");
  return CheckWorldSize(node, *ctx.comm);
}

Status AllGatherKernel(const Node& node, std::span<const Tensor* const> inputs,
                       std::span<Tensor* const> outputs, const KernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  RETURN_IF_ERROR(CheckAllGather(node, inputs, outputs, world));
  int64_t offset = 0;  // the next uneven output's region
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& shard = *inputs[i];
    Tensor& full = *outputs[i];
    const int64_t numel = full.numel(), c = shard.numel();
    if (numel == world * c) {
      RETURN_IF_ERROR(
          ctx.comm->AllGather(shard.raw(), full.raw(), c * 4).Prepend(node.Describe() + ": "));
      continue;
    }
    float* gathered = WorkspaceArray<float>(ctx, offset);
    offset += CollectiveRegionBytes(world * c);
    RETURN_IF_ERROR(
        ctx.comm->AllGather(shard.raw(), gathered, c * 4).Prepend(node.Describe() + ": "));
    std::memcpy(full.raw(), gathered, static_cast<size_t>(numel) * 4);
  }
  return Status::Ok();
}

// Both gradient collectives: the scaled partial sent shard by shard, and this rank's shard of the
// rank-order sum written to `sum` (accumulating onto `old` when ctx.grad_accumulate).
Status ReduceShard(const Node& node, const Tensor& partial, int64_t world, int64_t c,
                   const KernelContext& ctx, const float* old, float* sum) {
  const int64_t numel = partial.numel();
  const float* p = partial.data<float>();
  const float s = ctx.grad_scale;
  const bool accumulate = ctx.grad_accumulate;
  if (world == 1) {  // one rank: its own scaled partial, without an exchange or the workspace
    ParallelFor(c, kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float scaled = s * p[i];
        sum[i] = accumulate ? old[i] + scaled : scaled;
      }
    });
    return Status::Ok();
  }
  float* send = WorkspaceArray<float>(ctx);
  float* recv = WorkspaceArray<float>(ctx, CollectiveRegionBytes(world * c));
  ParallelFor(world * c, kElementGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) send[i] = s * (i < numel ? p[i] : 0.0f);
  });
  RETURN_IF_ERROR(ctx.comm->AllToAll(send, recv, c * 4).Prepend(node.Describe() + ": "));
  ParallelFor(c, kElementGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float g = accumulate ? old[i] + recv[i] : recv[i];
      for (int64_t r = 1; r < world; ++r) g = g + recv[r * c + i];
      sum[i] = g;
    }
  });
  return Status::Ok();
}

Status ReduceScatterGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                                   std::span<Tensor* const> outputs, const KernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  RETURN_IF_ERROR(CheckReduceScatter(node, partial, grad, world));
  float* g = grad.data<float>();
  return ReduceShard(node, partial, world, grad.numel(), ctx, g, g);
}

Status AllReduceGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                               std::span<Tensor* const> outputs, const KernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  RETURN_IF_ERROR(CheckAllReduce(node, partial, grad));
  const int64_t numel = grad.numel();
  const int64_t c = ShardElements(numel, world);
  if (world == 1) {  // one rank: grad itself is the only shard
    float* g = grad.data<float>();
    return ReduceShard(node, partial, world, c, ctx, g, g);
  }
  const int64_t begin = ctx.comm->rank() * c;
  // This rank's shard of the old gradient, zero-padded past numel (read only when accumulating).
  float* summed = WorkspaceArray<float>(ctx);  // the send buffer's front, free after the exchange
  float* old =
      WorkspaceArray<float>(ctx, 2 * CollectiveRegionBytes(world * c));  // gathered, free until the gather
  if (ctx.grad_accumulate) {
    const float* g = grad.data<float>();
    for (int64_t i = 0; i < c; ++i) old[i] = begin + i < numel ? g[begin + i] : 0.0f;
  }
  RETURN_IF_ERROR(ReduceShard(node, partial, world, c, ctx, old, summed));
  float* gathered = WorkspaceArray<float>(ctx, 2 * CollectiveRegionBytes(world * c));
  RETURN_IF_ERROR(ctx.comm->AllGather(summed, gathered, c * 4).Prepend(node.Describe() + ": "));
  std::memcpy(grad.raw(), gathered, static_cast<size_t>(numel) * 4);
  return Status::Ok();
}

}  // namespace

void RegisterCollectiveKernels(CpuKernelTable& table) {
  table.Add("foundry", "AllGather", AllGatherKernel);
  table.Add("foundry", "ReduceScatterGradient", ReduceScatterGradientKernel);
  table.Add("foundry", "AllReduceGradient", AllReduceGradientKernel);
}

}  // namespace foundry
