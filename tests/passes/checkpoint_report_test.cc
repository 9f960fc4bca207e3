#include "passes/checkpoint_report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "compiler/phase.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "passes/fold.h"
#include "passes/memory_report.h"
#include "passes/memory_timeline.h"
#include "passes/remat.h"
#include "tests/support/fixture_plans.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// A LayerNorm feeding an MLP, with a hand-written backward (only which values it reads matters
// here). Sizes: x, n, h, hm, e, y, mask are f32[4,64] = 1024 B; mean, istd f32[4,1] = 16 B.
//   forward  mask = Neg(x) (root), [n, mean, istd] = LayerNormalization (blk.ln),
//            h = n @ w, hm = h + mask, e = exp(hm), y = e * n (blk.mlp), loss = sum(y)
//   backward reads n (twice), e (twice), mean and istd.
// Saved before: n + e + mean + istd = 2080 B. The mask is not saved: an Add's gradient needs
// neither input.
constexpr const char* kPrefix = R"(graph g {
  module "blk" : pkg.Block
  module "blk.ln" : pkg.LayerNorm
  module "blk.mlp" : pkg.Mlp
  input x : f32[4,64]
  param w : f32[64,64]
  param s : f32[64]
  mask = Neg(x) marks{phase="forward"}
  n, mean, istd = LayerNormalization(x, s) {axis=-1} @"blk.ln" marks{phase="forward"}
  h = MatMul(n, w) @"blk.mlp" marks{phase="forward"}
  hm = Add(h, mask) @"blk.mlp" marks{phase="forward"}
  e = Exp(hm) @"blk.mlp" marks{phase="forward"}
  y = Mul(e, n) @"blk.mlp" marks{phase="forward"}
  loss = ReduceSum(y) {keepdims=0} marks{phase="forward"}
  dy = Neg(x) marks{phase="backward"}
  de = Mul(dy, n) marks{phase="backward"}
)";
constexpr const char* kPlainBackward = R"(
  dn1 = Mul(dy, e) marks{phase="backward"}
  dhm = Mul(de, e) marks{phase="backward"}
  nt = Transpose(n) {perm=[1, 0]} marks{phase="backward"}
  w_grad = MatMul(nt, dhm) marks{phase="backward"}
  wt = Transpose(w) {perm=[1, 0]} marks{phase="backward"}
  dn2 = MatMul(dhm, wt) marks{phase="backward"}
  dn = Add(dn1, dn2) marks{phase="backward"}
  dx, s_grad, db = com.microsoft::LayerNormalizationGrad(dn, x, s, mean, istd) marks{phase="backward"}
  output loss
  output w_grad
  output s_grad
})";
// Both instances checkpointed: the MLP's clones (before their first backward reader) read n, w
// and the mask, which is now saved (bytes added); the LayerNorm's clone regenerates mean and istd.
constexpr const char* kCheckpointedBackward = R"(
  h_recompute = MatMul(n, w) @"blk.mlp" #"MatMul_h_recompute" marks{phase="recompute", recompute_of="h", recompute_instance="blk.mlp"}
  hm_recompute = Add(h_recompute, mask) @"blk.mlp" marks{phase="recompute", recompute_of="hm", recompute_instance="blk.mlp"}
  e_recompute = Exp(hm_recompute) @"blk.mlp" marks{phase="recompute", recompute_of="e", recompute_instance="blk.mlp"}
  dn1 = Mul(dy, e_recompute) marks{phase="backward"}
  dhm = Mul(de, e_recompute) marks{phase="backward"}
  nt = Transpose(n) {perm=[1, 0]} marks{phase="backward"}
  w_grad = MatMul(nt, dhm) marks{phase="backward"}
  wt = Transpose(w) {perm=[1, 0]} marks{phase="backward"}
  dn2 = MatMul(dhm, wt) marks{phase="backward"}
  dn = Add(dn1, dn2) marks{phase="backward"}
  n_recompute, mean_recompute, istd_recompute = LayerNormalization(x, s) {axis=-1} @"blk.ln" marks{phase="recompute", recompute_of="ln", recompute_instance="blk.ln"}
  dx, s_grad, db = com.microsoft::LayerNormalizationGrad(dn, x, s, mean_recompute, istd_recompute) marks{phase="backward"}
  output loss
  output w_grad
  output s_grad
})";

Graph Parse(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(FoldPass({}).Run(*g).ok());  // value types
  return std::move(g).value();
}

struct Planned {
  Graph graph;
  MemoryPlan plan;
};

Planned Plan(const std::string& text) {
  Planned p{Parse(text), {}};
  auto plan = PlanMemory(p.graph, {{"cpu", nullptr}});
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  p.plan = std::move(plan).value();
  return p;
}

CkptSelection Selection() {
  CkptSelection s;
  s.targets = {"blk.ln", "mlp"};
  s.instances = {{"blk.ln", "pkg.LayerNorm", 0, "blk.ln", ""},
                 {"blk.mlp", "pkg.Mlp", 0, "mlp", ""}};
  s.nested = {{{"blk.mlp.act", "pkg.Gelu", 0, "gelu", ""}, {"blk.mlp", "pkg.Mlp", 0, "mlp", ""}}};
  EXPECT_EQ(s.notes(), (std::vector<std::string>{
                           "blk.mlp.act (gelu) is inside blk.mlp (mlp): the outer target wins"}));
  return s;
}

TEST(CheckpointReportTest, CountsFreedAddedAndRecomputedExactly) {
  Planned plain = Plan(std::string(kPrefix) + kPlainBackward);
  Planned ckpt = Plan(std::string(kPrefix) + kCheckpointedBackward);
  auto r = BuildCheckpointReport(plain.graph, plain.plan, ckpt.graph, ckpt.plan, Selection());
  ASSERT_TRUE(r.ok()) << r.status().message();

  EXPECT_EQ(r->targets, (std::vector<std::string>{"blk.ln", "mlp"}));
  EXPECT_EQ(r->nested, Selection().nested);
  EXPECT_EQ(r->saved_before_bytes, 1024 + 1024 + 16 + 16);  // n, e, mean, istd
  EXPECT_EQ(r->saved_after_bytes, 1024 + 1024);             // n, mask
  EXPECT_EQ(r->values_freed, 3);                            // e, mean, istd
  EXPECT_EQ(r->bytes_freed, 1024 + 16 + 16);
  EXPECT_EQ(r->bytes_added, 1024);  // the mask: only the MLP's clone reads it
  EXPECT_EQ(r->saved_after_bytes, r->saved_before_bytes - r->bytes_freed + r->bytes_added);
  EXPECT_EQ(r->nodes_recomputed, 4);
  const int64_t matmul = 2 * 4 * 64 * 64, add = 256, exp = 256, layer_norm = 7 * 256;
  EXPECT_EQ(r->flops_recomputed, matmul + add + exp + layer_norm);

  ASSERT_EQ(r->instances.size(), 2u);
  const CheckpointInstanceReport& ln = r->instances[0];
  EXPECT_EQ(ln.module, "blk.ln");
  EXPECT_EQ(ln.class_name, "pkg.LayerNorm");
  EXPECT_EQ(ln.target, "blk.ln");
  EXPECT_EQ(ln.values_freed, 2);
  EXPECT_EQ(ln.bytes_freed, 32);
  EXPECT_EQ(ln.bytes_added, 0);
  EXPECT_EQ(ln.nodes_recomputed, 1);
  EXPECT_EQ(ln.flops_recomputed, layer_norm);
  // It keeps its output n (1024 B) saved and frees 32 B: 3.1 %, under the 10 % threshold.
  EXPECT_EQ(ln.note,
            "frees 32 B, 3.1 % of the 1.0 KiB its boundary and outputs keep saved (under 10 %): "
            "checkpointing it saves almost nothing; checkpoint its enclosing module instead");
  const CheckpointInstanceReport& mlp = r->instances[1];
  EXPECT_EQ(mlp.module, "blk.mlp");
  EXPECT_EQ(mlp.target, "mlp");
  EXPECT_EQ(mlp.values_freed, 1);
  EXPECT_EQ(mlp.bytes_freed, 1024);
  EXPECT_EQ(mlp.bytes_added, 1024);
  EXPECT_EQ(mlp.nodes_recomputed, 3);
  EXPECT_EQ(mlp.flops_recomputed, matmul + add + exp);
  EXPECT_EQ(mlp.note, "");  // frees 1024 B against n + mask = 2048 B kept: 50 %

  const FlopCounts f = CountFlops(ckpt.graph);
  EXPECT_EQ(f.recompute, r->flops_recomputed);
  EXPECT_EQ(r->step_flops, f.forward + f.backward + f.recompute);

  // The memory report counts the same saved set.
  auto before = BuildMemoryReport(plain.graph, plain.plan, "cpu", "m", {});
  auto after = BuildMemoryReport(ckpt.graph, ckpt.plan, "cpu", "m", {});
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(before->saved_for_backward_bytes, r->saved_before_bytes);
  EXPECT_EQ(after->saved_for_backward_bytes, r->saved_after_bytes);
}

// The note fires on the threshold, not on the op: the same LayerNorm freeing its statistics is
// noted, and with nothing freed at all the note says 0.
TEST(CheckpointReportTest, AnInstanceThatFreesNothingGetsTheNote) {
  Planned plain = Plan(std::string(kPrefix) + kPlainBackward);
  CkptSelection s = Selection();
  auto r = BuildCheckpointReport(plain.graph, plain.plan, plain.graph, plain.plan, s);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->bytes_freed, 0);
  EXPECT_EQ(r->bytes_added, 0);
  EXPECT_EQ(r->saved_after_bytes, r->saved_before_bytes);
  EXPECT_EQ(r->nodes_recomputed, 0);
  ASSERT_EQ(r->instances.size(), 2u);
  // The MLP's forward nodes write or read n and e: 2048 B kept.
  EXPECT_EQ(r->instances[1].note,
            "frees 0 B, 0.0 % of the 2.0 KiB its boundary and outputs keep saved (under 10 %): "
            "checkpointing it saves almost nothing; checkpoint its enclosing module instead");
}

TEST(CheckpointReportTest, ACloneOfAnUnselectedInstanceIsAnError) {
  Planned plain = Plan(std::string(kPrefix) + kPlainBackward);
  Planned ckpt = Plan(std::string(kPrefix) + kCheckpointedBackward);
  CkptSelection s = Selection();
  s.instances.pop_back();  // blk.mlp
  auto r = BuildCheckpointReport(plain.graph, plain.plan, ckpt.graph, ckpt.plan, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.status().message(),
      "checkpoint report: MatMul node 'MatMul_h_recompute' (module blk.mlp) recomputes instance "
      "'blk.mlp', which the selection does not hold; build the report from the selection "
      "the remat pass was given");
}

TEST(CheckpointReportTest, JsonHasTheCheckpointObject) {
  Planned plain = Plan(std::string(kPrefix) + kPlainBackward);
  Planned ckpt = Plan(std::string(kPrefix) + kCheckpointedBackward);
  auto c = BuildCheckpointReport(plain.graph, plain.plan, ckpt.graph, ckpt.plan, Selection());
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto r = BuildMemoryReport(ckpt.graph, ckpt.plan, "cpu", "m.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(nlohmann::json::parse(MemoryReportJson(*r)).count("checkpoint"), 0u);
  r->checkpoint = *c;
  const auto j = nlohmann::json::parse(MemoryReportJson(*r));
  const auto& k = j.at("checkpoint");
  EXPECT_EQ(k.at("targets"), (nlohmann::json{"blk.ln", "mlp"}));
  EXPECT_EQ(k.at("values_freed"), 3);
  EXPECT_EQ(k.at("bytes_freed"), 1056);
  EXPECT_EQ(k.at("bytes_added"), 1024);
  EXPECT_EQ(k.at("nodes_recomputed"), 4);
  EXPECT_EQ(k.at("flops_recomputed"), c->flops_recomputed);
  EXPECT_EQ(k.at("saved_before_bytes"), 2080);
  EXPECT_EQ(k.at("saved_after_bytes"), 2048);
  EXPECT_EQ(k.at("step_flops"), c->step_flops);
  EXPECT_DOUBLE_EQ(k.at("recompute_percent").get<double>(),
                   100.0 * double(c->flops_recomputed) / double(c->step_flops));
  EXPECT_EQ(k.at("notes"), nlohmann::json(Selection().notes()));
  ASSERT_EQ(k.at("instances").size(), 2u);
  EXPECT_EQ(k.at("instances")[1], (nlohmann::json{{"module", "blk.mlp"},
                                                  {"class", "pkg.Mlp"},
                                                  {"target", "mlp"},
                                                  {"values_freed", 1},
                                                  {"bytes_freed", 1024},
                                                  {"bytes_added", 1024},
                                                  {"nodes_recomputed", 3},
                                                  {"flops_recomputed", 32768 + 512},
                                                  {"note", ""}}));
  EXPECT_EQ(k.at("instances")[0].at("note"), c->instances[0].note);
  EXPECT_EQ(j.at("flops").at("recompute"), c->flops_recomputed);
}

TEST(CheckpointReportTest, TextShowsRowsTotalsAndNotes) {
  Planned plain = Plan(std::string(kPrefix) + kPlainBackward);
  Planned ckpt = Plan(std::string(kPrefix) + kCheckpointedBackward);
  auto c = BuildCheckpointReport(plain.graph, plain.plan, ckpt.graph, ckpt.plan, Selection());
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto r = BuildMemoryReport(ckpt.graph, ckpt.plan, "cpu", "m.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  r->checkpoint = *c;
  const std::string text = FormatMemoryReport(*r);
  const std::string section = text.substr(text.find("checkpointing:"));
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.2f",
                100.0 * double(c->flops_recomputed) / double(c->step_flops));
  char step[32];
  std::snprintf(step, sizeof step, "%.2f", double(c->step_flops) / 1e3);
  EXPECT_EQ(section,
            "checkpointing: 2 instances of blk.ln, mlp\n"
            "  module   n  class      target  values freed  bytes freed  bytes added  nodes  "
            "  recompute\n"
            "  blk.ln   1  LayerNorm  blk.ln             2         32 B          0 B      1  "
            " 1.79 kFLOP\n"
            "  blk.mlp  1  Mlp        mlp                1      1.0 KiB      1.0 KiB      3  "
            "33.28 kFLOP\n"
            "  total    2                                3      1.0 KiB      1.0 KiB      4  "
            "35.07 kFLOP\n"
            "  saved for backward 2.0 KiB -> 2.0 KiB  (2080 - 1056 freed + 1024 added = 2048 B)\n"
            "  recompute          35.07 kFLOP, " +
                std::string(percent) + " % of the step's " + step +
                " kFLOP\n"
                "  note: blk.mlp.act (gelu) is inside blk.mlp (mlp): the outer target wins\n"
                "  note: blk.ln: " +
                c->instances[0].note + "\n")
      << text;
}

// 48 layers x 2 targets: identical instances collapse to one row per target, with their layers.
TEST(CheckpointReportTest, IdenticalInstancesCollapseIntoOneRowPerTarget) {
  CheckpointReport c;
  c.targets = {"grouped_query_attention", "mptmlp=[0,2,5]"};
  // Module-tree order, as the selection lists them: per layer, the attention then the MLP.
  for (int layer = 0; layer < 48; ++layer) {
    c.instances.push_back({"transformer.blocks." + std::to_string(layer) + ".attn",
                           "llmfoundry.GroupedQueryAttention", "grouped_query_attention", 5,
                           62914560, 0, 12, 3000000000, ""});
    if (layer == 0 || layer == 2 || layer == 5)
      c.instances.push_back({"transformer.blocks." + std::to_string(layer) + ".ffn",
                             "llmfoundry.MPTMLP", "mptmlp=[0,2,5]", 2, 25165824, 0, 4, 9000000000,
                             ""});
  }
  c.instances.back().bytes_freed += 1;  // the last attention differs: a row of its own
  c.saved_before_bytes = int64_t{4} << 30;
  c.saved_after_bytes = c.saved_before_bytes;
  for (const auto& i : c.instances) {
    c.values_freed += i.values_freed;
    c.bytes_freed += i.bytes_freed;
    c.nodes_recomputed += i.nodes_recomputed;
    c.flops_recomputed += i.flops_recomputed;
  }
  c.saved_after_bytes -= c.bytes_freed;
  c.step_flops = 4 * c.flops_recomputed;
  MemoryReport r;
  r.backend = "cpu";
  r.checkpoint = c;
  const std::string text = FormatMemoryReport(r);
  const std::string section = text.substr(text.find("checkpointing:"));
  EXPECT_EQ(section.substr(0, section.find("  (a row")),
            "checkpointing: 51 instances of grouped_query_attention, mptmlp=[0,2,5]\n"
            "  module                            n  class                  target                 "
            "  values freed  bytes freed  bytes added  nodes     recompute\n"
            "  transformer.blocks.{0..46}.attn  47  GroupedQueryAttention  grouped_query_attention"
            "             5     60.0 MiB          0 B     12    3.00 GFLOP\n"
            "  transformer.blocks.{0,2,5}.ffn    3  MPTMLP                 mptmlp=[0,2,5]         "
            "             2     24.0 MiB          0 B      4    9.00 GFLOP\n"
            "  transformer.blocks.47.attn        1  GroupedQueryAttention  grouped_query_attention"
            "             5     60.0 MiB          0 B     12    3.00 GFLOP\n"
            "  total                            51                                                "
            "           246      2.9 GiB          0 B    588  171.00 GFLOP\n")
      << section;
  EXPECT_NE(section.find("recompute          171.00 GFLOP, 25.00 % of the step's 684.00 GFLOP\n"),
            std::string::npos)
      << section;
  EXPECT_NE(section.find("saved for backward 4.0 GiB -> 1.1 GiB  (4294967296 - 3095396353 freed "
                         "+ 0 added = 1199570943 B)\n"),
            std::string::npos)
      << section;
}

// Nested-target notes that differ only in the layer print once with the layers collapsed; other
// notes as they are.
TEST(CheckpointReportTest, NotesCollapseAcrossLayers) {
  CheckpointReport c;
  c.targets = {"mptblock=first-3", "grouped_query_attention"};
  for (int layer : {2, 0, 1}) {
    const std::string block = "transformer.blocks." + std::to_string(layer);
    c.nested.push_back(
        {{block + ".attn", "GQA", layer, "grouped_query_attention", "transformer.blocks"},
         {block, "MPTBlock", layer, "mptblock=first-3", "transformer.blocks"}});
  }
  c.notes.push_back("transformer.blocks.7.attn (x) is inside transformer.blocks.7 (y): ok");
  c.notes.push_back("a.1.b is inside a.2: two numbers stay apart");
  MemoryReport r;
  r.backend = "cpu";
  r.checkpoint = c;
  const std::string text = FormatMemoryReport(r);
  const std::string notes = text.substr(text.find("  note: "));
  EXPECT_EQ(notes,
            "  note: transformer.blocks.{0..2}.attn (grouped_query_attention) is inside "
            "transformer.blocks.{0..2} (mptblock=first-3): the outer target wins\n"
            "  note: transformer.blocks.7.attn (x) is inside transformer.blocks.7 (y): ok\n"
            "  note: a.1.b is inside a.2: two numbers stay apart\n");
}

// The grouping reads the layer from the instances, not from the text: notes group when the
// modules (but for their block's index) and the targets are the same; a module that is not
// inside a block P.N prints as it is.
TEST(CheckpointReportTest, NestingNotesGroupOnTheirBlocksAndTargets) {
  auto nesting = [](int layer, const std::string& outer_target) {
    const std::string block = "h." + std::to_string(layer);
    return CkptNesting{{block + ".mlp.act", "", layer, "gelu", "h"},
                       {block + ".mlp", "", layer, outer_target, "h"}};
  };
  CheckpointReport c;
  c.nested = {nesting(3, "mlp"),
              nesting(10, "mlp"),
              nesting(4, "mlp=[4]"),
              nesting(11, "mlp"),
              {{"blk.mlp.act", "", -1, "gelu", ""}, {"blk.mlp", "", -1, "mlp", ""}}};
  MemoryReport r;
  r.backend = "cpu";
  r.checkpoint = c;
  const std::string text = FormatMemoryReport(r);
  EXPECT_EQ(text.substr(text.find("  note: ")),
            "  note: h.{3,10..11}.mlp.act (gelu) is inside h.{3,10..11}.mlp (mlp): the outer "
            "target wins\n"
            "  note: h.4.mlp.act (gelu) is inside h.4.mlp (mlp=[4]): the outer target wins\n"
            "  note: blk.mlp.act (gelu) is inside blk.mlp (mlp): the outer target wins\n");
  const auto j = nlohmann::json::parse(MemoryReportJson(r));
  ASSERT_EQ(j.at("checkpoint").at("notes").size(), 5u);  // the JSON keeps one note per module
  EXPECT_EQ(j.at("checkpoint").at("notes")[1],
            "h.10.mlp.act (gelu) is inside h.10.mlp (mlp): the outer target wins");
}

// The plain plan's curve on the checkpointed plan's chart: both on one set of axes, in the legend.
TEST(CheckpointReportTest, TimelineShowsBothPlans) {
  Planned plain = Plan(std::string(kPrefix) + kPlainBackward);
  Planned ckpt = Plan(std::string(kPrefix) + kCheckpointedBackward);
  auto before = BuildMemoryReport(plain.graph, plain.plan, "cpu", "m.onnx", {});
  auto after = BuildMemoryReport(ckpt.graph, ckpt.plan, "cpu", "m.onnx", {});
  ASSERT_TRUE(before.ok() && after.ok());
  const TimelineCurve curve = PlainTimelineCurve(*before);
  ASSERT_EQ(curve.live_bytes.size(), before->steps.size());
  for (size_t s = 0; s < curve.live_bytes.size(); ++s)
    EXPECT_EQ(curve.live_bytes[s], before->steps[s].Total()) << "step " << s;
  EXPECT_EQ(curve.label,
            "without checkpointing (peak " + HumanBytes(before->layout.lower_bound_bytes) + ")");
  TimelineOptions options;
  options.extra_curves.push_back(curve);
  const std::string svg = MemoryTimelineSvg(*after, options);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find(">" + curve.label + "<"), std::string::npos);
  EXPECT_NE(svg.find(">recompute<"), std::string::npos);  // the clones' steps are shaded
}

// The real thing: mpt_tiny compiled plain and through the remat pass, both planned as
// foundry-compile plans them.
struct FixtureReport {
  Graph plain, ckpt;
  MemoryPlan plain_plan, ckpt_plan;
  CheckpointReport report;
};

FixtureReport CompileMptTiny(const std::vector<std::string>& instances) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures/mpt_tiny";
  std::vector<std::string> feeds;
  for (const TrainingFixture& f : TrainingFixtures(dir.parent_path()))
    if (f.dir == dir) feeds = f.feeds;
  FixtureReport out;
  auto plain = CompileFixture(dir / "model.onnx", feeds);
  auto ckpt = CompileFixture(dir / "model.onnx", feeds, instances);
  EXPECT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
  if (!plain.ok() || !ckpt.ok()) return out;
  out.plain = std::move(plain->graph);
  out.ckpt = std::move(ckpt->graph);
  auto plain_plan = PlanMemory(out.plain, {{"cpu", CpuWorkspaceBytes}});
  auto ckpt_plan = PlanMemory(out.ckpt, {{"cpu", CpuWorkspaceBytes}});
  EXPECT_TRUE(plain_plan.ok() && ckpt_plan.ok());
  if (!plain_plan.ok() || !ckpt_plan.ok()) return out;
  out.plain_plan = std::move(plain_plan).value();
  out.ckpt_plan = std::move(ckpt_plan).value();
  CkptSelection selection;
  selection.targets = {"test"};
  for (const auto& m : instances) {
    auto it = out.ckpt.modules.find(m);
    selection.instances.push_back(
        {m, it == out.ckpt.modules.end() || it->second.classes.empty() ? "" : it->second.classes[0],
         -1, "test", ""});
  }
  auto report =
      BuildCheckpointReport(out.plain, out.plain_plan, out.ckpt, out.ckpt_plan, selection);
  EXPECT_TRUE(report.ok()) << report.status().message();
  if (report.ok()) out.report = std::move(report).value();
  return out;
}

// The accounting identity, the saved figures against the memory report's, and the recompute
// FLOPs against an independent sum over the nodes the remat pass marked.
void ExpectExactAccounting(const FixtureReport& f, const std::vector<std::string>& instances) {
  const CheckpointReport& r = f.report;
  ASSERT_EQ(r.instances.size(), instances.size());
  EXPECT_EQ(r.saved_after_bytes, r.saved_before_bytes - r.bytes_freed + r.bytes_added);
  EXPECT_LT(r.saved_after_bytes, r.saved_before_bytes);
  auto before = BuildMemoryReport(f.plain, f.plain_plan, "cpu", "mpt_tiny", {});
  auto after = BuildMemoryReport(f.ckpt, f.ckpt_plan, "cpu", "mpt_tiny", {});
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(before->saved_for_backward_bytes, r.saved_before_bytes);
  EXPECT_EQ(after->saved_for_backward_bytes, r.saved_after_bytes);
  EXPECT_EQ(after->flops.recompute, r.flops_recomputed);

  int64_t flops = 0, nodes = 0;
  std::map<std::string, int64_t> flops_of;
  for (const Node& n : f.ckpt.nodes) {
    if (!n.marks.count(kRecomputeInstanceMark)) continue;
    EXPECT_EQ(PhaseOf(n), Phase::kRecompute) << n.name;
    flops += NodeFlops(f.ckpt, n);
    flops_of[n.marks.at(kRecomputeInstanceMark)] += NodeFlops(f.ckpt, n);
    ++nodes;
  }
  EXPECT_GT(flops, 0);
  EXPECT_EQ(r.flops_recomputed, flops);
  EXPECT_EQ(r.nodes_recomputed, nodes);
  int64_t freed = 0, values = 0;
  for (const auto& i : r.instances) {
    EXPECT_EQ(i.flops_recomputed, flops_of[i.module]) << i.module;
    EXPECT_EQ(i.nodes_recomputed, static_cast<int64_t>(RecomputeNodesOf(f.ckpt, i.module).size()))
        << i.module;
    freed += i.bytes_freed;
    values += i.values_freed;
  }
  // Everything freed was made inside an instance.
  EXPECT_EQ(freed, r.bytes_freed);
  EXPECT_EQ(values, r.values_freed);
}

TEST(CheckpointReportFixtureTest, MptTinyBlocksAccountExactly) {
  const std::vector<std::string> blocks = {"transformer.blocks.0", "transformer.blocks.1"};
  FixtureReport f = CompileMptTiny(blocks);
  ExpectExactAccounting(f, blocks);
  for (const auto& i : f.report.instances) {
    EXPECT_GT(i.bytes_freed, 0) << i.module;
    EXPECT_EQ(i.note, "") << i.module;
    EXPECT_EQ(i.class_name, "models.mpt.MPTBlock");
  }
}

// Per submodule: the LayerNorms free only their statistics and get the note; the attention and
// the MLP free several times their boundary and do not.
TEST(CheckpointReportFixtureTest, MptTinyNormsGetTheNoteAttentionAndMlpDoNot) {
  const std::vector<std::string> instances = {
      "transformer.blocks.0.attn", "transformer.blocks.0.ffn", "transformer.blocks.0.norm_1",
      "transformer.blocks.1.attn", "transformer.blocks.1.ffn", "transformer.blocks.1.norm_2"};
  FixtureReport f = CompileMptTiny(instances);
  ExpectExactAccounting(f, instances);
  for (const auto& i : f.report.instances) {
    const bool norm = i.module.find(".norm_") != std::string::npos;
    EXPECT_EQ(i.note.empty(), !norm) << i.module << ": " << i.note;
    EXPECT_GT(i.bytes_freed, 0) << i.module;
  }
}

}  // namespace
}  // namespace foundry
