// The one allocator of runtime tensor storage (docs/design.md §6): every byte a Tensor owns and every
// region a backend hands out is allocated and freed here, under a memory class, so the runtime can
// put a measured figure next to each planned one (foundry-run's memory report) and a test can hold
// the live bytes against the sum of the live tensors.
//
// What is counted: the bytes asked for (a tensor's nbytes, a region's size), not the allocator's
// rounding or headers; those show up in peak RSS, which foundry-run reports beside these figures.
// Counters are process-wide and thread-safe (atomics); a high-water mark is kept per class and for
// the total.
//
// The class of an allocation is the thread's current class (ScopedMemoryClass), `other` unless
// someone set it; a tensor's storage can be re-classed later (Tensor::SetMemoryClass) when its role
// becomes known, e.g. an imported initializer that the trainer takes as a parameter.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/memory_class.h"

namespace foundry {

struct MemoryBytes {
  int64_t live = 0;
  int64_t peak = 0;  // high-water mark of `live` since the start or the last ResetMemoryPeaks()
};

struct MemorySnapshot {
  ByClass<MemoryBytes> by_class;
  MemoryBytes total;  // the total's own high-water mark (not the sum of the per-class peaks)
  const MemoryBytes& operator[](MemoryClass c) const { return by_class[c]; }
};

// `bytes` counted under `c`; the block is `alignment`-aligned (a power of two, at least 16) and
// zero-filled. Null (nothing counted) when the memory is not there. A zero-byte request returns a
// valid, distinct block and counts 0.
void* AllocateAccounted(size_t bytes, size_t alignment, MemoryClass c);
// Frees a block from AllocateAccounted with the same `bytes` and the class it is counted under now.
void FreeAccounted(void* p, size_t bytes, MemoryClass c);
// Moves `bytes` of live storage from one class to another (the total does not change).
void ReclassAccounted(size_t bytes, MemoryClass from, MemoryClass to);

MemorySnapshot MemoryUsage();
// Every high-water mark (per class and total) back to the current live bytes.
void ResetMemoryPeaks();

// The class of this thread's allocations.
MemoryClass CurrentMemoryClass();

// Sets this thread's allocation class for its lifetime, then restores the previous one.
class ScopedMemoryClass {
 public:
  explicit ScopedMemoryClass(MemoryClass c);
  ~ScopedMemoryClass();
  ScopedMemoryClass(const ScopedMemoryClass&) = delete;
  ScopedMemoryClass& operator=(const ScopedMemoryClass&) = delete;

 private:
  MemoryClass previous_;
};

}  // namespace foundry
