// The memory plan's types and contract (docs/design.md §6): where every byte of one training step
// lives, decided before anything runs. The planner that makes one is a pass (passes/memory_plan.h);
// the plan file carries one (compiler/plan.h); the runtime runs one (runtime/executor.h). The graph
// is scheduled: graph.nodes is the order the runtime follows; step s is graph.nodes[s].
//
// Memory classes (base/memory_class.h). Parameters, gradients (graph outputs that are a parameter's
// gradient), other graph outputs (the loss), inputs (run-time feeds) and constants (initializers
// that are not trained, folded constants) each have storage of their own for the whole run,
// outside the arena.
// Every other value with bytes is a transient and lives in the arena, one buffer per owner.
// Except: a plan with `gradients_in_arena` (one graph run per optimizer step: nothing accumulates
// into a gradient across runs) keeps each computed gradient in the arena too, live from the first
// write into its buffer (its own producer, or the first transient written in place into it) to
// the last step, where the optimizer reads it after the run. Its class stays kGradient (the
// reports count it as a gradient), its bytes are the arena's.
//
// Aliases. A value may use another value's buffer instead of its own:
//  - view: the output of a node whose schema says `view` (Reshape, Flatten, Squeeze, Unsqueeze,
//    Identity; Expand) is input 0's bytes under another shape, when both have the same byte count
//    (an Expand that repeats elements does not): no bytes, no copy. A graph output is never
//    a view (it has storage of its own; its view node copies).
//  - in place: output 0 of a node whose schema lists input k in `in_place_inputs` takes the
//    arena buffer of input k when that buffer dies at this node (no other value of the buffer is
//    read later), input k has output 0's shape and element size, and no other input of the node
//    reads the same buffer.
//  - in place into a graph output: a transient X may use the storage of a graph output G that a
//    node N computes (a gradient, the loss; G is never an alias) when N lists X's input slot in
//    `in_place_inputs`, X has G's shape and element size, X's buffer (X and its views) is last
//    read at N, no other input of N reads that buffer, and X is not a graph output. Chains
//    follow, link by link: when c1 -> Add -> g1 -> Add -> G and each link obeys the rule (the
//    first the in-place rule above), c1 and g1 both live in G's storage. Such values are aliases
//    of G of kind in place, made before N; their class is G's, so they take no arena bytes. This
//    is how a parameter read more than once accumulates its gradient without an arena buffer.
// `alias` maps each aliased value to the value that owns the buffer (never to another alias); the
// owner's memory class is the alias's class.
//
// Liveness. An arena buffer is live from the step of its owner's producer to the last step that
// reads any value of the buffer (the producer's step when nothing reads it). A node marked
// kHoldsMark reads, for liveness, the values the mark names (one per line) without taking them
// as inputs: FSDP frees a unit's gathered parameters in its post-backward hook, once the unit's
// last gradient is made, not after their last reader, and the shard pass (passes/shard.h) marks
// the node that makes each gradient of a unit with the unit's gathered parameters to say so. A
// node's workspace (kernel scratch, WorkspaceFn) is live during its own step only. Two arena
// buffers live at a common step never overlap.
//
// Layouts. Workspace sizes differ between backends, so offsets do too: the plan holds one
// BackendLayout per backend it was compiled for. Every arena buffer and workspace is aligned to
// kArenaAlignment and its size rounded up to it.
//
// Lower bound: the maximum over steps of the live rounded bytes (buffers + workspace). The arena
// can never be smaller; the planner's arena is held against it (the checker requires arena >=
// bound).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/memory_class.h"
#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

// The node mark that holds values live until the node's step (see Liveness above).
inline constexpr const char* kHoldsMark = "holds";

inline constexpr int64_t kArenaAlignment = 256;

// Scratch bytes a backend's kernel needs for one node of a graph whose types are concrete.
using WorkspaceFn = std::function<int64_t(const Graph& graph, const Node& node)>;

struct BackendSpec {
  std::string name;  // "cpu", "cuda"
  WorkspaceFn workspace;
};

enum class AliasKind : uint8_t { kView, kInPlace };

struct Alias {
  std::string owner;  // the value that owns the buffer (not itself an alias)
  AliasKind kind = AliasKind::kView;
};

struct BackendLayout {
  std::string backend;
  int64_t arena_bytes = 0;
  int64_t lower_bound_bytes = 0;
  int64_t peak_step = -1;                  // a step where the live rounded bytes equal the bound
  std::map<std::string, int64_t> offsets;  // every arena buffer owner -> byte offset in the arena
  // Per step (index into graph.nodes): the node's workspace, exact bytes (0: none) and its offset
  // in the arena (-1 when bytes is 0).
  std::vector<int64_t> workspace_bytes;
  std::vector<int64_t> workspace_offsets;
};

struct MemoryPlan {
  std::vector<std::string> schedule;  // node names in run order; equals graph.nodes
  std::map<std::string, Alias> alias;
  std::vector<BackendLayout> layouts;

  // Computed gradients live in the arena, from their first write to the end of the run (see the
  // file comment); false: outside it, for the whole run (needed when microbatches accumulate).
  bool gradients_in_arena = false;

  // Outside the arena, exact bytes per class: parameter, gradient, output, input, constant and
  // optimizer_state (kArena and kOther stay 0; the arena is per layout). The optimizer figure
  // assumes AdamW (two f32 slots per trainable element); SGD with momentum needs half of it, plain
  // SGD none.
  BytesByClass outside;

  const BackendLayout* Layout(std::string_view backend) const;  // null when not planned for it
  // arena + everything outside it: the planned peak of one training step.
  int64_t TotalBytes(const BackendLayout& layout) const;
};

// The classes that live outside the arena, in the order the plan file, the checker and the
// reports list them.
inline constexpr MemoryClass kOutsideClasses[] = {
    MemoryClass::kParameter, MemoryClass::kGradient, MemoryClass::kOutput,
    MemoryClass::kInput,     MemoryClass::kConstant, MemoryClass::kOptimizerState};

// The memory class of a value of `graph` under this plan's aliases (never kOptimizerState or
// kOther). Graph outputs follow the
// training graph's contract (passes/autodiff.h): outputs[0] is the loss (kOutput), outputs[1..P]
// the gradients of graph.parameters in order (kGradient); any further output is kOutput.
MemoryClass ClassOf(const Graph& graph, const MemoryPlan& plan, const std::string& value);

// Whether `value`'s buffer (its owner's, for an alias) is in the arena under this plan: a
// transient, or a computed gradient of a plan with gradients_in_arena.
bool InArena(const Graph& graph, const MemoryPlan& plan, const std::string& value);

// One arena buffer with its live interval on the schedule.
struct ArenaBuffer {
  std::string owner;
  int64_t bytes = 0;  // exact (unrounded) bytes of the owner
  int64_t first = 0;  // step of the owner's producer (a gradient's: its buffer's first write)
  int64_t last = 0;   // last step that reads any value of the buffer (a gradient's: the last)
};
// The arena buffers in the order of their owner's producer; liveness as in the file comment.
std::vector<ArenaBuffer> ArenaBuffers(const Graph& graph, const MemoryPlan& plan);

// The invariants, checked on every plan the planner makes and every plan the runtime loads
// (a plan file may be damaged or hand-edited): the schedule is graph.nodes; every alias is one
// the rules above allow; every arena buffer owner has an offset; offsets and workspace are
// aligned; buffers and workspace live at a common step do not overlap; everything fits in
// arena_bytes; arena_bytes >= lower_bound_bytes and the bound is the one recomputed here; views
// never outlive their owner's interval. When `backends` is given, each layout's workspace is at
// least what the kernels of the backend of the same name need. Errors name the value or node and
// the layout.
Status CheckMemoryPlan(const Graph& graph, const MemoryPlan& plan,
                       const std::vector<BackendSpec>* backends = nullptr);
Status CheckLayout(const Graph& graph, const MemoryPlan& plan, const BackendLayout& layout,
                   const WorkspaceFn* workspace = nullptr);

// foundry-compile's one line about the plan for `layout`: "memory: arena 1.50 MiB (lower bound
// 1.48 MiB, ratio 1.0135), peak at step 67 'node'; outside the arena: parameters ..., total ...".
std::string MemorySummary(const Graph& graph, const MemoryPlan& plan, const BackendLayout& layout);
// foundry-compile --dump-plan: the plan as readable text (format at the definition).
std::string DumpMemoryPlan(const Graph& graph, const MemoryPlan& plan);

}  // namespace foundry
