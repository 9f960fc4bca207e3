// --memory-budget's search (passes/ckpt_budget.h): optimality against brute force on 2-layer
// fixtures (every selection planned with the real planner), the lower bound the search prunes
// with, a smoke test on the 7B structure against llm-foundry's uniform targets, the error below
// the minimum, and byte sizes.
#include "passes/ckpt_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>

#include "compiler/module_tree.h"
#include "compiler/onnx_import.h"
#include "passes/pipeline.h"
#include "runtime/data.h"
#include "runtime/interpreter.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/sanitizer.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

// The pipeline's graph right after autodiff, as foundry-compile keeps it.
std::optional<Graph> AutodiffGraph(const fs::path& model,
                                   const std::map<std::string, int64_t>& dims) {
  auto g = ImportOnnx(model.string(), {.dims = dims});
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return std::nullopt;
  CompileOptions options;
  options.fold.dims = dims;
  std::optional<Graph> out;
  PipelineOptions pipeline;
  pipeline.after_pass = [&](std::string_view pass, const Graph& graph) {
    if (pass == "autodiff") out = graph;
  };
  Status st = RunPasses(*g, BuildPipeline(options), pipeline);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

// A fixture's autodiff graph at the shapes of its inputs, each dimension times `scale` (2: at the
// inputs' 2 x 16 the tiny models peak at the end of the backward, where every gradient is live and
// checkpointing lowers nothing; at 4 x 32 the activations decide, as in real models).
std::optional<Graph> FixtureGraph(const std::string& fixture, const std::string& file,
                                  int64_t scale = 1) {
  const fs::path dir = fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures" / fixture;
  std::map<std::string, int64_t> dims;
  for (const TrainingFixture& f : TrainingFixtures(dir.parent_path())) {
    if (f.dir != dir) continue;
    auto g = ImportOnnx((dir / file).string(), {});
    EXPECT_TRUE(g.ok()) << g.status().message();
    if (!g.ok()) return std::nullopt;
    for (const auto& spec : f.feeds) {
      auto feed = ReadFeed(spec);
      EXPECT_TRUE(feed.ok()) << feed.status().message();
      if (!feed.ok()) return std::nullopt;
      const Value* v = g->FindValue(feed->name);
      if (!v) continue;
      for (size_t d = 0; d < v->dim_params.size() && d < feed->tensor.shape().size(); ++d)
        if (!v->dim_params[d].empty()) dims[v->dim_params[d]] = feed->tensor.shape()[d] * scale;
    }
  }
  EXPECT_FALSE(dims.empty()) << fixture;
  return AutodiffGraph(dir / file, dims);
}

// Per layer: none, the block, every non-empty subset of its eligible children.
std::vector<std::vector<std::vector<std::string>>> LayerOptions(const Graph& g) {
  std::vector<std::vector<std::vector<std::string>>> out;
  for (const BlockLayer& layer : CheckpointableLayers(g)) {
    std::vector<std::vector<std::string>> options = {{}, {layer.block}};
    for (uint32_t m = 1; m < (1u << layer.children.size()); ++m) {
      std::vector<std::string> subset;
      for (size_t c = 0; c < layer.children.size(); ++c)
        if (m & (1u << c)) subset.push_back(layer.block + "." + layer.children[c]);
      options.push_back(subset);
    }
    out.push_back(std::move(options));
  }
  return out;
}

struct Planned {
  CkptEvaluation e;
  std::vector<uint8_t> checkpointed;  // per layer
};

// Every selection of a model with two layers, each planned.
std::vector<Planned> BruteForce(const CkptEvaluator& ev) {
  const auto options = LayerOptions(ev.graph());
  EXPECT_EQ(options.size(), 2u);
  std::vector<Planned> out;
  if (options.size() != 2) return out;
  for (const auto& a : options[0])
    for (const auto& b : options[1]) {
      std::vector<std::string> instances = a;
      instances.insert(instances.end(), b.begin(), b.end());
      auto e = ev.Evaluate(instances);
      EXPECT_TRUE(e.ok()) << e.status().message();
      if (!e.ok()) return {};
      out.push_back({*e, {static_cast<uint8_t>(!a.empty()), static_cast<uint8_t>(!b.empty())}});
    }
  return out;
}

TEST(CheckpointableLayersTest, EligibleChildrenOfTheFixtures) {
  auto mpt = FixtureGraph("mpt_tiny", "model.onnx");
  ASSERT_TRUE(mpt);
  auto layers = CheckpointableLayers(*mpt);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[1].block, "transformer.blocks.1");
  EXPECT_EQ(layers[1].layer, 1);
  // Registry keys: attention, FFN, the two norms; the dropouts carry none.
  EXPECT_EQ(layers[1].children, (std::vector<std::string>{"attn", "ffn", "norm_1", "norm_2"}));
  // No classes: every child with forward nodes (the residual dropouts, p = 0, fold away).
  auto stock = FixtureGraph("mpt_tiny", "model.stock.onnx");
  ASSERT_TRUE(stock);
  EXPECT_EQ(CheckpointableLayers(*stock)[0].children,
            (std::vector<std::string>{"attn", "ffn", "norm_1", "norm_2"}));
  // Classes outside llm-foundry's registry: the children that own parameters.
  auto llama = FixtureGraph("llama_tiny", "model.onnx");
  ASSERT_TRUE(llama);
  EXPECT_EQ(CheckpointableLayers(*llama)[0].children,
            (std::vector<std::string>{"input_layernorm", "mlp", "post_attention_layernorm",
                                      "self_attn"}));
}

// Brute force on 2-layer fixtures: the lower bound, the exact additivity of recompute FLOPs, and
// the search's choice against every selection for budgets from every block to plain.
void CheckOptimal(const std::string& fixture, const std::string& file) {
  SCOPED_TRACE(fixture + "/" + file);
  auto g = FixtureGraph(fixture, file);
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  const std::vector<Planned> all = BruteForce(ev);
  ASSERT_GT(all.size(), 4u);
  const CkptEvaluation& plain = all[0].e;
  ASSERT_TRUE(plain.instances.empty());
  std::map<std::string, std::pair<int64_t, int64_t>> single;  // instance -> flops, nodes
  int64_t all_blocks = 0;
  for (const Planned& p : all) {
    // The bound the search prunes with: every saved buffer is live at the turn, so the arena
    // holds at least their sum (outside bytes do not depend on the selection).
    EXPECT_GE(p.e.arena_bytes, p.e.saved_bytes);
    EXPECT_EQ(p.e.total_bytes - p.e.arena_bytes, plain.total_bytes - plain.arena_bytes);
    if (p.e.instances.size() == 1)
      single[p.e.instances[0]] = {p.e.flops_recomputed, p.e.nodes_recomputed};
    if (p.e.instances.size() == 2 && p.e.instances[0].find('.', 0) != std::string::npos &&
        CheckpointableLayers(*g)[0].block == p.e.instances[0] &&
        CheckpointableLayers(*g)[1].block == p.e.instances[1])
      all_blocks = p.e.total_bytes;
  }
  ASSERT_GT(all_blocks, 0);
  for (const Planned& p : all) {
    int64_t flops = 0, nodes = 0;
    for (const auto& i : p.e.instances) {
      flops += single.at(i).first;
      nodes += single.at(i).second;
    }
    EXPECT_EQ(p.e.flops_recomputed, flops) << "recompute FLOPs not additive";
    EXPECT_EQ(p.e.nodes_recomputed, nodes);
  }
  // Budgets: the boundaries (every block, plain, one byte either side of a selection's total)
  // and points between.
  std::set<int64_t> budgets = {all_blocks, plain.total_bytes, plain.total_bytes - 1,
                               (all_blocks + plain.total_bytes) / 2};
  std::vector<int64_t> totals;
  for (const Planned& p : all)
    if (p.e.total_bytes > all_blocks && p.e.total_bytes < plain.total_bytes)
      totals.push_back(p.e.total_bytes);
  std::sort(totals.begin(), totals.end());
  for (size_t q = 1; q < 4 && !totals.empty(); ++q) {
    const int64_t t = totals[totals.size() * q / 4];
    budgets.insert(t);
    budgets.insert(t - 1);
  }
  std::vector<std::string> blocks;
  for (const BlockLayer& l : CheckpointableLayers(*g)) blocks.push_back(l.block);
  for (int64_t budget : budgets) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    auto r = ChooseCheckpointing(ev, {budget, 400, CkptSyntax::kFoundry});
    ASSERT_TRUE(r.ok()) << r.status().message();
    // The optimum in CkptPreferred's order: fewest recompute FLOPs, nodes, then fewest
    // instances, then the smallest total, then earlier layers checkpointed.
    const Planned* best = nullptr;
    for (const Planned& p : all) {
      if (p.e.total_bytes > budget) continue;
      if (!best || CkptPreferred(p.e, best->e, blocks)) best = &p;
    }
    ASSERT_NE(best, nullptr);
    EXPECT_LE(r->chosen.total_bytes, budget);
    EXPECT_EQ(r->chosen.instances, best->e.instances)
        << "chose " << ::testing::PrintToString(r->chosen.instances) << ", optimum "
        << ::testing::PrintToString(best->e.instances);
    EXPECT_EQ(r->chosen.flops_recomputed, best->e.flops_recomputed);
    EXPECT_EQ(r->chosen.nodes_recomputed, best->e.nodes_recomputed);
    EXPECT_EQ(r->chosen.total_bytes, best->e.total_bytes);
    // Nothing in the answer frees nothing: without any one of its instances the plan is larger.
    for (size_t i = 0; i < r->chosen.instances.size(); ++i) {
      std::vector<std::string> rest = r->chosen.instances;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
      for (const Planned& p : all)
        if (p.e.instances == rest)
          EXPECT_GT(p.e.total_bytes, r->chosen.total_bytes)
              << r->chosen.instances[i] << " frees nothing in the answer";
    }
    EXPECT_LE(r->plans, 400);
    // The multiset search (too few plans left for every assignment): it fits and beats or ties
    // every fitting uniform target; how far it lands from the optimum is printed.
    auto h = ChooseCheckpointing(ev, {budget, 60, CkptSyntax::kFoundry});
    ASSERT_TRUE(h.ok()) << h.status().message();
    EXPECT_LE(h->chosen.total_bytes, budget);
    EXPECT_LE(h->plans, 60);
    for (const auto& u : h->uniform)
      if (u.total_bytes <= budget) {
        EXPECT_LE(h->chosen.flops_recomputed, u.flops_recomputed) << u.label;
      }
    std::printf("%s budget %lld: multiset search %lld recompute FLOPs in %d plans, optimum %lld\n",
                fixture.c_str(), static_cast<long long>(budget),
                static_cast<long long>(h->chosen.flops_recomputed), h->plans,
                static_cast<long long>(best->e.flops_recomputed));
  }
}

TEST(ChooseCheckpointingTest, OptimalOnMptTiny) { CheckOptimal("mpt_tiny", "model.onnx"); }
TEST(ChooseCheckpointingTest, OptimalOnGpt2Tiny) { CheckOptimal("gpt2_tiny", "model.onnx"); }
TEST(ChooseCheckpointingTest, OptimalOnStockLlamaTiny) {
  CheckOptimal("llama_tiny", "model.stock.onnx");
}

TEST(ChooseCheckpointingTest, UniformTargetsAreEvaluatedAndLabelled) {
  auto g = FixtureGraph("mpt_tiny", "model.onnx");
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  auto plain = ev.Evaluate({});
  ASSERT_TRUE(plain.ok());
  auto r = ChooseCheckpointing(ev, {plain->total_bytes - 1, 400, CkptSyntax::kFoundry});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::set<std::string> labels;
  for (const auto& u : r->uniform) labels.insert(u.label);
  for (const char* l :
       {"none", "grouped_query_attention", "mptmlp", "grouped_query_attention, mptmlp", "mptblock"})
    EXPECT_TRUE(labels.count(l)) << l;
  EXPECT_GT(r->plans, 0);
}

TEST(ChooseCheckpointingTest, BudgetBelowTheMinimumSaysWhatDominates) {
  auto g = FixtureGraph("mpt_tiny", "model.onnx");
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  // The smallest selection of all (brute force): on mpt_tiny not every block. The error states
  // exactly its total for every budget below it (the minimum is searched for independently of
  // the budget), and that budget itself compiles.
  int64_t smallest = INT64_MAX;
  for (const Planned& p : BruteForce(ev)) smallest = std::min(smallest, p.e.total_bytes);
  for (int64_t budget : {int64_t{1}, smallest / 2, smallest - 1}) {
    auto r = ChooseCheckpointing(ev, {budget, 400, CkptSyntax::kFoundry});
    ASSERT_FALSE(r.ok());
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(") is below the smallest plan foundry finds, 1.9 MiB (" +
                     std::to_string(smallest) + " bytes, "),
              std::string::npos)
        << m;
    // The gradients live in the arena (one graph run per step), so they are part of it.
    EXPECT_NE(m.find("); its largest part is the optimizer state, 910.0 KiB (AdamW's two slots "
                     "per trained parameter; then arena "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("; to lower it: fewer trained parameters (--freeze GLOB); foundry-run "
                     "--optimizer sgd allocates none of it, but the plan counts AdamW's"),
              std::string::npos)
        << m;
  }
  auto r = ChooseCheckpointing(ev, {smallest, 400, CkptSyntax::kFoundry});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chosen.total_bytes, smallest);
}

// The 7B structure at batch 1, seq 2048: two budgets between every block and plain.
TEST(ChooseCheckpointingTest, Mpt7bSmoke) {
  FOUNDRY_SKIP_UNDER_SANITIZERS();
  auto t0 = std::chrono::steady_clock::now();
  auto g = AutodiffGraph(fs::path(FOUNDRY_SOURCE_DIR) / "models/exports/mpt_7b.onnx",
                         {{"batch", 1}, {"seq", 2048}});
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  std::vector<std::string> blocks;
  for (const BlockLayer& l : CheckpointableLayers(*g)) blocks.push_back(l.block);
  ASSERT_EQ(blocks.size(), 32u);
  auto plain = ev.Evaluate({});
  auto every = ev.Evaluate(blocks);
  ASSERT_TRUE(plain.ok() && every.ok());
  std::printf("7B compile to autodiff + plain and every-block plans: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (int third : {1, 2}) {
    const int64_t budget =
        every->total_bytes + (plain->total_bytes - every->total_bytes) * third / 3;
    const auto start = std::chrono::steady_clock::now();
    auto r = ChooseCheckpointing(ev, {budget, 400});
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_LE(r->chosen.total_bytes, budget);
    const CkptEvaluation* cheapest = nullptr;
    for (const auto& u : r->uniform)
      if (u.total_bytes <= budget && (!cheapest || u.flops_recomputed < cheapest->flops_recomputed))
        cheapest = &u;
    ASSERT_NE(cheapest, nullptr);
    EXPECT_LE(r->chosen.flops_recomputed, cheapest->flops_recomputed);
    std::printf(
        "budget %lld: %.2f s, %d plans; chosen %zu instances '%s', total %lld, recompute %.3f%% "
        "of the step; cheapest fitting uniform '%s' %.3f%%\n",
        static_cast<long long>(budget), s, r->plans, r->chosen.instances.size(),
        r->chosen.label.c_str(), static_cast<long long>(r->chosen.total_bytes),
        100.0 * r->chosen.flops_recomputed / r->chosen.step_flops, cheapest->label.c_str(),
        100.0 * cheapest->flops_recomputed / cheapest->step_flops);
  }
}

TEST(ParseByteSizeTest, UnitsAndDecimals) {
  const std::pair<const char*, int64_t> ok[] = {
      {"123456789", 123456789},
      {"20GiB", int64_t{20} << 30},
      {"20 GiB", int64_t{20} << 30},
      {"1.5GiB", int64_t{3} << 29},
      {"512MiB", int64_t{512} << 20},
      {"1.5GB", 1500000000},
      {"2KB", 2000},
      {"3KiB", 3072},
      {"1TiB", int64_t{1} << 40},
      {"1TB", 1000000000000},
      {"7MB", 7000000},
      {"100B", 100},
      {"20gib", int64_t{20} << 30},
      {"1.3KiB", 1331},  // 1331.2 bytes round down
  };
  for (const auto& [text, bytes] : ok) {
    auto v = ParseByteSize(text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status().message();
    EXPECT_EQ(*v, bytes) << text;
  }
  const std::string forms =
      "; write bytes or a number with a unit: 123456789, 512MiB, 20 GiB, 1.5GB (KiB MiB GiB TiB "
      "are powers of 1024, KB MB GB TB of 1000)";
  const std::pair<const char*, std::string> bad[] = {
      {"", "'' is not a byte size (it does not start with a number)" + forms},
      {"GiB", "'GiB' is not a byte size (it does not start with a number)" + forms},
      {"20 GiBs", "'20 GiBs' is not a byte size (unknown unit 'GiBs')" + forms},
      {"20XB", "'20XB' is not a byte size (unknown unit 'XB')" + forms},
      {"1.", "'1.' is not a byte size (no digits after the decimal point)" + forms},
      {"1.5", "'1.5' is not a byte size (bytes are whole)" + forms},
      {"0GiB", "'0GiB' is not a byte size (it must be more than 0 bytes)" + forms},
      {"-1GiB", "'-1GiB' is not a byte size (it is negative)" + forms},
      {"9000000000TiB",
       "'9000000000TiB' is not a byte size (too large: more than 9223372036854775807 bytes)" +
           forms},
  };
  for (const auto& [text, message] : bad) {
    auto v = ParseByteSize(text);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_EQ(v.status().message(), message);
  }
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

namespace foundry {
namespace FOUNDRY_TEST_NS {

// The plans the search chooses train with the plain plan's numbers: for a budget halfway between
// the smallest plan and the plain one, the chosen selection's loss and every gradient are
// bitwise the plain graph's (dropout on in mpt_tiny_dropout; a stock export without classes).
TEST(ChooseCheckpointingTest, ChosenPlansAreBitwiseThePlainNumbers) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"mpt_tiny_dropout", "model.onnx"},
      {"llama_tiny", "model.onnx"},
      {"gpt2_tiny", "model.stock.onnx"},
      {"pythia_tiny", "model.onnx"}};
  for (const auto& [fixture, file] : models) {
    SCOPED_TRACE(fixture + "/" + file);
    auto g = FixtureGraph(fixture, file, 2);  // chosen at 4 x 32, run at the inputs' 2 x 16
    ASSERT_TRUE(g);
    CkptEvaluator evaluator(*g);
    auto plain = evaluator.Evaluate({});
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    std::vector<std::string> blocks;
    for (const BlockLayer& l : CheckpointableLayers(*g)) blocks.push_back(l.block);
    auto all = evaluator.Evaluate(blocks);
    ASSERT_TRUE(all.ok()) << all.status().message();
    BudgetOptions options;
    options.budget_bytes = (plain->total_bytes + all->total_bytes) / 2;
    auto chosen = ChooseCheckpointing(evaluator, options);
    ASSERT_TRUE(chosen.ok()) << chosen.status().message();
    ASSERT_FALSE(chosen->chosen.instances.empty());
    EXPECT_LE(chosen->chosen.total_bytes, options.budget_bytes);

    const fs::path dir = fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures" / fixture;
    std::vector<std::string> feeds;
    for (const TrainingFixture& f : TrainingFixtures(dir.parent_path()))
      if (f.dir == dir) feeds = f.feeds;
    auto a = CompileFixture(dir / file, feeds);
    auto b = CompileFixture(dir / file, feeds, chosen->chosen.instances);
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    std::map<std::string, Tensor> inputs;
    for (const auto& spec : feeds) {
      auto f = ReadFeed(spec);
      ASSERT_TRUE(f.ok()) << f.status().message();
      inputs.emplace(f->name, std::move(f->tensor));
    }
    InterpretOptions run;
    run.ctx.seed = 5;
    auto x = Interpret(a->graph, inputs, run);
    auto y = Interpret(b->graph, inputs, run);
    ASSERT_TRUE(x.ok()) << x.status().message();
    ASSERT_TRUE(y.ok()) << y.status().message();
    ASSERT_EQ(x->size(), a->graph.outputs.size());
    for (const auto& [name, t] : *x)
      EXPECT_TRUE(t.BitwiseEqual(y->at(name))) << name << " differs under the chosen plan";
  }
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

namespace foundry {
namespace FOUNDRY_TEST_NS {

CkptEvaluation Eval(int64_t flops, int64_t nodes, std::vector<std::string> instances,
                    int64_t total) {
  CkptEvaluation e;
  e.flops_recomputed = flops;
  e.nodes_recomputed = nodes;
  e.instances = std::move(instances);
  e.total_bytes = total;
  return e;
}

// The tie rule, stated: FLOPs, nodes, then fewer instances, then the smaller total, then earlier
// layers checkpointed (first-k before last-k), then the paths.
TEST(CkptPreferredTest, TiesGoToFewerInstancesThenTheSmallerTotalThenFirstK) {
  const std::vector<std::string> blocks = {"b.0", "b.1"};
  // Fewer recompute FLOPs wins over everything else.
  EXPECT_TRUE(
      CkptPreferred(Eval(9, 9, {"b.0", "b.1"}, 200), Eval(10, 1, {"b.0.attn"}, 100), blocks));
  // Equal recompute: fewer instances, even with a larger total (padding that recomputes
  // nothing never wins).
  const CkptEvaluation attn = Eval(10, 2, {"b.0.attn"}, 100);
  const CkptEvaluation padded = Eval(10, 2, {"b.0.act", "b.0.attn"}, 90);
  EXPECT_TRUE(CkptPreferred(attn, padded, blocks));
  EXPECT_FALSE(CkptPreferred(padded, attn, blocks));
  // Equal instances: the smaller total, whichever layer it checkpoints.
  EXPECT_TRUE(CkptPreferred(Eval(10, 2, {"b.1"}, 99), Eval(10, 2, {"b.0"}, 100), blocks));
  EXPECT_TRUE(CkptPreferred(Eval(10, 2, {"b.0"}, 99), Eval(10, 2, {"b.1"}, 100), blocks));
  // Equal totals: first-k (the earlier layer checkpointed) before last-k.
  EXPECT_TRUE(CkptPreferred(Eval(10, 2, {"b.0"}, 100), Eval(10, 2, {"b.1"}, 100), blocks));
  EXPECT_FALSE(CkptPreferred(Eval(10, 2, {"b.1"}, 100), Eval(10, 2, {"b.0"}, 100), blocks));
  // Irreflexive.
  EXPECT_FALSE(CkptPreferred(attn, attn, blocks));
}

// The attention option is the child that computes it, never a norm named after it.
TEST(AttentionChildTest, TheChildThatComputesTheAttention) {
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cases = {
      {"mpt_tiny", "model.onnx", "transformer.blocks.0", "attn"},
      {"mpt_tiny", "model.stock.onnx", "transformer.blocks.0", "attn"},
      {"llama_tiny", "model.onnx", "model.layers.0", "self_attn"},
      {"llama_tiny", "model.stock.onnx", "model.layers.1", "self_attn"},
      {"gpt2_tiny", "model.onnx", "transformer.h.0", "attn"},
      {"pythia_tiny", "model.onnx", "gpt_neox.layers.0", "attention"},
  };
  for (const auto& [fixture, file, block, child] : cases) {
    SCOPED_TRACE(fixture + "/" + file);
    auto g = FixtureGraph(fixture, file);
    ASSERT_TRUE(g);
    EXPECT_EQ(AttentionChild(*g, block), child);
  }
}

// Under --ckpt-syntax foundry, Llama's uniform "attention" target is self_attn (the issue saw
// post_attention_layernorm, the first child whose name holds "attention").
TEST(ChooseCheckpointingTest, LlamaAttentionTargetIsSelfAttn) {
  auto g = FixtureGraph("llama_tiny", "model.onnx");
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  auto plain = ev.Evaluate({});
  ASSERT_TRUE(plain.ok());
  auto r = ChooseCheckpointing(ev, {plain->total_bytes - 1, 400, CkptSyntax::kFoundry});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::set<std::string> labels;
  for (const auto& u : r->uniform) labels.insert(u.label);
  EXPECT_TRUE(labels.count("self_attn")) << ::testing::PrintToString(labels);
  EXPECT_TRUE(labels.count("self_attn, mlp")) << ::testing::PrintToString(labels);
  for (const auto& l : labels) EXPECT_EQ(l.find("layernorm"), std::string::npos) << l;
}

TEST(UpstreamUnitsTest, MptAttentionAndNormsLlamaNone) {
  auto mpt = FixtureGraph("mpt_tiny", "model.onnx");
  ASSERT_TRUE(mpt);
  EXPECT_TRUE(IsMptModel(*mpt));
  const auto units = UpstreamUnits(*mpt);
  ASSERT_EQ(units.size(), 2u);
  EXPECT_EQ(units[0].name, "grouped_query_attention");
  EXPECT_EQ(units[0].children, (std::vector<std::string>{"attn"}));
  EXPECT_EQ(units[1].name, "low_precision_layernorm");
  EXPECT_EQ(units[1].children, (std::vector<std::string>{"norm_1", "norm_2"}));
  for (const char* k : {"mptblock", "grouped_query_attention", "low_precision_layernorm"})
    EXPECT_TRUE(IsUpstreamClassKey(k)) << k;
  for (const char* k : {"mptmlp", "mptglu", "te_ln_mlp", "block", "attn"})
    EXPECT_FALSE(IsUpstreamClassKey(k)) << k;
  auto llama = FixtureGraph("llama_tiny", "model.onnx");
  ASSERT_TRUE(llama);
  EXPECT_FALSE(IsMptModel(*llama));
  EXPECT_TRUE(UpstreamUnits(*llama).empty());
  auto stock = FixtureGraph("mpt_tiny", "model.stock.onnx");  // no classes: not MPTBlock
  ASSERT_TRUE(stock);
  EXPECT_FALSE(IsMptModel(*stock));
}

// --ckpt-syntax llm-foundry on MPT: against every selection upstream can say on the 2-layer
// fixture (per layer: nothing, grouped_query_attention, low_precision_layernorm, mptblock), the
// search's answer is the best in CkptPreferred's order, and it is said with one upstream class
// key per block.
TEST(ChooseCheckpointingTest, LlmFoundrySyntaxIsOptimalAmongUpstreamAnswersOnMptTiny) {
  auto g = FixtureGraph("mpt_tiny", "model.onnx");
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  const auto layers = CheckpointableLayers(*g);
  ASSERT_EQ(layers.size(), 2u);
  std::vector<std::string> blocks = {layers[0].block, layers[1].block};
  auto options = [&](const std::string& b) {
    return std::vector<std::vector<std::string>>{
        {}, {b + ".attn"}, {b + ".norm_1", b + ".norm_2"}, {b}};
  };
  std::vector<CkptEvaluation> all;
  for (const auto& a : options(blocks[0]))
    for (const auto& c : options(blocks[1])) {
      std::vector<std::string> instances = a;
      instances.insert(instances.end(), c.begin(), c.end());
      auto e = ev.Evaluate(instances);
      ASSERT_TRUE(e.ok()) << e.status().message();
      all.push_back(*e);
    }
  std::set<int64_t> budgets;
  for (const auto& e : all) budgets.insert({e.total_bytes, e.total_bytes - 1});
  int answered = 0;
  for (int64_t budget : budgets) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    const CkptEvaluation* best = nullptr;
    for (const auto& e : all)
      if (e.total_bytes <= budget && (!best || CkptPreferred(e, *best, blocks))) best = &e;
    auto r = ChooseCheckpointing(ev, {budget, 400, CkptSyntax::kLlmFoundry});
    if (!best) {
      EXPECT_FALSE(r.ok());
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().message();
    ++answered;
    EXPECT_EQ(r->chosen.instances, best->instances);
    EXPECT_EQ(r->chosen.total_bytes, best->total_bytes);
    auto config = SelectionAsConfig(*g, r->chosen.instances, CkptSyntax::kLlmFoundry);
    ASSERT_TRUE(config.ok()) << config.status().message();
    EXPECT_TRUE(config->warnings.empty()) << config->warnings.front();
    if (r->chosen.instances.empty()) continue;
    EXPECT_EQ(config->yaml.front(), '{');
    std::set<int64_t> seen;
    for (const CkptTarget& t : config->targets) {
      EXPECT_TRUE(IsUpstreamClassKey(t.name)) << t.name;
      auto ls = ParseLayerSpec(t.layers, 2);
      ASSERT_TRUE(ls.ok()) << ls.status().message();
      for (int64_t l : *ls) EXPECT_TRUE(seen.insert(l).second) << config->yaml << ": layer " << l;
    }
  }
  EXPECT_GT(answered, 8);
}

// --ckpt-syntax llm-foundry on a Hugging Face model: every block or nothing, said by the flag
// alone, and the file says why.
TEST(ChooseCheckpointingTest, LlmFoundrySyntaxOnLlamaIsEveryBlockOrNothing) {
  auto g = FixtureGraph("llama_tiny", "model.onnx", 2);
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  std::vector<std::string> blocks;
  for (const BlockLayer& l : CheckpointableLayers(*g)) blocks.push_back(l.block);
  auto plain = ev.Evaluate({});
  auto every = ev.Evaluate(blocks);
  ASSERT_TRUE(plain.ok() && every.ok());
  ASSERT_LT(every->total_bytes, plain->total_bytes);
  auto none = ChooseCheckpointing(ev, {plain->total_bytes, 400, CkptSyntax::kLlmFoundry});
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->chosen.instances.empty());
  for (int64_t budget : {plain->total_bytes - 1, every->total_bytes}) {
    auto r = ChooseCheckpointing(ev, {budget, 400, CkptSyntax::kLlmFoundry});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->chosen.instances, blocks);
    EXPECT_LE(r->plans, 2);            // the first search's plans are cached on the evaluator
    ASSERT_EQ(r->uniform.size(), 2u);  // nothing else is planned: none, every block
    EXPECT_EQ(r->uniform[1].label, "block");
    EXPECT_TRUE(r->searched.empty());
    auto choice = MakeBudgetChoice(*g, *r, budget, CkptSyntax::kLlmFoundry);
    ASSERT_TRUE(choice.ok()) << choice.status().message();
    EXPECT_TRUE(choice->config.every_block_by_flag);
    EXPECT_EQ(choice->config.yaml, "");
    ASSERT_EQ(choice->config.notes.size(), 1u);
    EXPECT_EQ(CkptConfigFile("c", choice->config),
              "# c\n# note: " + choice->config.notes[0] +
                  "\nfsdp_config:\n  activation_checkpointing: true\n");
    EXPECT_NE(choice->config.notes[0].find("reads no model.activation_checkpointing_target"),
              std::string::npos);
    // The file reads back to every block.
    auto back = ParseCkptConfigText(CkptConfigFile("c", choice->config), "f.yaml");
    ASSERT_TRUE(back.ok()) << back.status().message();
    auto sel = SelectCkptTargets(*g, back->targets);
    ASSERT_TRUE(sel.ok());
    ASSERT_EQ(sel->instances.size(), blocks.size());
  }
  auto below = ChooseCheckpointing(ev, {every->total_bytes - 1, 400, CkptSyntax::kLlmFoundry});
  ASSERT_FALSE(below.ok());
  EXPECT_NE(below.status().message().find(
                "(" + std::to_string(every->total_bytes) +
                " bytes, every block checkpointed, among the answers upstream llm-foundry "
                "accepts (--ckpt-syntax foundry searches finer ones)); its largest part is "),
            std::string::npos)
      << below.status().message();
  // A finer selection is refused in that syntax, and said in foundry's.
  auto one = SelectionAsConfig(*g, {blocks[0]}, CkptSyntax::kLlmFoundry);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().message(),
            "checkpoint selection of 1 instances is not every block of this non-MPT model; "
            "upstream llm-foundry cannot say it (--ckpt-syntax foundry writes it in foundry's "
            "richer syntax)");
  EXPECT_TRUE(SelectionAsConfig(*g, {blocks[0]}, CkptSyntax::kFoundry).ok());
}

TEST(ParseCkptSyntaxTest, Names) {
  EXPECT_EQ(*ParseCkptSyntax("llm-foundry"), CkptSyntax::kLlmFoundry);
  EXPECT_EQ(*ParseCkptSyntax("foundry"), CkptSyntax::kFoundry);
  auto bad = ParseCkptSyntax("upstream");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "'upstream' is not a checkpoint syntax; write llm-foundry (only answers upstream "
            "llm-foundry accepts) or foundry (any selection foundry reads)");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Nothing that frees nothing is part of an answer, also where the search is heuristic (six
// children per block on the stock export with dropout: 65 options per layer, the multiset walk):
// for budgets across the range, taking any one name (a child, or the block) off every layer it
// is on in the answer plans a larger total.
TEST(ChooseCheckpointingTest, NoNameInAnAnswerFreesNothing) {
  auto g = FixtureGraph("mpt_tiny_dropout", "model.stock.onnx", 2);
  ASSERT_TRUE(g);
  CkptEvaluator ev(*g);
  const auto layers = CheckpointableLayers(*g);
  ASSERT_EQ(layers[0].children.size(), 6u);
  std::vector<std::string> blocks;
  for (const BlockLayer& l : layers) blocks.push_back(l.block);
  auto plain = ev.Evaluate({});
  auto every = ev.Evaluate(blocks);
  ASSERT_TRUE(plain.ok() && every.ok());
  int checked = 0;
  for (int k = 0; k <= 8; ++k) {
    const int64_t budget = every->total_bytes + (plain->total_bytes - every->total_bytes) * k / 8;
    SCOPED_TRACE("budget " + std::to_string(budget));
    auto r = ChooseCheckpointing(ev, {budget, 400, CkptSyntax::kFoundry});
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::vector<std::string> names = layers[0].children;
    names.push_back("");  // the block
    for (const std::string& name : names) {
      std::vector<std::string> rest;
      for (const auto& i : r->chosen.instances) {
        bool drop = false;
        for (const auto& b : blocks) drop = drop || i == (name.empty() ? b : b + "." + name);
        if (!drop) rest.push_back(i);
      }
      if (rest.size() == r->chosen.instances.size()) continue;
      auto without = ev.Evaluate(rest);
      ASSERT_TRUE(without.ok()) << without.status().message();
      ++checked;
      EXPECT_GT(without->total_bytes, r->chosen.total_bytes)
          << "'" << (name.empty() ? "block" : name) << "' frees nothing in "
          << ::testing::PrintToString(r->chosen.instances);
    }
  }
  EXPECT_GT(checked, 4);
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
