// The analyses of a scheduled training graph that the memory planner (passes/memory_plan.h) and
// the plan checker (compiler/memory_plan.h) share: who makes and last reads each value, the class
// a value has when it is no alias, the bytes outside the arena, the arena buffers with their live
// intervals, and the lower bound of an arena over intervals. Pure functions of the graph and the
// plan's aliases; the rules they follow are compiler/memory_plan.h's.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/memory_class.h"
#include "compiler/ir.h"
#include "compiler/memory_plan.h"

namespace foundry {

// More than any machine holds; keeps every sum of rounded sizes far from overflow.
inline constexpr int64_t kMaxPlanBytes = int64_t{1} << 50;

inline int64_t RoundUpToArenaAlignment(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// The values a node's kHoldsMark names (one per line).
std::vector<std::string> HeldValues(const std::string& mark);

// What the planner and the checker need to know about the graph, built once: who produces each
// value (first producer's step), the last step that reads it, and the roles of the values that
// live outside the arena.
struct GraphIndex {
  std::unordered_map<std::string, int64_t> producer;
  std::unordered_map<std::string, int64_t> last_read;
  std::unordered_map<std::string, size_t> output_pos;
  std::unordered_set<std::string> params, inputs, initializers;
  bool gradients_in_arena = false;  // the plan's (compiler/memory_plan.h)

  explicit GraphIndex(const Graph& g, bool gradients_in_arena = false);

  int64_t Producer(const std::string& v) const;  // -1 when no node makes it
  int64_t LastRead(const std::string& v) const;  // -1 when no node reads it
  // The class of a value as if it were no alias.
  MemoryClass BaseClass(const Graph& g, const std::string& v) const;
  // Whether a value that is no alias has its buffer in the arena: a transient, or a computed
  // gradient when gradients_in_arena.
  bool InArena(const Graph& g, const std::string& v) const;
};

// The owner of v's buffer under the plan's aliases (v itself when it is no alias).
std::string RootOf(const MemoryPlan& plan, const std::string& v);
// "f32[2,3]", or "?" for an unknown value.
std::string TypeOf(const Graph& g, const std::string& v);
// Same shape and element size: the in-place rule's condition on the input it writes over.
bool SameShapeAndElement(const Graph& g, const std::string& a, const std::string& b);
// A graph output that transients may be written into before it is made (memory_plan.h): one a
// node computes, not a parameter or feed passed through.
bool WritableOutput(const Graph& g, const GraphIndex& ix, const std::string& v);

// The exact bytes of the values outside the arena, per class (compiler/memory_plan.h's
// kOutsideClasses; the others 0).
BytesByClass CountOutside(const Graph& g, const GraphIndex& ix);

// The arena buffers in the order of their owner's producer, each live until the last read of any
// value of the buffer.
std::vector<ArenaBuffer> BuffersOf(const Graph& g, const MemoryPlan& plan, const GraphIndex& ix);

// One thing to place in the arena: a buffer or a step's workspace.
struct ArenaItem {
  int64_t size = 0;  // rounded
  int64_t first = 0, last = 0;
};

// Live rounded bytes per step and the first step where they peak.
struct LiveBound {
  int64_t bytes = 0;
  int64_t step = -1;
  std::vector<int64_t> live;
};
LiveBound LowerBound(const std::vector<ArenaItem>& items, size_t steps);

}  // namespace foundry
