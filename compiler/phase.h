// The phase of a training-graph node, kept as the node mark "phase" (so it survives export and
// re-import, like every mark): the schedule orders by it, the memory report counts the bytes that
// forward-phase nodes produce and backward- or recompute-phase nodes read.
//
// autodiff marks every node it is handed (and the loss it appends) forward and every node it
// emits backward; the remat pass marks its clones recompute; an optimizer graph would be optimizer.
#pragma once

#include <optional>
#include <string_view>

#include "compiler/ir.h"

namespace foundry {

enum class Phase { kForward, kBackward, kRecompute, kOptimizer };

inline constexpr const char* kPhaseMark = "phase";

// "forward", "backward", "recompute", "optimizer".
std::string_view PhaseName(Phase phase);
std::optional<Phase> ParsePhase(std::string_view name);

// The node's phase; nullopt when it carries no (or an unknown) phase mark.
std::optional<Phase> PhaseOf(const Node& node);
void SetPhase(Node& node, Phase phase);

}  // namespace foundry
