// The CPU reference backend: host memory from the accounting allocator, the kernels of
// kernels/cpu/, memcpy for copies.
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
  Status CopyIn(const Tensor& host, Tensor& device) override;
  Status CopyOut(const Tensor& device, Tensor& host) override;
  // The process's accounting (base/memory_accounting.h): CPU backend memory is host memory, so
  // tensors the runtime owns on the host are in the same figures.
  MemorySnapshot Bytes() const override;
  void ResetPeaks() override;

 protected:
  std::byte* AllocateBytes(int64_t bytes, MemoryClass c) override;
  void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) override;
};

// The process's CPU backend (stateless; one is enough).
CpuBackend& GetCpuBackend();

}  // namespace foundry
