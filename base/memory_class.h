// The one list of memory classes (docs/design.md §6): where a byte of a training step lives. The memory
// plan gives every value one of them (compiler/memory_plan.h), the accounting allocator counts
// every allocation under one (base/memory_accounting.h), and the reports of both CLIs print one
// row per class, planned beside measured. BytesByClass is the figure per class all of them share.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace foundry {

enum class MemoryClass : uint8_t {
  kArena,           // transients of one step (the planned arena)
  kParameter,       // trained weights
  kGradient,        // graph outputs that are a parameter's gradient
  kOptimizerState,  // AdamW m and v, SGD momentum
  kInput,           // run-time feeds
  kConstant,        // initializers that are not trained, folded constants
  kOutput,          // other graph outputs (the loss)
  kOther,           // anything the runtime allocates outside the plan
};
inline constexpr int kNumMemoryClasses = 8;
inline constexpr std::array<MemoryClass, kNumMemoryClasses> kMemoryClasses = {
    MemoryClass::kArena,          MemoryClass::kParameter, MemoryClass::kGradient,
    MemoryClass::kOptimizerState, MemoryClass::kInput,     MemoryClass::kConstant,
    MemoryClass::kOutput,         MemoryClass::kOther};

// "arena", "parameter", "gradient", "optimizer_state", "input", "constant", "output", "other"
std::string_view MemoryClassName(MemoryClass c);

// One figure per memory class, indexed by the class.
template <typename T>
struct ByClass {
  std::array<T, kNumMemoryClasses> values{};

  T& operator[](MemoryClass c) { return values[static_cast<size_t>(c)]; }
  const T& operator[](MemoryClass c) const { return values[static_cast<size_t>(c)]; }
  auto begin() { return values.begin(); }
  auto end() { return values.end(); }
  auto begin() const { return values.begin(); }
  auto end() const { return values.end(); }
  bool operator==(const ByClass&) const = default;
};

using BytesByClass = ByClass<int64_t>;

// The sum over every class.
inline int64_t TotalOf(const BytesByClass& b) {
  int64_t sum = 0;
  for (int64_t v : b) sum += v;
  return sum;
}

}  // namespace foundry
