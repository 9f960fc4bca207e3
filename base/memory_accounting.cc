#include "base/memory_accounting.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace foundry {

namespace {

struct Counter {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};

  void Add(int64_t n) {
    const int64_t now = live.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void Sub(int64_t n) { live.fetch_sub(n, std::memory_order_relaxed); }
};

struct Counters {
  Counter by_class[kNumMemoryClasses];
  Counter total;
};

Counters& Global() {
  static Counters* c = new Counters();  // never destroyed: tensors may outlive static destructors
  return *c;
}

thread_local MemoryClass current_class = MemoryClass::kOther;

}  // namespace

void* AllocateAccounted(size_t bytes, size_t alignment, MemoryClass c) {
  // aligned_alloc wants a size that is a multiple of the alignment, and never 0 here so every
  // block is distinct.
  const size_t alloc = std::max<size_t>((bytes + alignment - 1) / alignment * alignment, alignment);
  if (alloc < bytes) return nullptr;  // wrapped
  void* p = std::aligned_alloc(alignment, alloc);
  if (!p) return nullptr;
  std::memset(p, 0, alloc);
  Counters& g = Global();
  g.by_class[static_cast<int>(c)].Add(static_cast<int64_t>(bytes));
  g.total.Add(static_cast<int64_t>(bytes));
  return p;
}

void FreeAccounted(void* p, size_t bytes, MemoryClass c) {
  if (!p) return;
  std::free(p);
  Counters& g = Global();
  g.by_class[static_cast<int>(c)].Sub(static_cast<int64_t>(bytes));
  g.total.Sub(static_cast<int64_t>(bytes));
}

void ReclassAccounted(size_t bytes, MemoryClass from, MemoryClass to) {
  if (from == to || bytes == 0) return;
  Counters& g = Global();
  g.by_class[static_cast<int>(to)].Add(static_cast<int64_t>(bytes));
  g.by_class[static_cast<int>(from)].Sub(static_cast<int64_t>(bytes));
}

MemorySnapshot MemoryUsage() {
  Counters& g = Global();
  MemorySnapshot s;
  for (MemoryClass c : kMemoryClasses) {
    const Counter& from = g.by_class[static_cast<int>(c)];
    s.by_class[c].live = from.live.load(std::memory_order_relaxed);
    s.by_class[c].peak = from.peak.load(std::memory_order_relaxed);
  }
  s.total.live = g.total.live.load(std::memory_order_relaxed);
  s.total.peak = g.total.peak.load(std::memory_order_relaxed);
  return s;
}

void ResetMemoryPeaks() {
  Counters& g = Global();
  for (Counter& c : g.by_class) c.peak.store(c.live.load());
  g.total.peak.store(g.total.live.load());
}

MemoryClass CurrentMemoryClass() { return current_class; }

ScopedMemoryClass::ScopedMemoryClass(MemoryClass c) : previous_(current_class) {
  current_class = c;
}

ScopedMemoryClass::~ScopedMemoryClass() { current_class = previous_; }

}  // namespace foundry
