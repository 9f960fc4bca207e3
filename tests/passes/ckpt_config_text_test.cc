// SelectionAsConfig: the printed llm-foundry config, its warnings, and the round trip through a
// file, ReadCkptConfig and SelectCkptTargets on many selections.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "compiler/module_tree.h"
#include "compiler/onnx_import.h"
#include "passes/ckpt_budget.h"
#include "tests/support/sanitizer.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

const Graph& Model(const std::string& relative) {
  static std::map<std::string, Graph> cache;
  auto it = cache.find(relative);
  if (it != cache.end()) return it->second;
  ImportOptions options;
  options.load_weights = false;
  auto g = ImportOnnx(std::string(FOUNDRY_SOURCE_DIR) + "/" + relative, options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return cache.emplace(relative, g.ok() ? std::move(g).value() : Graph()).first->second;
}
const Graph& Fixture(const std::string& name, const std::string& file = "model.onnx") {
  return Model("models/fixtures/" + name + "/" + file);
}

// The instances `yaml` selects when --ckpt-config reads it from a file; notes make it fail.
std::vector<std::string> ReadBack(const Graph& g, const std::string& yaml) {
  const std::string path = ::testing::TempDir() + "/ckpt_config_text_test.yaml";
  std::ofstream(path) << yaml << "\n";
  auto config = ReadCkptConfig(path);
  std::remove(path.c_str());
  EXPECT_TRUE(config.ok()) << yaml << ": " << config.status().message();
  if (!config.ok()) return {};
  EXPECT_TRUE(config->enabled);
  auto sel = SelectCkptTargets(g, config->targets);
  EXPECT_TRUE(sel.ok()) << yaml << ": " << sel.status().message();
  if (!sel.ok()) return {};
  EXPECT_TRUE(sel->notes().empty()) << yaml << ": " << sel->notes().front();
  std::vector<std::string> out;
  for (const auto& i : sel->instances) out.push_back(i.module);
  return out;
}

CkptConfigText Config(const Graph& g, const std::vector<std::string>& instances) {
  auto c = SelectionAsConfig(g, instances);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : CkptConfigText{};
}

std::string Yaml(const Graph& g, const std::vector<std::string>& instances) {
  CkptConfigText c = Config(g, instances);
  EXPECT_EQ(ReadBack(g, c.yaml), instances) << c.yaml;
  return c.yaml;
}

std::vector<std::string> Paths(const std::string& prefix, std::vector<int> layers,
                               const std::string& child = "") {
  std::vector<std::string> out;
  for (int l : layers)
    out.push_back(prefix + std::to_string(l) + (child.empty() ? "" : "." + child));
  return out;
}
std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end(), ModulePathLess);
  return v;
}
std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return Sorted(a);
}

const std::string kMpt = "transformer.blocks.";

TEST(SelectionAsConfig, LayerForms) {
  const Graph& g = Fixture("mpt_tiny_4layer");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {0, 1, 2, 3})), "{mptblock: first-4}");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {0, 1, 2})), "{mptblock: first-3}");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {2, 3})), "{mptblock: last-2}");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {1, 2})), "{mptblock: range-1-3}");
  // A run of one inside: a bare index, so a YAML list (upstream's comma string takes none, and a
  // bare int value would mean "the first n").
  EXPECT_EQ(Yaml(g, Paths(kMpt, {1})), "{mptblock: [1]}");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {0, 2})), "{mptblock: [first-1, 2]}");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {0, 3})), "{mptblock: 'first-1,last-1'}");
  EXPECT_EQ(Config(g, Paths(kMpt, {0, 3})).targets.front().Text(), "mptblock=first-1,last-1");
  EXPECT_TRUE(Config(g, Paths(kMpt, {0, 3})).warnings.empty());
}

TEST(SelectionAsConfig, IssueExampleOnThe7B) {
  const Graph& g = Model("models/exports/mpt_7b.onnx");
  std::vector<std::string> sel = Paths(kMpt, {0, 1, 2});
  for (int l = 3; l < 23; ++l) sel.push_back(kMpt + std::to_string(l) + ".attn");
  CkptConfigText c = Config(g, Sorted(sel));
  EXPECT_EQ(c.yaml, "{mptblock: first-3, grouped_query_attention: range-3-23}");
  EXPECT_EQ(ReadBack(g, c.yaml), Sorted(sel));
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  EXPECT_EQ(Yaml(g, Paths(kMpt, {29, 30, 31}, "attn")), "{grouped_query_attention: last-3}");

  // Blocks, then attention, with the FFN too in the last 12 layers: two upstream objections.
  sel = Paths(kMpt, {0, 1, 2, 3, 4, 5, 6, 7});
  for (int l = 8; l < 32; ++l) sel.push_back(kMpt + std::to_string(l) + ".attn");
  for (int l = 20; l < 32; ++l) sel.push_back(kMpt + std::to_string(l) + ".ffn");
  c = Config(g, Sorted(sel));
  EXPECT_EQ(c.yaml, "{mptblock: first-8, grouped_query_attention: last-24, mptmlp: last-12}");
  EXPECT_EQ(ReadBack(g, c.yaml), Sorted(sel));
  EXPECT_EQ(c.warnings,
            (std::vector<std::string>{
                "upstream llm-foundry rejects 'mptmlp': FFN keys raise a TypeError there (foundry "
                "reads them)",
                "upstream llm-foundry rejects several names on one block: grouped_query_attention, "
                "mptmlp share layers 20..31 (its overlap check allows one name per block)"}));
}

TEST(SelectionAsConfig, NamesAndWarnings) {
  const Graph& g = Fixture("mpt_tiny_4layer");
  // Attention + FFN in every layer: two names on every block, one of them an FFN key.
  CkptConfigText c =
      Config(g, Paths(kMpt, {0, 1, 2, 3}, "attn") + Paths(kMpt, {0, 1, 2, 3}, "ffn"));
  EXPECT_EQ(c.yaml, "{grouped_query_attention: first-4, mptmlp: first-4}");
  EXPECT_EQ(c.warnings,
            (std::vector<std::string>{
                "upstream llm-foundry rejects 'mptmlp': FFN keys raise a TypeError there (foundry "
                "reads them)",
                "upstream llm-foundry rejects several names on one block: grouped_query_attention, "
                "mptmlp share layers 0..3 (its overlap check allows one name per block)"}));

  // `low_precision_layernorm` takes norm_1 and norm_2: where only norm_1 is chosen, its child
  // name says it.
  c = Config(g, Sorted({kMpt + "0.norm_1", kMpt + "1.norm_1", kMpt + "1.norm_2"}));
  EXPECT_EQ(c.yaml, "{norm_1: first-1, low_precision_layernorm: [1]}");
  EXPECT_EQ(ReadBack(g, c.yaml), Sorted({kMpt + "0.norm_1", kMpt + "1.norm_1", kMpt + "1.norm_2"}));
  EXPECT_EQ(c.warnings, (std::vector<std::string>{
                            "upstream llm-foundry rejects 'norm_1': a child name of the blocks "
                            "(foundry only; upstream takes registry keys)"}));

  // A name grows over layers it covers anyway when that is shorter: norm_1 in layers 0..2 with
  // norm_2 in layer 1 is written norm_1: first-3 (layer 1's norm_1 covered twice), not
  // norm_1: [first-1, 2]. Both names on layer 1: upstream's overlap check would object, as it
  // does to norm_1 anyway.
  c = Config(g, Paths(kMpt, {0, 1, 2}, "norm_1") + Paths(kMpt, {1}, "norm_2"));
  EXPECT_EQ(c.yaml, "{norm_1: first-3, low_precision_layernorm: [1]}");
  EXPECT_EQ(ReadBack(g, c.yaml), Paths(kMpt, {0, 1, 2}, "norm_1") + Paths(kMpt, {1}, "norm_2"));
  EXPECT_EQ(c.warnings.size(), 2u);
  // Where it is no shorter, it stays.
  EXPECT_EQ(Yaml(g, Paths(kMpt, {0, 1, 2, 3}, "norm_1") + Paths(kMpt, {1, 2, 3}, "norm_2")),
            "{norm_1: first-1, low_precision_layernorm: last-3}");

  // A grandchild: the path glob.
  c = Config(g, Paths(kMpt, {0, 1}, "attn.Wqkv"));
  EXPECT_EQ(c.yaml, "{'transformer.blocks.*.attn.Wqkv': first-2}");
  EXPECT_EQ(ReadBack(g, c.yaml), Paths(kMpt, {0, 1}, "attn.Wqkv"));
  EXPECT_EQ(c.warnings,
            (std::vector<std::string>{
                "upstream llm-foundry rejects 'transformer.blocks.*.attn.Wqkv': a module-path glob "
                "(foundry only; upstream takes registry keys)"}));
}

TEST(SelectionAsConfig, GluIsMptmlp) {
  const Graph& g = Fixture("mpt_tiny_gqa_glu");
  EXPECT_EQ(Yaml(g, Paths(kMpt, {0, 1}, "ffn")), "{mptmlp: first-2}");
}

TEST(SelectionAsConfig, ExportsWithoutRegistryClasses) {
  const Graph& gpt2 = Fixture("gpt2_tiny", "model.stock.onnx");
  CkptConfigText c = Config(gpt2, Paths("transformer.h.", {0, 1}));
  EXPECT_EQ(c.yaml, "{block: first-2}");
  EXPECT_EQ(c.warnings, (std::vector<std::string>{
                            "upstream llm-foundry rejects 'block': foundry's name for every block "
                            "(upstream knows mptblock only)"}));
  EXPECT_EQ(Yaml(gpt2, Paths("transformer.h.", {1}, "mlp")), "{mlp: last-1}");
  const Graph& llama = Fixture("llama_tiny");
  EXPECT_EQ(Yaml(llama, Sorted({"model.layers.0", "model.layers.1.self_attn"})),
            "{block: first-1, self_attn: last-1}");
}

TEST(SelectionAsConfig, Errors) {
  const Graph& g = Fixture("mpt_tiny_4layer");
  auto error = [&](const std::vector<std::string>& instances) {
    auto c = SelectionAsConfig(g, instances);
    EXPECT_FALSE(c.ok());
    return c.ok() ? "" : c.status().message();
  };
  EXPECT_EQ(error({"transformer.blocks.9"}),
            "checkpoint selection: 'transformer.blocks.9' is not a module of this model");
  EXPECT_EQ(error({"transformer"}),
            "checkpoint selection: 'transformer' is not inside a block; only modules inside the "
            "blocks can be checkpointed");
  EXPECT_EQ(error({kMpt + "0", kMpt + "0"}),
            "checkpoint selection: 'transformer.blocks.0' is listed twice");
  EXPECT_EQ(error({kMpt + "0", kMpt + "0.attn"}),
            "checkpoint selection: 'transformer.blocks.0.attn' is inside 'transformer.blocks.0', "
            "also selected; list the outer module only");
  // Nothing to checkpoint is no target at all (llm-foundry turns it off with its flag).
  auto none = SelectionAsConfig(g, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->yaml, "");
  EXPECT_TRUE(none->targets.empty());
}

// Random selections: per layer nothing, the block, or a random set of its children (sometimes a
// grandchild), round-tripped; the warnings recomputed from the targets.
void RandomRoundTrips(const Graph& g, int count, uint32_t seed) {
  std::vector<std::string> blocks;
  const std::vector<ModuleInfo> modules = ListModules(g);
  for (const auto& m : modules)
    if (m.is_block) blocks.push_back(m.path);
  std::mt19937 rng(seed);
  int warned = 0, names_seen = 0;
  for (int round = 0; round < count; ++round) {
    std::vector<std::string> sel;
    for (const auto& b : blocks) {
      const int pick = static_cast<int>(rng() % 4);
      if (pick == 0) continue;
      if (pick == 1) {
        sel.push_back(b);
        continue;
      }
      std::vector<std::string> kids;
      for (const auto& m : modules) {
        if (m.node_count == 0 || m.path.compare(0, b.size() + 1, b + ".") != 0) continue;
        const std::string rest = m.path.substr(b.size() + 1);
        const bool child = rest.find('.') == std::string::npos;
        if (child ? rng() % 2 == 0 : rng() % 16 == 0) kids.push_back(m.path);
      }
      for (const auto& k : kids) {  // keep the outermost
        bool inner = false;
        for (const auto& o : kids) inner |= k.compare(0, o.size() + 1, o + ".") == 0;
        if (!inner) sel.push_back(k);
      }
    }
    sel = Sorted(sel);
    auto c = SelectionAsConfig(g, sel);
    ASSERT_TRUE(c.ok()) << c.status().message();
    if (sel.empty()) {
      EXPECT_EQ(c->yaml, "");
      continue;
    }
    ASSERT_EQ(ReadBack(g, c->yaml), sel) << c->yaml;
    // Warnings: one per name upstream lacks or raises on, one more for a layer with two names.
    size_t expected = 0;
    std::map<int64_t, int> names_on;
    for (const auto& t : c->targets) {
      const bool ffn = t.name == "mptmlp" || t.name == "mptglu";
      expected += ffn || !IsCkptRegistryKey(t.name);
      auto layers = ParseLayerSpec(t.layers, static_cast<int64_t>(blocks.size()));
      ASSERT_TRUE(layers.ok()) << t.layers;
      for (int64_t l : *layers) ++names_on[l];
    }
    bool shared = false;
    for (const auto& [l, n] : names_on) shared |= n > 1;
    expected += shared;
    EXPECT_EQ(c->warnings.size(), expected) << c->yaml;
    warned += !c->warnings.empty();
    names_seen += static_cast<int>(c->targets.size());
  }
  EXPECT_GT(warned, 0);
  EXPECT_GT(names_seen, count);
}

TEST(SelectionAsConfig, RandomRoundTrips) {
  RandomRoundTrips(Fixture("mpt_tiny_4layer"), 300, 1);
  RandomRoundTrips(Fixture("mpt_tiny"), 100, 2);
  RandomRoundTrips(Fixture("mpt_tiny_gqa_glu"), 100, 3);
  RandomRoundTrips(Fixture("gpt2_tiny", "model.stock.onnx"), 200, 4);
  RandomRoundTrips(Fixture("gpt2_tiny"), 100, 5);
  RandomRoundTrips(Fixture("llama_tiny"), 200, 6);
  RandomRoundTrips(Fixture("llama_tiny", "model.stock.onnx"), 100, 7);
}

TEST(SelectionAsConfig, RandomRoundTripsOnThe7B) {
  FOUNDRY_SKIP_UNDER_SANITIZERS();
  RandomRoundTrips(Model("models/exports/mpt_7b.onnx"), 60, 8);
}

}  // namespace
}  // namespace foundry

namespace foundry {
namespace FOUNDRY_TEST_NS {

// --ckpt-syntax llm-foundry: what upstream accepts is said with its notes; what it refuses is an
// error naming --ckpt-syntax foundry; the file carries every warning and note as a comment.
TEST(SelectionAsConfig, LlmFoundrySyntax) {
  const Graph& g = Model("models/exports/mpt_7b.onnx");
  std::vector<std::string> sel = Paths(kMpt, {0, 1, 2});
  for (int l = 3; l < 23; ++l) sel.push_back(kMpt + std::to_string(l) + ".attn");
  auto ok = SelectionAsConfig(g, Sorted(sel), CkptSyntax::kLlmFoundry);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->yaml, "{mptblock: first-3, grouped_query_attention: range-3-23}");
  EXPECT_TRUE(ok->warnings.empty());
  ASSERT_EQ(ok->notes.size(), 1u);
  EXPECT_EQ(CkptConfigFile("head", *ok),
            "# head\n# note: " + ok->notes[0] +
                "\nmodel:\n  activation_checkpointing_target: {mptblock: first-3, "
                "grouped_query_attention: range-3-23}\nfsdp_config:\n  activation_checkpointing: "
                "true\n");

  // The issue's MPT-1B answer, on the 7B's layers: two names on blocks 22..23, an FFN key.
  sel = Paths(kMpt, {}, "attn");
  for (int l = 0; l < 24; ++l) sel.push_back(kMpt + std::to_string(l) + ".attn");
  for (int l = 22; l < 32; ++l) sel.push_back(kMpt + std::to_string(l) + ".ffn");
  auto refused = SelectionAsConfig(g, Sorted(sel), CkptSyntax::kLlmFoundry);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "checkpoint selection: no name upstream llm-foundry resolves to a class selects "
            "'transformer.blocks.22.ffn' alone (foundry's names for it: mptmlp, ffn, "
            "transformer.blocks.*.ffn); upstream llm-foundry cannot say it (--ckpt-syntax "
            "foundry writes it in foundry's richer syntax)");
  // Attention and both norms on one block: each has an upstream name, but two on one block.
  sel = {kMpt + "0.attn", kMpt + "0.norm_1", kMpt + "0.norm_2"};
  refused = SelectionAsConfig(g, sel, CkptSyntax::kLlmFoundry);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "checkpoint selection {grouped_query_attention: first-1, low_precision_layernorm: "
            "first-1}: upstream llm-foundry rejects several names on one block: "
            "grouped_query_attention, low_precision_layernorm share layer 0 (its overlap check "
            "allows one name per block); upstream llm-foundry cannot say it (--ckpt-syntax "
            "foundry writes it in foundry's richer syntax)");
  // Said in foundry's syntax, the file carries the warnings as comments.
  auto rich = SelectionAsConfig(g, sel, CkptSyntax::kFoundry);
  ASSERT_TRUE(rich.ok()) << rich.status().message();
  ASSERT_EQ(rich->warnings.size(), 1u);
  EXPECT_TRUE(rich->notes.empty());
  EXPECT_EQ(CkptConfigFile("head", *rich),
            "# head\n# warning: " + rich->warnings[0] +
                "\nmodel:\n  activation_checkpointing_target: " + rich->yaml +
                "\nfsdp_config:\n  activation_checkpointing: true\n");
}

}  // namespace
}  // namespace foundry
