#include "runtime/cpu_backend.h"

#include <cstring>

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

namespace {

Status CheckCopy(const Tensor& from, const Tensor& to, const char* direction) {
  if (from.dtype() != to.dtype() || from.shape() != to.shape())
    return Error(std::string("cpu backend: cannot copy ") + direction + " " +
                 TypeOf(from.dtype(), from.shape()) + " into " + TypeOf(to.dtype(), to.shape()));
  return Status::Ok();
}

}  // namespace

Status CpuBackend::CopyIn(const Tensor& host, Tensor& device) {
  RETURN_IF_ERROR(CheckCopy(host, device, "in"));
  if (host.nbytes() && host.raw() != device.raw())
    std::memcpy(device.raw(), host.raw(), host.nbytes());
  return Status::Ok();
}

Status CpuBackend::CopyOut(const Tensor& device, Tensor& host) {
  RETURN_IF_ERROR(CheckCopy(device, host, "out"));
  if (device.nbytes() && host.raw() != device.raw())
    std::memcpy(host.raw(), device.raw(), device.nbytes());
  return Status::Ok();
}

MemorySnapshot CpuBackend::Bytes() const { return MemoryUsage(); }

void CpuBackend::ResetPeaks() { ResetMemoryPeaks(); }

std::byte* CpuBackend::AllocateBytes(int64_t bytes, MemoryClass c) {
  return static_cast<std::byte*>(
      AllocateAccounted(static_cast<size_t>(bytes), static_cast<size_t>(kArenaAlignment), c));
}

void CpuBackend::FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) {
  FreeAccounted(p, static_cast<size_t>(bytes), c);
}

CpuBackend& GetCpuBackend() {
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

}  // namespace foundry
