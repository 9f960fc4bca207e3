#include "compiler/module_tree.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <map>

#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/text.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

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
  e : f32[2,3,4] = MatMul(d, transformer.blocks.2.attn.Wqkv.weight) @"transformer.blocks.2.attn"
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

  EXPECT_EQ(at("transformer.blocks.0").registry_keys,
            (std::vector<std::string>{"mptblock", "block"}));
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

// Lists with other names are blocks by structure: two or more members numbered from 0 without a
// gap, each with submodules, all with the same child names.
TEST(ModuleTreeTest, BlocksAreTheRepeatedInstancesOfAModuleList) {
  Graph g;
  for (const char* p :
       {// BERT: the blocks; a MoE-style list inside a block is not a second level of blocks.
        "bert.encoder.layer.0.attention", "bert.encoder.layer.0.output",
        "bert.encoder.layer.0.output.experts.0.fc", "bert.encoder.layer.0.output.experts.1.fc",
        "bert.encoder.layer.1.attention", "bert.encoder.layer.1.output",
        // Different children: not alike.
        "odd.stack.0.attn", "odd.stack.1.mlp",
        // nn.Sequential of leaves (Linear, activation, Linear): no submodules.
        "head.mlp.0", "head.mlp.1", "head.mlp.2",
        // A gap in the numbering, and a lone member with nothing to compare.
        "gap.0.a", "gap.2.a", "solo.0.a"})
    g.modules[p];
  std::map<std::string, const ModuleInfo*> at;
  std::vector<ModuleInfo> mods = ListModules(g);
  for (const auto& m : mods) at[m.path] = &m;
  for (int n : {0, 1}) {
    std::string block = "bert.encoder.layer." + std::to_string(n);
    ASSERT_TRUE(at.count(block + ".attention")) << block;
    const ModuleInfo& attn = *at[block + ".attention"];
    EXPECT_EQ(attn.block_index, n);
    EXPECT_EQ(attn.block_list, "bert.encoder.layer");
    EXPECT_FALSE(attn.is_block);  // the block itself is not a module of this graph
  }
  const ModuleInfo& expert = *at["bert.encoder.layer.0.output.experts.1.fc"];
  EXPECT_EQ(expert.block_index, 0);
  EXPECT_EQ(expert.block_list, "bert.encoder.layer");
  for (const char* p : {"odd.stack.0.attn", "odd.stack.1.mlp", "head.mlp.0", "head.mlp.2",
                        "gap.0.a", "gap.2.a", "solo.0.a"}) {
    EXPECT_EQ(at[p]->block_index, -1) << p;
    EXPECT_EQ(at[p]->block_list, "") << p;
  }

  // A listed block answers to the key `block`, after the registry keys.
  g.modules["bert.encoder.layer.0"];
  g.modules["transformer.blocks.0"].classes = {"llmfoundry.MPTBlock"};
  for (const auto& m : ListModules(g)) {
    if (m.path == "bert.encoder.layer.0") {
      EXPECT_TRUE(m.is_block);
      EXPECT_EQ(m.registry_keys, (std::vector<std::string>{"block"}));
    }
    if (m.path == "transformer.blocks.0") {
      EXPECT_EQ(m.registry_keys, (std::vector<std::string>{"mptblock", "block"}));
    }
  }
}

// Layer indices are parsed only when they fit: a fuzzed path may hold any digit string.
TEST(ModuleTreeTest, HugeLayerNumbersAreNotBlocks) {
  Graph g;
  g.modules["transformer.blocks.99999999999999999999999"];
  g.modules["transformer.blocks.99999999999999999999999.attn"];
  for (const auto& m : ListModules(g)) EXPECT_EQ(m.block_index, -1) << m.path;
}

// Every llm-foundry registry key, with the class it selects; megablocks' MoE and dMoE only from
// megablocks (llm-foundry's own dMoE is torch_dmoe; a MoE of any other package is no key's).
TEST(ModuleTreeTest, TheWholeLlmFoundryRegistry) {
  std::vector<std::string> keys;
  for (const auto& r : CkptRegistry()) keys.push_back(r.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"mptblock", "norm_attn_norm", "grouped_query_attention",
                                            "multihead_attention", "multiquery_attention", "mptmlp",
                                            "mptglu", "torch_dmoe", "te_ln_mlp", "mb_moe",
                                            "mb_dmoe", "layernorm", "low_precision_layernorm",
                                            "rmsnorm", "low_precision_rmsnorm", "triton_rmsnorm"}));
  EXPECT_TRUE(IsCkptRegistryKey("te_ln_mlp"));
  EXPECT_FALSE(IsCkptRegistryKey("block"));
  EXPECT_EQ(RegistryKeys({"llmfoundry.models.layers.dmoe.dMoE"}),
            (std::vector<std::string>{"torch_dmoe", "dmoe"}));
  EXPECT_EQ(RegistryKeys({"megablocks.layers.dmoe.dMoE"}),
            (std::vector<std::string>{"mb_dmoe", "dmoe"}));
  EXPECT_EQ(RegistryKeys({"megablocks.layers.moe.MoE"}),
            (std::vector<std::string>{"mb_moe", "moe"}));
  EXPECT_EQ(RegistryKeys({"mymodel.MoE"}), (std::vector<std::string>{"moe"}));
  EXPECT_EQ(RegistryKeys({"llmfoundry.models.layers.blocks.FusedNormAttentionNorm"}),
            (std::vector<std::string>{"norm_attn_norm", "fusednormattentionnorm"}));
  EXPECT_EQ(RegistryKeys({"transformer_engine.pytorch.LayerNormMLP"}),
            (std::vector<std::string>{"te_ln_mlp", "layernormmlp"}));
  EXPECT_EQ(RegistryKeys({"TritonRMSNorm"}),
            (std::vector<std::string>{"triton_rmsnorm", "tritonrmsnorm"}));
  EXPECT_TRUE(ModulePathLess("blocks.2", "blocks.10"));
  EXPECT_FALSE(ModulePathLess("blocks.10", "blocks.2"));
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
      R"(module             class               --ckpt keys                                                          nodes  params
(root)             Root                -                                                                        2    64 B
  blocks.0         MPTBlock            mptblock,block                                                           2    64 B
    blocks.0.act   GELU                gelu,act                                                                 1     0 B
    blocks.0.attn  MultiheadAttention  multihead_attention,grouped_query_attention,multiheadattention,attn      1    64 B
  blocks.1         ?                   block                                                                    0     0 B
block: blocks.N, N = 0..1 (2 blocks: the repeated instances of a module list; layer ranges count N)
keys: the --ckpt names that select the module (case-insensitive; a base class's name selects too; modules outside the blocks are never checkpointed)
?: the export names no class for the module (a plain torch.onnx.export; foundry's exporter adds the classes)
)");
}

// A stock torch.onnx.export: scoped node names and nothing else (no class table, no parameter
// list), written here from the text form with foundry's own annotations stripped. The tree comes
// from the names; every class is unknown; `bert.encoder.layer.N` are the blocks by structure;
// the tied head, called from the root as `self.transformer.wte` ("/wte"), resolves to the module
// that holds transformer.wte.weight.
TEST(ModuleTreeTest, StockExportWithScopedNamesOnly) {
  Graph text = Parse(R"(graph stock opset=17 {
  input ids : i64[2,3]
  param transformer.wte.weight : f32[8,4]
  param bert.encoder.layer.0.attention.self.query.weight : f32[4,4]
  param bert.encoder.layer.0.output.dense.weight : f32[4,4]
  param bert.encoder.layer.1.attention.self.query.weight : f32[4,4]
  param bert.encoder.layer.1.output.dense.weight : f32[4,4]
  e : f32[2,3,4] = Gather(transformer.wte.weight, ids) #"/transformer/wte/Gather"
  q0 : f32[2,3,4] = MatMul(e, bert.encoder.layer.0.attention.self.query.weight) #"/bert/encoder/layer.0/attention/self/query/MatMul"
  s0 : f32[2,3,4] = Softmax(q0) #"/bert/encoder/layer.0/attention/self/Softmax"
  o0 : f32[2,3,4] = MatMul(s0, bert.encoder.layer.0.output.dense.weight) #"/bert/encoder/layer.0/output/dense/MatMul"
  q1 : f32[2,3,4] = MatMul(o0, bert.encoder.layer.1.attention.self.query.weight) #"/bert/encoder/layer.1/attention/self/query/MatMul"
  s1 : f32[2,3,4] = Softmax(q1) #"/bert/encoder/layer.1/attention/self/Softmax"
  o1 : f32[2,3,4] = MatMul(s1, bert.encoder.layer.1.output.dense.weight) #"/bert/encoder/layer.1/output/dense/MatMul"
  t : f32[4,8] = Transpose(transformer.wte.weight) #"/wte/Transpose"
  y : f32[2,3,8] = MatMul(o1, t) #"/wte/MatMul"
  output y
}
)");
  for (const auto& p : text.parameters) {
    Value* v = text.FindValue(p);
    v->data = std::make_shared<const Tensor>(Tensor(DType::kFloat32, v->shape));
  }
  auto bytes = ExportOnnxToBytes(text);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  model.clear_metadata_props();
  for (auto& n : *model.mutable_graph()->mutable_node()) n.clear_doc_string();
  auto g = ImportOnnxFromBytes(model.SerializeAsString());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->metadata["foundry.annotation_format"], "scopes");
  EXPECT_EQ(
      FormatModuleTree(ListModules(*g)),
      R"(module                                                 class  --ckpt keys  nodes  params
(root)                                                 ?      -                9   384 B
  bert                                                 ?      -                6   256 B
    bert.encoder                                       ?      -                6   256 B
      bert.encoder.layer.0                             ?      block            3   128 B
        bert.encoder.layer.0.attention                 ?      attention        2    64 B
          bert.encoder.layer.0.attention.self          ?      -                2    64 B
            bert.encoder.layer.0.attention.self.query  ?      -                1    64 B
        bert.encoder.layer.0.output                    ?      output           1    64 B
          bert.encoder.layer.0.output.dense            ?      -                1    64 B
      bert.encoder.layer.1                             ?      block            3   128 B
        bert.encoder.layer.1.attention                 ?      attention        2    64 B
          bert.encoder.layer.1.attention.self          ?      -                2    64 B
            bert.encoder.layer.1.attention.self.query  ?      -                1    64 B
        bert.encoder.layer.1.output                    ?      output           1    64 B
          bert.encoder.layer.1.output.dense            ?      -                1    64 B
  transformer                                          ?      -                3   128 B
    transformer.wte                                    ?      -                3   128 B
block: bert.encoder.layer.N, N = 0..1 (2 blocks: the repeated instances of a module list; layer ranges count N)
keys: the --ckpt names that select the module (case-insensitive; a base class's name selects too; modules outside the blocks are never checkpointed)
?: the export names no class for the module (a plain torch.onnx.export; foundry's exporter adds the classes)
)");
  for (const Node& n : g->nodes) {
    if (n.name == "/wte/MatMul") {
      EXPECT_EQ(n.scope, "transformer.wte");
    }
  }
  EXPECT_FALSE(g->modules.count("wte"));

  // Without initializers to go by, a segment is joined to its caller's path as written.
  model.mutable_graph()->clear_initializer();
  auto* ids = model.mutable_graph()->mutable_input(0);
  for (const auto& p : text.parameters) {
    auto* in = model.mutable_graph()->add_input();
    *in = *ids;
    in->set_name(p);
    auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : text.FindValue(p)->shape) shape->add_dim()->set_dim_value(d);
  }
  auto no_weights = ImportOnnxFromBytes(model.SerializeAsString());
  ASSERT_TRUE(no_weights.ok()) << no_weights.status().message();
  EXPECT_TRUE(no_weights->modules.count("wte"));
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
