// The collective ops of data-parallel training on the CPU (the contract is
// docs/design.md §10 and the schemas in compiler/ops): they move bytes through ctx.comm
// (kernels/cpu/communicator.h; MPI on the host) and add in rank order themselves, so the sums
// never depend on the transport. N = ctx.comm->size() (it must equal the node's world_size), r its
// rank, c = ceil(numel / N) a shard's elements; rank r's shard of a flat tensor x is
// x[r*c, (r+1)*c), zero-padded past numel. T is the shard's (partial's) element type, f32 or
// bf16, e its bytes.
//
// Buckets (kernels/cpu/collective.h): each op runs through the shard in chunks of
// b = CollectiveChunkElements(c, N, e) elements, [k0, k0 + bk) with bk = min(b, c - k0); one
// exchange per chunk moves N*bk elements. The workspace is sliced as
// kernels/cpu/collective_workspace.cc plans it (CollectiveWorkspaceBytes): regions in order, each
// R = CollectiveRegionBytes(c, N, e) bytes (N*b*e rounded up to 256, at most one bucket).
//
//  - foundry::AllGather(shard_1..shard_k) -> (full_1..full_k): full_i = concat over ranks of
//    shard_i, its first numel_i elements; bytes only. Gathered straight into the output when
//    numel_i = N*c_i; otherwise chunk by chunk into the one region at 0 (rank r's chunk lands at
//    r*bk), its elements below numel_i copied to r*c_i + k0.
//  - foundry::ReduceScatterGradient(partial) -> grad [c] f32. Per chunk:
//    send_j = T(s * pad(partial)[j*c + k0, j*c + k0 + bk)) for j = 0..N-1 (s = ctx.grad_scale, the
//    product in f32, rounded to bf16 when T is), exchanged (AllToAll) into recv_0..recv_{N-1};
//    then for each i < bk, with g = grad[k0 + i]:
//      f32:  g = recv_0 (or g + recv_0 when ctx.grad_accumulate); g = g + recv_r, r = 1..N-1
//      bf16: t = recv_0; t = bf16(t + recv_r), r = 1..N-1; g = f32(t) (or g + f32(t))
//    every add in f32, rounded (no FMA: the build contracts nothing). In f32, with global
//    microbatch j = k*N + r, this is bit for bit foundry::AccumulateGradient over N*K microbatches
//    in one process. Workspace: [send R][recv R].
//  - foundry::AllReduceGradient(partial) -> grad (full shape) f32: per chunk the same exchange,
//    this rank's sums of the chunk written (as T) to the send region's front, all-gathered into
//    the third region and applied to grad at r*c + k0 + i below numel: f32 gathers g itself (its
//    old value read from this rank's shard of grad, which every rank holds whole and equal,
//    zero past numel); bf16 gathers t, and every rank then forms g = f32(t) (or g + f32(t)).
//    A chunk reads and writes only offsets [k0, k0 + bk) of each rank's shard of grad, so it
//    never overwrites an old value a later chunk reads. Workspace: [send R][recv R][gathered R].
// With N = 1 (no plan has such nodes) nothing is exchanged: the same arithmetic runs without the
// workspace.
#include "kernels/cpu/collective.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/bfloat16.h"
#include "compiler/sharding.h"
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

namespace {

bool F32OrBf16(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16; }

// "12 elements of bf16"
std::string Elements(const Tensor& t) {
  return std::to_string(t.numel()) + " elements of " + std::string(DTypeName(t.dtype()));
}

}  // namespace

Status CheckAllGather(const Node& node, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs, int64_t world) {
  if (inputs.size() != outputs.size())
    return Error(node.Describe() + ": one output per input shard, not " +
                 std::to_string(outputs.size()) + " for " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& shard = *inputs[i];
    const Tensor& full = *outputs[i];
    if (!F32OrBf16(shard.dtype()) || full.dtype() != shard.dtype() ||
        shard.numel() != ShardElements(full.numel(), world))
      return Error(node.Describe() + ": input " + std::to_string(i) + " is " + Elements(shard) +
                   " for an output of " + Elements(full) +
                   "; a shard is f32 or bf16, of its output's type, with ceil(numel / " +
                   std::to_string(world) + ") elements");
  }
  return Status::Ok();
}

Status CheckReduceScatter(const Node& node, const Tensor& partial, const Tensor& grad,
                          int64_t world) {
  if (!F32OrBf16(partial.dtype()) || grad.dtype() != DType::kFloat32 ||
      grad.numel() != ShardElements(partial.numel(), world))
    return Error(node.Describe() + ": reduces a partial of " + Elements(partial) +
                 " into a shard of " + Elements(grad) +
                 "; the partial is f32 or bf16, the shard f32 with ceil(numel / " +
                 std::to_string(world) + ") elements");
  return Status::Ok();
}

Status CheckAllReduce(const Node& node, const Tensor& partial, const Tensor& grad) {
  if (!F32OrBf16(partial.dtype()) || grad.dtype() != DType::kFloat32 ||
      partial.numel() != grad.numel())
    return Error(node.Describe() + ": reduces a partial of " + Elements(partial) +
                 " into a gradient of " + Elements(grad) +
                 "; the partial is f32 or bf16, the gradient f32 of its size");
  return Status::Ok();
}

bool IsCollectiveOp(const Node& node) {
  return node.domain == "foundry" &&
         (node.op_type == "AllGather" || node.op_type == "ReduceScatterGradient" ||
          node.op_type == "AllReduceGradient");
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
  std::byte* bucket = WorkspaceArray<std::byte>(ctx);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& shard = *inputs[i];
    Tensor& full = *outputs[i];
    const int64_t numel = full.numel(), c = shard.numel();
    const int64_t e = CollectiveElementBytes(shard.dtype());
    if (numel == world * c) {
      RETURN_IF_ERROR(
          ctx.comm->AllGather(shard.raw(), full.raw(), c * e).Prepend(node.Describe() + ": "));
      continue;
    }
    const int64_t b = CollectiveChunkElements(c, world, e);
    const auto* src = static_cast<const std::byte*>(shard.raw());
    auto* dst = static_cast<std::byte*>(full.raw());
    for (int64_t k0 = 0; k0 < c; k0 += b) {
      const int64_t bk = std::min(b, c - k0);
      RETURN_IF_ERROR(
          ctx.comm->AllGather(src + k0 * e, bucket, bk * e).Prepend(node.Describe() + ": "));
      for (int64_t r = 0; r < world; ++r) {
        const int64_t at = r * c + k0, n = std::min(bk, numel - at);
        if (n > 0) std::memcpy(dst + at * e, bucket + r * bk * e, static_cast<size_t>(n * e));
      }
    }
  }
  return Status::Ok();
}

float Widen(float x) { return x; }
float Widen(uint16_t x) { return Bf16ToFloat(x); }
template <class T>
T Narrow(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return FloatToBf16(x);
}

// send[j*bk + i] = T(s * pad(p)[j*c + k0 + i]) for j < world, i < bk: this rank's scaled partial,
// the chunk's slice of every rank's shard.
template <class T>
void ScaleIntoSend(T* send, const T* p, int64_t numel, float s, int64_t world, int64_t c,
                   int64_t k0, int64_t bk) {
  for (int64_t j = 0; j < world; ++j) {
    const int64_t base = j * c + k0;
    T* out = send + j * bk;
    ParallelFor(bk, kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        out[i] = Narrow<T>(s * (base + i < numel ? Widen(p[base + i]) : 0.0f));
    });
  }
}

// Element i of the chunk summed over the N received blocks of bk elements, in rank order: in f32
// onto `old` when `accumulate` (recv_0 first otherwise).
float SumInRankOrder(const float* recv, int64_t world, int64_t bk, int64_t i, bool accumulate,
                     float old) {
  float g = accumulate ? old + recv[i] : recv[i];
  for (int64_t r = 1; r < world; ++r) g = g + recv[r * bk + i];
  return g;
}
// In bf16: t = recv_0, t = bf16(t + recv_r); the result t alone.
uint16_t Bf16SumInRankOrder(const uint16_t* recv, int64_t world, int64_t bk, int64_t i) {
  uint16_t t = recv[i];
  for (int64_t r = 1; r < world; ++r)
    t = FloatToBf16(Bf16ToFloat(t) + Bf16ToFloat(recv[r * bk + i]));
  return t;
}
// f32(t) onto the f32 gradient's old value.
float AddBf16Sum(uint16_t t, bool accumulate, float old) {
  return accumulate ? old + Bf16ToFloat(t) : Bf16ToFloat(t);
}
float SumInRankOrder(const uint16_t* recv, int64_t world, int64_t bk, int64_t i, bool accumulate,
                     float old) {
  return AddBf16Sum(Bf16SumInRankOrder(recv, world, bk, i), accumulate, old);
}

// ReduceScatterGradient on partials of T: this rank's shard of the sum into `grad` [c].
template <class T>
Status ReduceScatter(const Node& node, const T* p, int64_t numel, int64_t world, int64_t c,
                     const KernelContext& ctx, float* grad) {
  const float s = ctx.grad_scale;
  const bool accumulate = ctx.grad_accumulate;
  if (world == 1) {  // one rank: its own scaled partial, without an exchange or the workspace
    ParallelFor(c, kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T sent = Narrow<T>(s * Widen(p[i]));
        grad[i] = SumInRankOrder(&sent, 1, 1, 0, accumulate, grad[i]);
      }
    });
    return Status::Ok();
  }
  const int64_t e = sizeof(T), b = CollectiveChunkElements(c, world, e);
  T* send = WorkspaceArray<T>(ctx);
  T* recv = WorkspaceArray<T>(ctx, CollectiveRegionBytes(c, world, e));
  for (int64_t k0 = 0; k0 < c; k0 += b) {
    const int64_t bk = std::min(b, c - k0);
    ScaleIntoSend(send, p, numel, s, world, c, k0, bk);
    RETURN_IF_ERROR(ctx.comm->AllToAll(send, recv, bk * e).Prepend(node.Describe() + ": "));
    float* g = grad + k0;
    ParallelFor(bk, kElementGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) g[i] = SumInRankOrder(recv, world, bk, i, accumulate, g[i]);
    });
  }
  return Status::Ok();
}

// AllReduceGradient on partials of T: every rank's grad [numel] the whole sum.
template <class T>
Status AllReduce(const Node& node, const T* p, int64_t numel, int64_t world,
                 const KernelContext& ctx, float* grad) {
  const int64_t c = ShardElements(numel, world);
  if (world == 1) return ReduceScatter(node, p, numel, world, c, ctx, grad);
  const float s = ctx.grad_scale;
  const bool accumulate = ctx.grad_accumulate;
  const int64_t e = sizeof(T), b = CollectiveChunkElements(c, world, e);
  const int64_t region = CollectiveRegionBytes(c, world, e);
  T* send = WorkspaceArray<T>(ctx);
  T* recv = WorkspaceArray<T>(ctx, region);
  T* gathered = WorkspaceArray<T>(ctx, 2 * region);
  T* summed = send;  // the send region's front, free once exchanged
  const int64_t mine = ctx.comm->rank() * c;
  for (int64_t k0 = 0; k0 < c; k0 += b) {
    const int64_t bk = std::min(b, c - k0);
    ScaleIntoSend(send, p, numel, s, world, c, k0, bk);
    RETURN_IF_ERROR(ctx.comm->AllToAll(send, recv, bk * e).Prepend(node.Describe() + ": "));
    ParallelFor(bk, kElementGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          const int64_t at = mine + k0 + i;
          summed[i] = SumInRankOrder(recv, world, bk, i, accumulate, at < numel ? grad[at] : 0.0f);
        } else {
          summed[i] = Bf16SumInRankOrder(recv, world, bk, i);
        }
      }
    });
    RETURN_IF_ERROR(ctx.comm->AllGather(summed, gathered, bk * e).Prepend(node.Describe() + ": "));
    for (int64_t r = 0; r < world; ++r) {
      const int64_t at = r * c + k0, n = std::min(bk, numel - at);
      const T* from = gathered + r * bk;
      float* g = grad + at;
      ParallelFor(n, kElementGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          if constexpr (std::is_same_v<T, float>)
            g[i] = from[i];
          else
            g[i] = AddBf16Sum(from[i], accumulate, g[i]);
        }
      });
    }
  }
  return Status::Ok();
}

Status ReduceScatterGradientKernel(const Node& node, std::span<const Tensor* const> inputs,
                                   std::span<Tensor* const> outputs, const KernelContext& ctx) {
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
                               std::span<Tensor* const> outputs, const KernelContext& ctx) {
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

void RegisterCollectiveKernels(CpuKernelTable& table) {
  table.Add("foundry", "AllGather", AllGatherKernel);
  table.Add("foundry", "ReduceScatterGradient", ReduceScatterGradientKernel);
  table.Add("foundry", "AllReduceGradient", AllReduceGradientKernel);
}

}  // namespace foundry
