// End-to-end: runs the real foundry-run binary (and foundry-compile, to make a plan from the
// mpt_tiny fixture) and checks exact error lines, exit codes, and results against the PyTorch
// reference the fixture carries.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/tensor_proto.h"
#include "tests/support/exec.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace foundry {
namespace {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kFixture = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny";

using Result = ExecResult;


class FoundryRunTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        (fs::path(testing::TempDir()) / ("foundry_run_test_" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Result r = Exec(kCompile, {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16",
                               "-o", dir_ + "/mpt"});
    compiled_ = r.code == 0;
    if (!compiled_) std::cerr << "foundry-compile failed:\n" << r.out << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(compiled_) << "the mpt_tiny plan did not compile"; }

  static Result Exec(const std::string& binary, const std::vector<std::string>& args) {
    return foundry::Exec(binary, args, dir_);
  }
  static Result Run(const std::vector<std::string>& args) { return Exec(kRun, args); }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }

  static std::string dir_;
  static bool compiled_;
};

std::string FoundryRunTest::dir_;
bool FoundryRunTest::compiled_ = false;

std::string Line(const std::string& message) { return "foundry-run: error: " + message + "\n"; }

TEST_F(FoundryRunTest, MissingPlan) {
  Result r = Run({Path("nothing")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("cannot open plan '" + Path("nothing.plan") +
                        "': No such file or directory; create it with foundry-compile "
                        "MODEL.onnx -o PREFIX"));
  EXPECT_EQ(r.out, "");
}

TEST_F(FoundryRunTest, CorruptPlan) {
  {
    std::ofstream out(Path("random.plan"), std::ios::binary);
    uint32_t x = 12345;
    for (int i = 0; i < 300; ++i) {
      x = x * 1664525u + 1013904223u;
      out.put(static_cast<char>(x >> 24));
    }
  }
  Result r = Run({Path("random.plan")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("'" + Path("random.plan") +
                        "' is not a foundry plan (not the JSON foundry-compile writes); recompile "
                        "it with foundry-compile MODEL.onnx -o PREFIX"));
  { std::ofstream(Path("v99.plan")) << R"({"format": "foundry-plan", "version": 99})"; }
  r = Run({Path("v99")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("'" + Path("v99.plan") +
                        "' is plan format version 99; this foundry-run reads version 1; "
                        "recompile it with foundry-compile MODEL.onnx -o PREFIX"));
}

TEST_F(FoundryRunTest, FeedErrors) {
  const std::string ids = kFixture + "/inputs/input_ids.pb";
  const std::string labels = kFixture + "/inputs/labels.pb";
  Result r = Run({Path("mpt"), "--feed", "attention_mask=" + ids});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("--feed attention_mask=" + ids +
                        ": no input named 'attention_mask'; the inputs are input_ids, labels"));

  ASSERT_TRUE(WriteTensorFile(Path("f32.pb"), Tensor(DType::kFloat32, {2, 16}), "labels").ok());
  r = Run({Path("mpt"), "--feed", "labels=" + Path("f32.pb")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("--feed labels=" + Path("f32.pb") + ": expected i64[2,16], got f32[2,16]"));

  ASSERT_TRUE(WriteTensorFile(Path("short.pb"), Tensor(DType::kInt64, {2, 8}), "labels").ok());
  r = Run({Path("mpt"), "--feed", "input_ids=" + ids, "--feed", "labels=" + Path("short.pb")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            Line("--feed labels=" + Path("short.pb") + ": expected i64[2,16], got i64[2,8]"));

  r = Run({Path("mpt"), "--feed", "labels=" + Path("missing.pb")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("--feed labels=" + Path("missing.pb") + ": cannot open '" +
                        Path("missing.pb") + "': No such file or directory"));
  r = Run({Path("mpt"), "--feed", labels});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("--feed " + labels + ": expected NAME=FILE.pb"));
}

TEST_F(FoundryRunTest, Devices) {
  Result r = Run({Path("mpt"), "--device", "tpu"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            Line("--device: unknown device 'tpu' (choose cpu or cuda) (run foundry-run --help)"));
  r = Run({Path("mpt"), "--device", "cuda"});
  EXPECT_EQ(r.code, 1);
  std::string want = "--device cuda: the CUDA backend is not built yet; use --device cpu";
#ifdef FOUNDRY_HAVE_CUDA
  if (CudaDeviceCount() == 0)
    want =
        "--device cuda: no CUDA device found (" + CudaDeviceDescription(0) + "); use --device cpu";
#endif
  EXPECT_EQ(r.err, Line(want));
}

TEST_F(FoundryRunTest, UsageErrors) {
  Result r = Run({Path("mpt"), "--bogus"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, Line("The following argument was not expected: --bogus (run foundry-run "
                        "--help)"));
  r = Run({Path("mpt"), "--dim", "seq=4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, Line("--dim is for --forward; a plan's dimensions are fixed by "
                        "foundry-compile --dim"));
  r = Run({});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, Line("no plan given: foundry-run PREFIX (the -o PREFIX of foundry-compile)"));
  r = Run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--optimizer"), std::string::npos);
}

// Loss and gradients of the fixture's batch match PyTorch's (models/fixtures/mpt_tiny/reference).
TEST_F(FoundryRunTest, GradientsMatchPyTorchReference) {
  Result r =
      Run({Path("mpt"), "--steps", "2", "--feed", "input_ids=" + kFixture + "/inputs/input_ids.pb",
           "--feed", "labels=" + kFixture + "/inputs/labels.pb", "--dump-grads", Path("grads"),
           "--dump-outputs", Path("outs")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("  params     27 tensors, 116480 elements"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  batch      2 x 16 (32 tokens/step)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nstep 1/2  loss 5.6202  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nstep 2/2  loss "), std::string::npos) << r.out;

  auto ref_loss = ReadTensorFile(kFixture + "/reference/loss.pb");
  auto loss = ReadTensorFile(Path("outs/loss.pb"));
  ASSERT_TRUE(ref_loss.ok() && loss.ok());
  EXPECT_NEAR(loss->GetAsDouble(0), ref_loss->GetAsDouble(0), 1e-5);
  int checked = 0;
  for (const auto& e : fs::directory_iterator(kFixture + "/reference/grads")) {
    auto ref = ReadTensorFile(e.path().string());
    std::string name;
    auto got = ReadTensorFile(Path("grads/" + e.path().filename().string()), &name);
    ASSERT_TRUE(ref.ok() && got.ok()) << e.path();
    EXPECT_EQ(name + ".pb", e.path().filename().string());
    ASSERT_EQ(got->shape(), ref->shape());
    // fp32 reordering between PyTorch and foundry: 1e-5 of the tensor's largest entry.
    double max_ref = 0;
    for (int64_t i = 0; i < ref->numel(); ++i)
      max_ref = std::max(max_ref, std::abs(ref->GetAsDouble(i)));
    for (int64_t i = 0; i < ref->numel(); ++i)
      ASSERT_NEAR(got->GetAsDouble(i), ref->GetAsDouble(i), 1e-5 * max_ref + 1e-9)
          << name << "[" << i << "]";
    ++checked;
  }
  EXPECT_EQ(checked, 27);
}

// The model's own loss (PyTorch's cross-entropy, ignore_index -100, labels shifted inside the
// model) over a batch with nothing to predict: loss 0 and every gradient exactly 0.
TEST_F(FoundryRunTest, AllIgnoredLabelsGiveZeroLossAndGradients) {
  Tensor ignored(DType::kInt64, {2, 16});
  for (int64_t i = 0; i < ignored.numel(); ++i) ignored.data<int64_t>()[i] = -100;
  ASSERT_TRUE(WriteTensorFile(Path("ignored.pb"), ignored, "labels").ok());
  Result r = Run(
      {Path("mpt"), "--feed", "labels=" + Path("ignored.pb"), "--dump-grads", Path("zero_grads")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nstep 1/1  loss 0.0000  "), std::string::npos) << r.out;
  int checked = 0;
  for (const auto& e : fs::directory_iterator(Path("zero_grads"))) {
    auto g = ReadTensorFile(e.path().string());
    ASSERT_TRUE(g.ok());
    for (int64_t i = 0; i < g->numel(); ++i)
      ASSERT_EQ(g->GetAsDouble(i), 0.0) << e.path() << "[" << i << "]";
    ++checked;
  }
  EXPECT_EQ(checked, 27);
}

TEST_F(FoundryRunTest, ResumeContinuesTheRunExactly) {
  Result straight = Run({Path("mpt"), "--steps", "3", "--lr", "0.01", "--seed", "5"});
  ASSERT_EQ(straight.code, 0) << straight.err;
  Result first =
      Run({Path("mpt"), "--steps", "2", "--lr", "0.01", "--seed", "5", "--save", Path("run")});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("saved " + Path("run") + " (step 2)"), std::string::npos);
  // No PREFIX: the plan, optimizer, seeds and data come from the save.
  Result second = Run({"--resume", Path("run"), "--steps", "1"});
  ASSERT_EQ(second.code, 0) << second.err;
  auto step3 = [](const std::string& out) {
    size_t at = out.find("step 3/3  loss ");
    return at == std::string::npos ? std::string("(none)") : out.substr(at, 22);
  };
  EXPECT_EQ(step3(second.out), step3(straight.out)) << second.out << straight.out;
  EXPECT_NE(second.out.find("  resumed    " + Path("run") + " at step 2"), std::string::npos);
}

// Real training: 200 AdamW steps (default lr 1e-3) on one fixed batch of the mpt_tiny fixture
// memorise it: the loss ends below 10 % of where it started. Two runs are bitwise identical: the
// same loss line at every step and the same saved weights, byte for byte.
TEST_F(FoundryRunTest, MemorisesAFixedBatchDeterministically) {
  std::vector<std::string> args = {Path("mpt"), "--steps", "200",
                                   "--feed", "input_ids=" + kFixture + "/inputs/input_ids.pb",
                                   "--feed", "labels=" + kFixture + "/inputs/labels.pb"};
  auto run = [&](const std::string& save) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--save", Path(save)});
    Result r = Run(a);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  };
  // "step 7/200  loss 5.1234  1.8 ms ..." -> the losses, in order.
  auto losses = [](const std::string& out) {
    std::vector<double> l;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      size_t at = line.find("  loss ");
      if (line.rfind("step ", 0) == 0 && at != std::string::npos)
        l.push_back(std::stod(line.substr(at + 7)));
    }
    return l;
  };
  std::vector<double> a = losses(run("a")), b = losses(run("b"));
  ASSERT_EQ(a.size(), 200u);
  EXPECT_EQ(a, b);
  EXPECT_LT(a.back(), 0.1 * a.front()) << "from " << a.front() << " to " << a.back();
  EXPECT_EQ(ReadWholeFile(Path("a/model.onnx")), ReadWholeFile(Path("b/model.onnx")));
}

TEST_F(FoundryRunTest, TrainsOnATokenFile) {
  {
    std::ofstream out(Path("tokens.bin"), std::ios::binary);
    for (int i = 0; i < 100; ++i) {
      uint16_t t = static_cast<uint16_t>((i * 37) % 256);
      out.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  Result r = Run({Path("mpt"), "--steps", "2", "--data", Path("tokens.bin"), "--optimizer", "sgd",
                  "--lr", "0.1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  data       --data " + Path("tokens.bin") + " (uint16, 100 tokens)"),
            std::string::npos)
      << r.out;
  {
    std::ofstream out(Path("bad.bin"), std::ios::binary);
    for (int i = 0; i < 40; ++i) {
      uint16_t t = static_cast<uint16_t>(i == 20 ? 300 : 1);
      out.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  r = Run({Path("mpt"), "--data", Path("bad.bin")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("--data " + Path("bad.bin") +
                        ": token 300 at position 20 is outside the vocabulary [0, 256)"));
}

TEST_F(FoundryRunTest, ForwardRunsAnyModel) {
  Result r = Run({"--forward", kFixture + "/model.onnx", "--feed",
                  "input_ids=" + kFixture + "/inputs/input_ids.pb", "--feed",
                  "labels=" + kFixture + "/inputs/labels.pb", "--dump-outputs", Path("fwd")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  loss  f32[]  = 5.62"), std::string::npos) << r.out;
  auto loss = ReadTensorFile(Path("fwd/loss.pb"));
  auto ref = ReadTensorFile(kFixture + "/reference/loss.pb");
  ASSERT_TRUE(loss.ok() && ref.ok());
  EXPECT_NEAR(loss->GetAsDouble(0), ref->GetAsDouble(0), 1e-5);

  r = Run({"--forward", kFixture + "/model.onnx", "--feed",
           "labels=" + kFixture + "/inputs/labels.pb"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("missing input 'input_ids': the graph needs it; pass it with --feed "
                        "input_ids=FILE.pb"));
}

}  // namespace
}  // namespace foundry
