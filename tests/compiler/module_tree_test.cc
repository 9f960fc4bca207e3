#include "compiler/module_tree.h"

#include <gtest/gtest.h>

#include "compiler/onnx_import.h"
#include "compiler/text.h"

namespace foundry {
namespace {

// Three blocks, numbered so that text order (0, 10, 2) and natural order (0, 2, 10) differ.
constexpr const char* kModel = R"(graph m opset=17 {
  module "" : llmfoundry.models.mpt.MPTForCausalLM
  module "transformer" : llmfoundry.models.mpt.MPTModel
  module "transformer.blocks.0" : llmfoundry.models.layers.blocks.MPTBlock
  module "transformer.blocks.0.attn" : llmfoundry.models.layers.attention.MultiheadAttention, llmfoundry.models.layers.attention.GroupedQueryAttention
  module "transformer.blocks.0.norm_1" : llmfoundry.models.layers.norm.LPLayerNorm, torch.nn.modules.normalization.LayerNorm
  module "transformer.blocks.2" : llmfoundry.models.layers.blocks.MPTBlock
  module "transformer.blocks.2.attn" : llmfoundry.models.layers.attention.MultiQueryAttention
  module "transformer.blocks.10" : llmfoundry.models.layers.blocks.MPTBlock
  module "transformer.blocks.10.ffn" : llmfoundry.models.layers.ffn.MPTGLU
  module "transformer.blocks.10.norm_2" : llmfoundry.models.layers.norm.LPRMSNorm
  input x : f32[2,4]
  param transformer.blocks.0.attn.Wqkv.weight : f32[4,4]
  param transformer.blocks.2.attn.Wqkv.weight : f32[4,4]
  param transformer.blocks.10.ffn.up_proj.weight : f32[4,8]
  const transformer.blocks.0.mask : f32[4,4]
  a = MatMul(x, transformer.blocks.0.attn.Wqkv.weight) @"transformer.blocks.0.attn.Wqkv"
  b = Relu(a) @"transformer.blocks.0.attn"
  c = LayerNormalization(b) @"transformer.blocks.0.norm_1"
  d = Relu(c) @"transformer.blocks.0"
  e = MatMul(d, transformer.blocks.2.attn.Wqkv.weight) @"transformer.blocks.2.attn"
  f = MatMul(e, transformer.blocks.10.ffn.up_proj.weight) @"transformer.blocks.10.ffn"
  g = Relu(f) @"transformer"
  h = Relu(g)
  output h
}
)";

Graph Parse(const char* text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph();
}

TEST(ModuleTreeTest, TreeOrderCountsAndKeys) {
  Graph g = Parse(kModel);
  std::vector<ModuleInfo> mods = ListModules(g);
  std::vector<std::string> paths;
  for (const auto& m : mods) paths.push_back(m.path);
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "", "transformer", "transformer.blocks.0", "transformer.blocks.0.attn",
                       "transformer.blocks.0.norm_1", "transformer.blocks.2",
                       "transformer.blocks.2.attn", "transformer.blocks.10",
                       "transformer.blocks.10.ffn", "transformer.blocks.10.norm_2"}));
  auto at = [&](const std::string& path) {
    for (const auto& m : mods)
      if (m.path == path) return m;
    ADD_FAILURE() << path;
    return ModuleInfo{};
  };
  // Node counts include nested scopes; the unlisted "…attn.Wqkv" scope counts for its ancestors.
  EXPECT_EQ(at("").node_count, 8);
  EXPECT_EQ(at("transformer").node_count, 7);
  EXPECT_EQ(at("transformer.blocks.0").node_count, 4);
  EXPECT_EQ(at("transformer.blocks.0.attn").node_count, 2);
  EXPECT_EQ(at("transformer.blocks.10.norm_2").node_count, 0);
  // Parameters only (the mask buffer does not count): 4*4 and 4*8 floats.
  EXPECT_EQ(at("").param_bytes, 64 + 64 + 128);
  EXPECT_EQ(at("transformer.blocks.0").param_bytes, 64);
  EXPECT_EQ(at("transformer.blocks.10.ffn").param_bytes, 128);
  // Depth counts listed ancestors: transformer.blocks is not a module here.
  EXPECT_EQ(at("").depth, 0);
  EXPECT_EQ(at("transformer.blocks.2").depth, 2);
  EXPECT_EQ(at("transformer.blocks.2.attn").depth, 3);
  EXPECT_EQ(at("transformer").block_index, -1);
  EXPECT_EQ(at("transformer.blocks.10").block_index, 10);
  EXPECT_TRUE(at("transformer.blocks.10").is_block);
  EXPECT_EQ(at("transformer.blocks.10.ffn").block_index, 10);
  EXPECT_FALSE(at("transformer.blocks.10.ffn").is_block);

  EXPECT_EQ(at("transformer.blocks.0").registry_keys, (std::vector<std::string>{"mptblock"}));
  EXPECT_EQ(at("transformer.blocks.0.attn").registry_keys,
            (std::vector<std::string>{"multihead_attention", "grouped_query_attention",
                                      "multiheadattention", "groupedqueryattention"}));
  // No bases in the table: llm-foundry's class hierarchy is known.
  EXPECT_EQ(at("transformer.blocks.2.attn").registry_keys,
            (std::vector<std::string>{"multiquery_attention", "grouped_query_attention",
                                      "multiqueryattention", "groupedqueryattention"}));
  EXPECT_EQ(at("transformer.blocks.0.norm_1").registry_keys,
            (std::vector<std::string>{"low_precision_layernorm", "layernorm", "lplayernorm"}));
  EXPECT_EQ(at("transformer.blocks.10.norm_2").registry_keys,
            (std::vector<std::string>{"low_precision_rmsnorm", "rmsnorm", "lprmsnorm"}));
  EXPECT_EQ(at("transformer.blocks.10.ffn").registry_keys,
            (std::vector<std::string>{"mptglu", "mptmlp"}));
  EXPECT_EQ(at("").registry_keys, (std::vector<std::string>{"mptforcausallm"}));
  EXPECT_EQ(at("transformer.blocks.0.attn").qualified_class,
            "llmfoundry.models.layers.attention.MultiheadAttention");
}

TEST(ModuleTreeTest, BlockPatterns) {
  Graph g;
  for (const char* p : {"model", "model.layers", "model.layers.3", "model.layers.3.self_attn",
                        "transformer.h.11", "transformer.h.11.mlp", "blockchain.0"})
    g.modules[p].classes = {"X"};
  for (const auto& m : ListModules(g)) {
    SCOPED_TRACE(m.path);
    if (m.path == "model.layers.3" || m.path == "model.layers.3.self_attn")
      EXPECT_EQ(m.block_index, 3);
    else if (m.path == "transformer.h.11" || m.path == "transformer.h.11.mlp")
      EXPECT_EQ(m.block_index, 11);
    else
      EXPECT_EQ(m.block_index, -1);
  }
}

TEST(ModuleTreeTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(50381), "49.2 KiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 20), "3.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{13} << 30), "13.0 GiB");
}

TEST(ModuleTreeTest, FormatsATable) {
  Graph g = Parse(R"(graph m opset=17 {
  module "" : toy.Root
  module "blocks.0" : llmfoundry.MPTBlock
  module "blocks.0.attn" : llmfoundry.MultiheadAttention, llmfoundry.GroupedQueryAttention
  module "blocks.0.act" : torch.nn.GELU
  input x : f32[2,4]
  param blocks.0.attn.w : f32[4,4]
  a = MatMul(x, blocks.0.attn.w) @"blocks.0.attn"
  b = Gelu(a) @"blocks.0.act"
  output b
}
)");
  g.modules["blocks.1"] = Module{};  // a module whose class the export did not name
  EXPECT_EQ(
      FormatModuleTree(ListModules(g)),
      R"(module             class               --ckpt keys                                  nodes  params
(root)             Root                -                                                2    64 B
  blocks.0         MPTBlock            mptblock                                         2    64 B
    blocks.0.act   GELU                -                                                1     0 B
    blocks.0.attn  MultiheadAttention  multihead_attention,grouped_query_attention      1    64 B
  blocks.1         -                   -                                                0     0 B
)");
}

TEST(ModuleTreeTest, ImportedToyModel) {
  auto g = ImportOnnx(std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/toy.functions.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  int blocks = 0, gqa = 0;
  for (const auto& m : ListModules(*g)) {
    blocks += m.is_block;
    for (const auto& k : m.registry_keys) gqa += k == "grouped_query_attention";
  }
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(gqa, 2);
}

}  // namespace
}  // namespace foundry
