// The CUDA backend: device memory from cudaMalloc (counted per memory class by the backend itself,
// like the CPU accounting), the kernels of kernels/cuda/ on one stream with one cuBLAS handle, and
// copies through that stream. With runtime/nccl_communicator.cc (which needs the device's
// stream) the only runtime file that reaches kernels/cuda/: the trainer and the executor see the
// Backend interface. Built when nvcc is present; without a GPU it cannot be
// created, and GetCudaBackend says why in one line.
//
// Everything runs in order on the one non-blocking work stream: zero-fills of new memory, copies,
// kernels, the step's checks and the optimizer. A device fault surfaces at the next wait (a copy
// back, the step's read-back) without naming the node that caused it; FOUNDRY_CUDA_SYNC=1 in the
// environment (read once, when the backend is created) waits after every node instead, so the
// error names the node and its op: "cuda: node 'mm' (MatMul): cudaStreamSynchronize failed: ...".
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
  std::vector<std::string> MissingKernels(const Graph& graph) const override;
  Status Run(const Node& node, std::span<const Tensor* const> inputs,
             std::span<Tensor* const> outputs, std::span<std::byte> workspace,
             const KernelContext& ctx) override;
  Status CopyIn(const Tensor& host, Tensor& device) override;
  Status CopyOut(const Tensor& device, Tensor& host) override;
  Status Copy(const Tensor& from, Tensor& to) override;
  Status Zero(Tensor& device) override;
  // int32 words: [0] the loss's bits, [1] the gradients' non-finite flag, [2 + i] the update flag
  // of parameter i.
  StatusOr<Region> AllocateStepStatus(int64_t num_parameters) override;
  StatusOr<StepCheck> CheckStep(const Tensor& loss, std::span<const Tensor* const> gradients,
                                Region& status) override;
  StatusOr<std::optional<size_t>> ApplyOptimizer(const OptimizerOptions& o, int64_t step,
                                                 std::span<const ParameterUpdate> updates,
                                                 Region& status) override;
  // Device scratch for the block partials (kernels/cuda/grad_norm.h); the norm is read back
  // (4 bytes) when the call returns.
  StatusOr<Region> AllocateGradNormScratch(std::span<const Tensor* const> gradients) override;
  StatusOr<float> ClipGradNorm(std::span<Tensor* const> gradients, double max_norm,
                               Region& scratch) override;
  MemorySnapshot Bytes() const override;
  void ResetPeaks() override;

  // TF32 tensor cores in cuBLAS (foundry-run --tf32). Off: exact fp32 products.
  void set_tf32(bool on) { tf32_ = on; }
  // FOUNDRY_CUDA_SYNC=1: Run waits for every node and names the one that faulted.
  bool sync_each_node() const { return sync_; }
  // The work stream (a cudaStream_t): a device communicator (runtime/nccl_communicator.h) enqueues
  // its collectives on it, in order with the kernels.
  void* stream() const { return stream_; }

 protected:
  StatusOr<std::byte*> AllocateBytes(int64_t bytes, MemoryClass c) override;
  void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) override;

 private:
  friend StatusOr<CudaBackend*> GetCudaBackend();

  CudaBackend() = default;
  void Count(MemoryClass c, int64_t delta);

  void* stream_ = nullptr;
  void* cublas_ = nullptr;
  bool tf32_ = false;
  bool sync_ = false;
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

// FOUNDRY_CUDA_SYNC's value (null: unset): on for "1" only.
bool CudaSyncRequested(const char* value);
// A fault found by waiting after `node`, named as FOUNDRY_CUDA_SYNC reports it:
// "cuda: node 'mm' (MatMul): <the CUDA error>".
Status CudaNodeFault(const Node& node, const Status& cuda_error);

}  // namespace foundry
