// The CUDA backend: device memory from cudaMalloc (counted per memory class by the backend itself,
// like the CPU accounting), the kernels of kernels/cuda/ on one stream with one cuBLAS handle, and
// copies through that stream. Built when nvcc is present; without a GPU it cannot be created, and
// GetCudaBackend says why in one line.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backend.h"

namespace foundry {

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }
  bool host_memory() const override { return false; }
  int64_t WorkspaceBytes(const Graph& graph, const Node& node) const override;
  Status Run(const Node& node, std::span<const Tensor* const> inputs,
             std::span<Tensor* const> outputs, std::span<std::byte> workspace,
             const KernelContext& ctx) override;
  Status CopyIn(const Tensor& host, Tensor& device) override;
  Status CopyOut(const Tensor& device, Tensor& host) override;
  MemorySnapshot Bytes() const override;
  void ResetPeaks() override;

  // TF32 tensor cores in cuBLAS (foundry-run --tf32). Off: exact fp32 products.
  void set_tf32(bool on) { tf32_ = on; }
  void* stream() const { return stream_; }

 protected:
  std::byte* AllocateBytes(int64_t bytes, MemoryClass c) override;
  void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) override;

 private:
  friend StatusOr<CudaBackend*> GetCudaBackend();

  // The planner's backend specs for every backend this build has kernels for: cpu, and cuda when
  // the CUDA backend is built (its workspace figures need no GPU). foundry-compile plans a layout
  // for each.
  std::vector<BackendSpec> CompiledBackendSpecs();
  CudaBackend() = default;
  void Count(MemoryClass c, int64_t delta);

  void* stream_ = nullptr;
  void* cublas_ = nullptr;
  bool tf32_ = false;
  mutable std::mutex mu_;
  MemorySnapshot bytes_;
};

// The process's CUDA backend on device 0, created on first use. An error (one line, saying what to
// do) when the backend is not built or no GPU is usable.
StatusOr<CudaBackend*> GetCudaBackend();

// The planner's backend specs for every backend this build has kernels for: cpu, and cuda when the
// CUDA backend is built (its workspace figures need no GPU). foundry-compile plans a layout for
// each.
std::vector<BackendSpec> CompiledBackendSpecs();

}  // namespace foundry
