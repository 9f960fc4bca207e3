// The backend interface (docs/design.md §7): everything the runtime does on a device goes through it, so
// nothing above it (the executor, the trainer) knows which device it runs on. The CPU backend
// (runtime/cpu_backend.h) and the CUDA backend (runtime/cuda_backend.h) implement it; nothing in
// here assumes the backend's memory is host memory.
//
//  - name(), WorkspaceBytes(), MissingKernels(): the planner's BackendSpec
//  (compiler/memory_plan.h),
//    so a plan's layout for this backend has room for its kernels' scratch, and the ops it has no
//    kernel for;
//  - Allocate(): a region of backend memory (kArenaAlignment-aligned), counted under a memory
//    class; the region frees itself;
//  - Run(): one node on tensors that are views of backend memory, with the node's workspace;
//  - CopyIn()/CopyOut(), Copy(), Zero(): bytes between host and backend tensors, between two
//    backend tensors, and zeroes;
//  - CheckStep() and ApplyOptimizer(): the end of a training step, on the backend's memory: the
//    loss and whether it and the gradients are finite (one read-back), then the optimizer update
//    of every parameter with its own non-finite check; ClipGradNorm(): the gradients' global norm,
//    and clipping by it;
//  - Bytes(): live and high-water bytes per memory class.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/memory_accounting.h"
#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/memory_plan.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/optimizer.h"

namespace foundry {

class Backend;

// Backend memory from Backend::Allocate, returned to it on destruction. Move-only.
class Region {
 public:
  Region() = default;
  Region(Region&& other) noexcept { *this = std::move(other); }
  Region& operator=(Region&& other) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { Reset(); }

  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemoryClass memory_class() const { return class_; }
  void Reset();

 private:
  friend class Backend;
  Backend* backend_ = nullptr;
  std::byte* data_ = nullptr;
  int64_t bytes_ = 0;
  MemoryClass class_ = MemoryClass::kOther;
};

// One parameter's operands of an optimizer update, all in the backend's memory, f32 and of the
// parameter's shape.
struct ParameterUpdate {
  Tensor* param = nullptr;  // updated in place
  const Tensor* grad = nullptr;
  Tensor* m = nullptr;  // AdamW exp_avg / SGD momentum buffer; null when the optimizer keeps none
  Tensor* v = nullptr;  // AdamW exp_avg_sq
};

// What a step's end reads back from the backend.
struct StepCheck {
  float loss = 0;
  bool finite = true;  // the loss and every gradient
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // Scratch bytes this backend's kernel needs for `node` (types in `graph` concrete).
  virtual int64_t WorkspaceBytes(const Graph& graph, const Node& node) const = 0;
  // name() and WorkspaceBytes() as the planner takes them; the backend must outlive the spec.
  BackendSpec Spec() const;
  // The ops of `graph` this backend has no kernel for (sorted, each once); empty: it runs them all.
  virtual std::vector<std::string> MissingKernels(const Graph& graph) const { return {}; }

  // `bytes` of backend memory (zero-filled, kArenaAlignment-aligned), counted under `c`. `what`
  // names the use in the error ("the arena", "gradient 'w_grad'"), which carries the backend's
  // reason: "cannot allocate 1024 bytes for the arena on cpu: out of memory".
  StatusOr<Region> Allocate(int64_t bytes, MemoryClass c, std::string_view what);

  // Runs `node`: inputs and outputs are tensors in this backend's memory (null for an omitted
  // input), `workspace` at least WorkspaceBytes(graph, node) bytes of it. `ctx.workspace` is
  // ignored: the backend passes `workspace` on. Errors name the node.
  virtual Status Run(const Node& node, std::span<const Tensor* const> inputs,
                     std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                     const KernelContext& ctx) = 0;

  // The planned executor's fast path: what Run would look up for `node` (its kernel), resolved
  // once before the steps, or null where the backend resolves nothing. RunPrepared(Prepare(node),
  // ...) is Run(node, ...) without the lookup and without the checks the executor has already
  // made at Create (workspace size against the plan, tensor types against the graph): a step
  // does no string work, no table lookup and no allocation per node.
  virtual const void* Prepare(const Node& node) const { return nullptr; }
  virtual Status RunPrepared(const void* prepared, const Node& node,
                             std::span<const Tensor* const> inputs,
                             std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                             const KernelContext& ctx) {
    return Run(node, inputs, outputs, workspace, ctx);
  }

  // Host tensor -> backend tensor and back; dtype and shape must match (an error says which).
  virtual Status CopyIn(const Tensor& host, Tensor& device) = 0;
  virtual Status CopyOut(const Tensor& device, Tensor& host) = 0;
  // Backend tensor -> backend tensor (dtype and shape must match), and all bytes of one to zero.
  // Ordered after the work before them, like every call here.
  virtual Status Copy(const Tensor& from, Tensor& to) = 0;
  virtual Status Zero(Tensor& device) = 0;

  // `device` readable on the host: a view of it when the backend's memory is host memory (valid
  // as long as `device`), else a host copy. For reading without a copy where none is needed.
  StatusOr<Tensor> ReadableOnHost(const Tensor& device);
  // Where the host writes the bytes of `device`: `device` itself (a view) when the host can,
  // else a new host tensor of its type. CopyIn(HostStaging(d), d) then moves them (on the host
  // it copies nothing: the bytes are already there).
  Tensor HostStaging(Tensor& device) const;

  // ---- the end of a training step ----
  // The backend memory CheckStep and ApplyOptimizer read back through, for `num_parameters`
  // parameters (the CPU: none, an empty region). Allocated once, before the steps, so that a
  // step allocates nothing; each trainer has its own (a backend is shared by the process).
  virtual StatusOr<Region> AllocateStepStatus(int64_t num_parameters) { return Region(); }
  // The loss (a float scalar; on CUDA f32) and whether it and every gradient are finite, read in
  // one round trip. `status` from AllocateStepStatus.
  virtual StatusOr<StepCheck> CheckStep(const Tensor& loss,
                                        std::span<const Tensor* const> gradients,
                                        Region& status) = 0;
  // One optimizer update of every parameter, in place, in fp32, bitwise the updates of
  // kernels/cpu/optimizer.h; `step` counts it (1 = the first, which starts SGD's momentum
  // buffer). Returns the index in `updates` of the first parameter the update made non-finite
  // (nullopt: every one is finite). The caller checked the operands' types.
  virtual StatusOr<std::optional<size_t>> ApplyOptimizer(const OptimizerOptions& o, int64_t step,
                                                         std::span<const ParameterUpdate> updates,
                                                         Region& status) = 0;
  // The global 2-norm of `gradients` (f32, in the order kernels/cpu/grad_norm.h fixes, the same
  // bits on every backend and thread count) and, with max_norm > 0, torch.nn.utils.
  // clip_grad_norm_(max_norm) applied to them in place: each scaled by min(max_norm / (norm +
  // 1e-6), 1). Returns the norm before clipping, as clip_grad_norm_ does. `scratch` from
  // AllocateGradNormScratch for these gradients (allocated once, before the steps).
  virtual StatusOr<Region> AllocateGradNormScratch(std::span<const Tensor* const> gradients) {
    return Region();
  }
  // (A backend without it says so.)
  virtual StatusOr<float> ClipGradNorm(std::span<Tensor* const> gradients, double max_norm,
                                       Region& scratch) {
    return Error("the " + std::string(name()) + " backend has no gradient norm");
  }

  // Live and high-water bytes of this backend's memory per class; ResetPeaks starts the
  // high-water marks again from the live bytes.
  virtual MemorySnapshot Bytes() const = 0;
  virtual void ResetPeaks() = 0;

  // Whether tensors in this backend's memory may be read and written on the host (the CPU: yes;
  // a GPU: no, every byte goes through CopyIn / CopyOut, which wait for the work before them).
  virtual bool host_memory() const { return true; }

 protected:
  // The memory, or why there is none, in one line (the CPU: "out of memory"; CUDA: the CUDA
  // error). Allocate prefixes what was asked for.
  virtual StatusOr<std::byte*> AllocateBytes(int64_t bytes, MemoryClass c) = 0;
  virtual void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) = 0;

 private:
  friend class Region;
};

}  // namespace foundry
