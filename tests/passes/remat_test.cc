// The remat pass on the committed fixtures, instances named by module path (target selection is
// compiler/ckpt_targets' job and has its own tests): the structure of the rewrite, and loss and
// gradients bitwise equal to the plain graph's (dropout included: the clones draw the original's
// mask).
#include "passes/remat.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "compiler/phase.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "passes/memory_report.h"
#include "runtime/data.h"
#include "runtime/interpreter.h"
#include "tests/support/fixture_plans.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

fs::path Fixture(const std::string& name) {
  return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures" / name;
}

std::vector<std::string> Feeds(const fs::path& dir) {
  for (const TrainingFixture& f : TrainingFixtures(dir.parent_path()))
    if (f.dir == dir) return f.feeds;
  return {};
}

bool InModule(const std::string& scope, const std::string& module) {
  return scope == module || scope.rfind(module + ".", 0) == 0;
}

Phase PhaseOrForward(const Node& n) { return PhaseOf(n).value_or(Phase::kForward); }

struct Compiled {
  Graph plain, ckpt;
};

Compiled Compile(const std::string& fixture, const std::vector<std::string>& instances,
                 const char* file = "model.onnx") {
  const fs::path dir = Fixture(fixture);
  auto plain = CompileFixture(dir / file, Feeds(dir));
  EXPECT_TRUE(plain.ok()) << plain.status().message();
  auto ckpt = CompileFixture(dir / file, Feeds(dir), instances);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
  if (!plain.ok() || !ckpt.ok()) return {};
  return {std::move(plain->graph), std::move(ckpt->graph)};
}

std::map<std::string, Tensor> Run(const Graph& g, const fs::path& dir, uint64_t seed) {
  std::map<std::string, Tensor> feeds;
  for (const auto& spec : Feeds(dir)) {
    auto f = ReadFeed(spec);
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (f.ok()) feeds.emplace(f->name, std::move(f->tensor));
  }
  InterpretOptions options;
  options.ctx.seed = seed;
  auto out = Interpret(g, feeds, options);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? std::move(out).value() : std::map<std::string, Tensor>{};
}

void ExpectBitwiseEqual(const Compiled& c, const std::string& fixture) {
  const fs::path dir = Fixture(fixture);
  auto a = Run(c.plain, dir, 7), b = Run(c.ckpt, dir, 7);
  ASSERT_EQ(a.size(), c.plain.outputs.size());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(t.BitwiseEqual(b.at(name))) << name << " differs with checkpointing";
  }
}

// After the pass: every backward reader of a value made inside an instance reads one of its
// outputs (a value a forward node outside reads) or a clone; clones exist for exactly the
// instances; nodes outside them are the plain graph's.
void ExpectStructure(const Compiled& c, const std::vector<std::string>& instances) {
  const Graph& g = c.ckpt;
  const UseDef ud = BuildUseDef(g);
  std::set<std::string> with_clones;
  for (const Node& n : g.nodes) {
    if (PhaseOrForward(n) != Phase::kRecompute) continue;
    ASSERT_TRUE(n.marks.count(kRecomputeInstanceMark)) << n.name;
    ASSERT_TRUE(n.marks.count(kRecomputeOfMark)) << n.name;
    with_clones.insert(n.marks.at(kRecomputeInstanceMark));
    EXPECT_EQ(n.name, n.marks.at(kRecomputeOfMark) + "_recompute");
    EXPECT_TRUE(InModule(n.scope, n.marks.at(kRecomputeInstanceMark))) << n.name;
  }
  EXPECT_EQ(with_clones, std::set<std::string>(instances.begin(), instances.end()));
  for (const auto& inst : instances) {
    for (const Node& n : g.nodes) {
      if (PhaseOrForward(n) != Phase::kForward || !InModule(n.scope, inst)) continue;
      for (const auto& o : n.outputs) {
        if (o.empty()) continue;
        bool output = false, read_back = false;
        for (int r : ud.Consumers(o)) {
          const Node& reader = g.nodes[r];
          output |= PhaseOrForward(reader) == Phase::kForward && !InModule(reader.scope, inst);
          read_back |= PhaseOrForward(reader) == Phase::kBackward;
        }
        EXPECT_FALSE(read_back && !output)
            << o << " of " << inst << " is read by the backward without a clone";
      }
    }
  }
  // Unselected nodes untouched: the plain graph's forward nodes, with the same inputs (the
  // schedule may order them differently).
  std::map<std::string, std::vector<std::string>> plain, ckpt;
  for (const Node& n : c.plain.nodes)
    if (PhaseOrForward(n) == Phase::kForward) plain[n.name] = n.inputs;
  for (const Node& n : g.nodes)
    if (PhaseOrForward(n) == Phase::kForward) ckpt[n.name] = n.inputs;
  EXPECT_EQ(plain, ckpt);
}

TEST(RematTest, WholeBlocksBitwiseAndEachKeepsOnlyItsBoundary) {
  const std::vector<std::string> blocks = {"transformer.blocks.0", "transformer.blocks.1"};
  Compiled c = Compile("mpt_tiny", blocks);
  ExpectStructure(c, blocks);
  ExpectBitwiseEqual(c, "mpt_tiny");
  // Block 0 keeps its input (the embedding) and its output (block 1's input); block 1 its input
  // and its output (norm_f's input).
  for (const auto& b : blocks) {
    std::vector<std::string> saved = SavedValuesOf(c.ckpt, b);
    EXPECT_EQ(saved.size(), 2u) << b << ": " << ::testing::PrintToString(saved);
    EXPECT_FALSE(RecomputeNodesOf(c.ckpt, b).empty());
  }
  // Fewer saved bytes, a smaller arena.
  int64_t saved[2], arena[2];
  for (int k = 0; k < 2; ++k) {
    const Graph& g = k ? c.ckpt : c.plain;
    auto plan = PlanMemory(g, {{"cpu", CpuWorkspaceBytes}});
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    auto report = BuildMemoryReport(g, *plan, "cpu", "mpt_tiny", {});
    ASSERT_TRUE(report.ok()) << report.status().message();
    saved[k] = report->saved_for_backward_bytes;
    arena[k] = report->layout.arena_bytes;
  }
  std::cout << "mpt_tiny, both blocks checkpointed: saved " << saved[0] << " -> " << saved[1]
            << " B, arena " << arena[0] << " -> " << arena[1] << " B\n";
  EXPECT_LT(saved[1], saved[0] / 2);
  EXPECT_LT(arena[1], arena[0]);
}

TEST(RematTest, SubmodulesAndDropoutBitwise) {
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_dropout", "mpt_tiny_gqa_glu"}) {
    SCOPED_TRACE(fixture);
    const std::vector<std::string> inst = {"transformer.blocks.0.attn", "transformer.blocks.1.ffn",
                                           "transformer.blocks.1.norm_1"};
    Compiled c = Compile(fixture, inst);
    ExpectStructure(c, inst);
    ExpectBitwiseEqual(c, fixture);
  }
}

TEST(RematTest, NestedInstancesAreAnError) {
  Graph g;
  RematPass pass({{"a", "a.b"}});
  auto r = pass.Run(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "remat: module 'a.b' is inside 'a'; checkpoint one of them (the outer one wins)");
}

}  // namespace
}  // namespace foundry
