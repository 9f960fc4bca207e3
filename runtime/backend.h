// The backend interface (DESIGN §6): what the runtime needs from a device to run a planned
// training step. The CPU backend (runtime/cpu_backend.h) implements it now, CUDA next; nothing in
// here assumes the backend's memory is host memory.
//
//  - name() and WorkspaceBytes(): the planner's BackendSpec (compiler/memory_plan.h), so a plan's
//    layout for this backend has room for its kernels' scratch;
//  - Allocate(): a region of backend memory (kArenaAlignment-aligned), counted under a memory
//    class; the region frees itself;
//  - Run(): one node on tensors that are views of backend memory, with the node's workspace;
//  - CopyIn()/CopyOut(): bytes between host tensors and backend tensors;
//  - Bytes(): live and high-water bytes per memory class.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/memory_accounting.h"
#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/kernel.h"
#include "compiler/memory_plan.h"

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

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // Scratch bytes this backend's kernel needs for `node` (types in `graph` concrete).
  virtual int64_t WorkspaceBytes(const Graph& graph, const Node& node) const = 0;
  // name() and WorkspaceBytes() as the planner takes them; the backend must outlive the spec.
  BackendSpec Spec() const;

  // `bytes` of backend memory (zero-filled, kArenaAlignment-aligned), counted under `c`. `what`
  // names the use for the out-of-memory error ("the arena", "gradient 'w_grad'").
  StatusOr<Region> Allocate(int64_t bytes, MemoryClass c, std::string_view what);

  // Runs `node`: inputs and outputs are tensors in this backend's memory (null for an omitted
  // input), `workspace` at least WorkspaceBytes(graph, node) bytes of it. `ctx.workspace` is
  // ignored: the backend passes `workspace` on. Errors name the node.
  virtual Status Run(const Node& node, std::span<const Tensor* const> inputs,
                     std::span<Tensor* const> outputs, std::span<std::byte> workspace,
                     const KernelContext& ctx) = 0;

  // Host tensor -> backend tensor and back; dtype and shape must match (an error says which).
  virtual Status CopyIn(const Tensor& host, Tensor& device) = 0;
  virtual Status CopyOut(const Tensor& device, Tensor& host) = 0;

  // Live and high-water bytes of this backend's memory per class; ResetPeaks starts the
  // high-water marks again from the live bytes.
  virtual MemorySnapshot Bytes() const = 0;
  virtual void ResetPeaks() = 0;

  // Whether tensors in this backend's memory may be read and written on the host (the CPU: yes;
  // a GPU: no, every byte goes through CopyIn / CopyOut, which wait for the work before them).
  virtual bool host_memory() const { return true; }

 protected:
  // Null when the memory is not there.
  virtual std::byte* AllocateBytes(int64_t bytes, MemoryClass c) = 0;
  virtual void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) = 0;

 private:
  friend class Region;
};

}  // namespace foundry
