// The collective ops of data-parallel training on CUDA (the contract is
// docs/design.md §10): the GPU twins of kernels/cpu/collective.cc, bit for bit. They move
// bytes through ctx.base.comm, which must be a device communicator (runtime/nccl_communicator.h:
// NCCL on this stream), and add in rank order themselves. N = comm->size() (= the node's
// world_size), r its rank, c = ceil(numel / N); rank r's shard of a flat x is x[r*c, (r+1)*c),
// zero-padded past numel. Products are rounded with __fmul_rn and sums with __fadd_rn, so nvcc
// fuses nothing into an FMA (the CPU kernel contracts nothing either); one thread per element,
// the ranks summed in order inside it; no atomics.
//
// Workspace (device memory, planned in the arena; the figure is CollectiveWorkspaceBytes, whose
// regions are rounded up to 256 bytes; these packed slices lie inside it):
//  - AllGather: output i whose numel_i != N*c_i gets the slice [o_i, o_i + N*c_i*4), o_i the sum
//    of the slices of the outputs before it; it is gathered there, then its first numel_i copied
//    out. An output with numel_i == N*c_i is gathered straight into itself (no slice).
//  - ReduceScatterGradient: send [0, N*c*4), recv [N*c*4, 2*N*c*4).
//  - AllReduceGradient: send [0, N*c*4) (its first c floats then hold this rank's summed shard),
//    recv [N*c*4, 2*N*c*4), gathered [2*N*c*4, 3*N*c*4).
#include <string>

#include "compiler/sharding.h"
#include "kernels/cpu/collective.h"
#include "kernels/cpu/communicator.h"
#include "kernels/cuda/common.cuh"

namespace foundry {
namespace {

// The node's world_size against the run's communicator, which must serve device memory.
StatusOr<int64_t> WorldOf(const Node& node, const CudaKernelContext& ctx) {
  Communicator* comm = ctx.base.comm;
  if (!comm)
    return Error(node.Describe() +
                 ": a collective op needs the run's communicator (on --device cuda: NCCL, "
                 "runtime/nccl_communicator.h)");
  if (comm->name() != "nccl")
    return Error(node.Describe() + ": the cuda kernel exchanges device memory through NCCL, not " +
                 std::string(comm->name()));
  return CheckWorldSize(node, *comm);
}

Status Short(const Node& node, int64_t need, const CudaKernelContext& ctx) {
  if (static_cast<int64_t>(ctx.base.workspace.size()) >= need) return Status::Ok();
  return Error(node.Describe() + ": needs " + std::to_string(need) + " bytes of workspace, has " +
               std::to_string(ctx.base.workspace.size()));
}

// send[i] = s * pad(p)[i], i < n_send (the CPU's `s * (i < numel ? p[i] : 0.0f)`).
__global__ void ScaleIntoShardsKernel(float* send, const float* p, float s, int64_t numel,
                                      int64_t n_send) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_send;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    send[i] = __fmul_rn(s, i < numel ? p[i] : 0.0f);
}

// sum[i] = (old ? old_i + recv_0[i] : recv_0[i]) + recv_1[i] + ... + recv_{N-1}[i], left to
// right; old_i = old[i] when old_begin + i < old_numel, else 0 (this rank's shard of a full
// gradient, zero-padded). `sum` may be `old` (the shard gradient accumulates in place).
__global__ void SumInRankOrderKernel(float* sum, const float* recv, const float* old,
                                     int64_t old_begin, int64_t old_numel, int64_t world,
                                     int64_t c) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    float g = recv[i];
    if (old) g = __fadd_rn(old_begin + i < old_numel ? old[old_begin + i] : 0.0f, g);
    for (int64_t r = 1; r < world; ++r) g = __fadd_rn(g, recv[r * c + i]);
    sum[i] = g;
  }
}

Status CopyPrefix(const Node& node, void* dst, const void* src, int64_t numel,
                  const CudaKernelContext& ctx) {
  FOUNDRY_CUDA_CHECK(node, cudaMemcpyAsync(dst, src, static_cast<size_t>(numel) * 4,
                                           cudaMemcpyDeviceToDevice, cuda::StreamOf(ctx)));
  return Status::Ok();
}

Status AllGatherKernel(const Node& node, std::span<const Tensor* const> inputs,
                       std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  RETURN_IF_ERROR(CheckAllGather(node, inputs, outputs, world));
  int64_t offset = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& shard = *inputs[i];
    Tensor& full = *outputs[i];
    const int64_t numel = full.numel(), c = shard.numel();
    if (numel == world * c) {
      RETURN_IF_ERROR(
          ctx.base.comm->AllGather(shard.raw(), full.raw(), c * 4).Prepend(node.Describe() + ": "));
      continue;
    }
    RETURN_IF_ERROR(Short(node, offset + world * c * 4, ctx));
    std::byte* gathered = ctx.base.workspace.data() + offset;
    offset += world * c * 4;
    RETURN_IF_ERROR(
        ctx.base.comm->AllGather(shard.raw(), gathered, c * 4).Prepend(node.Describe() + ": "));
    RETURN_IF_ERROR(CopyPrefix(node, full.raw(), gathered, numel, ctx));
  }
  return Status::Ok();
}

// Both gradient collectives: the scaled partial sent shard by shard (AllToAll), and this rank's
// shard of the rank-order sum written to `sum` (onto `old`'s shard when ctx.grad_accumulate).
Status ReduceShard(const Node& node, const Tensor& partial, int64_t world, int64_t c,
                   const CudaKernelContext& ctx, const float* old, int64_t old_begin,
                   int64_t old_numel, float* sum) {
  RETURN_IF_ERROR(Short(node, 2 * world * c * 4, ctx));
  float* send = reinterpret_cast<float*>(ctx.base.workspace.data());
  float* recv = reinterpret_cast<float*>(ctx.base.workspace.data() + world * c * 4);
  const int64_t n_send = world * c;
  if (n_send > 0) {
    ScaleIntoShardsKernel<<<cuda::BlocksFor(n_send), cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
        send, partial.data<float>(), ctx.base.grad_scale, partial.numel(), n_send);
    FOUNDRY_CUDA_LAUNCHED(node, "ScaleIntoShardsKernel");
  }
  RETURN_IF_ERROR(ctx.base.comm->AllToAll(send, recv, c * 4).Prepend(node.Describe() + ": "));
  if (c > 0) {
    SumInRankOrderKernel<<<cuda::BlocksFor(c), cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
        sum, recv, ctx.base.grad_accumulate ? old : nullptr, old_begin, old_numel, world, c);
    FOUNDRY_CUDA_LAUNCHED(node, "SumInRankOrderKernel");
  }
  return Status::Ok();
}

Status ReduceScatterGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                                   std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  RETURN_IF_ERROR(CheckReduceScatter(node, partial, grad, world));
  const int64_t c = grad.numel();
  float* g = grad.data<float>();
  return ReduceShard(node, partial, world, c, ctx, g, 0, c, g);
}

Status AllReduceGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                               std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  RETURN_IF_ERROR(CheckAllReduce(node, partial, grad));
  const int64_t numel = grad.numel();
  const int64_t c = ShardElements(numel, world);
  RETURN_IF_ERROR(Short(node, 3 * world * c * 4, ctx));
  // This rank's shard of the old gradient is read from `grad` itself (every rank holds it whole
  // and equal), before the gather below overwrites it.
  float* summed = reinterpret_cast<float*>(ctx.base.workspace.data());
  RETURN_IF_ERROR(ReduceShard(node, partial, world, c, ctx, grad.data<float>(),
                              ctx.base.comm->rank() * c, numel, summed));
  std::byte* gathered = ctx.base.workspace.data() + 2 * world * c * 4;
  RETURN_IF_ERROR(
      ctx.base.comm->AllGather(summed, gathered, c * 4).Prepend(node.Describe() + ": "));
  return numel > 0 ? CopyPrefix(node, grad.raw(), gathered, numel, ctx) : Status::Ok();
}

}  // namespace

void RegisterCudaCollectiveKernels(CudaKernelTable& table) {
  table.Add("foundry", "AllGather", AllGatherKernel);
  table.Add("foundry", "ReduceScatterGradient", ReduceScatterGradientKernel);
  table.Add("foundry", "AllReduceGradient", AllReduceGradientKernel);
}

// The CPU's figure (kernels/cpu/collective_workspace.cc): each region rounded up to 256 bytes. The
// slices above are packed without that rounding, so they lie inside it.
void RegisterCudaCollectiveWorkspaces(CudaWorkspaceTable& table) {
  for (const char* op : {"AllGather", "ReduceScatterGradient", "AllReduceGradient"})
    table.Add("foundry", op, CollectiveWorkspaceBytes);
}

}  // namespace foundry
