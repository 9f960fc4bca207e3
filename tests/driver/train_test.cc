// Train(RunRequest) as a library call (driver/train.h): a compiled plan trains, the result holds
// the losses and planned against measured memory per class, the log holds what foundry-run
// prints, a save resumed through ResumedOptions continues the run bit for bit, and the checks made
// before the first step stop a run before any step.
#include "driver/train.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "compiler/plan.h"
#include "driver/compile.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

class TrainTest : public ScratchDirTest {
 protected:
  // foundry-compile mpt_tiny --dim batch=2 --dim seq=16 -o DIR/m
  std::string CompilePlan() {
    CompileRequest c;
    c.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
    c.dims = {{"batch", 2}, {"seq", 16}};
    c.output_prefix = Path("m");
    StatusOr<CompileResult> r = Compile(c);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return "";
    Status st = WriteCompiledOutputs(r->graph, &*r->plan, c.output_prefix);
    EXPECT_TRUE(st.ok()) << st.message();
    return c.output_prefix;
  }
  RunRequest Request(const std::string& plan, int64_t steps) {
    RunRequest r;
    r.plan = plan;
    r.steps = steps;
    r.log = &log_;
    return r;
  }
  std::ostringstream log_;
};

TEST_F(TrainTest, TrainsAndMeasuresWhatWasPlanned) {
  const std::string plan = CompilePlan();
  RunRequest req = Request(plan, 2);
  req.report_json = Path("run.json");
  StatusOr<RunResult> r = Train(req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->first_step, 0);
  EXPECT_EQ(r->last_step, 2);
  EXPECT_GT(r->loss_first, 0);
  EXPECT_GT(r->loss_last, 0);
  const RunMemory& m = r->memory;
  EXPECT_GT(m.planned[MemoryClass::kArena], 0);
  EXPECT_EQ(m.measured[MemoryClass::kArena], m.planned[MemoryClass::kArena]);
  for (MemoryClass c : {MemoryClass::kParameter, MemoryClass::kGradient,
                        MemoryClass::kOptimizerState, MemoryClass::kInput, MemoryClass::kOutput})
    EXPECT_EQ(m.measured[c], m.planned[c]) << MemoryClassName(c);
  EXPECT_EQ(m.total_measured, m.total_planned);
  EXPECT_EQ(m.other_during, 0);
  const std::string log = log_.str();
  EXPECT_EQ(log.rfind("foundry-run " + plan + ".plan\n", 0), 0u) << log;
  EXPECT_NE(log.find("step 2/2  loss "), std::string::npos) << log;
  EXPECT_NE(log.find("  arena            "), std::string::npos) << log;
  EXPECT_NE(log.find("report " + req.report_json + "\n"), std::string::npos) << log;
  const auto j = nlohmann::json::parse(ReadWholeFile(req.report_json));
  EXPECT_EQ(j.at("steps"), 2);
  EXPECT_EQ(j.at("loss_last").get<float>(), r->loss_last);
  EXPECT_EQ(j.at("memory").at("parameters_planned_bytes"), m.planned[MemoryClass::kParameter]);
  EXPECT_EQ(j.at("memory").at("optimizer_state_measured_bytes"),
            m.measured[MemoryClass::kOptimizerState]);
}

// The torch_crossentropy backward (passes/loss_backward.h) trains as the fused one does, within
// the last bits; its plan is measured as planned; and checkpointing every block keeps its losses
// bit for bit.
TEST_F(TrainTest, TorchCrossEntropyTrainsLikeTheFusedLoss) {
  auto Losses = [&](LossFn loss_fn, std::vector<std::string> ckpt, const std::string& name) {
    CompileRequest c;
    c.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
    c.dims = {{"batch", 2}, {"seq", 16}};
    c.loss_fn = loss_fn;
    for (const std::string& t : ckpt) c.ckpt_targets.push_back({t, ""});
    c.output_prefix = Path(name);
    StatusOr<CompileResult> r = Compile(c);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return std::vector<float>{};
    EXPECT_TRUE(WriteCompiledOutputs(r->graph, &*r->plan, c.output_prefix).ok());
    RunRequest req = Request(c.output_prefix, 3);
    req.trainer.seed = 3;
    req.trainer.optimizer.lr = 0.01;
    StatusOr<RunResult> run = Train(req);
    EXPECT_TRUE(run.ok()) << run.status().message();
    if (!run.ok()) return std::vector<float>{};
    EXPECT_EQ(run->memory.total_measured, run->memory.total_planned) << name;
    EXPECT_EQ(run->memory.measured[MemoryClass::kArena], run->memory.planned[MemoryClass::kArena]);
    return run->losses;
  };
  const std::vector<float> fused = Losses(LossFn::kFusedCrossEntropy, {}, "fused");
  const std::vector<float> torch = Losses(LossFn::kTorchCrossEntropy, {}, "torch");
  const std::vector<float> torch_ckpt =
      Losses(LossFn::kTorchCrossEntropy, {"mptblock"}, "torch_ckpt");
  ASSERT_EQ(fused.size(), 3u);
  ASSERT_EQ(torch.size(), 3u);
  EXPECT_EQ(fused[0], torch[0]);  // the same forward
  for (size_t i = 1; i < 3; ++i) EXPECT_NEAR(torch[i], fused[i], 1e-5 * fused[i]) << i;
  EXPECT_EQ(torch_ckpt, torch);
}

TEST_F(TrainTest, ASaveResumedThroughResumedOptionsContinuesTheRun) {
  const std::string plan = CompilePlan();
  RunRequest three = Request(plan, 3);
  three.trainer.seed = 5;
  three.trainer.optimizer.lr = 0.01;
  StatusOr<RunResult> whole = Train(three);
  ASSERT_TRUE(whole.ok()) << whole.status().message();

  RunRequest two = three;
  two.steps = 2;
  two.save_dir = Path("save");
  ASSERT_TRUE(Train(two).ok());
  std::string saved_plan;
  StatusOr<TrainerOptions> resumed = ResumedOptions(two.save_dir, saved_plan);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->seed, 5u);
  EXPECT_EQ(resumed->optimizer.lr, 0.01);
  EXPECT_FALSE(saved_plan.empty());
  RunRequest one = Request(saved_plan, 1);
  one.trainer = *resumed;
  one.resume_dir = two.save_dir;
  StatusOr<RunResult> rest = Train(one);
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  EXPECT_EQ(rest->first_step, 2);
  EXPECT_EQ(rest->last_step, 3);
  EXPECT_EQ(rest->loss_last, whole->loss_last);  // bitwise: the resume contract
}

TEST_F(TrainTest, ChecksBeforeTheFirstStep) {
  const std::string plan = CompilePlan();
  RunRequest folder = Request(plan, 1);
  folder.report_json = dir_;
  StatusOr<RunResult> r = Train(folder);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--report-json '" + dir_ + "': it is a folder; give a file name");
  RunRequest over = Request(plan, 1);
  over.save_dir = plan + ".plan";
  EXPECT_FALSE(Train(over).ok());
  EXPECT_EQ(log_.str().find("step 1/"), std::string::npos) << log_.str();

  RunRequest missing = Request(Path("nothing"), 1);
  EXPECT_FALSE(Train(missing).ok());
}

}  // namespace
}  // namespace foundry
