// BudgetChoice (ckpt_budget.h): what a --memory-budget search chose, said the way foundry-compile
// prints it. The search itself is ckpt_budget.cc; the JSON form is memory_report.cc's.
#include <cstdio>
#include <tuple>

#include "base/bytes.h"
#include "passes/ckpt_budget.h"

namespace foundry {

double RecomputePercent(const CkptEvaluation& e) {
  return e.step_flops > 0 ? 100.0 * double(e.flops_recomputed) / double(e.step_flops) : 0.0;
}

StatusOr<BudgetChoice> MakeBudgetChoice(const Graph& autodiff_graph, const BudgetResult& result,
                                        int64_t budget_bytes, CkptSyntax syntax,
                                        int64_t reserve_bytes) {
  BudgetChoice choice;
  choice.budget_bytes = budget_bytes;
  choice.reserve_bytes = reserve_bytes;
  choice.chosen = result.chosen;
  choice.plans = result.plans;
  choice.syntax = syntax;
  ASSIGN_OR_RETURN(choice.config,
                   SelectionAsConfig(autodiff_graph, result.chosen.instances, syntax));
  std::vector<std::string> blocks;
  for (const BlockLayer& l : CheckpointableLayers(autodiff_graph)) blocks.push_back(l.block);
  const CkptEvaluation* uniform = nullptr;
  for (const CkptEvaluation& u : result.uniform)
    if (u.total_bytes + reserve_bytes <= budget_bytes &&
        (!uniform || CkptPreferred(u, *uniform, blocks)))
      uniform = &u;
  if (uniform) choice.uniform = *uniform;
  return choice;
}

std::string BudgetLine(const BudgetChoice& choice) {
  const CkptEvaluation& c = choice.chosen;
  std::string reserve;
  if (choice.reserve_bytes > 0) reserve = " + device reserve " + HumanBytes(choice.reserve_bytes);
  char line[384];
  std::snprintf(line, sizeof line,
                "planned total %s (%lld B)%s <= budget %s (%lld B), recompute %.2f %% of the step; "
                "%d plans evaluated",
                HumanBytes(c.total_bytes).c_str(), static_cast<long long>(c.total_bytes),
                reserve.c_str(), HumanBytes(choice.budget_bytes).c_str(),
                static_cast<long long>(choice.budget_bytes), RecomputePercent(c), choice.plans);
  return line;
}

std::string FormatBudgetChoice(const BudgetChoice& choice) {
  std::string out = "memory budget: " + BudgetLine(choice) + "\n";
  if (choice.config.empty())
    out +=
        "  the plain plan fits: nothing to checkpoint (llm-foundry: "
        "fsdp_config.activation_checkpointing: false)\n";
  else if (choice.config.every_block_by_flag)
    out += "  fsdp_config.activation_checkpointing: true (every block, no target)\n";
  else
    out += "  activation_checkpointing_target: " + choice.config.yaml + "\n";
  for (const auto& w : choice.config.warnings) out += "  note: " + w + "\n";
  for (const auto& n : choice.config.notes) out += "  note: " + n + "\n";
  if (choice.uniform) {
    char cost[128];
    std::snprintf(cost, sizeof cost, "%.2f %% of the step, planned total %s",
                  RecomputePercent(*choice.uniform),
                  HumanBytes(choice.uniform->total_bytes).c_str());
    out += "  cheapest uniform llm-foundry target that fits: " + choice.uniform->label + ", " +
           cost + "\n";
  }
  return out;
}

}  // namespace foundry
