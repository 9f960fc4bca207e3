#include "compiler/phase.h"

#include <string>

namespace foundry {

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "forward";
}

std::optional<Phase> ParsePhase(std::string_view name) {
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kRecompute, Phase::kOptimizer})
    if (PhaseName(p) == name) return p;
  return std::nullopt;
}

std::optional<Phase> PhaseOf(const Node& node) {
  auto it = node.marks.find(kPhaseMark);
  if (it == node.marks.end()) return std::nullopt;
  return ParsePhase(it->second);
}

void SetPhase(Node& node, Phase phase) { node.marks[kPhaseMark] = std::string(PhaseName(phase)); }

}  // namespace foundry
