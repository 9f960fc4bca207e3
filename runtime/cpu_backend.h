// The CPU reference backend: host memory from the accounting allocator, the kernels of
// kernels/cpu/ (the optimizer's included), memcpy for copies. A step's end reads the loss and
// checks finiteness in place: there is nothing to read back.
#pragma once

#include "runtime/backend.h"

namespace foundry {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  int64_t WorkspaceBytes(const Graph& graph, const Node& node) const override;
  Status Run(const Node& node, std::span<const Tensor* const> inputs,
             std::span<Tensor* const> outputs, std::span<std::byte> workspace,
             const KernelContext& ctx) override;
  // The node's CpuKernelFn (its row in CpuKernels()), null when there is none (Run then fails).
  const void* Prepare(const Node& node) const override;
  Status RunPrepared(const void* prepared, const Node& node, std::span<const Tensor* const> inputs,
                     std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                     const KernelContext& ctx) override;
  Status CopyIn(const Tensor& host, Tensor& device) override;
  Status CopyOut(const Tensor& device, Tensor& host) override;
  Status Copy(const Tensor& from, Tensor& to) override;
  Status Zero(Tensor& device) override;
  StatusOr<StepCheck> CheckStep(const Tensor& loss, std::span<const Tensor* const> gradients,
                                Region& status) override;
  StatusOr<std::optional<size_t>> ApplyOptimizer(const OptimizerOptions& o, int64_t step,
                                                 std::span<const ParameterUpdate> updates,
                                                 Region& status) override;
  StatusOr<float> ClipGradNorm(std::span<Tensor* const> gradients, double max_norm,
                               Region& scratch) override;
  // The process's accounting (base/memory_accounting.h): CPU backend memory is host memory, so
  // tensors the runtime owns on the host are in the same figures.
  MemorySnapshot Bytes() const override;
  void ResetPeaks() override;

 protected:
  StatusOr<std::byte*> AllocateBytes(int64_t bytes, MemoryClass c) override;
  void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) override;
};

// The process's CPU backend (stateless; one is enough).
CpuBackend& GetCpuBackend();

}  // namespace foundry
