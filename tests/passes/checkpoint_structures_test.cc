// Proof 6 of checkpointing: the big structures (models/exports/mpt_7b.onnx and mpt_30b.onnx, no
// weights, batch 1, seq 2048) compile with each target (none, grouped_query_attention, mptmlp,
// both, mptblock; selected as foundry-compile selects them): the rewrite, the schedule and the
// memory plan are made, the plan passes CheckMemoryPlan (what LoadPlan checks), and checkpointing
// lowers the saved-for-backward bytes, the more the more it selects. No timing here (bench/
// measures it).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <regex>
#include <set>

#include "compiler/ckpt_targets.h"
#include "compiler/onnx_import.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "passes/memory_report.h"
#include "passes/pipeline.h"
#include "passes/remat.h"
#include "tests/support/sanitizer.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

struct Compiled {
  int64_t saved_bytes = 0;
  int64_t arena_bytes = 0;
  size_t recompute_nodes = 0;
};

// The blocks of an MPT structure: transformer.blocks.N, from the node scopes.
int Layers(const Graph& g) {
  const std::regex block(R"(transformer\.blocks\.(\d+)(\..*)?)");
  std::set<int> n;
  std::smatch m;
  for (const Node& node : g.nodes)
    if (std::regex_match(node.scope, m, block)) n.insert(std::stoi(m[1]));
  return n.empty() ? 0 : *n.rbegin() + 1;
}

// `targets` (--ckpt arguments) must select `per_layer` instances in each block.
StatusOr<Compiled> Compile(const fs::path& model, const std::vector<std::string>& args,
                           size_t per_layer) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(model.string(), {}));
  const int layers = Layers(g);
  if (layers == 0) return Error(model.string() + ": no transformer.blocks.N");
  CompileOptions options;
  options.fold.dims = {{"batch", 1}, {"seq", 2048}};
  if (!args.empty()) {
    std::vector<CkptTarget> targets;
    for (const auto& a : args) {
      ASSIGN_OR_RETURN(CkptTarget t, ParseCkptArg(a));
      targets.push_back(std::move(t));
    }
    ASSIGN_OR_RETURN(CkptSelection selection, SelectCkptTargets(g, targets));
    for (const CkptInstance& i : selection.instances) options.remat.instances.push_back(i.module);
  }
  if (options.remat.instances.size() != per_layer * layers)
    return Error(std::to_string(options.remat.instances.size()) + " instances selected, expected " +
                 std::to_string(per_layer * layers));
  RETURN_IF_ERROR(RunPasses(g, BuildPipeline(options), {}));
  ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(g, {{"cpu", CpuWorkspaceBytes}}));
  RETURN_IF_ERROR(CheckMemoryPlan(g, plan));
  ASSIGN_OR_RETURN(MemoryReport report,
                   BuildMemoryReport(g, plan, "cpu", model.string(), options.fold.dims));
  Compiled c{report.saved_for_backward_bytes, report.layout.arena_bytes, 0};
  for (const auto& inst : options.remat.instances) {
    const size_t n = RecomputeNodesOf(g, inst).size();
    if (n == 0) return Error(inst + " has no recompute clone");
    c.recompute_nodes += n;
  }
  return c;
}

void ExpectEachTargetLowersSavedBytes(const std::string& name) {
  const fs::path model = fs::path(FOUNDRY_SOURCE_DIR) / "models/exports" / (name + ".onnx");
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, Compiled> by_target;
  struct Target {
    std::string name;
    std::vector<std::string> args;
    size_t per_layer;
  };
  const std::vector<Target> targets = {
      {"none", {}, 0},
      {"attn", {"grouped_query_attention"}, 1},
      {"ffn", {"mptmlp"}, 1},
      {"attn+ffn", {"grouped_query_attention", "mptmlp"}, 2},
      {"block", {"mptblock"}, 1},
  };
  for (const auto& [target, args, per_layer] : targets) {
    SCOPED_TRACE(name + " " + target);
    auto c = Compile(model, args, per_layer);
    ASSERT_TRUE(c.ok()) << c.status().message();
    by_target[target] = *c;
    std::cout << name << " " << target << ": saved for backward " << c->saved_bytes << " B, arena "
              << c->arena_bytes << " B, " << c->recompute_nodes << " recompute nodes\n";
  }
  const int64_t none = by_target["none"].saved_bytes;
  for (const char* t : {"attn", "ffn"}) {
    EXPECT_LT(by_target[t].saved_bytes, none) << t;
    EXPECT_LT(by_target["attn+ffn"].saved_bytes, by_target[t].saved_bytes) << t;
  }
  EXPECT_LT(by_target["block"].saved_bytes, by_target["attn+ffn"].saved_bytes);
  EXPECT_LT(by_target["block"].arena_bytes, by_target["none"].arena_bytes);
  std::cout << name << ": 5 compiles in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
}

TEST(CheckpointStructuresTest, Mpt7b) { ExpectEachTargetLowersSavedBytes("mpt_7b"); }

TEST(CheckpointStructuresTest, Mpt30b) {
  FOUNDRY_SKIP_UNDER_SANITIZERS();
  ExpectEachTargetLowersSavedBytes("mpt_30b");
}

}  // namespace
}  // namespace foundry
