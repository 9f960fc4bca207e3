#include "compiler/ckpt_targets.h"

#include <gtest/gtest.h>

#include <map>

#include "compiler/onnx_import.h"
#include "compiler/text.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::string Fixture(const std::string& name, const std::string& file = "model.onnx") {
  return std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/" + name + "/" + file;
}
std::string Data(const std::string& file) {
  return std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/ckpt/" + file;
}

// The fixtures, imported once each (module annotations only matter here: no weights).
const Graph& Model(const std::string& name, const std::string& file = "model.onnx") {
  static std::map<std::string, Graph> cache;
  std::string path = Fixture(name, file);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  ImportOptions options;
  options.load_weights = false;
  auto g = ImportOnnx(path, options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return cache.emplace(path, g.ok() ? std::move(g).value() : Graph()).first->second;
}

StatusOr<CkptSelection> Select(const Graph& g, const std::vector<std::string>& args) {
  std::vector<CkptTarget> targets;
  for (const auto& a : args) {
    auto t = ParseCkptArg(a);
    if (!t.ok()) return t.status();
    targets.push_back(*t);
  }
  return SelectCkptTargets(g, targets);
}

// "module <- target" per selected instance, in order.
std::vector<std::string> Picked(const Graph& g, const std::vector<std::string>& args) {
  auto sel = Select(g, args);
  EXPECT_TRUE(sel.ok()) << sel.status().message();
  std::vector<std::string> out;
  if (!sel.ok()) return out;
  for (const auto& i : sel->instances) out.push_back(i.module + " <- " + i.target);
  return out;
}

std::string ErrorOf(const Graph& g, const std::vector<std::string>& args) {
  auto sel = Select(g, args);
  EXPECT_FALSE(sel.ok());
  return sel.ok() ? "" : sel.status().message();
}

std::vector<std::string> Blocks(const std::string& prefix, int n, const std::string& child,
                                const std::string& target) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back(prefix + "." + std::to_string(i) + (child.empty() ? "" : "." + child) + " <- " +
                  target);
  return out;
}

// --- layer specs -------------------------------------------------------------------------------

std::vector<int64_t> Layers(const std::string& spec, int64_t n) {
  auto l = ParseLayerSpec(spec, n);
  EXPECT_TRUE(l.ok()) << spec << ": " << l.status().message();
  return l.ok() ? *l : std::vector<int64_t>{};
}

TEST(CkptTargetsTest, LayerSpecsAsLlmFoundryReadsThem) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(Layers("3", 8), (V{0, 1, 2}));  // an int n: the first n
  EXPECT_EQ(Layers("first-2", 8), (V{0, 1}));
  EXPECT_EQ(Layers("last-3", 8), (V{5, 6, 7}));
  // middle-m starts at max_block_idx // 2 - m // 2: 7 // 2 - 1 = 2.
  EXPECT_EQ(Layers("middle-3", 8), (V{2, 3, 4}));
  EXPECT_EQ(Layers("middle-2", 8), (V{2, 3}));
  EXPECT_EQ(Layers("middle-2", 5), (V{1, 2}));      // 4 // 2 - 1 = 1
  EXPECT_EQ(Layers("range-2-5", 8), (V{2, 3, 4}));  // half-open
  EXPECT_EQ(Layers("first-2,last-1", 8), (V{0, 1, 7}));
  EXPECT_EQ(Layers(" first-1 , range-3-4 ", 8), (V{0, 3}));  // spaces removed, as upstream
  EXPECT_EQ(Layers("[0,2,5]", 8), (V{0, 2, 5}));
  EXPECT_EQ(Layers("[5,0,5]", 8), (V{0, 5}));  // sorted, without duplicates
  EXPECT_EQ(Layers("0,2,5", 8), (V{0, 2, 5}));
  EXPECT_EQ(Layers("[1,last-2]", 8), (V{1, 6, 7}));  // ints and strings mixed, as a YAML list
  EXPECT_EQ(Layers("[1,'first-1']", 8), (V{0, 1}));
  // Clamped to the model exactly as upstream clamps: more than there are = all of them.
  EXPECT_EQ(Layers("9", 4), (V{0, 1, 2, 3}));
  EXPECT_EQ(Layers("first-9", 4), (V{0, 1, 2, 3}));
  EXPECT_EQ(Layers("last-9", 4), (V{0, 1, 2, 3}));
  EXPECT_EQ(Layers("middle-9", 4), (V{0, 1, 2, 3}));
  EXPECT_EQ(Layers("range-2-9", 4), (V{2, 3}));
}

TEST(CkptTargetsTest, LayerSpecErrors) {
  const std::string forms =
      "accepted: an int n (the first n layers), a comma-separated list of first-n, last-k, "
      "middle-m, range-i-j (half-open) and layer indices, or a list [0,2,5]";
  for (const char* bad : {"", "first-", "first-x", "last--1", "-1", "range-1", "range-1-2-3",
                          "[0,2", "[]", "1,,2", "top-3", "[0,[1]]", "middle-m"}) {
    auto l = ParseLayerSpec(bad, 4);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().message(), "malformed layers '" + std::string(bad) + "'; " + forms);
  }
  auto out = ParseLayerSpec("[0,2,5]", 4);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "layer 5 in '[0,2,5]' is out of range: the model has layers 0..3");
  auto none = ParseLayerSpec("range-2-2", 4);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            "layers 'range-2-2' select no layer: the model has layers 0..3");
  auto zero = ParseLayerSpec("0", 1);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(), "layers '0' select no layer: the model has layer 0");
}

// --- --ckpt arguments --------------------------------------------------------------------------

TEST(CkptTargetsTest, ParsesCkptArguments) {
  auto t = ParseCkptArg("mptblock");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "mptblock");
  EXPECT_EQ(t->layers, "");
  EXPECT_EQ(t->source, "--ckpt mptblock");
  EXPECT_EQ(t->Text(), "mptblock");
  t = ParseCkptArg("mptblock=first-2,last-1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "mptblock");
  EXPECT_EQ(t->layers, "first-2,last-1");
  EXPECT_EQ(t->Text(), "mptblock=first-2,last-1");
  t = ParseCkptArg("transformer.blocks.*.attn=[0,2]");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "transformer.blocks.*.attn");
  EXPECT_EQ(t->layers, "[0,2]");

  const std::string forms =
      "; accepted: NAME or NAME=LAYERS, NAME a registry key (mptblock), a class name, `block`, a "
      "child name of the blocks (attn) or a module path glob (transformer.blocks.*.attn), LAYERS "
      "n (the first n), first-n,last-k,middle-m,range-i-j or [0,2,5]";
  auto bad = ParseCkptArg("=3");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--ckpt '=3': no name" + forms);
  bad = ParseCkptArg("mpt block");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--ckpt 'mpt block': a space in the name" + forms);
  bad = ParseCkptArg("mptblock=");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--ckpt 'mptblock=': malformed layers ''; accepted: an int n (the first n layers), a "
            "comma-separated list of first-n, last-k, middle-m, range-i-j (half-open) and layer "
            "indices, or a list [0,2,5]");
  bad = ParseCkptArg("mptblock=firsts-2");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().substr(0, 52),
            "--ckpt 'mptblock=firsts-2': malformed layers 'firsts");
}

// --- registry keys on the MPT fixtures ---------------------------------------------------------

TEST(CkptTargetsTest, RegistryKeysOnMpt) {
  const Graph& mha = Model("mpt_tiny");  // MHA, low-precision LayerNorm, MLP, 2 layers
  EXPECT_EQ(Picked(mha, {"mptblock"}), Blocks("transformer.blocks", 2, "", "mptblock"));
  EXPECT_EQ(Picked(mha, {"multihead_attention"}),
            Blocks("transformer.blocks", 2, "attn", "multihead_attention"));
  // MHA and MQA subclass GQA upstream: the GQA key selects them.
  EXPECT_EQ(Picked(mha, {"grouped_query_attention"}),
            Blocks("transformer.blocks", 2, "attn", "grouped_query_attention"));
  EXPECT_EQ(Picked(mha, {"mptmlp"}), Blocks("transformer.blocks", 2, "ffn", "mptmlp"));
  // Norms: both norms of each block; norm_f is outside the blocks.
  std::vector<std::string> norms;
  for (int b = 0; b < 2; ++b)
    for (const char* n : {"norm_1", "norm_2"})
      norms.push_back("transformer.blocks." + std::to_string(b) + "." + n +
                      " <- low_precision_layernorm");
  EXPECT_EQ(Picked(mha, {"low_precision_layernorm"}), norms);
  for (auto& n : norms) n.replace(n.find("<- ") + 3, std::string::npos, "layernorm");
  EXPECT_EQ(Picked(mha, {"layernorm"}), norms);  // LPLayerNorm is a torch LayerNorm

  const Graph& mqa = Model("mpt_tiny_mqa");  // MQA, RMSNorm
  EXPECT_EQ(Picked(mqa, {"multiquery_attention"}),
            Blocks("transformer.blocks", 2, "attn", "multiquery_attention"));
  EXPECT_EQ(Picked(mqa, {"grouped_query_attention"}),
            Blocks("transformer.blocks", 2, "attn", "grouped_query_attention"));
  EXPECT_EQ(Picked(mqa, {"rmsnorm"}).size(), 4u);

  const Graph& gqa = Model("mpt_tiny_gqa_glu");  // GQA, low-precision RMSNorm, GLU, 3 layers
  EXPECT_EQ(Picked(gqa, {"grouped_query_attention"}),
            Blocks("transformer.blocks", 3, "attn", "grouped_query_attention"));
  EXPECT_EQ(Picked(gqa, {"mptglu"}), Blocks("transformer.blocks", 3, "ffn", "mptglu"));
  // MPTGLU subclasses MPTMLP (upstream's FFN keys raise a TypeError; here they work).
  EXPECT_EQ(Picked(gqa, {"mptmlp"}), Blocks("transformer.blocks", 3, "ffn", "mptmlp"));
  EXPECT_EQ(Picked(gqa, {"low_precision_rmsnorm"}).size(), 6u);
  EXPECT_EQ(Picked(gqa, {"rmsnorm"}).size(), 6u);

  auto sel = Select(gqa, {"grouped_query_attention=last-1"});
  ASSERT_TRUE(sel.ok());
  ASSERT_EQ(sel->instances.size(), 1u);
  EXPECT_EQ(sel->instances[0].module, "transformer.blocks.2.attn");
  EXPECT_EQ(sel->instances[0].class_name, "models.mpt.GroupedQueryAttention");
  EXPECT_EQ(sel->instances[0].layer, 2);
  EXPECT_EQ(sel->instances[0].target, "grouped_query_attention=last-1");
  EXPECT_EQ(sel->instances[0].block_list, "transformer.blocks");
  EXPECT_EQ(sel->targets, (std::vector<std::string>{"grouped_query_attention=last-1"}));
  EXPECT_TRUE(sel->notes().empty());
}

TEST(CkptTargetsTest, NamesAreCaseInsensitive) {
  const Graph& g = Model("mpt_tiny");
  EXPECT_EQ(Picked(g, {"MPTBlock"}), Blocks("transformer.blocks", 2, "", "MPTBlock"));
  EXPECT_EQ(Picked(g, {"Grouped_Query_Attention"}),
            Blocks("transformer.blocks", 2, "attn", "Grouped_Query_Attention"));
  EXPECT_EQ(Picked(g, {"multiheadattention"}),
            Blocks("transformer.blocks", 2, "attn", "multiheadattention"));
  EXPECT_EQ(Picked(g, {"TRANSFORMER.BLOCKS.*.ATTN"}),
            Blocks("transformer.blocks", 2, "attn", "TRANSFORMER.BLOCKS.*.ATTN"));
  EXPECT_EQ(Picked(g, {"BLOCK"}), Blocks("transformer.blocks", 2, "", "BLOCK"));
  EXPECT_EQ(Picked(g, {"FFN"}), Blocks("transformer.blocks", 2, "ffn", "FFN"));
}

TEST(CkptTargetsTest, LayerFormsOnFourLayers) {
  const Graph& g = Model("mpt_tiny_4layer");
  auto layers = [&](const std::string& arg) {
    std::vector<int64_t> out;
    auto sel = Select(g, {arg});
    EXPECT_TRUE(sel.ok()) << arg << ": " << sel.status().message();
    if (sel.ok())
      for (const auto& i : sel->instances) out.push_back(i.layer);
    return out;
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(layers("mptblock"), (V{0, 1, 2, 3}));
  EXPECT_EQ(layers("mptblock=3"), (V{0, 1, 2}));
  EXPECT_EQ(layers("mptblock=first-2"), (V{0, 1}));
  EXPECT_EQ(layers("mptblock=last-1"), (V{3}));
  EXPECT_EQ(layers("mptblock=middle-2"), (V{0, 1}));  // max_block_idx 3: 3 // 2 - 1 = 0
  EXPECT_EQ(layers("mptblock=middle-1"), (V{1}));
  EXPECT_EQ(layers("mptblock=range-1-3"), (V{1, 2}));
  EXPECT_EQ(layers("mptblock=first-1,last-1"), (V{0, 3}));
  EXPECT_EQ(layers("mptblock=[0,2]"), (V{0, 2}));
  EXPECT_EQ(layers("grouped_query_attention=[1,last-1]"), (V{1, 3}));
  EXPECT_EQ(layers("mptblock=9"), (V{0, 1, 2, 3}));
  EXPECT_EQ(Picked(g, {"attn=range-2-4"}),
            (std::vector<std::string>{"transformer.blocks.2.attn <- attn=range-2-4",
                                      "transformer.blocks.3.attn <- attn=range-2-4"}));
}

// --- classes, globs, children, block -----------------------------------------------------------

TEST(CkptTargetsTest, ClassNamesBareAndQualified) {
  const Graph& g = Model("mpt_tiny");
  EXPECT_EQ(Picked(g, {"models.mpt.MultiheadAttention"}),
            Blocks("transformer.blocks", 2, "attn", "models.mpt.MultiheadAttention"));
  // A base class selects its subclasses, as isinstance does.
  EXPECT_EQ(Picked(g, {"GroupedQueryAttention"}),
            Blocks("transformer.blocks", 2, "attn", "GroupedQueryAttention"));
  EXPECT_EQ(Picked(g, {"torch.nn.modules.normalization.LayerNorm=1"}),
            (std::vector<std::string>{
                "transformer.blocks.0.norm_1 <- torch.nn.modules.normalization.LayerNorm=1",
                "transformer.blocks.0.norm_2 <- torch.nn.modules.normalization.LayerNorm=1"}));
  // Linear layers inside the blocks only (no Linear outside them in mpt_tiny: the head is tied).
  EXPECT_EQ(Picked(g, {"Linear=last-1"}),
            (std::vector<std::string>{"transformer.blocks.1.attn.Wqkv <- Linear=last-1",
                                      "transformer.blocks.1.attn.out_proj <- Linear=last-1",
                                      "transformer.blocks.1.ffn.down_proj <- Linear=last-1",
                                      "transformer.blocks.1.ffn.up_proj <- Linear=last-1"}));

  const Graph& llama = Model("llama_tiny");
  EXPECT_EQ(Picked(llama, {"LlamaDecoderLayer"}),
            Blocks("model.layers", 2, "", "LlamaDecoderLayer"));
  EXPECT_EQ(Picked(llama, {"LlamaAttention"}),
            Blocks("model.layers", 2, "self_attn", "LlamaAttention"));
  EXPECT_EQ(Picked(llama, {"models.llama.LlamaMLP"}),
            Blocks("model.layers", 2, "mlp", "models.llama.LlamaMLP"));
  EXPECT_EQ(Picked(llama, {"llamarmsnorm=first-1"}),
            (std::vector<std::string>{
                "model.layers.0.input_layernorm <- llamarmsnorm=first-1",
                "model.layers.0.post_attention_layernorm <- llamarmsnorm=first-1"}));

  const Graph& gpt2 = Model("gpt2_tiny");
  EXPECT_EQ(Picked(gpt2, {"GPT2Block"}), Blocks("transformer.h", 2, "", "GPT2Block"));
  EXPECT_EQ(Picked(gpt2, {"GPT2Attention"}), Blocks("transformer.h", 2, "attn", "GPT2Attention"));
  EXPECT_EQ(Picked(gpt2, {"gpt2mlp"}), Blocks("transformer.h", 2, "mlp", "gpt2mlp"));
  EXPECT_EQ(Picked(gpt2, {"layernorm=[1]"}),
            (std::vector<std::string>{"transformer.h.1.ln_1 <- layernorm=[1]",
                                      "transformer.h.1.ln_2 <- layernorm=[1]"}));

  const Graph& pythia = Model("pythia_tiny");
  EXPECT_EQ(Picked(pythia, {"GPTNeoXLayer"}), Blocks("gpt_neox.layers", 2, "", "GPTNeoXLayer"));
  EXPECT_EQ(Picked(pythia, {"GPTNeoXAttention"}),
            Blocks("gpt_neox.layers", 2, "attention", "GPTNeoXAttention"));

  const Graph& bert = Model("bert_tiny");
  EXPECT_EQ(Picked(bert, {"BertLayer"}), Blocks("bert.encoder.layer", 2, "", "BertLayer"));
  EXPECT_EQ(Picked(bert, {"BertSelfAttention"}),
            Blocks("bert.encoder.layer", 2, "attention.self", "BertSelfAttention"));
}

TEST(CkptTargetsTest, ClassesFromFunctionsAndMetadataFormats) {
  for (const char* file : {"model.functions.onnx", "model.metadata.onnx"}) {
    SCOPED_TRACE(file);
    EXPECT_EQ(
        Picked(Model("mpt_tiny_gqa_glu", file), {"grouped_query_attention=last-2"}),
        (std::vector<std::string>{"transformer.blocks.1.attn <- grouped_query_attention=last-2",
                                  "transformer.blocks.2.attn <- grouped_query_attention=last-2"}));
    EXPECT_EQ(Picked(Model("mpt_tiny_gqa_glu", file), {"mptmlp"}),
              Blocks("transformer.blocks", 3, "ffn", "mptmlp"));
    EXPECT_EQ(Picked(Model("gpt2_tiny", file), {"GPT2Block"}),
              Blocks("transformer.h", 2, "", "GPT2Block"));
    EXPECT_EQ(Picked(Model("llama_tiny", file), {"LlamaDecoderLayer=1"}),
              (std::vector<std::string>{"model.layers.0 <- LlamaDecoderLayer=1"}));
  }
}

TEST(CkptTargetsTest, GlobsChildrenAndBlock) {
  const Graph& g = Model("mpt_tiny");
  EXPECT_EQ(Picked(g, {"transformer.blocks.*.attn"}),
            Blocks("transformer.blocks", 2, "attn", "transformer.blocks.*.attn"));
  EXPECT_EQ(Picked(g, {"transformer.blocks.*"}),
            Blocks("transformer.blocks", 2, "", "transformer.blocks.*"));
  EXPECT_EQ(Picked(g, {"transformer.blocks.1.ffn"}),
            (std::vector<std::string>{"transformer.blocks.1.ffn <- transformer.blocks.1.ffn"}));
  // `*` inside a segment; it never crosses a dot.
  EXPECT_EQ(
      Picked(g, {"transformer.blocks.0.norm_*"}),
      (std::vector<std::string>{"transformer.blocks.0.norm_1 <- transformer.blocks.0.norm_*",
                                "transformer.blocks.0.norm_2 <- transformer.blocks.0.norm_*"}));
  EXPECT_EQ(Picked(g, {"*.*.*.ffn.*_proj=1"}),
            (std::vector<std::string>{"transformer.blocks.0.ffn.down_proj <- *.*.*.ffn.*_proj=1",
                                      "transformer.blocks.0.ffn.up_proj <- *.*.*.ffn.*_proj=1"}));
  // A child name relative to the blocks.
  EXPECT_EQ(Picked(g, {"attn"}), Blocks("transformer.blocks", 2, "attn", "attn"));
  EXPECT_EQ(Picked(g, {"norm_2=last-1"}),
            (std::vector<std::string>{"transformer.blocks.1.norm_2 <- norm_2=last-1"}));
  EXPECT_EQ(Picked(g, {"block"}), Blocks("transformer.blocks", 2, "", "block"));

  // A glob that also reaches modules outside the blocks takes the ones inside.
  EXPECT_EQ(Picked(g, {"transformer.*.*=first-1"}),
            (std::vector<std::string>{"transformer.blocks.0 <- transformer.*.*=first-1"}));
}

// A stock torch.onnx.export: scoped names, no class anywhere.
TEST(CkptTargetsTest, StockExportsWithGlobsChildrenAndBlock) {
  const Graph& gpt2 = Model("gpt2_tiny", "model.stock.onnx");
  EXPECT_EQ(Picked(gpt2, {"transformer.h.*"}), Blocks("transformer.h", 2, "", "transformer.h.*"));
  EXPECT_EQ(Picked(gpt2, {"attn"}), Blocks("transformer.h", 2, "attn", "attn"));
  EXPECT_EQ(Picked(gpt2, {"block=last-1"}),
            (std::vector<std::string>{"transformer.h.1 <- block=last-1"}));
  auto sel = Select(gpt2, {"block"});
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->instances[0].class_name, "");

  const Graph& llama = Model("llama_tiny", "model.stock.onnx");
  EXPECT_EQ(Picked(llama, {"model.layers.*.self_attn"}),
            Blocks("model.layers", 2, "self_attn", "model.layers.*.self_attn"));
  EXPECT_EQ(Picked(llama, {"mlp", "self_attn=1"}),
            (std::vector<std::string>{"model.layers.0.mlp <- mlp",
                                      "model.layers.0.self_attn <- self_attn=1",
                                      "model.layers.1.mlp <- mlp"}));

  const Graph& mpt = Model("mpt_tiny", "model.stock.onnx");
  EXPECT_EQ(Picked(mpt, {"block"}), Blocks("transformer.blocks", 2, "", "block"));
  EXPECT_EQ(Picked(mpt, {"ffn=[1]"}),
            (std::vector<std::string>{"transformer.blocks.1.ffn <- ffn=[1]"}));

  const Graph& bert = Model("bert_tiny", "model.stock.onnx");
  EXPECT_EQ(Picked(bert, {"block"}), Blocks("bert.encoder.layer", 2, "", "block"));
  EXPECT_EQ(
      Picked(bert, {"bert.encoder.layer.*.attention.self"}),
      Blocks("bert.encoder.layer", 2, "attention.self", "bert.encoder.layer.*.attention.self"));

  const Graph& pythia = Model("pythia_tiny", "model.stock.onnx");
  EXPECT_EQ(Picked(pythia, {"attention"}), Blocks("gpt_neox.layers", 2, "attention", "attention"));
}

// --- several targets, nesting, duplicates ------------------------------------------------------

TEST(CkptTargetsTest, SeveralTargetsAtOnce) {
  const Graph& g = Model("mpt_tiny_4layer");
  // Upstream rejects any list of two names; here they combine.
  EXPECT_EQ(Picked(g, {"grouped_query_attention", "mptmlp=first-1"}),
            (std::vector<std::string>{"transformer.blocks.0.attn <- grouped_query_attention",
                                      "transformer.blocks.0.ffn <- mptmlp=first-1",
                                      "transformer.blocks.1.attn <- grouped_query_attention",
                                      "transformer.blocks.2.attn <- grouped_query_attention",
                                      "transformer.blocks.3.attn <- grouped_query_attention"}));
  // llm-foundry's own example, on 4 layers.
  EXPECT_EQ(
      Picked(g, {"mptblock=first-1", "grouped_query_attention=last-2"}),
      (std::vector<std::string>{"transformer.blocks.0 <- mptblock=first-1",
                                "transformer.blocks.2.attn <- grouped_query_attention=last-2",
                                "transformer.blocks.3.attn <- grouped_query_attention=last-2"}));
  // Two targets naming the same module: the first one named keeps it.
  auto sel = Select(g, {"attn=[1]", "grouped_query_attention=first-2"});
  ASSERT_TRUE(sel.ok());
  std::vector<std::string> got;
  for (const auto& i : sel->instances) got.push_back(i.module + " <- " + i.target);
  EXPECT_EQ(
      got, (std::vector<std::string>{"transformer.blocks.0.attn <- grouped_query_attention=first-2",
                                     "transformer.blocks.1.attn <- attn=[1]"}));
  EXPECT_TRUE(sel->notes().empty());
  EXPECT_EQ(sel->targets,
            (std::vector<std::string>{"attn=[1]", "grouped_query_attention=first-2"}));
}

TEST(CkptTargetsTest, NestedTargetsTheOuterWins) {
  const Graph& g = Model("mpt_tiny_4layer");
  auto sel = Select(g, {"grouped_query_attention", "mptblock=range-1-3"});
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  std::vector<std::string> got;
  for (const auto& i : sel->instances) got.push_back(i.module + " <- " + i.target);
  EXPECT_EQ(got,
            (std::vector<std::string>{"transformer.blocks.0.attn <- grouped_query_attention",
                                      "transformer.blocks.1 <- mptblock=range-1-3",
                                      "transformer.blocks.2 <- mptblock=range-1-3",
                                      "transformer.blocks.3.attn <- grouped_query_attention"}));
  EXPECT_EQ(sel->notes(), (std::vector<std::string>{
                              "transformer.blocks.1.attn (grouped_query_attention) is inside "
                              "transformer.blocks.1 (mptblock=range-1-3): the outer target wins",
                              "transformer.blocks.2.attn (grouped_query_attention) is inside "
                              "transformer.blocks.2 (mptblock=range-1-3): the outer target wins"}));
  // The same as data: the dropped attention and the block that holds it, layer and list.
  ASSERT_EQ(sel->nested.size(), 2u);
  EXPECT_EQ(sel->nested[0].inner.module, "transformer.blocks.1.attn");
  EXPECT_EQ(sel->nested[0].inner.layer, 1);
  EXPECT_EQ(sel->nested[0].inner.block_list, "transformer.blocks");
  EXPECT_EQ(sel->nested[0].outer, sel->instances[1]);

  // Nested inside one target, and two levels deep: qk LayerNorms inside the attention.
  const Graph& qkln = Model("mpt_tiny_qkln");
  sel = Select(qkln, {"layernorm=1", "attn=1", "block=1"});
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  ASSERT_EQ(sel->instances.size(), 1u);
  EXPECT_EQ(sel->instances[0].module, "transformer.blocks.0");
  EXPECT_EQ(sel->instances[0].target, "block=1");
  ASSERT_FALSE(sel->notes().empty());
  EXPECT_EQ(sel->notes()[0],
            "transformer.blocks.0.attn (attn=1) is inside transformer.blocks.0 (block=1): the "
            "outer target wins");
  for (const auto& n : sel->notes())
    EXPECT_NE(n.find("inside transformer.blocks.0 (block=1)"), std::string::npos) << n;
}

// The order names resolve in: registry key, `block`, class, child name, path glob. Here the class
// MLP is the child `ffn`, and the child called `mlp` is an Other: `mlp` is the class.
TEST(CkptTargetsTest, AmbiguousNamesResolveInAFixedOrder) {
  auto g = ParseGraph(R"(graph m opset=17 {
  module "h.0" : x.Block
  module "h.0.ffn" : x.MLP
  module "h.0.mlp" : x.Other
  module "h.1" : x.Block
  module "h.1.ffn" : x.MLP
  module "h.1.mlp" : x.Other
  module "head" : x.Head
  input x : f32[2,4]
  a = Relu(x) @"h.0.ffn"
  b = Relu(a) @"h.0.mlp"
  c = Relu(b) @"h.1.ffn"
  d = Relu(c) @"h.1.mlp"
  e = Relu(d) @"head"
  output e
}
)");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(Picked(*g, {"mlp"}), (std::vector<std::string>{"h.0.ffn <- mlp", "h.1.ffn <- mlp"}));
  EXPECT_EQ(Picked(*g, {"h.*.mlp"}),
            (std::vector<std::string>{"h.0.mlp <- h.*.mlp", "h.1.mlp <- h.*.mlp"}));
  // A class named Block: `block` is the key every block answers to, whatever its class.
  EXPECT_EQ(Picked(*g, {"block=1"}), (std::vector<std::string>{"h.0 <- block=1"}));

  auto flat = ParseGraph(R"(graph m opset=17 {
  module "encoder" : x.Encoder
  input x : f32[2,4]
  y = Relu(x) @"encoder"
  output y
}
)");
  ASSERT_TRUE(flat.ok()) << flat.status().message();
  EXPECT_EQ(ErrorOf(*flat, {"encoder"}),
            "--ckpt encoder: the model has no blocks (repeated instances of a module list, "
            "module_tree.h), and only modules inside blocks can be checkpointed; foundry-compile "
            "--list-modules shows its module tree");
}

// --- errors ------------------------------------------------------------------------------------

TEST(CkptTargetsTest, ErrorNoModuleAnnotations) {
  auto g = ParseGraph(R"(graph m opset=17 {
  input x : f32[2,4]
  y = Relu(x)
  output y
}
)");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(ErrorOf(*g, {"mptblock"}),
            "--ckpt mptblock: the model carries no module annotations to match a target against; "
            "export it with models/export_mpt.py (--annotations scopes or functions), with torch "
            ">= 1.13's torch.onnx.export (scoped node names), with torch.onnx.export(..., "
            "export_modules_as_functions=...) or with torch >= 2.5's dynamo exporter");
  // No target, nothing to match: fine on any model.
  auto none = SelectCkptTargets(*g, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->instances.empty());
}

TEST(CkptTargetsTest, ErrorUnknownNameListsTheNamesOfThisModel) {
  EXPECT_EQ(ErrorOf(Model("mpt_tiny"), {"attention"}),
            "--ckpt attention: unknown name 'attention'; names that select modules in this "
            "model's blocks: attn, block, Dropout, ffn, GELU, grouped_query_attention, layernorm, "
            "Linear, low_precision_layernorm, LPLayerNorm, mptblock, mptmlp, multihead_attention, "
            "MultiheadAttention, norm_1, norm_2, resid_attn_dropout, resid_ffn_dropout (or a "
            "module path glob such as 'transformer.blocks.*')");
  EXPECT_EQ(ErrorOf(Model("llama_tiny"), {"mptblock"}),
            "--ckpt mptblock: 'mptblock' (llm-foundry's key for MPTBlock) matches nothing in this "
            "model: no module is a MPTBlock; names that select modules in its blocks: block, "
            "input_layernorm, Linear, LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm, "
            "mlp, post_attention_layernorm, self_attn, SiLU");
}

TEST(CkptTargetsTest, ErrorRegistryKeyAbsentFromTheModel) {
  EXPECT_EQ(ErrorOf(Model("mpt_tiny"), {"mptglu"}).substr(0, 107),
            "--ckpt mptglu: 'mptglu' (llm-foundry's key for MPTGLU) matches nothing in this model: "
            "no module is a MPTGLU");
  for (const char* key : {"norm_attn_norm", "torch_dmoe", "te_ln_mlp", "mb_moe", "mb_dmoe",
                          "triton_rmsnorm", "multiquery_attention", "rmsnorm"}) {
    std::string e = ErrorOf(Model("mpt_tiny"), {key});
    EXPECT_NE(e.find("matches nothing in this model"), std::string::npos) << e;
  }
}

TEST(CkptTargetsTest, ErrorClassNameOnAStockExport) {
  EXPECT_EQ(ErrorOf(Model("gpt2_tiny", "model.stock.onnx"), {"GPT2Attention"}),
            "--ckpt GPT2Attention: 'GPT2Attention' names no module path or child of this model, "
            "and the file carries no classes to match a class name against (a stock "
            "torch.onnx.export); try a path glob such as 'transformer.h.*.attn' (children of each "
            "block: attn, ln_1, ln_2, mlp)");
  EXPECT_EQ(ErrorOf(Model("gpt2_tiny", "model.stock.onnx"), {"GPT2Block"}),
            "--ckpt GPT2Block: 'GPT2Block' names no module path or child of this model, and the "
            "file carries no classes to match a class name against (a stock torch.onnx.export); "
            "try a path glob such as 'transformer.h.*' (children of each block: attn, ln_1, ln_2, "
            "mlp)");
  EXPECT_EQ(ErrorOf(Model("llama_tiny", "model.stock.onnx"), {"LlamaMLP"}),
            "--ckpt LlamaMLP: 'LlamaMLP' names no module path or child of this model, and the "
            "file carries no classes to match a class name against (a stock torch.onnx.export); "
            "try a path glob such as 'model.layers.*.mlp' (children of each block: "
            "input_layernorm, mlp, post_attention_layernorm, self_attn)");
  // A registry key too: the file cannot say which module is an MPTBlock.
  EXPECT_EQ(ErrorOf(Model("mpt_tiny", "model.stock.onnx"), {"mptblock"}),
            "--ckpt mptblock: 'mptblock' names no module path or child of this model, and the "
            "file carries no classes to match a class name against (a stock torch.onnx.export); "
            "try a path glob such as 'transformer.blocks.*' (children of each block: attn, ffn, "
            "norm_1, norm_2, resid_attn_dropout, resid_ffn_dropout)");
}

TEST(CkptTargetsTest, ErrorMalformedLayersAndOutOfRange) {
  const Graph& g = Model("mpt_tiny_4layer");
  CkptTarget bad{"mptblock", "first-two", "--ckpt mptblock=first-two"};
  auto sel = SelectCkptTargets(g, {bad});
  ASSERT_FALSE(sel.ok());
  EXPECT_EQ(sel.status().message(),
            "--ckpt mptblock=first-two: malformed layers 'first-two'; accepted: an int n (the "
            "first n layers), a comma-separated list of first-n, last-k, middle-m, range-i-j "
            "(half-open) and layer indices, or a list [0,2,5]");
  EXPECT_EQ(ErrorOf(g, {"mptblock=[0,2,5]"}),
            "--ckpt mptblock=[0,2,5]: layer 5 in '[0,2,5]' is out of range: the model has layers "
            "0..3 (transformer.blocks.N)");
  EXPECT_EQ(ErrorOf(g, {"attn=range-4-6"}),
            "--ckpt attn=range-4-6: layers 'range-4-6' select no layer: the model has layers 0..3 "
            "(transformer.blocks.N)");
}

TEST(CkptTargetsTest, ErrorMatchesNothing) {
  const Graph& g = Model("mpt_tiny");
  EXPECT_EQ(ErrorOf(g, {"transformer.norm_f"}),
            "--ckpt transformer.norm_f: 'transformer.norm_f' matches only modules outside the "
            "blocks (transformer.norm_f); only modules inside the blocks (transformer.blocks.N) "
            "can be checkpointed");
  EXPECT_EQ(ErrorOf(g, {"SharedEmbedding"}),
            "--ckpt SharedEmbedding: 'SharedEmbedding' matches only modules outside the blocks "
            "(transformer.wte); only modules inside the blocks (transformer.blocks.N) can be "
            "checkpointed");
  EXPECT_EQ(ErrorOf(g, {"transformer.*"}),
            "--ckpt transformer.*: 'transformer.*' matches only modules outside the blocks "
            "(transformer.emb_drop, transformer.norm_f, transformer.wte); only modules inside the "
            "blocks (transformer.blocks.N) can be checkpointed");
  EXPECT_EQ(ErrorOf(Model("bert_tiny"), {"bert.embeddings.*"}),
            "--ckpt bert.embeddings.*: 'bert.embeddings.*' matches only modules outside the "
            "blocks (bert.embeddings.LayerNorm, bert.embeddings.dropout, "
            "bert.embeddings.position_embeddings, ... (5 modules)); only modules inside the blocks "
            "(bert.encoder.layer.N) can be checkpointed");
  EXPECT_EQ(ErrorOf(g, {"transformer.blocks.*.mlp"}),
            "--ckpt transformer.blocks.*.mlp: 'transformer.blocks.*.mlp' matches nothing in this "
            "model: no module path matches it (blocks: transformer.blocks.N; children of each "
            "block: attn, ffn, norm_1, norm_2, resid_attn_dropout, resid_ffn_dropout)");
  EXPECT_EQ(ErrorOf(g, {"transformer.blocks.0.attn=last-1"}),
            "--ckpt transformer.blocks.0.attn=last-1: 'transformer.blocks.0.attn' matches nothing "
            "in layers 1: the modules it names are in layers 0 only");
}

// --- --ckpt-config -----------------------------------------------------------------------------

std::vector<std::string> Texts(const CkptConfig& c) {
  std::vector<std::string> out;
  for (const auto& t : c.targets) out.push_back(t.Text());
  return out;
}

CkptConfig MustRead(const std::string& file) {
  auto c = ReadCkptConfig(Data(file));
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : CkptConfig{};
}

TEST(CkptTargetsTest, ConfigBareValues) {
  CkptConfig c = MustRead("bare_string.yaml");
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(Texts(c), (std::vector<std::string>{"grouped_query_attention"}));
  EXPECT_EQ(c.targets[0].source, "--ckpt-config " + Data("bare_string.yaml"));
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(Texts(MustRead("bare_list.yaml")),
            (std::vector<std::string>{"grouped_query_attention", "mptmlp"}));
  c = MustRead("bare_dict.yaml");
  EXPECT_EQ(Texts(c), (std::vector<std::string>{"mptblock=1", "grouped_query_attention=last-1",
                                                "mptmlp=[1,range-2-4]"}));
  // And it selects what llm-foundry would, on 4 layers.
  auto sel = SelectCkptTargets(Model("mpt_tiny_4layer"), c.targets);
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  std::vector<std::string> got;
  for (const auto& i : sel->instances) got.push_back(i.module + " <- " + i.target);
  EXPECT_EQ(got,
            (std::vector<std::string>{"transformer.blocks.0 <- mptblock=1",
                                      "transformer.blocks.1.ffn <- mptmlp=[1,range-2-4]",
                                      "transformer.blocks.2.ffn <- mptmlp=[1,range-2-4]",
                                      "transformer.blocks.3.attn <- grouped_query_attention=last-1",
                                      "transformer.blocks.3.ffn <- mptmlp=[1,range-2-4]"}));
  EXPECT_EQ(Texts(MustRead("bare.json")),
            (std::vector<std::string>{"mptblock", "GroupedQueryAttention"}));
}

TEST(CkptTargetsTest, ConfigWholeTrainingConfig) {
  CkptConfig on = MustRead("whole_on.yaml");
  EXPECT_TRUE(on.enabled);
  EXPECT_EQ(Texts(on),
            (std::vector<std::string>{"mptblock=first-2", "grouped_query_attention=last-1"}));
  EXPECT_TRUE(on.warnings.empty());

  CkptConfig off = MustRead("whole_off.yaml");
  EXPECT_FALSE(off.enabled);
  EXPECT_TRUE(off.targets.empty());
  EXPECT_EQ(off.warnings,
            (std::vector<std::string>{
                Data("whole_off.yaml") +
                ": model.activation_checkpointing_target is set but "
                "fsdp_config.activation_checkpointing is false: nothing is checkpointed "
                "(llm-foundry reads the target only when the flag is true)"}));
  CkptConfig absent = MustRead("whole_absent_flag.yaml");
  EXPECT_FALSE(absent.enabled);
  EXPECT_TRUE(absent.targets.empty());
  EXPECT_EQ(absent.warnings,
            (std::vector<std::string>{
                Data("whole_absent_flag.yaml") +
                ": model.activation_checkpointing_target is set but "
                "fsdp_config.activation_checkpointing is absent: nothing is checkpointed "
                "(llm-foundry reads the target only when the flag is true)"}));

  for (const char* file : {"whole_empty_target.yaml", "whole_no_target.yaml"}) {
    CkptConfig every = MustRead(file);
    EXPECT_TRUE(every.enabled) << file;
    EXPECT_EQ(Texts(every), (std::vector<std::string>{"block"})) << file;
    EXPECT_TRUE(every.warnings.empty());
  }
  // A config with only one of the two keys (yaml-cpp's missing keys must not throw).
  CkptConfig only_off = MustRead("whole_only_fsdp_off.yaml");
  EXPECT_FALSE(only_off.enabled);
  EXPECT_TRUE(only_off.warnings.empty());
  CkptConfig only_on = MustRead("whole_only_fsdp_on.yaml");
  EXPECT_TRUE(only_on.enabled);
  EXPECT_EQ(Texts(only_on), (std::vector<std::string>{"block"}));
  CkptConfig only_model = MustRead("whole_only_model.yaml");
  EXPECT_FALSE(only_model.enabled);
  EXPECT_EQ(only_model.warnings.size(), 1u);

  CkptConfig json = MustRead("whole.json");
  EXPECT_TRUE(json.enabled);
  EXPECT_EQ(Texts(json), (std::vector<std::string>{"mptblock=[0,2]", "mptmlp=middle-2"}));
}

// A whole config's top-level `precision:` is read as written (the CLI checks it); a bare target
// value or a config without the key leaves it unset; a list or mapping there is an error.
TEST(CkptTargetsTest, ConfigPrecision) {
  auto parse = [](const std::string& text) {
    auto c = ParseCkptConfigText(text, "c.yaml");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : CkptConfig{};
  };
  CkptConfig amp = parse("precision: amp_bf16\nfsdp_config:\n  activation_checkpointing: false\n");
  EXPECT_EQ(amp.precision, std::optional<std::string>("amp_bf16"));
  EXPECT_FALSE(amp.enabled);
  CkptConfig quoted = parse(
      "precision: 'fp32'\nmodel:\n  activation_checkpointing_target: mptblock\nfsdp_config:\n"
      "  activation_checkpointing: true\n");
  EXPECT_EQ(quoted.precision, std::optional<std::string>("fp32"));
  EXPECT_EQ(Texts(quoted), (std::vector<std::string>{"mptblock"}));
  EXPECT_EQ(parse("model:\n  d_model: 8\n").precision, std::nullopt);
  EXPECT_EQ(parse("mptblock\n").precision, std::nullopt);
  for (const char* bad : {"precision: [amp_bf16]\nmodel: {}\n", "precision:\nmodel: {}\n"}) {
    auto c = ParseCkptConfigText(bad, "c.yaml");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().message().rfind("--ckpt-config c.yaml: key 'precision' is ", 0), 0u)
        << c.status().message();
  }
}

TEST(CkptTargetsTest, ConfigErrors) {
  auto err = [](const std::string& file) {
    auto c = ReadCkptConfig(file);
    EXPECT_FALSE(c.ok()) << file;
    return c.ok() ? "" : c.status().message();
  };
  std::string missing = Data("no_such_file.yaml");
  EXPECT_EQ(err(missing),
            "--ckpt-config " + missing + ": cannot read the file: No such file or directory");
  std::string f = Data("syntax_error.yaml");
  EXPECT_EQ(err(f), "--ckpt-config " + f +
                        ": YAML syntax error at line 3, column 12: end of sequence flow not found");
  f = Data("wrong_type_model.yaml");
  EXPECT_EQ(err(f), "--ckpt-config " + f + ": key 'model' is 'mpt_causal_lm'; expected a mapping");
  f = Data("wrong_type_flag.yaml");
  EXPECT_EQ(err(f), "--ckpt-config " + f +
                        ": key 'fsdp_config.activation_checkpointing' is 'yes please'; expected "
                        "true or false");
  f = Data("wrong_type_target.yaml");
  EXPECT_EQ(err(f), "--ckpt-config " + f +
                        ": key 'model.activation_checkpointing_target'[1] is a mapping; expected "
                        "a module name (mptblock, a class name, block, a path glob)");
  f = Data("wrong_type_layers.yaml");
  EXPECT_EQ(err(f), "--ckpt-config " + f +
                        ": the target.mptblock is a mapping; expected layers (accepted: an int n "
                        "(the first n layers), a comma-separated list of first-n, last-k, "
                        "middle-m, range-i-j (half-open) and layer indices, or a list [0,2,5])");
  f = Data("malformed_layers.yaml");
  EXPECT_EQ(err(f), "--ckpt-config " + f +
                        ": the target.mptblock: malformed layers 'first-two'; accepted: an int n "
                        "(the first n layers), a comma-separated list of first-n, last-k, "
                        "middle-m, range-i-j (half-open) and layer indices, or a list [0,2,5]");
}

// A target from a config names the file in its errors.
TEST(CkptTargetsTest, ConfigTargetErrorsNameTheFile) {
  CkptConfig c = MustRead("whole.json");  // mptblock: [0, 2], on a 2-layer model
  auto sel = SelectCkptTargets(Model("mpt_tiny"), c.targets);
  ASSERT_FALSE(sel.ok());
  EXPECT_EQ(sel.status().message(),
            "--ckpt-config " + Data("whole.json") +
                " (mptblock=[0,2]): layer 2 in '[0,2]' is out of range: the model has layers 0..1 "
                "(transformer.blocks.N)");
}

}  // namespace
}  // namespace foundry
