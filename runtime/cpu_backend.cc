#include "runtime/cpu_backend.h"

#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/grad_norm.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cpu/parallel.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

int64_t CpuBackend::WorkspaceBytes(const Graph& graph, const Node& node) const {
  return CpuWorkspaceBytes(graph, node);
}

Status CpuBackend::Run(const Node& node, std::span<const Tensor* const> inputs,
                       std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                       const KernelContext& ctx) {
  KernelContext c = ctx;
  c.workspace = workspace;
  return RunCpuKernel(node, inputs, outputs, c);
}

const void* CpuBackend::Prepare(const Node& node) const {
  return CpuKernels().Find(node.domain, node.op_type);
}

Status CpuBackend::RunPrepared(const void* prepared, const Node& node,
                               std::span<const Tensor* const> inputs,
                               std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                               const KernelContext& ctx) {
  if (!prepared) return Run(node, inputs, outputs, workspace, ctx);
  KernelContext c = ctx;
  c.workspace = workspace;
  return RunResolvedCpuKernel(*static_cast<const CpuKernelFn*>(prepared), node, inputs, outputs, c);
}

namespace {

Status CheckCopy(const Tensor& from, const Tensor& to, const char* direction) {
  if (from.dtype() != to.dtype() || from.shape() != to.shape())
    return Error(std::string("cpu backend: cannot copy ") + direction +
                 TypeOf(from.dtype(), from.shape()) + " into " + TypeOf(to.dtype(), to.shape()));
  return Status::Ok();
}

}  // namespace

Status CpuBackend::CopyIn(const Tensor& host, Tensor& device) {
  RETURN_IF_ERROR(CheckCopy(host, device, "in "));
  if (host.nbytes() && host.raw() != device.raw())
    std::memcpy(device.raw(), host.raw(), host.nbytes());
  return Status::Ok();
}

Status CpuBackend::CopyOut(const Tensor& device, Tensor& host) {
  RETURN_IF_ERROR(CheckCopy(device, host, "out "));
  if (device.nbytes() && host.raw() != device.raw())
    std::memcpy(host.raw(), device.raw(), device.nbytes());
  return Status::Ok();
}

Status CpuBackend::Copy(const Tensor& from, Tensor& to) {
  RETURN_IF_ERROR(CheckCopy(from, to, ""));
  if (from.nbytes() && from.raw() != to.raw()) std::memcpy(to.raw(), from.raw(), from.nbytes());
  return Status::Ok();
}

Status CpuBackend::Zero(Tensor& device) {
  if (device.nbytes()) std::memset(device.raw(), 0, device.nbytes());
  return Status::Ok();
}

namespace {

// Elements per chunk of the step's memory-bound passes (finite check, optimizer update): large
// enough that a chunk's cost dwarfs taking it, small enough that two threads share a tensor.
constexpr int64_t kUpdateGrain = int64_t{1} << 16;

// AllFinite over chunks of the tensor, on the kernels' threads (no allocation per chunk).
bool AllFiniteParallel(const Tensor& t) {
  if (t.dtype() != DType::kFloat32 || t.numel() <= kUpdateGrain) return AllFinite(t);
  std::atomic<bool> finite{true};
  const float* p = t.data<float>();
  ParallelFor(t.numel(), kUpdateGrain, [&](int64_t begin, int64_t end) {
    if (!AllFinite(DType::kFloat32, p + begin, end - begin))
      finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

}  // namespace

StatusOr<StepCheck> CpuBackend::CheckStep(const Tensor& loss,
                                          std::span<const Tensor* const> gradients, Region&) {
  StepCheck c;
  c.loss = static_cast<float>(loss.GetAsDouble(0));
  c.finite = AllFinite(loss);
  for (const Tensor* g : gradients) c.finite = c.finite && AllFiniteParallel(*g);
  return c;
}

StatusOr<std::optional<size_t>> CpuBackend::ApplyOptimizer(const OptimizerOptions& o, int64_t step,
                                                           std::span<const ParameterUpdate> updates,
                                                           Region&) {
  std::optional<size_t> first_non_finite;
  for (size_t i = 0; i < updates.size(); ++i) {
    const ParameterUpdate& u = updates[i];
    float* param = u.param->data<float>();
    const float* grad = u.grad->data<float>();
    float* m = u.m ? u.m->data<float>() : nullptr;
    float* v = u.v ? u.v->data<float>() : nullptr;
    // The update is elementwise: chunks give the same bits at any thread count.
    std::atomic<bool> finite{true};
    ParallelFor(u.param->numel(), kUpdateGrain, [&](int64_t b, int64_t e) {
      float* mb = m ? m + b : nullptr;
      bool ok;
      if (IsAdam(o.kind)) {
        ok = AdamWUpdate(o, step, param + b, grad + b, mb, v + b, e - b);
      } else {
        // The momentum buffer starts as the first update's gradient: the run's first update, or
        // the first after resuming a save made before any (no slots saved then).
        float* buf = o.momentum != 0 ? mb : nullptr;
        ok = SgdUpdate(o, step == 1, param + b, grad + b, buf, e - b);
      }
      if (!ok) finite.store(false, std::memory_order_relaxed);
    });
    if (!finite.load() && !first_non_finite) first_non_finite = i;
  }
  return first_non_finite;
}

StatusOr<float> CpuBackend::ClipGradNorm(std::span<Tensor* const> gradients, double max_norm,
                                         Region&) {
  std::vector<double> sums;
  sums.reserve(gradients.size());
  for (const Tensor* g : gradients) {
    if (g->dtype() != DType::kFloat32)
      return Error("cpu backend: a gradient is " + TypeOf(g->dtype(), g->shape()) +
                   "; the gradient norm reads f32 gradients only");
    sums.push_back(SumOfSquares(g->data<float>(), g->numel()));
  }
  const ClipScalars c = ClipScalarsFromSums(sums, max_norm);
  // clip_grad_norm_ multiplies by the clamped coefficient; by 1 changes no bit.
  if (max_norm > 0 && c.clip_coef != 1.0f)
    for (Tensor* g : gradients) ScaleInPlace(g->data<float>(), g->numel(), c.clip_coef);
  return c.total_norm;
}

MemorySnapshot CpuBackend::Bytes() const { return MemoryUsage(); }

void CpuBackend::ResetPeaks() { ResetMemoryPeaks(); }

StatusOr<std::byte*> CpuBackend::AllocateBytes(int64_t bytes, MemoryClass c) {
  void* p = AllocateAccounted(static_cast<size_t>(bytes), static_cast<size_t>(kArenaAlignment), c);
  if (!p) return Error("out of memory");
  return static_cast<std::byte*>(p);
}

void CpuBackend::FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) {
  FreeAccounted(p, static_cast<size_t>(bytes), c);
}

CpuBackend& GetCpuBackend() {
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

}  // namespace foundry
