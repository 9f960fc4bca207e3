// The collective ops of data-parallel training on CUDA (the contract is
// docs/design.md §10): the GPU twins of kernels/cpu/collective.cc, bit for bit, in the same
// buckets. They move bytes through ctx.base.comm, which must be a device communicator
// (runtime/nccl_communicator.h: NCCL on this stream), and add in rank order themselves. N =
// comm->size() (= the node's world_size), r its rank, c = ceil(numel / N); rank r's shard of a
// flat x is x[r*c, (r+1)*c), zero-padded past numel. T is the shard's (partial's) type, f32 or
// bf16 (base/bfloat16.h's conversions, the CPU's), e its bytes. Products are rounded with
// __fmul_rn and sums with __fadd_rn, so nvcc fuses nothing into an FMA (the CPU kernel contracts
// nothing either); one thread per element, the ranks summed in order inside it; no atomics.
//
// Each op runs through the shard in chunks [k0, k0 + bk) of b = CollectiveChunkElements(c, N, e)
// elements (kernels/cpu/collective.h), one exchange of N*bk elements per chunk. Workspace (device
// memory, planned in the arena: CollectiveWorkspaceBytes), sliced as on the CPU, each region
// R = CollectiveRegionBytes(c, N, e) bytes (at most kCollectiveBucketBytes):
//  - AllGather: an output with numel_i == N*c_i is gathered straight into itself; any other
//    chunk by chunk into the region at 0, rank r's chunk at r*bk, the elements below numel_i
//    copied to r*c_i + k0.
//  - ReduceScatterGradient: [send R][recv R]; the shard's sums written onto grad[k0 + i].
//  - AllReduceGradient: [send R][recv R][gathered R]; this rank's sums of the chunk (f32: g
//    itself, onto its old value read from grad; bf16: t) in the send region's front, gathered,
//    then applied at r*c + k0 + i below numel (f32: copied; bf16: g = f32(t) or g + f32(t)).
#include <algorithm>
#include <string>
#include <type_traits>

#include "base/bfloat16.h"
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

__device__ inline float Widen(float x) { return x; }
__device__ inline float Widen(uint16_t x) { return Bf16ToFloat(x); }
template <class T>
__device__ inline T Narrow(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return FloatToBf16(x);
}

// dst[r*c + k0 + i] = bucket[r*bk + i] below numel: a gathered chunk into the full tensor. U is
// an unsigned integer of the element's size (bytes are moved, never converted).
template <class U>
__global__ void ScatterChunkKernel(U* dst, const U* bucket, int64_t numel, int64_t world, int64_t c,
                                   int64_t k0, int64_t bk) {
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < world * bk;
       x += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t at = (x / bk) * c + k0 + x % bk;
    if (at < numel) dst[at] = bucket[x];
  }
}

// send[j*bk + i] = T(s * pad(p)[j*c + k0 + i]) (the CPU's ScaleIntoSend).
template <class T>
__global__ void ScaleIntoSendKernel(T* send, const T* p, float s, int64_t numel, int64_t world,
                                    int64_t c, int64_t k0, int64_t bk) {
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < world * bk;
       x += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t at = (x / bk) * c + k0 + x % bk;
    send[x] = Narrow<T>(__fmul_rn(s, at < numel ? Widen(p[at]) : 0.0f));
  }
}

// Element i of the chunk over the N received blocks, in rank order. f32: onto `old` when
// accumulating (recv_0 first otherwise). bf16: t = recv_0, t = bf16(t + recv_r).
__device__ inline float SumInRankOrder(const float* recv, int64_t world, int64_t bk, int64_t i,
                                       bool accumulate, float old) {
  float g = accumulate ? __fadd_rn(old, recv[i]) : recv[i];
  for (int64_t r = 1; r < world; ++r) g = __fadd_rn(g, recv[r * bk + i]);
  return g;
}
__device__ inline uint16_t Bf16SumInRankOrder(const uint16_t* recv, int64_t world, int64_t bk,
                                              int64_t i) {
  uint16_t t = recv[i];
  for (int64_t r = 1; r < world; ++r)
    t = FloatToBf16(__fadd_rn(Bf16ToFloat(t), Bf16ToFloat(recv[r * bk + i])));
  return t;
}
__device__ inline float AddBf16Sum(uint16_t t, bool accumulate, float old) {
  return accumulate ? __fadd_rn(old, Bf16ToFloat(t)) : Bf16ToFloat(t);
}

// ReduceScatterGradient's chunk: g[i] = the sum of element i, onto g[i] when accumulating.
template <class T>
__global__ void ReduceIntoShardKernel(float* g, const T* recv, int64_t world, int64_t bk,
                                      bool accumulate) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bk;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    if constexpr (std::is_same_v<T, float>)
      g[i] = SumInRankOrder(recv, world, bk, i, accumulate, g[i]);
    else
      g[i] = AddBf16Sum(Bf16SumInRankOrder(recv, world, bk, i), accumulate, g[i]);
  }
}

// AllReduceGradient's chunk, before the gather: summed[i] = f32: g onto grad[mine + i] (0 past
// numel); bf16: t.
template <class T>
__global__ void SumShardChunkKernel(T* summed, const T* recv, const float* grad, int64_t mine,
                                    int64_t numel, int64_t world, int64_t bk, bool accumulate) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bk;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    if constexpr (std::is_same_v<T, float>)
      summed[i] =
          SumInRankOrder(recv, world, bk, i, accumulate, mine + i < numel ? grad[mine + i] : 0.0f);
    else
      summed[i] = Bf16SumInRankOrder(recv, world, bk, i);
  }
}

// AllReduceGradient's chunk, after the gather: grad[r*c + k0 + i] from gathered[r*bk + i] below
// numel (f32: the sum itself; bf16: f32(t), onto grad when accumulating).
template <class T>
__global__ void ApplyGatheredKernel(float* grad, const T* gathered, int64_t numel, int64_t world,
                                    int64_t c, int64_t k0, int64_t bk, bool accumulate) {
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < world * bk;
       x += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t at = (x / bk) * c + k0 + x % bk;
    if (at >= numel) continue;
    if constexpr (std::is_same_v<T, float>)
      grad[at] = gathered[x];
    else
      grad[at] = AddBf16Sum(gathered[x], accumulate, grad[at]);
  }
}

template <class U>
Status ScatterChunk(const Node& node, void* dst, const std::byte* bucket, int64_t numel,
                    int64_t world, int64_t c, int64_t k0, int64_t bk, cudaStream_t stream) {
  ScatterChunkKernel<U><<<cuda::BlocksFor(world * bk), cuda::kThreads, 0, stream>>>(
      static_cast<U*>(dst), reinterpret_cast<const U*>(bucket), numel, world, c, k0, bk);
  FOUNDRY_CUDA_LAUNCHED(node, "ScatterChunkKernel");
  return Status::Ok();
}

Status AllGatherKernel(const Node& node, std::span<const Tensor* const> inputs,
                       std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  RETURN_IF_ERROR(CheckAllGather(node, inputs, outputs, world));
  std::byte* bucket = ctx.base.workspace.data();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& shard = *inputs[i];
    Tensor& full = *outputs[i];
    const int64_t numel = full.numel(), c = shard.numel();
    const int64_t e = CollectiveElementBytes(shard.dtype());
    if (numel == world * c) {
      RETURN_IF_ERROR(
          ctx.base.comm->AllGather(shard.raw(), full.raw(), c * e).Prepend(node.Describe() + ": "));
      continue;
    }
    const int64_t b = CollectiveChunkElements(c, world, e);
    const auto* src = static_cast<const std::byte*>(shard.raw());
    for (int64_t k0 = 0; k0 < c; k0 += b) {
      const int64_t bk = std::min(b, c - k0);
      RETURN_IF_ERROR(
          ctx.base.comm->AllGather(src + k0 * e, bucket, bk * e).Prepend(node.Describe() + ": "));
      RETURN_IF_ERROR(e == 2 ? ScatterChunk<uint16_t>(node, full.raw(), bucket, numel, world, c, k0,
                                                      bk, cuda::StreamOf(ctx))
                             : ScatterChunk<uint32_t>(node, full.raw(), bucket, numel, world, c, k0,
                                                      bk, cuda::StreamOf(ctx)));
    }
  }
  return Status::Ok();
}

// This rank's scaled partial for chunk [k0, k0 + bk), exchanged: send at the workspace's start,
// what every rank sent this one in `recv`.
template <class T>
Status ExchangeChunk(const Node& node, const T* p, int64_t numel, int64_t world, int64_t c,
                     int64_t k0, int64_t bk, const CudaKernelContext& ctx, T* send, T* recv) {
  ScaleIntoSendKernel<T><<<cuda::BlocksFor(world * bk), cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
      send, p, ctx.base.grad_scale, numel, world, c, k0, bk);
  FOUNDRY_CUDA_LAUNCHED(node, "ScaleIntoSendKernel");
  return ctx.base.comm->AllToAll(send, recv, bk * static_cast<int64_t>(sizeof(T)))
      .Prepend(node.Describe() + ": ");
}

template <class T>
Status ReduceScatter(const Node& node, const T* p, int64_t numel, int64_t world, int64_t c,
                     const CudaKernelContext& ctx, float* grad) {
  const int64_t e = sizeof(T), b = CollectiveChunkElements(c, world, e);
  T* send = reinterpret_cast<T*>(ctx.base.workspace.data());
  T* recv = reinterpret_cast<T*>(ctx.base.workspace.data() + CollectiveRegionBytes(c, world, e));
  for (int64_t k0 = 0; k0 < c; k0 += b) {
    const int64_t bk = std::min(b, c - k0);
    RETURN_IF_ERROR(ExchangeChunk(node, p, numel, world, c, k0, bk, ctx, send, recv));
    ReduceIntoShardKernel<T><<<cuda::BlocksFor(bk), cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
        grad + k0, recv, world, bk, ctx.base.grad_accumulate);
    FOUNDRY_CUDA_LAUNCHED(node, "ReduceIntoShardKernel");
  }
  return Status::Ok();
}

template <class T>
Status AllReduce(const Node& node, const T* p, int64_t numel, int64_t world,
                 const CudaKernelContext& ctx, float* grad) {
  const int64_t c = ShardElements(numel, world);
  const int64_t e = sizeof(T), b = CollectiveChunkElements(c, world, e);
  const int64_t region = CollectiveRegionBytes(c, world, e);
  T* send = reinterpret_cast<T*>(ctx.base.workspace.data());
  T* recv = reinterpret_cast<T*>(ctx.base.workspace.data() + region);
  T* gathered = reinterpret_cast<T*>(ctx.base.workspace.data() + 2 * region);
  T* summed = send;  // the send region's front, free once exchanged
  const int64_t mine = ctx.base.comm->rank() * c;
  const bool accumulate = ctx.base.grad_accumulate;
  cudaStream_t stream = cuda::StreamOf(ctx);
  for (int64_t k0 = 0; k0 < c; k0 += b) {
    const int64_t bk = std::min(b, c - k0);
    RETURN_IF_ERROR(ExchangeChunk(node, p, numel, world, c, k0, bk, ctx, send, recv));
    SumShardChunkKernel<T><<<cuda::BlocksFor(bk), cuda::kThreads, 0, stream>>>(
        summed, recv, grad, mine + k0, numel, world, bk, accumulate);
    FOUNDRY_CUDA_LAUNCHED(node, "SumShardChunkKernel");
    RETURN_IF_ERROR(
        ctx.base.comm->AllGather(summed, gathered, bk * e).Prepend(node.Describe() + ": "));
    ApplyGatheredKernel<T><<<cuda::BlocksFor(world * bk), cuda::kThreads, 0, stream>>>(
        grad, gathered, numel, world, c, k0, bk, accumulate);
    FOUNDRY_CUDA_LAUNCHED(node, "ApplyGatheredKernel");
  }
  return Status::Ok();
}

Status ReduceScatterGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                                   std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  RETURN_IF_ERROR(CheckReduceScatter(node, partial, grad, world));
  if (partial.dtype() == DType::kBFloat16)
    return ReduceScatter(node, partial.data<uint16_t>(), partial.numel(), world, grad.numel(), ctx,
                         grad.data<float>());
  return ReduceScatter(node, partial.data<float>(), partial.numel(), world, grad.numel(), ctx,
                       grad.data<float>());
}

Status AllReduceGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                               std::span<Tensor* const> outputs, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t world, WorldOf(node, ctx));
  const Tensor& partial = *inputs[0];
  Tensor& grad = *outputs[0];
  RETURN_IF_ERROR(CheckAllReduce(node, partial, grad));
  if (partial.dtype() == DType::kBFloat16)
    return AllReduce(node, partial.data<uint16_t>(), partial.numel(), world, ctx,
                     grad.data<float>());
  return AllReduce(node, partial.data<float>(), partial.numel(), world, ctx, grad.data<float>());
}

}  // namespace

void RegisterCudaCollectiveKernels(CudaKernelTable& table) {
  table.Add("foundry", "AllGather", AllGatherKernel);
  table.Add("foundry", "ReduceScatterGradient", ReduceScatterGradientKernel);
  table.Add("foundry", "AllReduceGradient", AllReduceGradientKernel);
}

// The CPU's figure (kernels/cpu/collective_workspace.cc), sliced the same way above.
void RegisterCudaCollectiveWorkspaces(CudaWorkspaceTable& table) {
  for (const char* op : {"AllGather", "ReduceScatterGradient", "AllReduceGradient"})
    table.Add("foundry", op, CollectiveWorkspaceBytes);
}

}  // namespace foundry
