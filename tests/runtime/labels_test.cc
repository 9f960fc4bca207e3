// How token batches form the labels (runtime/data.h LabelRule, TrainerOptions::labels), checked
// on the input storage a step actually fed, on both kinds of model: mpt_tiny has its own loss
// (llm-foundry's, which shifts the labels itself: plan loss_in_model), and a logits-only model to
// which foundry appends its unshifted loss; and on a nanoGPT-style model whose own loss takes
// already-shifted targets (the plan's rule is wrong for it: a warning, and --labels shifted). The
// expected windows are cut from the token vector here, not by WriteTokenBatch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compiler/plan.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const fs::path kMpt = fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures/mpt_tiny";

// mpt_tiny at [2, 16], vocabulary 256, its loss in the model.
LoadedPlan MptPlan() {
  auto lp =
      CompileFixture(kMpt / "model.onnx", {"input_ids=" + (kMpt / "inputs/input_ids.pb").string(),
                                           "labels=" + (kMpt / "inputs/labels.pb").string()});
  EXPECT_TRUE(lp.ok()) << lp.status().message();
  return std::move(lp).value();
}

// Embedding (vocabulary 8) -> linear head: logits only; foundry appends the loss over `labels`.
constexpr const char* kLogitsOnly = R"(graph logits_only opset=17 {
  input input_ids : i64[2,4]
  param emb : f32[8,3]
  param "head.weight" : f32[3,8]
  x = Gather(emb, input_ids) #"embed"
  logits = MatMul(x, "head.weight") #"mm"
  output logits
}
)";

// nanoGPT's shape of model: its own loss, cross_entropy(logits, targets) on targets the data
// loader has already shifted -- nothing slices `labels`.
constexpr const char* kNanoGpt = R"(graph nanogpt opset=17 {
  input input_ids : i64[2,4]
  input labels : i64[2,4]
  param emb : f32[8,3]
  param "head.weight" : f32[3,8]
  const rows_classes : i64[2] = [8, 8]
  const rows : i64[1] = [8]
  x = Gather(emb, input_ids) #"embed"
  logits = MatMul(x, "head.weight") #"mm"
  l2 = Reshape(logits, rows_classes) #"view_logits"
  t1 = Reshape(labels, rows) #"view_targets"
  loss = SoftmaxCrossEntropyLoss(l2, t1) #"cross_entropy"
  output loss
}
)";

LoadedPlan TextPlan(const char* text) {
  auto parsed = ParseGraph(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  Graph g = std::move(parsed).value();
  Status st = RunPasses(g, BuildPipeline(CompileOptions{}), PipelineOptions{});
  EXPECT_TRUE(st.ok()) << st.message();
  LoadedPlan lp;
  lp.plan_path = "logits_only.plan";
  lp.plan.graph_file = "logits_only.train.onnx";
  lp.plan.source_model = "logits_only.onnx";
  lp.plan.loss = g.metadata["foundry.loss"];
  lp.plan.loss_in_model = g.metadata.count("foundry.loss_appended") == 0;  // as foundry-compile
  lp.plan.inputs = g.inputs;
  lp.plan.parameters = g.parameters;
  for (size_t i = 0; i < g.parameters.size(); ++i)
    lp.plan.gradients[g.parameters[i]] = g.outputs[i + 1];
  EXPECT_TRUE(CheckPlan(lp.plan, g, lp.plan_path).ok());
  auto memory = PlanMemory(g, {{"cpu", CpuWorkspaceBytes}});
  EXPECT_TRUE(memory.ok()) << memory.status().message();
  lp.plan.memory = std::move(memory).value();
  lp.graph = std::move(g);
  return lp;
}

struct Case {
  const char* model;  // nullptr: mpt_tiny (own loss, slices labels); else a text graph
  LabelRule rule;
  bool shifted;  // what the labels must be
  std::string labels_line, warning;
};

TEST(LabelsTest, TheFedLabelsFollowTheRuleOnBothKindsOfModel) {
  const std::string kSame = "labels = input_ids (window[0:seq]): ";
  const std::string kShifted = "labels = window[1:seq+1] (input_ids shifted by one): ";
  const std::vector<Case> cases = {
      {nullptr, LabelRule::kAuto, false,
       kSame + "the model's own loss shifts them (it slices 'labels', as HF and llm-foundry do)",
       ""},
      {nullptr, LabelRule::kSame, false, kSame + "--labels same (the model has its own loss)", ""},
      {nullptr, LabelRule::kShifted, true,
       kShifted + "--labels shifted (the model has its own loss)",
       "--labels shifted overrides the plan's rule: the model's own loss slices 'labels' (shifts "
       "them itself, as HF and llm-foundry do), so shifted labels train it to predict the token "
       "two ahead"},
      {kLogitsOnly, LabelRule::kAuto, true,
       kShifted + "foundry appended the loss, which does not shift them", ""},
      {kLogitsOnly, LabelRule::kShifted, true,
       kShifted + "--labels shifted (foundry appended the loss)", ""},
      {kLogitsOnly, LabelRule::kSame, false, kSame + "--labels same (foundry appended the loss)",
       "--labels same overrides the plan's rule: foundry appended this model's loss, which does "
       "not shift the labels, so labels = input_ids train it to copy its input"},
      // The plan's rule (own loss: same) is wrong for nanoGPT's model, and foundry says so.
      {kNanoGpt, LabelRule::kAuto, false,
       kSame + "the model has its own loss, and nothing in it slices 'labels'",
       "the model has its own loss but nothing in it slices 'labels' (HF and llm-foundry models "
       "shift them with a Slice): if its loss takes already-shifted targets (nanoGPT style), "
       "pass --labels shifted, or it learns to copy its input; --labels same keeps labels = "
       "input_ids without this warning"},
      {kNanoGpt, LabelRule::kShifted, true,
       kShifted + "--labels shifted (the model has its own loss)", ""},
      {kNanoGpt, LabelRule::kSame, false, kSame + "--labels same (the model has its own loss)", ""},
  };
  TempDir dir;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 200; ++i) tokens.push_back((i * 37 + 11) % 8);  // in both vocabularies
  WriteTokens(dir / "tokens.bin", tokens, TokenDType::kUint16);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model ? c.model : "mpt_tiny").substr(0, 20) + " --labels " +
                 std::string(LabelRuleName(c.rule)));
    LoadedPlan lp = c.model ? TextPlan(c.model) : MptPlan();
    EXPECT_EQ(lp.plan.loss_in_model, c.model != kLogitsOnly);
    TrainerOptions o;
    o.data_path = dir / "tokens.bin";
    o.labels = c.rule;
    auto t = Trainer::Create(std::move(lp), o);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ((*t)->data_source().DescribeLabels(), c.labels_line);
    EXPECT_EQ((*t)->data_source().LabelsWarning(), c.warning);
    const int64_t batch = (*t)->batch(), seq = (*t)->seq();
    for (int64_t step = 0; step < 2; ++step) {
      ASSERT_TRUE((*t)->Step().ok());
      auto ids = (*t)->OutputOnHost("input_ids");
      auto labels = (*t)->OutputOnHost("labels");
      ASSERT_TRUE(ids.ok() && labels.ok());
      std::vector<int64_t> want_ids, want_labels;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t start = (step * batch + b) * (seq + 1);  // window position + b
        for (int64_t i = 0; i < seq; ++i) {
          want_ids.push_back(tokens[static_cast<size_t>(start + i)]);
          want_labels.push_back(tokens[static_cast<size_t>(start + i + (c.shifted ? 1 : 0))]);
        }
      }
      EXPECT_EQ(ids->ToInt64Vector(), want_ids);
      EXPECT_EQ(labels->ToInt64Vector(), want_labels);
    }
  }
}

TEST(LabelsTest, FedLabelsAreNotFormedFromWindows) {
  TrainerOptions o;
  o.feeds = {"labels=" + (kMpt / "inputs/labels.pb").string()};
  o.labels = LabelRule::kShifted;
  auto t = Trainer::Create(MptPlan(), o);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->data_source().DescribeLabels(), "");
  EXPECT_EQ((*t)->data_source().LabelsWarning(),
            "--labels shifted does nothing: the labels do not come from token windows (--feed "
            "gives them)");
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LabelsTest, StateJsonKeepsTheRule) {
  TempDir dir;
  TrainerOptions o;
  o.labels = LabelRule::kShifted;
  auto t = Trainer::Create(MptPlan(), o);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_TRUE((*t)->Step().ok());
  ASSERT_TRUE((*t)->Save(dir / "run").ok());
  nlohmann::json j = nlohmann::json::parse(ReadAll(dir / "run/state.json"));
  EXPECT_EQ(j["data"]["labels"], "shifted");
  EXPECT_EQ(j["data"]["dtype"], "auto");
  auto state = ReadTrainState(dir / "run");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->labels, LabelRule::kShifted);
  EXPECT_EQ(state->data_dtype, TokenDType::kAuto);
  // A save from before --labels has no key: the plan's rule.
  j["data"].erase("labels");
  std::ofstream(dir / "run/state.json", std::ios::binary) << j.dump(2);
  state = ReadTrainState(dir / "run");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->labels, LabelRule::kAuto);
  j["data"]["labels"] = "next";
  std::ofstream(dir / "run/state.json", std::ios::binary) << j.dump(2);
  EXPECT_EQ(ReadTrainState(dir / "run").status().message(),
            "--resume " + (dir / "run") + ": --labels next: choose auto, shifted or same");
}

}  // namespace
}  // namespace foundry
