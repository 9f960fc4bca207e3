#include "runtime/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "compiler/onnx_export.h"
#include "compiler/plan.h"
#include "compiler/tensor_proto.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

// A tiny language model: embedding (8 x 3) -> dropout -> linear head; foundry appends the
// cross-entropy loss over a `labels` input (so loss_in_model is false).
constexpr const char* kTinyLm = R"(graph tiny_lm opset=17 {
  input input_ids : i64[2,4]
  param emb : f32[8,3]
  param "head.weight" : f32[3,8]
  param "head.bias" : f32[8]
  const ratio : f32[] = [0.25]
  const train : bool[] = [1]
  x = Gather(emb, input_ids) #"embed"
  d, mask = Dropout(x, ratio, train) #"drop"
  h = MatMul(d, "head.weight") #"mm"
  logits = Add(h, "head.bias") #"add"
  output logits
}
)";

// Compiles `text` like foundry-compile does. `weights`: random initial values (else none).
LoadedPlan Compile(bool weights, const char* text = kTinyLm) {
  auto parsed = ParseGraph(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  Graph g = std::move(parsed).value();
  if (weights) {
    uint64_t seed = 1;
    for (const auto& p : g.parameters) {
      Value* v = g.FindValue(p);
      v->data = std::make_shared<const Tensor>(RandomTensor(v->shape, seed++));
    }
  }
  Status st = RunPasses(g, BuildPipeline(CompileOptions{}), PipelineOptions{});
  EXPECT_TRUE(st.ok()) << st.message();
  LoadedPlan lp;
  lp.plan_path = "tiny.plan";
  lp.plan.graph_file = "tiny.train.onnx";
  lp.plan.source_model = "tiny.onnx";
  lp.plan.loss = g.metadata["foundry.loss"];
  lp.plan.loss_in_model = g.metadata.count("foundry.loss_appended") == 0;
  lp.plan.inputs = g.inputs;
  lp.plan.parameters = g.parameters;
  for (size_t i = 0; i < g.parameters.size(); ++i)
    lp.plan.gradients[g.parameters[i]] = g.outputs[i + 1];
  EXPECT_TRUE(CheckPlan(lp.plan, g, lp.plan_path).ok());
  auto memory = PlanMemory(g, {{"cpu", CpuWorkspaceBytes}});
  EXPECT_TRUE(memory.ok()) << memory.status().message();
  if (memory.ok()) lp.plan.memory = std::move(memory).value();
  lp.graph = std::move(g);
  return lp;
}

// Writes the compiled tiny model as dir/tiny.train.onnx + dir/tiny.plan.
void WritePlanFiles(const LoadedPlan& lp, const TempDir& dir) {
  ASSERT_TRUE(ExportOnnx(lp.graph, dir / "tiny.train.onnx").ok());
  ASSERT_TRUE(WritePlan(lp.plan, dir / "tiny.plan").ok());
}

std::unique_ptr<Trainer> MakeTrainer(LoadedPlan lp, const TrainerOptions& o) {
  auto t = Trainer::Create(std::move(lp), o);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(TrainerTest, TrainsOnSyntheticTokens) {
  LoadedPlan lp = Compile(true);
  EXPECT_FALSE(lp.plan.loss_in_model);
  EXPECT_EQ(lp.plan.inputs, (std::vector<std::string>{"input_ids", "labels"}));
  TrainerOptions o;
  o.optimizer.lr = 0.05;
  auto t = MakeTrainer(std::move(lp), o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->batch(), 2);
  EXPECT_EQ(t->seq(), 4);
  EXPECT_EQ(t->vocab(), 8);
  EXPECT_EQ(t->num_parameter_elements(), 8 * 3 + 3 * 8 + 8);
  EXPECT_EQ(t->DataDescription(), "synthetic tokens (seed 0)");
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i) {
    auto r = t->Step();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->step, i + 1);
    EXPECT_GT(r->seconds, 0);
    EXPECT_NEAR(r->tokens_per_second, 8 / r->seconds, 1e-6 * r->tokens_per_second);
    losses.push_back(r->loss);
  }
  EXPECT_EQ(t->step(), 3);
  // ln(8) = 2.08 for a uniform guess over 8 classes; random weights start near it.
  EXPECT_NEAR(losses[0], std::log(8.0), 1.0);
}

TEST(TrainerTest, SeededInitForParametersWithoutData) {
  TrainerOptions o;
  o.init_seed = 42;
  auto t = MakeTrainer(Compile(false), o);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->parameter("emb").BitwiseEqual(InitParameter("emb", {8, 3}, 42)));
  EXPECT_TRUE(t->parameter("head.bias").BitwiseEqual(Tensor(DType::kFloat32, {8})));
  auto again = MakeTrainer(Compile(false), o);
  EXPECT_TRUE(again->parameter("head.weight").BitwiseEqual(t->parameter("head.weight")));
  ASSERT_TRUE(t->Step().ok());
}

TEST(TrainerTest, AllIgnoredLabelsGiveZeroLossAndGradients) {
  TempDir dir;
  Tensor labels(DType::kInt64, {2, 4});
  for (int i = 0; i < 8; ++i) labels.data<int64_t>()[i] = -100;
  ASSERT_TRUE(WriteTensorFile(dir / "labels.pb", labels, "labels").ok());
  TrainerOptions o;
  o.feeds = {"labels=" + (dir / "labels.pb")};
  o.optimizer.weight_decay = 0;  // zero gradients then leave AdamW's weights exactly as they were
  auto t = MakeTrainer(Compile(true), o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->DataDescription(), "synthetic tokens (seed 0) + --feed");
  auto before = t->parameters();
  auto r = t->Step();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->loss, 0.f);
  for (const auto& [param, gname] : t->plan().plan.gradients) {
    const Tensor& g = t->output(gname);
    for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(g.data<float>()[i], 0.f) << gname;
    EXPECT_TRUE(t->parameter(param).BitwiseEqual(before.at(param))) << param;
  }
}

// A weight that is not finite before any step is a buffer trained by mistake (a -inf mask): the
// trainer says so at once, not as a step's failure with learning-rate advice.
TEST(TrainerTest, ANonFiniteWeightBeforeAnyStepIsItsOwnError) {
  LoadedPlan lp = Compile(true);
  Tensor w = *lp.graph.FindValue("head.weight")->data;
  w.data<float>()[0] = -INFINITY;
  lp.graph.FindValue("head.weight")->data = std::make_shared<const Tensor>(w);
  auto t = Trainer::Create(std::move(lp), TrainerOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "parameter 'head.weight' holds non-finite values before any step (a buffer such as a "
            "-inf attention mask?); buffers are not trained: compile with --freeze "
            "'head.weight'");
}

TEST(TrainerTest, NonFiniteNamesTheFirstNode) {
  LoadedPlan lp = Compile(true);
  Tensor w = *lp.graph.FindValue("head.weight")->data;
  // Finite, but the product overflows fp32.
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 3e38f;
  lp.graph.FindValue("head.weight")->data = std::make_shared<const Tensor>(w);
  auto t = MakeTrainer(std::move(lp), TrainerOptions{});
  ASSERT_TRUE(t);
  auto r = t->Step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "step 1: non-finite value first produced by MatMul node 'mm' (in 'h'); lower --lr, "
            "or check the inputs and weights");
}

// Finite loss and gradients, but an update that overflows fp32 (f32(-1e300) = -inf): the step is
// an error naming it and the first parameter hit, and the trainer refuses to step or save after.
TEST(TrainerTest, NonFiniteWeightsAfterTheUpdateFailTheStep) {
  TempDir dir;
  TrainerOptions o;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.lr = 1e300;
  LoadedPlan lp = Compile(true);
  const std::string first = lp.plan.parameters.at(0);
  auto t = MakeTrainer(std::move(lp), o);
  ASSERT_TRUE(t);
  auto r = t->Step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "step 1: the optimizer update made parameter '" + first +
                                      "' non-finite (lr 1e+300); lower --lr, or check the weights");
  EXPECT_EQ(t->step(), 0);
  EXPECT_EQ(t->Step().status().message(), "an earlier step failed; the trainer cannot go on");
  EXPECT_EQ(t->Save(dir / "s").message(),
            "--save " + (dir / "s") + ": a step failed; nothing to save");
  EXPECT_FALSE(fs::exists(dir / "s"));
}

TEST(TrainerTest, DropoutSeedDependsOnRunSeedAndStep) {
  TrainerOptions a, b;
  b.seed = 1;
  auto ta = MakeTrainer(Compile(true), a);
  auto ta2 = MakeTrainer(Compile(true), a);
  auto tb = MakeTrainer(Compile(true), b);
  auto ra = ta->Step(), ra2 = ta2->Step(), rb = tb->Step();
  ASSERT_TRUE(ra.ok() && ra2.ok() && rb.ok());
  EXPECT_EQ(ra->loss, ra2->loss);
  EXPECT_NE(ra->loss, rb->loss);
  EXPECT_NE(StepSeed(0, 1), StepSeed(0, 2));
  EXPECT_NE(StepSeed(0, 1), StepSeed(1, 1));
}

TEST(TrainerTest, FeedErrors) {
  TempDir dir;
  ASSERT_TRUE(WriteTensorFile(dir / "f32.pb", Tensor(DType::kFloat32, {2, 4}), "x").ok());
  ASSERT_TRUE(WriteTensorFile(dir / "i64t.pb", Tensor(DType::kInt64, {4, 2}), "x").ok());
  auto create = [&](const std::string& feed) {
    TrainerOptions o;
    o.feeds = {feed};
    return Trainer::Create(Compile(true), o).status().message();
  };
  EXPECT_EQ(create("labels=" + (dir / "f32.pb")),
            "--feed labels=" + (dir / "f32.pb") + ": expected i64[2,4], got f32[2,4]");
  EXPECT_EQ(create("labels=" + (dir / "i64t.pb")),
            "--feed labels=" + (dir / "i64t.pb") + ": expected i64[2,4], got i64[4,2]");
  EXPECT_EQ(create("mask=" + (dir / "f32.pb")),
            "--feed mask=" + (dir / "f32.pb") +
                ": no input named 'mask'; the inputs are input_ids, labels");
  EXPECT_EQ(create("labels=" + (dir / "no.pb")), "--feed labels=" + (dir / "no.pb") +
                                                     ": cannot open '" + (dir / "no.pb") +
                                                     "': No such file or directory");
  EXPECT_EQ(create("labels"), "--feed labels: expected NAME=FILE.pb");
  ASSERT_TRUE(WriteTensorFile(dir / "ids.pb", Tensor(DType::kInt64, {2, 4}), "x").ok());
  EXPECT_EQ(create("input_ids=" + (dir / "ids.pb")),
            "input 'labels' has no data: pass it with --feed labels=FILE.pb (with --feed "
            "input_ids given, labels cannot come from token windows)");
}

TEST(TrainerTest, DataFileErrors) {
  TempDir dir;
  WriteTokens(dir / "short.bin", {1, 2, 3}, TokenDType::kUint16);
  WriteTokens(dir / "big.bin", {1, 2, 3, 4, 5, 1, 2, 9, 4, 5}, TokenDType::kUint16);
  TrainerOptions o;
  o.data_path = dir / "short.bin";
  EXPECT_EQ(Trainer::Create(Compile(true), o).status().message(),
            "--data " + (dir / "short.bin") +
                ": 3 tokens is shorter than one window of seq + 1 = 5 tokens");
  // Refused before the first step (the first whole windows are checked at Create).
  o.data_path = dir / "big.bin";
  EXPECT_EQ(
      Trainer::Create(Compile(true), o).status().message(),
      "--data " + (dir / "big.bin") + ": token 9 at position 7 is outside the vocabulary [0, 8)");
}

TEST(TrainerTest, DumpsGradientsAndOutputsOfTheFirstStep) {
  TempDir dir;
  TrainerOptions o;
  o.dump_grads_dir = dir / "grads";
  o.dump_outputs_dir = dir / "outs";
  auto t = MakeTrainer(Compile(true), o);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Step().ok());
  for (const auto& [param, gname] : t->plan().plan.gradients) {
    std::string name;
    auto g = ReadTensorFile(dir / ("grads/" + param + "_grad.pb"), &name);
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(name, param + "_grad");
    EXPECT_TRUE(g->BitwiseEqual(t->output(gname)));
  }
  for (const auto& out : t->plan().graph.outputs) {
    auto v = ReadTensorFile(dir / ("outs/" + out + ".pb"));
    ASSERT_TRUE(v.ok()) << v.status().message();
  }
  // Only the first step is dumped.
  fs::remove_all(dir / "grads");
  ASSERT_TRUE(t->Step().ok());
  EXPECT_FALSE(fs::exists(dir / "grads"));
}

TEST(TrainerTest, LoadPlanAcceptsPrefixOrPlanPath) {
  TempDir dir;
  LoadedPlan lp = Compile(true);
  WritePlanFiles(lp, dir);
  auto by_prefix = LoadPlan(dir / "tiny");
  ASSERT_TRUE(by_prefix.ok()) << by_prefix.status().message();
  EXPECT_EQ(by_prefix->plan_path, dir / "tiny.plan");
  EXPECT_EQ(by_prefix->plan.parameters, lp.plan.parameters);
  auto by_path = LoadPlan(dir / "tiny.plan");
  ASSERT_TRUE(by_path.ok());
  // The imported graph trains like the in-memory one.
  auto a = MakeTrainer(std::move(by_path).value(), TrainerOptions{});
  auto b = MakeTrainer(Compile(true), TrainerOptions{});
  auto ra = a->Step(), rb = b->Step();
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  EXPECT_EQ(ra->loss, rb->loss);

  EXPECT_EQ(LoadPlan(dir / "none").status().message(),
            "cannot open plan '" + (dir / "none.plan") +
                "': No such file or directory; create it with foundry-compile MODEL.onnx -o "
                "PREFIX");
  Plan bad = lp.plan;
  bad.inputs.push_back("attention_mask");
  ASSERT_TRUE(WritePlan(bad, dir / "bad.plan").ok());
  EXPECT_EQ(LoadPlan(dir / "bad.plan").status().message(),
            "'" + (dir / "bad.plan") +
                "' is a damaged foundry plan (input 'attention_mask' is not among the inputs of "
                "'tiny.train.onnx': input_ids, labels); recompile it with foundry-compile "
                "MODEL.onnx -o PREFIX");
  bad = lp.plan;
  bad.gradients["emb"] = "nothing";
  ASSERT_TRUE(WritePlan(bad, dir / "bad.plan").ok());
  EXPECT_EQ(LoadPlan(dir / "bad.plan").status().message(),
            "'" + (dir / "bad.plan") +
                "' is a damaged foundry plan (the gradient 'nothing' of parameter 'emb' is not "
                "an output of the graph 'tiny.train.onnx'); recompile it with foundry-compile "
                "MODEL.onnx -o PREFIX");
}

// N steps + Save + Resume + M steps must equal N + M steps bit for bit, for both optimizers,
// with dropout and a data file that wraps around (7 windows, 2 per step).
void ExpectResumeIsBitwise(const OptimizerOptions& opt, const ScheduleOptions& schedule = {},
                           int64_t total_steps = 0, double clip_norm = 0) {
  TempDir dir;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 37; ++i) tokens.push_back((i * 5 + 3) % 8);
  WriteTokens(dir / "d.bin", tokens, TokenDType::kUint16);
  LoadedPlan lp = Compile(false);
  WritePlanFiles(lp, dir);
  TrainerOptions o;
  o.optimizer = opt;
  o.seed = 7;
  o.init_seed = 3;
  o.data_path = dir / "d.bin";
  o.schedule = schedule;
  o.total_steps = total_steps;
  o.clip_norm = clip_norm;

  auto straight = MakeTrainer(*LoadPlan(dir / "tiny"), o);
  std::vector<float> want;
  for (int i = 0; i < 5; ++i) want.push_back(straight->Step()->loss);

  auto first = MakeTrainer(*LoadPlan(dir / "tiny"), o);
  std::vector<float> got;
  for (int i = 0; i < 3; ++i) got.push_back(first->Step()->loss);
  ASSERT_TRUE(first->Save(dir / "run").ok());
  ASSERT_TRUE(fs::exists(dir / "run/model.onnx"));
  ASSERT_TRUE(fs::exists(dir / "run/state.json"));
  for (const auto& e : fs::directory_iterator(dir.path()))  // no temp folder left beside it
    EXPECT_EQ(e.path().filename().string().rfind("run.", 0), std::string::npos) << e.path();

  auto state = ReadTrainState(dir / "run");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->step, 3);
  EXPECT_EQ(state->data_position, 6);
  EXPECT_EQ(state->seed, 7u);
  EXPECT_EQ(state->init_seed, 3u);
  EXPECT_EQ(state->optimizer.kind, opt.kind);
  EXPECT_EQ(state->optimizer.lr, opt.lr);
  EXPECT_EQ(state->data_path, fs::absolute(dir / "d.bin").string());
  EXPECT_EQ(state->plan_path, fs::absolute(dir / "tiny.plan").string());
  EXPECT_EQ(state->schedule.kind, schedule.kind);
  EXPECT_EQ(state->schedule.t_warmup, schedule.t_warmup);
  EXPECT_EQ(state->schedule.t_max, schedule.t_max);
  EXPECT_EQ(state->schedule.alpha_i, schedule.alpha_i);
  EXPECT_EQ(state->schedule.alpha_f, schedule.alpha_f);
  EXPECT_EQ(state->total_steps, total_steps);
  EXPECT_EQ(state->clip_norm, clip_norm);

  // Resume with options rebuilt from the state, as foundry-run does.
  TrainerOptions r;
  r.optimizer = state->optimizer;
  r.seed = state->seed;
  r.init_seed = 99;  // unused: the parameters come from the save
  r.data_path = state->data_path;
  r.data_dtype = state->data_dtype;
  r.schedule = state->schedule;
  r.total_steps = state->total_steps;
  r.clip_norm = state->clip_norm;
  auto second = MakeTrainer(*LoadPlan(state->plan_path), r);
  Status st = second->Resume(dir / "run");
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(second->step(), 3);
  for (int i = 0; i < 2; ++i) {
    auto s = second->Step();
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->step, 4 + i);
    got.push_back(s->loss);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
        << "step " << i + 1 << ": " << got[i] << " vs " << want[i];
  for (const auto& [name, p] : straight->parameters())
    EXPECT_TRUE(second->parameter(name).BitwiseEqual(p)) << name;

  // The save it resumed from is an input of this run: never replaced. Another save is.
  EXPECT_EQ(second->Save(dir / "run").message(),
            "--save " + (dir / "run") +
                ": it is the --resume directory, whose files this run reads; save to another "
                "directory");
  EXPECT_EQ(ReadTrainState(dir / "run")->step, 3);
  ASSERT_TRUE(first->Save(dir / "other").ok());
  ASSERT_TRUE(second->Save(dir / "other").ok());
  EXPECT_EQ(ReadTrainState(dir / "other")->step, 5);
}

TEST(TrainerTest, ResumeIsBitwiseAdamW) {
  OptimizerOptions o;
  o.lr = 0.05;
  o.weight_decay = 0.1;
  ExpectResumeIsBitwise(o);
}

TEST(TrainerTest, ResumeIsBitwiseSgdMomentum) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.2;
  o.momentum = 0.9;
  ExpectResumeIsBitwise(o);
}

// Across a cosine schedule with warmup, Composer's DecoupledAdamW and clipping.
TEST(TrainerTest, ResumeIsBitwiseAcrossAScheduleWithClipping) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kDecoupledAdamW;
  o.lr = 0.05;
  o.weight_decay = 0.01;
  ScheduleOptions s;
  s.kind = ScheduleKind::kCosineWithWarmup;
  s.t_warmup = 3;
  s.alpha_f = 0.1;
  ExpectResumeIsBitwise(o, s, /*total_steps=*/5, /*clip_norm=*/0.05);
}

// The step's report and its update use the schedule's lr: under warmup steps 1 and 2 have lr 0,
// so DecoupledAdamW moves no weight; the norm is measured every step, and clipping brings the
// gradients the optimizer reads to clip_norm.
TEST(TrainerTest, ScheduleAndClippingReachTheUpdate) {
  TempDir dir;
  LoadedPlan lp = Compile(true);
  TrainerOptions o;
  o.optimizer.kind = OptimizerKind::kDecoupledAdamW;
  o.optimizer.lr = 0.1;
  o.optimizer.weight_decay = 0.01;
  o.schedule.kind = ScheduleKind::kLinearDecayWithWarmup;
  o.schedule.t_warmup = 2;
  o.total_steps = 6;
  o.clip_norm = 1e-3;
  auto t = MakeTrainer(lp, o);
  ASSERT_TRUE(t);
  const std::map<std::string, Tensor> before = t->parameters();
  for (int64_t k = 1; k <= 6; ++k) {
    StatusOr<StepReport> r = t->Step();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->lr, ScheduledLr(o.schedule, 0.1, k, 6)) << "step " << k;
    ASSERT_TRUE(r->grad_norm);
    EXPECT_GT(*r->grad_norm, 1e-3f);
    // The gradients as the optimizer read them: clipped to the threshold.
    double sum = 0;
    for (const auto& [param, grad] : lp.plan.gradients) {
      const Tensor& g = t->output(grad);
      for (int64_t i = 0; i < g.numel(); ++i)
        sum += double(g.data<float>()[i]) * g.data<float>()[i];
    }
    EXPECT_NEAR(std::sqrt(sum), 1e-3, 1e-8) << "step " << k;
    if (k == 2) {
      for (const auto& [name, p] : before)
        EXPECT_TRUE(t->parameter(name).BitwiseEqual(p)) << name << " moved at lr 0";
    }
  }
  EXPECT_EQ(ScheduledLr(o.schedule, 0.1, 3, 6), 0.05);
  EXPECT_FALSE(t->parameter("emb").BitwiseEqual(before.at("emb")));

  // A schedule needs its total.
  o.total_steps = 0;
  auto u = MakeTrainer(lp, o);
  EXPECT_EQ(u->Step().status().message(),
            "the linear_decay_with_warmup schedule needs the run's total steps (--max-steps)");
  ASSERT_TRUE(u->SetTotalSteps(6).ok());
  EXPECT_TRUE(u->Step().ok());
  o.clip_norm = -1;
  EXPECT_EQ(Trainer::Create(lp, o).status().message(),
            "--clip-norm -1: must be a finite number >= 0 (0: no clipping)");
}

// A save made before the schedules (no schedule, max_steps, clip_norm keys) reads as none.
TEST(TrainerTest, OldSavesReadWithoutASchedule) {
  TempDir dir;
  LoadedPlan lp = Compile(true);
  TrainerOptions o;
  o.schedule.kind = ScheduleKind::kCosineWithWarmup;
  o.total_steps = 4;
  o.clip_norm = 2;
  auto t = MakeTrainer(lp, o);
  ASSERT_TRUE(t->Step().ok());
  ASSERT_TRUE(t->Save(dir / "run").ok());
  ASSERT_EQ(ReadTrainState(dir / "run")->schedule.kind, ScheduleKind::kCosineWithWarmup);
  std::ifstream in(dir / "run/state.json");
  nlohmann::json j = nlohmann::json::parse(in);
  for (const char* key : {"schedule", "max_steps", "clip_norm"}) ASSERT_EQ(j.erase(key), 1u) << key;
  const std::string text = j.dump(2);
  std::ofstream(dir / "run/state.json") << text;
  StatusOr<TrainState> s = ReadTrainState(dir / "run");
  ASSERT_TRUE(s.ok()) << s.status().message() << "\n" << text;
  EXPECT_EQ(s->schedule.kind, ScheduleKind::kConstant);
  EXPECT_EQ(s->total_steps, 0);
  EXPECT_EQ(s->clip_norm, 0);
  EXPECT_EQ(s->step, 1);
}

TEST(TrainerTest, SaveAndResumeErrors) {
  TempDir dir;
  auto t = MakeTrainer(Compile(true), TrainerOptions{});
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine/notes.txt") << "keep me";
  EXPECT_EQ(t->Save(dir / "mine").message(),
            "--save " + (dir / "mine") + ": '" + (dir / "mine") +
                "' exists and is not a foundry-run save (no state.json); choose another "
                "directory");
  EXPECT_TRUE(fs::exists(dir / "mine/notes.txt"));
  EXPECT_EQ(t->Resume(dir / "nothing").message(),
            "--resume " + (dir / "nothing") + ": cannot open '" + (dir / "nothing/state.json") +
                "': No such file or directory; save a run with --save DIR first");
  ASSERT_TRUE(t->Save(dir / "run").ok());
  TrainerOptions sgd;
  sgd.optimizer.kind = OptimizerKind::kSgd;
  auto u = MakeTrainer(Compile(true), sgd);
  EXPECT_EQ(u->Resume(dir / "run").message(),
            "--resume " + (dir / "run") + ": the saved run used --optimizer adamw, this one sgd");
  {
    std::ofstream(dir / "run/state.json")
        << "{\"format\": \"foundry-train-state\", \"version\": 2}";
  }
  EXPECT_EQ(ReadTrainState(dir / "run").status().message(),
            "--resume " + (dir / "run") + ": '" + (dir / "run/state.json") +
                "' has state format version 2; this foundry-run reads 1");
}

TEST(TrainerTest, FileNamesForValues) {
  EXPECT_EQ(FileNameForValue("transformer.wte.weight"), "transformer.wte.weight");
  EXPECT_EQ(FileNameForValue("/blocks/0%"), "%2Fblocks%2F0%25");
  EXPECT_EQ(FileNameForValue(".."), "%..");
}

}  // namespace
}  // namespace foundry
