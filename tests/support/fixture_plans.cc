#include "tests/support/fixture_plans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "compiler/ckpt_targets.h"
#include "compiler/onnx_import.h"
#include "compiler/plan.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "runtime/cuda_backend.h"
#include "runtime/data.h"

namespace foundry {

namespace fs = std::filesystem;

std::vector<TrainingFixture> TrainingFixtures(const fs::path& fixtures_dir) {
  std::vector<TrainingFixture> out;
  for (const auto& e : fs::directory_iterator(fixtures_dir)) {
    if (!fs::exists(e.path() / "inputs")) continue;
    TrainingFixture f{e.path(), {}};
    for (const auto& in : fs::directory_iterator(e.path() / "inputs"))
      f.feeds.push_back(in.path().stem().string() + "=" + in.path().string());
    std::sort(f.feeds.begin(), f.feeds.end());
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.dir < b.dir; });
  return out;
}

namespace {

// The compile of an imported fixture graph (with `checkpoint` instances).
StatusOr<LoadedPlan> CompileImported(Graph g, const fs::path& model,
                                     const std::vector<std::string>& feeds,
                                     const std::vector<std::string>& checkpoint,
                                     Precision precision) {
  std::map<std::string, int64_t> dims;
  for (const auto& spec : feeds) {
    ASSIGN_OR_RETURN(Feed f, ReadFeed(spec));
    const Value* v = g.FindValue(f.name);
    if (!v) return Error("no input " + f.name);
    for (size_t d = 0; d < v->dim_params.size() && d < f.tensor.shape().size(); ++d)
      if (!v->dim_params[d].empty()) dims[v->dim_params[d]] = f.tensor.shape()[d];
  }
  CompileOptions options;
  options.fold.dims = dims;
  options.remat.instances = checkpoint;
  options.autocast.precision = precision;
  RETURN_IF_ERROR(RunPasses(g, BuildPipeline(options), {}));
  LoadedPlan lp;
  lp.plan_path = (fs::path(testing::TempDir()) / "fixture.plan").string();
  lp.plan.graph_file = "fixture.train.onnx";
  lp.plan.source_model = model.string();
  lp.plan.loss = g.metadata["foundry.loss"];
  lp.plan.loss_in_model = g.metadata.count("foundry.loss_appended") == 0;
  lp.plan.inputs = g.inputs;
  lp.plan.parameters = g.parameters;
  for (size_t i = 0; i < g.parameters.size(); ++i)
    lp.plan.gradients[g.parameters[i]] = g.outputs[i + 1];
  lp.plan.dims = dims;
  RETURN_IF_ERROR(CheckPlan(lp.plan, g, lp.plan_path));
  // The memory plan, as foundry-compile makes it: a layout for every backend this build has.
  ASSIGN_OR_RETURN(lp.plan.memory, PlanMemory(g, CompiledBackendSpecs()));
  lp.graph = std::move(g);
  return lp;
}

}  // namespace

StatusOr<LoadedPlan> CompileFixture(const fs::path& model, const std::vector<std::string>& feeds,
                                    const std::vector<std::string>& checkpoint,
                                    Precision precision) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(model.string(), {}));
  return CompileImported(std::move(g), model, feeds, checkpoint, precision);
}

StatusOr<LoadedPlan> CompileFixture(const fs::path& model, const std::vector<std::string>& feeds,
                                    const std::vector<CkptTarget>& targets,
                                    CkptSelection* selection, Precision precision) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(model.string(), {}));
  ASSIGN_OR_RETURN(CkptSelection selected, SelectCkptTargets(g, targets));
  std::vector<std::string> instances;
  for (const CkptInstance& i : selected.instances) instances.push_back(i.module);
  if (selection) *selection = std::move(selected);
  return CompileImported(std::move(g), model, feeds, instances, precision);
}

std::string CkptCase::Name() const {
  std::string s = fixture + "/" + file;
  for (const auto& a : ckpt) s += " --ckpt " + a;
  return s;
}

namespace {

// `blocks`.N[.child] for each layer N.
std::vector<std::string> Each(const std::string& blocks, const std::vector<int>& layers,
                              const std::vector<std::string>& children = {""}) {
  std::vector<std::string> out;
  for (int n : layers)
    for (const auto& c : children)
      out.push_back(blocks + "." + std::to_string(n) + (c.empty() ? "" : "." + c));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> Upto(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

std::vector<std::string> Sorted(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  return a;
}

// An MPT fixture's classes: the registry keys its attention, FFN and norms answer to.
struct MptFixture {
  const char* name;
  int layers;
  std::vector<const char*> attn_keys;  // grouped_query_attention, and the class's own key
  const char* ffn_class;
  std::vector<const char*> ffn_keys;  // mptmlp, and mptglu for a GLU
  std::vector<const char*> norm_keys;
  std::vector<std::string> norms;  // the modules of a block the norm keys select
};

}  // namespace

std::vector<CkptCase> CheckpointCases() {
  const std::string kMpt = "transformer.blocks";
  const std::vector<MptFixture> mpts = {
      {"mpt_tiny",
       2,
       {"grouped_query_attention", "multihead_attention"},
       "MPTMLP",
       {"mptmlp"},
       {"low_precision_layernorm", "layernorm"},
       {"norm_1", "norm_2"}},
      {"mpt_tiny_dropout",
       2,
       {"grouped_query_attention", "multihead_attention"},
       "MPTMLP",
       {"mptmlp"},
       {"low_precision_layernorm", "layernorm"},
       {"norm_1", "norm_2"}},
      {"mpt_tiny_gqa_glu",
       3,
       {"grouped_query_attention"},
       "MPTGLU",
       {"mptglu", "mptmlp"},
       {"low_precision_rmsnorm", "rmsnorm"},
       {"norm_1", "norm_2"}},
      {"mpt_tiny_mqa",
       2,
       {"grouped_query_attention", "multiquery_attention"},
       "MPTMLP",
       {"mptmlp"},
       {"rmsnorm"},
       {"norm_1", "norm_2"}},
      {"mpt_tiny_qkln",
       2,
       {"grouped_query_attention", "multihead_attention"},
       "MPTGLU",
       {"mptglu", "mptmlp"},
       {"low_precision_layernorm", "layernorm"},
       {"attn.k_ln", "attn.q_ln", "norm_1", "norm_2"}},
      {"mpt_tiny_4layer",
       4,
       {"grouped_query_attention"},
       "MPTMLP",
       {"mptmlp"},
       {"layernorm"},
       {"norm_1", "norm_2"}},
  };
  std::vector<CkptCase> cases;
  auto add = [&](const std::string& fixture, const std::string& file, std::vector<std::string> ckpt,
                 std::vector<std::string> instances) {
    std::sort(instances.begin(), instances.end());
    cases.push_back({fixture, file, std::move(ckpt), std::move(instances)});
  };
  for (const MptFixture& m : mpts) {
    const std::string f = m.name, file = "model.onnx";
    const std::vector<int> all = Upto(m.layers);
    // Every registry key each fixture's classes answer to.
    add(f, file, {"mptblock"}, Each(kMpt, all));
    for (const char* k : m.attn_keys) add(f, file, {k}, Each(kMpt, all, {"attn"}));
    for (const char* k : m.ffn_keys) add(f, file, {k}, Each(kMpt, all, {"ffn"}));
    for (const char* k : m.norm_keys) add(f, file, {k}, Each(kMpt, all, m.norms));
    // The other forms on one fixture with dropout off and the one with dropout on.
    if (f != "mpt_tiny" && f != "mpt_tiny_dropout") continue;
    add(f, file, {m.ffn_class}, Each(kMpt, all, {"ffn"}));
    add(f, file, {"MPTBlock"}, Each(kMpt, all));
    add(f, file, {"transformer.blocks.*.attn"}, Each(kMpt, all, {"attn"}));
    add(f, file, {"norm_2"}, Each(kMpt, all, {"norm_2"}));
    add(f, file, {"block"}, Each(kMpt, all));
    add(f, file, {"grouped_query_attention", m.ffn_keys[0]}, Each(kMpt, all, {"attn", "ffn"}));
    // Nested: block 0 whole (its attention is inside it: the outer target wins), the other
    // layers' attention.
    add(f, file, {"grouped_query_attention", "mptblock=first-1"},
        Sorted(Each(kMpt, {0}),
               Each(kMpt, std::vector<int>(all.begin() + 1, all.end()), {"attn"})));
  }
  // The layer forms, on the 4-layer fixture (llm-foundry's target_blocks; middle-m starts at
  // max_block_idx // 2 - m // 2 with max_block_idx = 3).
  {
    const std::string f = "mpt_tiny_4layer", file = "model.onnx";
    add(f, file, {"mptblock=3"}, Each(kMpt, {0, 1, 2}));
    add(f, file, {"mptblock=first-1"}, Each(kMpt, {0}));
    add(f, file, {"mptblock=last-1"}, Each(kMpt, {3}));
    add(f, file, {"mptblock=middle-1"}, Each(kMpt, {1}));
    add(f, file, {"mptblock=middle-2"}, Each(kMpt, {0, 1}));
    add(f, file, {"mptblock=range-1-3"}, Each(kMpt, {1, 2}));
    add(f, file, {"mptblock=[0,2]"}, Each(kMpt, {0, 2}));
    add(f, file, {"mptblock=first-1,last-1"}, Each(kMpt, {0, 3}));
    add(f, file, {"grouped_query_attention=last-2", "mptmlp=[0,1]"},
        Sorted(Each(kMpt, {2, 3}, {"attn"}), Each(kMpt, {0, 1}, {"ffn"})));
    add(f, file, {"mptblock=range-0-2", "grouped_query_attention=[1,3]"},
        Sorted(Each(kMpt, {0, 1}), Each(kMpt, {3}, {"attn"})));
  }
  // The other families, annotated: class names, block, globs, a registry key.
  add("llama_tiny", "model.onnx", {"LlamaDecoderLayer"}, Each("model.layers", {0, 1}));
  add("llama_tiny", "model.onnx", {"LlamaAttention", "LlamaMLP"},
      Each("model.layers", {0, 1}, {"self_attn", "mlp"}));
  add("llama_tiny", "model.onnx", {"block=last-1"}, Each("model.layers", {1}));
  add("llama_tiny", "model.onnx", {"model.layers.*.mlp"}, Each("model.layers", {0, 1}, {"mlp"}));
  // Its Gemma-2 variant: a sliding-window layer and a full one, both soft-capped.
  add("llama_tiny_window", "model.onnx", {"LlamaDecoderLayer"}, Each("model.layers", {0, 1}));
  add("llama_tiny_window", "model.onnx", {"LlamaAttention", "LlamaMLP"},
      Each("model.layers", {0, 1}, {"self_attn", "mlp"}));
  add("llama_tiny_window", "model.onnx",
      {"model.layers.*.input_layernorm", "model.layers.*.post_attention_layernorm"},
      Each("model.layers", {0, 1}, {"input_layernorm", "post_attention_layernorm"}));
  add("llama_tiny_window", "model.onnx", {"block=first-1"}, Each("model.layers", {0}));
  add("gpt2_tiny", "model.onnx", {"GPT2Block"}, Each("transformer.h", {0, 1}));
  add("gpt2_tiny", "model.onnx", {"GPT2Attention", "GPT2MLP"},
      Each("transformer.h", {0, 1}, {"attn", "mlp"}));
  add("gpt2_tiny", "model.onnx", {"block"}, Each("transformer.h", {0, 1}));
  add("gpt2_tiny", "model.onnx", {"transformer.h.*.mlp"}, Each("transformer.h", {0, 1}, {"mlp"}));
  add("gpt2_tiny", "model.onnx", {"layernorm"}, Each("transformer.h", {0, 1}, {"ln_1", "ln_2"}));
  add("pythia_tiny", "model.onnx", {"GPTNeoXLayer"}, Each("gpt_neox.layers", {0, 1}));
  add("pythia_tiny", "model.onnx", {"GPTNeoXAttention", "GPTNeoXMLP"},
      Each("gpt_neox.layers", {0, 1}, {"attention", "mlp"}));
  add("pythia_tiny", "model.onnx", {"block=first-1"}, Each("gpt_neox.layers", {0}));
  add("pythia_tiny", "model.onnx", {"gpt_neox.layers.*.attention"},
      Each("gpt_neox.layers", {0, 1}, {"attention"}));
  add("pythia_tiny", "model.onnx", {"layernorm"},
      Each("gpt_neox.layers", {0, 1}, {"input_layernorm", "post_attention_layernorm"}));
  add("bert_tiny", "model.onnx", {"BertLayer"}, Each("bert.encoder.layer", {0, 1}));
  add("bert_tiny", "model.onnx", {"BertAttention", "BertIntermediate"},
      Each("bert.encoder.layer", {0, 1}, {"attention", "intermediate"}));
  add("bert_tiny", "model.onnx", {"block"}, Each("bert.encoder.layer", {0, 1}));
  add("bert_tiny", "model.onnx", {"bert.encoder.layer.*.output"},
      Each("bert.encoder.layer", {0, 1}, {"output"}));
  add("bert_tiny", "model.onnx", {"layernorm"},
      Each("bert.encoder.layer", {0, 1}, {"attention.output.LayerNorm", "output.LayerNorm"}));
  // Stock exports: block, a glob, a child name relative to the blocks.
  struct Stock {
    const char* fixture;
    const char* blocks;
    int layers;
    const char* glob_child;
    const char* child;
  };
  const std::vector<Stock> stocks = {
      {"bert_tiny", "bert.encoder.layer", 2, "attention", "intermediate"},
      {"gpt2_tiny", "transformer.h", 2, "attn", "mlp"},
      {"llama_tiny", "model.layers", 2, "self_attn", "mlp"},
      {"llama_tiny_window", "model.layers", 2, "self_attn", "mlp"},
      {"mpt_tiny", "transformer.blocks", 2, "attn", "ffn"},
      {"mpt_tiny_4layer", "transformer.blocks", 4, "attn", "ffn"},
      {"mpt_tiny_dropout", "transformer.blocks", 2, "attn", "ffn"},
      {"mpt_tiny_gqa_glu", "transformer.blocks", 3, "attn", "ffn"},
      {"mpt_tiny_mqa", "transformer.blocks", 2, "attn", "ffn"},
      {"mpt_tiny_qkln", "transformer.blocks", 2, "attn", "ffn"},
      {"pythia_tiny", "gpt_neox.layers", 2, "attention", "mlp"},
  };
  for (const Stock& s : stocks) {
    const std::vector<int> all = Upto(s.layers);
    add(s.fixture, "model.stock.onnx", {"block"}, Each(s.blocks, all));
    // The MPT variants differ from mpt_tiny inside the blocks, not in their paths.
    const std::string name = s.fixture;
    if (name.rfind("mpt_tiny_", 0) == 0 && name != "mpt_tiny_dropout") continue;
    add(s.fixture, "model.stock.onnx", {std::string(s.blocks) + ".*." + s.glob_child},
        Each(s.blocks, all, {s.glob_child}));
    add(s.fixture, "model.stock.onnx", {s.child}, Each(s.blocks, all, {s.child}));
  }
  return cases;
}

StatusOr<TrainingFixture> FixtureOf(const fs::path& fixtures_dir, const CkptCase& c) {
  for (TrainingFixture& f : TrainingFixtures(fixtures_dir))
    if (f.dir.filename() == c.fixture) return std::move(f);
  return Error("no fixture '" + c.fixture + "' with inputs under " + fixtures_dir.string());
}

StatusOr<LoadedPlan> CompileCkptCase(const fs::path& fixtures_dir, const CkptCase& c,
                                     Precision precision) {
  ASSIGN_OR_RETURN(TrainingFixture f, FixtureOf(fixtures_dir, c));
  std::vector<CkptTarget> targets;
  for (const auto& arg : c.ckpt) {
    ASSIGN_OR_RETURN(CkptTarget t, ParseCkptArg(arg));
    targets.push_back(std::move(t));
  }
  CkptSelection selection;
  ASSIGN_OR_RETURN(LoadedPlan lp,
                   CompileFixture(f.dir / c.file, f.feeds, targets, &selection, precision));
  std::vector<std::string> selected;
  for (const CkptInstance& i : selection.instances) selected.push_back(i.module);
  std::sort(selected.begin(), selected.end());
  if (selected != c.instances) {
    std::string got, want;
    for (const auto& m : selected) got += " " + m;
    for (const auto& m : c.instances) want += " " + m;
    return Error(c.Name() + " selected" + (got.empty() ? " nothing" : got) + "; expected" + want);
  }
  return lp;
}

}  // namespace foundry
