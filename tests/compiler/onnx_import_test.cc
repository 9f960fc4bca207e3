#include "compiler/onnx_import.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "compiler/module_tree.h"
#include "compiler/text.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

// Test models: tests/data/make_test_models.py (committed); fixtures: models/make_fixtures.py.
std::string Data(const std::string& name) {
  return std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/" + name;
}
std::string FixtureDir() { return std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures"; }

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Graph MustImport(const std::string& path, const ImportOptions& options = {}) {
  auto g = ImportOnnx(path, options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph();
}

const Node* FindNode(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

std::map<std::string, std::string> BareClasses(const Graph& g) {
  std::map<std::string, std::string> out;
  for (const auto& [path, m] : g.modules)
    out[path] = m.classes.empty() ? "" : BareClassName(m.classes.front());
  return out;
}

// The deepest module of `modules` that is `scope` or contains it.
std::string DeepestContaining(const std::map<std::string, Module>& modules, std::string scope) {
  for (;;) {
    if (modules.count(scope)) return scope;
    if (scope.empty()) return "";
    size_t dot = scope.rfind('.');
    scope = dot == std::string::npos ? "" : scope.substr(0, dot);
  }
}

// The three annotation formats of one model agree (docs/design.md §2):
//  - scoped names and node metadata give the same modules (paths, bare classes) and, node for
//    node (same nodes, same order), the same scopes;
//  - local functions give the modules of the extracted classes and the scoped top-level nodes
//    only, and each node's scope is the deepest of those modules around its scoped-name scope
//    (inside a function body nothing finer is known).
void ExpectSameModuleTree(const std::string& scopes_path, const std::string& functions_path,
                          const std::string& metadata_path) {
  SCOPED_TRACE(scopes_path);
  Graph s = MustImport(scopes_path);
  Graph f = MustImport(functions_path);
  Graph m = MustImport(metadata_path);
  EXPECT_EQ(s.metadata["foundry.annotation_format"], "scopes");
  EXPECT_EQ(m.metadata["foundry.annotation_format"], "metadata");
  EXPECT_EQ(m.ir_version, 10);
  ASSERT_FALSE(s.modules.empty());
  EXPECT_EQ(BareClasses(s), BareClasses(m));
  ASSERT_EQ(s.nodes.size(), m.nodes.size());
  int mismatches = 0;
  for (size_t i = 0; i < s.nodes.size() && mismatches < 5; ++i) {
    ASSERT_EQ(s.nodes[i].op_type, m.nodes[i].op_type) << i;
    EXPECT_EQ(s.nodes[i].scope, m.nodes[i].scope) << s.nodes[i].name << " / " << m.nodes[i].name;
    mismatches += s.nodes[i].scope != m.nodes[i].scope;
  }
  EXPECT_EQ(s.parameters, m.parameters);
  EXPECT_EQ(s.initializers, m.initializers);

  if (f.metadata["foundry.annotation_format"] != "functions") {
    // The exporter fell back to scoped names (torch's function extraction is fragile).
    EXPECT_EQ(PrintGraph(f), PrintGraph(s));
    return;
  }
  auto fc = BareClasses(f), sc = BareClasses(s);
  for (const auto& [path, cls] : fc) {
    ASSERT_TRUE(sc.count(path)) << "functions import invented module '" << path << "'";
    EXPECT_EQ(cls, sc.at(path)) << path;
  }
  EXPECT_EQ(s.parameters, f.parameters);
  // Inlined bodies hold the same ops as the scoped export, in the same order, except where
  // Constants stand: a Constant shared by several calls moves out in front of the first call
  // (GPT-2's torch.where fill value becomes a GPT2Block input made in the caller).
  ASSERT_EQ(s.nodes.size(), f.nodes.size());
  auto computing = [](const Graph& g) {
    std::vector<const Node*> nodes;
    for (const Node& n : g.nodes)
      if (n.op_type != "Constant") nodes.push_back(&n);
    return nodes;
  };
  std::vector<const Node*> sn = computing(s), fn = computing(f);
  ASSERT_EQ(sn.size(), fn.size());
  mismatches = 0;
  for (size_t i = 0; i < sn.size() && mismatches < 5; ++i) {
    ASSERT_EQ(sn[i]->op_type, fn[i]->op_type) << i;
    std::string expected = DeepestContaining(f.modules, sn[i]->scope);
    EXPECT_EQ(fn[i]->scope, expected) << sn[i]->name << " / " << fn[i]->name;
    mismatches += fn[i]->scope != expected;
  }
}

TEST(OnnxImportTest, ScopedNames) {
  Graph g = MustImport(Data("toy.scopes.onnx"));
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "scopes");
  EXPECT_EQ(g.opset, 17);
  EXPECT_EQ(g.ir_version, 8);
  EXPECT_EQ(g.inputs, (std::vector<std::string>{"input_ids", "labels"}));
  EXPECT_EQ(g.outputs, (std::vector<std::string>{"loss"}));
  EXPECT_EQ(g.FindValue("input_ids")->TypeString(), "i64[batch,seq]");
  EXPECT_EQ(g.FindValue("loss")->TypeString(), "f32[]");
  // 12 per block, the embedding and the final norm; the pos_bias buffer is not trainable.
  EXPECT_EQ(g.parameters.size(), 27u);
  EXPECT_EQ(g.initializers.size(), 28u);
  EXPECT_TRUE(g.IsInitializer("transformer.pos_bias"));
  EXPECT_FALSE(g.IsParameter("transformer.pos_bias"));
  EXPECT_EQ(g.FindValue("transformer.blocks.0.attn.Wqkv.weight")->TypeString(), "f32[24,8]");
  ASSERT_NE(g.FindValue("transformer.blocks.0.attn.Wqkv.weight")->data, nullptr);

  const Node* mm = FindNode(g, "/transformer/blocks.0/attn/Wqkv/MatMul");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->scope, "transformer.blocks.0.attn.Wqkv");
  EXPECT_EQ(FindNode(g, "/transformer/blocks.1/ffn/act/Erf")->scope,
            "transformer.blocks.1.ffn.act");
  // The tied LM head is called from the root as `self.transformer.wte`: torch names it "/wte".
  EXPECT_EQ(FindNode(g, "/MatMul")->scope, "");
  EXPECT_EQ(g.modules.at("transformer.blocks.0.attn").classes,
            (std::vector<std::string>{"toy.layers.MultiheadAttention",
                                      "toy.layers.GroupedQueryAttention"}));
  EXPECT_EQ(g.modules.at("").classes, (std::vector<std::string>{"toy.model.ToyLM"}));
  // Containers that no call goes through are not modules of the tree.
  EXPECT_FALSE(g.modules.count("transformer.blocks"));
  EXPECT_EQ(g.ClassChain("transformer.blocks.1.attn"),
            (std::vector<std::string>{"ToyLM", "Transformer", "MPTBlock", "MultiheadAttention"}));
}

TEST(OnnxImportTest, LocalFunctionsAreInlinedWithScopes) {
  Graph g = MustImport(Data("toy.functions.onnx"));
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "functions");
  std::set<std::string> ops;
  for (const Node& n : g.nodes) ops.insert(n.op_type);
  EXPECT_FALSE(ops.count("MPTBlock"));
  EXPECT_FALSE(ops.count("MultiheadAttention"));
  EXPECT_TRUE(ops.count("LayerNormalization"));
  int layernorms = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type != "LayerNormalization") continue;
    EXPECT_NE(n.scope.find("norm"), std::string::npos) << n.name << " " << n.scope;
    ++layernorms;
  }
  EXPECT_EQ(layernorms, 5);
  EXPECT_EQ(BareClassName(g.modules.at("transformer.blocks.1.attn").classes.front()),
            "MultiheadAttention");
  EXPECT_EQ(BareClassName(g.modules.at("transformer.blocks.0.ffn").classes.front()), "MPTMLP");
  // Values inside function bodies got unique names.
  std::set<std::string> produced;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs) EXPECT_TRUE(o.empty() || produced.insert(o).second) << o;
}

TEST(OnnxImportTest, NodeMetadataProps) {
  Graph g = MustImport(Data("toy.metadata.onnx"));
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "metadata");
  EXPECT_EQ(g.ir_version, 10);
  // Parameters from the graph signature (PARAMETER vs BUFFER lines).
  EXPECT_EQ(g.parameters.size(), 27u);
  EXPECT_FALSE(g.IsParameter("transformer.pos_bias"));
  // Classes from class_hierarchy: the qualified class, without bases.
  EXPECT_EQ(g.modules.at("transformer.blocks.0.attn").classes,
            (std::vector<std::string>{"toy.layers.MultiheadAttention"}));
}

TEST(OnnxImportTest, ThreeFormatsGiveTheSameModuleTree) {
  ExpectSameModuleTree(Data("toy.scopes.onnx"), Data("toy.functions.onnx"),
                       Data("toy.metadata.onnx"));
}

TEST(OnnxImportTest, FixturesGiveTheSameModuleTreeInAllFormats) {
  if (!fs::exists(FixtureDir())) GTEST_SKIP() << "no models/fixtures";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(FixtureDir())) {
    std::string dir = entry.path().string();
    if (!fs::exists(dir + "/model.onnx") || !fs::exists(dir + "/model.functions.onnx") ||
        !fs::exists(dir + "/model.metadata.onnx"))
      continue;
    ExpectSameModuleTree(dir + "/model.onnx", dir + "/model.functions.onnx",
                         dir + "/model.metadata.onnx");
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(OnnxImportTest, MptTinyModules) {
  std::string path = FixtureDir() + "/mpt_tiny/model.onnx";
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path;
  Graph g = MustImport(path);
  std::vector<std::string> listed;
  for (const ModuleInfo& m : ListModules(g))
    listed.push_back(m.path + " " + BareClassName(m.qualified_class));
  std::vector<std::string> expected = {" MPTForCausalLM", "transformer MPTModel"};
  for (int b = 0; b < 2; ++b) {
    std::string p = "transformer.blocks." + std::to_string(b);
    for (const char* s :
         {" MPTBlock", ".attn MultiheadAttention", ".attn.Wqkv Linear", ".attn.out_proj Linear",
          ".ffn MPTMLP", ".ffn.act GELU", ".ffn.down_proj Linear", ".ffn.up_proj Linear",
          ".norm_1 LPLayerNorm", ".norm_2 LPLayerNorm", ".resid_attn_dropout Dropout",
          ".resid_ffn_dropout Dropout"}) {
      expected.push_back(p + s);
    }
  }
  for (const char* s : {"transformer.emb_drop Dropout", "transformer.norm_f LPLayerNorm",
                        "transformer.wte SharedEmbedding"}) {
    expected.push_back(s);
  }
  EXPECT_EQ(listed, expected);
  for (const ModuleInfo& m : ListModules(g)) {
    if (m.path == "") {
      EXPECT_EQ(m.node_count, static_cast<int>(g.nodes.size()));
    } else if (m.path == "transformer.blocks.1.attn.Wqkv") {
      EXPECT_EQ(m.param_bytes, (192 * 64 + 192) * 4);  // d_model 64: 192x64 + bias 192, f32
    } else if (m.path == "transformer.blocks.1") {
      EXPECT_TRUE(m.is_block);
      EXPECT_EQ(m.block_index, 1);
      EXPECT_EQ(m.registry_keys, (std::vector<std::string>{"mptblock", "block"}));
    }
  }
}

TEST(OnnxImportTest, ParametersDeclaredByShapeOnly) {
  Graph g = MustImport(Data("toy.noweights.onnx"));
  EXPECT_EQ(g.inputs, (std::vector<std::string>{"input_ids", "labels"}));
  EXPECT_EQ(g.parameters.size(), 27u);
  // The buffer is an initializer too: it is named as an attribute of a listed module.
  EXPECT_EQ(g.initializers.size(), 28u);
  EXPECT_TRUE(g.IsInitializer("transformer.pos_bias"));
  const Value* w = g.FindValue("transformer.blocks.1.ffn.up_proj.weight");
  EXPECT_EQ(w->data, nullptr);
  EXPECT_EQ(w->TypeString(), "f32[16,8]");
}

TEST(OnnxImportTest, WithoutWeights) {
  ImportOptions options;
  options.load_weights = false;
  Graph g = MustImport(Data("toy.scopes.onnx"), options);
  EXPECT_EQ(g.FindValue("transformer.wte.weight")->data, nullptr);
  EXPECT_EQ(g.FindValue("transformer.wte.weight")->TypeString(), "f32[16,8]");
  EXPECT_NE(g.FindValue("transformer.pos_bias")->data, nullptr);  // buffers are still loaded
}

TEST(OnnxImportTest, BindsDims) {
  ImportOptions options;
  options.dims = {{"batch", 3}};
  Graph g = MustImport(Data("toy.scopes.onnx"), options);
  EXPECT_EQ(g.FindValue("input_ids")->TypeString(), "i64[3,seq]");
  options.dims["seq"] = 5;
  g = MustImport(Data("toy.scopes.onnx"), options);
  EXPECT_EQ(g.FindValue("labels")->TypeString(), "i64[3,5]");
  EXPECT_TRUE(g.FindValue("labels")->dim_params.empty());

  options.dims = {{"sequence", 8}};
  auto bad = ImportOnnx(Data("toy.scopes.onnx"), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "'" + Data("toy.scopes.onnx") +
                "': --dim sequence=8: the model has no symbolic dimension 'sequence' (it has "
                "batch, seq)");
}

TEST(OnnxImportTest, Opset18Forms) {
  Graph g = MustImport(Data("opset18.onnx"));
  EXPECT_EQ(g.opset, 18);
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "none");
  EXPECT_TRUE(g.modules.empty());
  const Node* mean = FindNode(g, "mean");
  ASSERT_NE(mean, nullptr);
  EXPECT_TRUE(mean->HasInput(1));
  EXPECT_FALSE(mean->HasAttr("axes"));
  EXPECT_EQ(mean->scope, "");
  const Node* split = FindNode(g, "split");
  EXPECT_EQ(split->GetInt("num_outputs", 0), 2);
  EXPECT_EQ(split->outputs.size(), 2u);
  EXPECT_EQ(g.FindValue("axes")->data->data<int64_t>()[0], 1);
  // Not floating point, so not a parameter (no foundry.parameters in this file).
  EXPECT_TRUE(g.parameters.empty());
}

TEST(OnnxImportTest, ReprListsWithQuotesAndRepeatedCalls) {
  Graph g = MustImport(Data("quoted_ir10.onnx"));
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "metadata");
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].scope, "it's");
  EXPECT_EQ(g.nodes[1].scope, "it's");  // "it's@1": a second call of the same module
  EXPECT_EQ(g.modules.size(), 2u);
  EXPECT_EQ(g.modules.at("").classes, (std::vector<std::string>{"toy.Root"}));
  EXPECT_EQ(g.modules.at("it's").classes, (std::vector<std::string>{"toy.Quote\"Class"}));
  // No declared set and not named *.weight or *.bias: a buffer by the stock-export rule.
  EXPECT_TRUE(g.parameters.empty());
  EXPECT_NE(g.FindValue("it's.w"), nullptr);
}

TEST(OnnxImportTest, FunctionAttributeReferencesAndCallsWithoutParameters) {
  Graph g = MustImport(Data("func_refs.onnx"));
  EXPECT_EQ(g.metadata["foundry.annotation_format"], "functions");
  ASSERT_EQ(g.nodes.size(), 8u);
  std::vector<std::string> got;
  for (const Node& n : g.nodes) got.push_back(n.op_type + "@" + n.scope);
  EXPECT_EQ(got, (std::vector<std::string>{"Mul@blocks.0.scale", "LeakyRelu@blocks.0.act_in",
                                           "LeakyRelu@blocks.0.act_out", "Add@blocks.0",
                                           "Mul@blocks.1.scale", "LeakyRelu@blocks.1.act_in",
                                           "LeakyRelu@blocks.1.act_out", "Add@blocks.1"}));
  // alpha=0.5 at the `Act` call reaches LeakyRelu through ref_attr_name; `Act.1` gives none.
  EXPECT_EQ(g.nodes[1].GetFloat("alpha", -1), 0.5f);
  EXPECT_FALSE(g.nodes[2].HasAttr("alpha"));
  // Formal names bind by position: block 1's Mul reads block 1's weight.
  EXPECT_EQ(g.nodes[4].inputs[1], "blocks.1.scale.weight");
  EXPECT_EQ(g.nodes[0].outputs[0], "Block_0/s");
  EXPECT_EQ(g.nodes[3].outputs[0], "h");
  EXPECT_EQ(g.nodes[7].inputs, (std::vector<std::string>{"Block_1/b", "h"}));
  EXPECT_EQ(g.nodes[1].name, "Block_0/Act_1/LeakyRelu_0");
  EXPECT_FALSE(g.modules.count("blocks"));
  EXPECT_EQ(g.modules.at("blocks.1.act_out").classes, (std::vector<std::string>{"toy.layers.Act"}));
}

TEST(OnnxImportTest, FunctionsWithoutClassTable) {
  Graph g = MustImport(Data("func_refs.notable.onnx"));
  std::vector<std::string> got;
  for (const Node& n : g.nodes) got.push_back(n.op_type + "@" + n.scope);
  // Calls without parameters stay in their caller's module: nothing names their instance.
  EXPECT_EQ(got,
            (std::vector<std::string>{"Mul@blocks.0.scale", "LeakyRelu@blocks.0",
                                      "LeakyRelu@blocks.0", "Add@blocks.0", "Mul@blocks.1.scale",
                                      "LeakyRelu@blocks.1", "LeakyRelu@blocks.1", "Add@blocks.1"}));
  EXPECT_EQ(g.modules.at("blocks.0").classes, (std::vector<std::string>{"toy.layers.Block"}));
  EXPECT_EQ(g.modules.at("blocks.0.scale").classes,
            (std::vector<std::string>{"toy.layers.Scaler"}));
  EXPECT_TRUE(g.modules.at("").classes.empty());
  // Without foundry.parameters every floating-point initializer is trainable.
  EXPECT_EQ(g.parameters,
            (std::vector<std::string>{"blocks.0.scale.weight", "blocks.1.scale.weight"}));
}

TEST(OnnxImportTest, ExternalData) {
  Graph g = MustImport(Data("external/model.onnx"));
  const Value* w = g.FindValue("w");
  ASSERT_NE(w->data, nullptr);
  EXPECT_EQ(w->TypeString(), "f32[2,3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w->data->data<float>()[i], 0.5f * i);

  auto missing = ImportOnnx(Data("external_missing.onnx"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "'" + Data("external_missing.onnx") +
                "': external data file 'missing.bin' for initializer 'w' not found (looked in " +
                std::string(FOUNDRY_SOURCE_DIR) +
                "/tests/data/onnx); keep the .onnx file next to its data files");
}

TEST(OnnxImportTest, InitializerSizeDisagreesWithDims) {
  auto g = ImportOnnx(Data("bad_raw_size.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "'" + Data("bad_raw_size.onnx") +
                                      "': initializer 'w': raw_data holds 20 bytes but dims "
                                      "[2,3] of f32 need 6 values (24 bytes)");
}

TEST(OnnxImportTest, VersionErrors) {
  auto old = ImportOnnx(Data("opset11.onnx"));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().message(),
            "'" + Data("opset11.onnx") +
                "' uses ai.onnx opset 11; foundry supports opsets 13 to 20 (export with "
                "torch.onnx.export(..., opset_version=17))");
  auto ir6 = ImportOnnx(Data("ir6.onnx"));
  ASSERT_FALSE(ir6.ok());
  EXPECT_EQ(ir6.status().message(),
            "'" + Data("ir6.onnx") +
                "' has ONNX IR version 6; foundry reads IR versions 7 to 10 (torch.onnx.export "
                "writes 7 or 8)");
  // The ONNX backend node tests use old opsets; a harness can opt out of the version check.
  ImportOptions any;
  any.check_versions = false;
  EXPECT_TRUE(ImportOnnx(Data("opset11.onnx"), any).ok());
  EXPECT_TRUE(ImportOnnx(Data("ir6.onnx"), any).ok());
}

TEST(OnnxImportTest, BadFiles) {
  TempDir tmp;
  auto missing = ImportOnnx(tmp.path() + "/nope.onnx");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "cannot open '" + tmp.path() + "/nope.onnx': No such file or directory");

  std::string empty = tmp.File("empty.onnx", "");
  auto e = ImportOnnx(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(),
            "'" + empty + "' is empty; pass a .onnx file exported with torch.onnx.export");

  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  std::string random = tmp.File("random.onnx", noise);
  auto r = ImportOnnx(random);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "'" + random +
                "' is not an ONNX model (protobuf parse failed); pass a .onnx file exported "
                "with torch.onnx.export");

  std::string bytes = ReadBytes(Data("toy.scopes.onnx"));
  std::string cut = tmp.File("cut.onnx", bytes.substr(0, bytes.size() / 2));
  auto t = ImportOnnx(cut);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "'" + cut +
                "' is not an ONNX model (protobuf parse failed); pass a .onnx file exported "
                "with torch.onnx.export");

  // Well-formed protobuf that is some other message.
  std::string text = tmp.File("text.onnx",
                              "\x0a\x03"
                              "abc");
  auto other = ImportOnnx(text);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message(),
            "'" + text +
                "' is not an ONNX model (no graph or IR version); pass a .onnx file exported "
                "with torch.onnx.export");

  auto nodes = ImportOnnx(Data("no_nodes.onnx"));
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().message(), "'" + Data("no_nodes.onnx") + "' has a graph with no nodes");

  auto sub = ImportOnnx(Data("if_subgraph.onnx"));
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().message(),
            "'" + Data("if_subgraph.onnx") +
                "': If node 'branch' has a subgraph attribute 'else_branch'; control flow (If, "
                "Loop, Scan) is not supported: export a model without data-dependent control "
                "flow");

  auto undef = ImportOnnx(Data("undefined_input.onnx"));
  ASSERT_FALSE(undef.ok());
  EXPECT_EQ(undef.status().message(),
            "'" + Data("undefined_input.onnx") +
                "': Relu node 'r' reads 'nope', which is not a graph input, an initializer or "
                "an earlier node's output (nodes must be in topological order)");
}

TEST(OnnxImportTest, CorruptedModelsNeverCrash) {
  std::string bytes = ReadBytes(Data("toy.functions.onnx"));
  std::mt19937 rng(11);
  int failed = 0;
  for (int i = 0; i < 60; ++i) {
    std::string mutated = bytes;
    if (i % 2) {
      mutated.resize(rng() % bytes.size());
    } else {
      for (int k = 0; k < 8; ++k) mutated[rng() % mutated.size()] = static_cast<char>(rng());
    }
    auto g = ImportOnnxFromBytes(mutated, {}, "", "mutated");
    if (!g.ok()) {
      ++failed;
      EXPECT_EQ(g.status().message().find('\n'), std::string::npos) << g.status().message();
    }
  }
  EXPECT_GT(failed, 0);
}

TEST(OnnxImportTest, FromBytes) {
  auto g = ImportOnnxFromBytes(ReadBytes(Data("opset18.onnx")));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes.size(), 4u);
  auto bad = ImportOnnxFromBytes(std::string("\xff\xff\xff", 3));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "'<memory>' is not an ONNX model (protobuf parse failed); pass a .onnx file "
            "exported with torch.onnx.export");
}

}  // namespace
}  // namespace foundry
