// End-to-end: runs the real foundry-run binary (and foundry-compile, to make a plan from the
// mpt_tiny fixture) and checks exact error lines, exit codes, and results against the PyTorch
// reference the fixture carries.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "compiler/onnx_export.h"
#include "compiler/tensor_proto.h"
#include "compiler/text.h"
#include "runtime/checkpoint_manifest.h"
#include "tests/support/exec.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

// A save edited by hand, given a manifest that matches the edit: the reader's own checks are
// under test here (an edit after the save was written is refused by its manifest, as
// checkpoint_trust_test.cc shows).
void Reseal(const std::string& dir) {
  std::filesystem::remove(dir + "/manifest.json");
  Status st = WriteCheckpointManifest(dir);
  ASSERT_TRUE(st.ok()) << st.message();
}

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

  // Size, modification time and content hash of every file under the test directory (captured
  // output aside) and of the fixture's inputs: equal snapshots mean nothing was written or touched.
  static std::map<std::string, std::string> Snapshot() {
    std::map<std::string, std::string> files;
    auto add = [&](const fs::path& p) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) return;
      // A folder's own mtime moves when a temp entry comes and goes; entries are compared.
      files[p.string()] = S_ISDIR(st.st_mode)
                              ? std::string("(dir)")
                              : std::to_string(st.st_size) + " " +
                                    std::to_string(st.st_mtim.tv_sec) + "." +
                                    std::to_string(st.st_mtim.tv_nsec) + " hash " +
                                    std::to_string(std::hash<std::string>{}(ReadWholeFile(p)));
    };
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) != 0 && name.rfind("stderr.", 0) != 0) add(e.path());
    }
    for (const auto& e : fs::recursive_directory_iterator(kFixture)) add(e.path());
    return files;
  }
  // The bad-input contract: exit `code`, exactly the one prefixed line on stderr, nothing
  // written or changed.
  static void ExpectCleanError(const std::vector<std::string>& args, const std::string& message,
                               int code = 1) {
    auto before = Snapshot();
    Result r = Run(args);
    EXPECT_EQ(r.code, code) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-run: error: " + message + "\n");
    EXPECT_TRUE(Snapshot() == before)
        << "files changed by: foundry-run " << testing::PrintToString(args);
  }

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
                        "' is plan format version 99; this foundry-run reads version 2; "
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
  std::string want =
      "--device cuda: this foundry was built without the CUDA backend (no nvcc at configure "
      "time); use --device cpu";
  bool have_gpu = false;
#ifdef FOUNDRY_HAVE_CUDA
  want = "--device cuda: no CUDA device found (" + CudaDeviceDescription(0) + "); use --device cpu";
  have_gpu = CudaDeviceCount() > 0;
#endif
  // With a GPU the run goes on (tests/runtime/cuda_training_test.cc covers it).
  if (!have_gpu) {
    EXPECT_EQ(r.err, Line(want));
  }
  r = Run({Path("mpt"), "--tf32"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, Line("--tf32 is for --device cuda (the CPU computes in exact fp32)"));
  r = Run({Path("mpt"), "--forward", "--device", "cuda"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, Line("--forward runs on the CPU reference backend; drop --device cuda"));
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
  ExpectCleanError({Path("mpt"), "--lr"}, "--lr: 1 required FLOAT missing (run foundry-run --help)",
                   2);
  ExpectCleanError({Path("mpt"), "--lr", "fast"},
                   "Could not convert: --lr = fast (run foundry-run --help)", 2);
  r = Run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--optimizer"), std::string::npos);
  EXPECT_NE(r.out.find("Exit status: 0 success; 2 a wrong command line"), std::string::npos)
      << r.out;
}

TEST_F(FoundryRunTest, StepsAndSeedsAreCheckedNotClamped) {
  for (const char* v : {"9223372036854775808", "-1", "99999999999999999999999"})
    ExpectCleanError(
        {Path("mpt"), "--steps", v},
        std::string("--steps ") + v + ": expected a number of steps from 0 to 9223372036854775807",
        2);
  ExpectCleanError({Path("mpt"), "--steps", "1e3"}, "--steps 1e3: expected a number of steps", 2);
  ExpectCleanError({Path("mpt"), "--seed", "-1"},
                   "--seed -1: expected an integer from 0 to 18446744073709551615", 2);
  ExpectCleanError({Path("mpt"), "--init-seed", "18446744073709551616"},
                   "--init-seed 18446744073709551616: expected an integer from 0 to "
                   "18446744073709551615",
                   2);
}

TEST_F(FoundryRunTest, OptimizerOptionsInRange) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lr", "0"}, "--lr 0: the learning rate must be a finite number > 0"},
      {{"--lr", "-1"}, "--lr -1: the learning rate must be a finite number > 0"},
      {{"--lr", "nan"}, "--lr nan: the learning rate must be a finite number > 0"},
      {{"--lr", "inf"}, "--lr inf: the learning rate must be a finite number > 0"},
      {{"--beta1", "1"}, "--beta1 1: must be in [0, 1)"},
      {{"--beta2", "-0.5"}, "--beta2 -0.5: must be in [0, 1)"},
      {{"--beta2", "nan"}, "--beta2 nan: must be in [0, 1)"},
      {{"--eps", "0"}, "--eps 0: must be a finite number > 0"},
      {{"--weight-decay", "-0.1"}, "--weight-decay -0.1: must be a finite number >= 0"},
      {{"--optimizer", "sgd", "--momentum", "1"}, "--momentum 1: must be in [0, 1)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> a = {Path("mpt")};
    a.insert(a.end(), args.begin(), args.end());
    ExpectCleanError(a, message, 2);
  }
}

TEST_F(FoundryRunTest, SaveNeverOverwritesAFileOrAnInput) {
  { std::ofstream(Path("a_file")) << "not a directory\n"; }
  ExpectCleanError({Path("mpt"), "--save", Path("a_file")},
                   "--save " + Path("a_file") + ": '" + Path("a_file") +
                       "' exists and is not a directory; choose a new directory");

  Result r = Run({Path("mpt"), "--save", Path("save1")});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectCleanError({"--resume", Path("save1"), "--save", Path("save1")},
                   "--save " + Path("save1") +
                       ": it is the --resume directory, whose files this run reads; save to "
                       "another directory");
  // A --feed file inside an earlier save: replacing that save would delete the input.
  fs::copy_file(kFixture + "/inputs/labels.pb", Path("save1/labels.pb"));
  ExpectCleanError(
      {Path("mpt"), "--feed", "labels=" + Path("save1/labels.pb"), "--save", Path("save1")},
      "--save " + Path("save1") + ": '" + Path("save1") + "' holds '" + Path("save1/labels.pb") +
          "', an input of this run; save to another directory");
}

TEST_F(FoundryRunTest, DumpsNeverOverwriteAnInput) {
  fs::create_directories(Path("dump_in"));
  fs::copy_file(kFixture + "/inputs/labels.pb", Path("dump_in/loss.pb"));
  ExpectCleanError({Path("mpt"), "--feed", "labels=" + Path("dump_in/loss.pb"), "--dump-outputs",
                    Path("dump_in")},
                   "--dump-outputs '" + Path("dump_in/loss.pb") + "': writing it would change '" +
                       Path("dump_in/loss.pb") + "', an input of this run; choose another file");
}

// lr 1e300 is a finite double, but -lr rounds to -inf in fp32: the first update makes every weight
// non-finite although loss and gradients are finite. The run stops at that step, names it, and
// saves nothing.
TEST_F(FoundryRunTest, NonFiniteWeightsStopTheRunAndSaveNothing) {
  auto before = Snapshot();
  Result r = Run({Path("mpt"), "--optimizer", "sgd", "--lr", "1e300", "--steps", "3", "--save",
                  Path("never")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, Line("step 1: the optimizer update made parameter 'transformer.wte.weight' "
                        "non-finite (lr 1e+300); lower --lr, or check the weights"));
  EXPECT_EQ(r.out.find("\nstep 1/"), std::string::npos) << r.out;
  EXPECT_TRUE(Snapshot() == before);
  EXPECT_FALSE(fs::exists(Path("never")));
}

// A plan is a JSON file anyone can edit; LoadPlan checks it against the graph. The plan under
// test is foundry-compile's for a two-parameter model (w f32[4,2], b f32[2]; x f32[batch,4]),
// edited one field at a time.
TEST_F(FoundryRunTest, HandEditedPlansAreChecked) {
  auto g = ParseGraph(R"(graph wb opset=17 {
  input x : f32[batch,4]
  param w : f32[4,2] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
  param b : f32[2] = [0.5, -0.5]
  const axes : i64[2] = [0, 1]
  y : f32[batch,2] = MatMul(x, w)
  z : f32[batch,2] = Add(y, b)
  loss : f32[] = ReduceSum(z, axes) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(ExportOnnx(*g, Path("wb.onnx")).ok());
  Result r = Exec(kCompile, {Path("wb.onnx"), "--dim", "batch=2", "-o", Path("wb")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json plan = nlohmann::json::parse(ReadWholeFile(Path("wb.plan")));
  ASSERT_EQ(plan["parameters"], nlohmann::json({"w", "b"}));
  ASSERT_EQ(plan["input_dims"], nlohmann::json::parse(R"({"x": ["batch", ""]})"));

  auto edited = [&](auto edit) {
    nlohmann::json p = plan;
    edit(p);
    std::ofstream(Path("edited.plan")) << p.dump(2);
    return Path("edited.plan");
  };
  const std::string fix = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";
  auto damaged = [&](const std::string& why) {
    return "'" + Path("edited.plan") + "' is a damaged foundry plan (" + why + ")" + fix;
  };
  using J = nlohmann::json;
  const std::vector<std::pair<std::function<void(J&)>, std::string>> cases = {
      {[](J& p) { p["loss"] = "w_grad"; }, "the loss 'w_grad' is also a gradient"},
      {[](J& p) {
         p["loss"] = "b_grad";
         p["parameters"] = {"w"};
         p["gradients"] = {{"w", "w_grad"}};
       },
       "the loss 'b_grad' is f32[2], not a float scalar"},
      {[](J& p) { p["loss"] = "nope"; },
       "the loss 'nope' is not an output of the graph 'wb.train.onnx'"},
      {[](J& p) {
         p["parameters"] = {"w", "b", "w"};
       },
       "parameter 'w' is listed twice"},
      {[](J& p) {
         p["parameters"] = {"w", "b", "q"};
         p["gradients"]["q"] = "q_grad";
       },
       "parameter 'q' is not an initializer of the graph 'wb.train.onnx'"},
      {[](J& p) { p["parameters"] = {"w"}; },
       "gradient 'b_grad' belongs to 'b', which is not a parameter"},
      {[](J& p) {
         p["gradients"] = {{"w", "b_grad"}, {"b", "w_grad"}};
       },
       "the gradient of parameter 'w' is 'b_grad', not 'w_grad', the gradient foundry-compile "
       "computes for it"},
      {[](J& p) {
         p["gradients"] = {{"w", "w_grad"}, {"b", "w_grad"}};
       },
       "gradient 'w_grad' is given for two parameters"},
      {[](J& p) { p["gradients"]["w"] = "x"; }, "gradient 'x' is also an input or a parameter"},
      {[](J& p) { p["dims"]["batch"] = 0; }, "dimension 'batch' is 0; dimensions are positive"},
      {[](J& p) { p["dims"]["batch"] = 3; },
       "dims gives 'batch' = 3 but input 'x' is f32[2,4] in the graph"},
      {[](J& p) { p["dims"] = J::object(); },
       "input 'x' has dimension 'batch', which dims does not bind"},
  };
  for (const auto& [edit, why] : cases) ExpectCleanError({edited(edit)}, damaged(why));
}

// state.json of a save is checked before anything of it is used.
TEST_F(FoundryRunTest, ResumeStateIsChecked) {
  Result r = Run({Path("mpt"), "--save", Path("state_src")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json state = nlohmann::json::parse(ReadWholeFile(Path("state_src/state.json")));
  auto edited = [&](const std::string& name, auto edit) {
    fs::remove_all(Path(name));
    fs::copy(Path("state_src"), Path(name), fs::copy_options::recursive);
    nlohmann::json s = state;
    edit(s);
    std::ofstream(Path(name + "/state.json")) << s.dump(2);
    Reseal(Path(name));
    return Path(name);
  };
  using J = nlohmann::json;
  std::string d = edited("st_step", [](J& s) { s["step"] = -1; });
  ExpectCleanError({"--resume", d}, "--resume " + d + ": '" + d +
                                        "/state.json' is damaged (step -1 is out of range)");
  d = edited("st_pos", [](J& s) { s["data"]["position"] = -4; });
  ExpectCleanError({"--resume", d}, "--resume " + d + ": '" + d +
                                        "/state.json' is damaged (data position -4 is negative)");
  // Positions whose token windows would pass int64: (position + 2) * 17 > 2^63 - 1.
  d = edited("st_far", [](J& s) { s["data"]["position"] = int64_t{9223372036854775000}; });
  ExpectCleanError({"--resume", d}, "--resume " + d +
                                        ": data position 9223372036854775000 is out of range for "
                                        "batches of 2 x 17 tokens");
  d = edited("st_lr", [](J& s) { s["optimizer"]["lr"] = -1.0; });
  ExpectCleanError({"--resume", d},
                   "--resume " + d + ": '" + d +
                       "/state.json' is damaged (it records --lr -1: the learning rate must be a "
                       "finite number > 0)");
  // An optimizer slot of the wrong shape.
  d = edited("st_slot", [](J&) {});
  std::string slot;
  for (const auto& e : fs::directory_iterator(d + "/optimizer"))
    if (e.path().string().ends_with(".m.pb") && (slot.empty() || e.path().string() < slot))
      slot = e.path().string();
  ASSERT_FALSE(slot.empty());
  ASSERT_TRUE(WriteTensorFile(slot, Tensor(DType::kFloat32, {3}), "x").ok());
  Reseal(d);
  auto shape = ReadTensorFile(Path("state_src/optimizer/" + fs::path(slot).filename().string()));
  ASSERT_TRUE(shape.ok());
  ExpectCleanError({"--resume", d}, "--resume " + d + ": '" + slot + "' is f32[3], expected f32" +
                                        ShapeToString(shape->shape()));
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

// Every file under `dir`, relative path -> bytes.
std::map<std::string, std::string> DirFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = ReadWholeFile(e.path().string());
  return files;
}

// 2 steps + save + resume for 1 step is the 3-step run, bit for bit: every saved file (weights,
// AdamW moments, state) is byte-identical.
TEST_F(FoundryRunTest, ScheduleOptionsInRange) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--warmup-steps", "-1"},
       "--warmup-steps -1: expected a number of steps from 0 to 9223372036854775807"},
      {{"--max-steps", "x"}, "--max-steps x: expected a number of steps"},
      {{"--alpha-f", "nan"}, "--alpha-f nan: must be finite"},
      {{"--clip-norm", "-2"}, "--clip-norm -2: must be a finite number >= 0 (0: no clipping)"},
      {{"--scheduler", "cosine_with_warmup", "--decay-steps", "5", "--max-steps", "10"},
       "--decay-steps 5: shorter than the run's 10 steps (--max-steps); Composer refuses a t_max "
       "below max_duration: give at least 10, or leave it out (the whole run)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> a = {Path("mpt")};
    a.insert(a.end(), args.begin(), args.end());
    ExpectCleanError(a, message, 2);
  }
  Result r = Run({Path("mpt"), "--scheduler", "cosine"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--scheduler: cosine not in {constant,cosine_with_warmup,"),
            std::string::npos)
      << r.err;
}

// --print-schedule needs no plan; with warmup, steps 1 and 2 have lr 0 (Composer's lag).
TEST_F(FoundryRunTest, PrintSchedule) {
  Result r = Run({"--print-schedule", "--steps", "5", "--lr", "0.001", "--scheduler",
                  "linear_decay_with_warmup", "--warmup-steps", "2", "--alpha-f", "0.5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "# linear_decay_with_warmup, lr 0.001, 5 steps\n"
            "1 0\n2 0\n3 0.00050000000000000001\n4 0.001\n5 0.00083333333333333339\n");
}

// A run with a schedule and clipping: the header says so, each step line prints the lr it used
// and the norm, the report holds them per step, and --resume continues the schedule exactly.
TEST_F(FoundryRunTest, ScheduleClippingAndResume) {
  const std::vector<std::string> common = {
      "--lr",           "0.01",  "--optimizer", "decoupled_adamw",
      "--weight-decay", "0.001", "--scheduler", "cosine_with_warmup",
      "--warmup-steps", "2",     "--alpha-f",   "0.1",
      "--max-steps",    "4",     "--clip-norm", "0.5",
      "--seed",         "3"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.begin() + 1, common.begin(), common.end());
    return a;
  };
  Result straight = Run(with({Path("mpt"), "--steps", "4", "--save", Path("sched_straight"),
                              "--report-json", Path("sched.json")}));
  ASSERT_EQ(straight.code, 0) << straight.err;
  EXPECT_NE(straight.out.find("  schedule   cosine_with_warmup  warmup 2  t_max 4  of 4 steps  "
                              "alpha_f 0.1\n  clipping   norm 0.5\n"),
            std::string::npos)
      << straight.out;
  EXPECT_NE(straight.out.find("  lr 0.0e+00  grad_norm "), std::string::npos) << straight.out;
  const nlohmann::json j = nlohmann::json::parse(ReadWholeFile(Path("sched.json")));
  ASSERT_EQ(j["step_lr"].size(), 4u);
  EXPECT_EQ(j["step_lr"][0].get<double>(), 0.0);
  EXPECT_EQ(j["step_lr"][2].get<double>(), 0.005);
  EXPECT_GT(j["step_grad_norm"][0].get<double>(), 0.5);  // clipping happens
  Result first = Run(with({Path("mpt"), "--steps", "2", "--save", Path("sched_run")}));
  ASSERT_EQ(first.code, 0) << first.err;
  Result second =
      Run({"--resume", Path("sched_run"), "--steps", "2", "--save", Path("sched_resumed")});
  ASSERT_EQ(second.code, 0) << second.err;
  auto a = DirFiles(Path("sched_straight")), b = DirFiles(Path("sched_resumed"));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a)
    EXPECT_TRUE(bytes == b[name]) << name << " differs between the straight and resumed runs";
}

TEST_F(FoundryRunTest, ResumeContinuesTheRunExactly) {
  Result straight =
      Run({Path("mpt"), "--steps", "3", "--lr", "0.01", "--seed", "5", "--save", Path("straight")});
  ASSERT_EQ(straight.code, 0) << straight.err;
  Result first =
      Run({Path("mpt"), "--steps", "2", "--lr", "0.01", "--seed", "5", "--save", Path("run")});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("saved " + Path("run") + " (step 2)"), std::string::npos);
  // No PREFIX: the plan, optimizer, seeds and data come from the save.
  Result second = Run({"--resume", Path("run"), "--steps", "1", "--save", Path("resumed")});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.out.find("  resumed    " + Path("run") + " at step 2"), std::string::npos);

  auto a = DirFiles(Path("straight")), b = DirFiles(Path("resumed"));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 3u);  // model.onnx, state.json and the optimizer slots
  for (const auto& [name, bytes] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(bytes == b[name]) << name << " differs between the straight and resumed runs";
  }
  // Equal weights after step 3 need equal step-3 gradients; the printed loss agrees too.
  auto step3 = [](const std::string& out) {
    size_t at = out.find("step 3/3  loss ");
    return at == std::string::npos ? std::string("(none)") : out.substr(at, 22);
  };
  EXPECT_EQ(step3(second.out), step3(straight.out)) << second.out << straight.out;
}

// --data: row b of step s is window (s - 1) * 2 + b of seq + 1 = 17 tokens; the fixture's loss
// is in the model (it shifts the labels itself), so input_ids = labels = window[0:16]. The loss
// of each step must be bit-identical to a --feed run of exactly those windows: step 1 from the
// initial weights, step 2 from the 1-step save (`--data ""` drops the saved token file so that
// the feeds give the tokens). A wrong window, offset or position changes the loss.
TEST_F(FoundryRunTest, TrainsOnATokenFile) {
  std::vector<uint16_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[i] = static_cast<uint16_t>((i * 37) % 256);
  {
    std::ofstream out(Path("tokens.bin"), std::ios::binary);
    for (uint16_t t : tokens) out.write(reinterpret_cast<const char*>(&t), 2);
  }
  auto windows = [&](int first, const std::string& name) {
    Tensor t(DType::kInt64, {2, 16});
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 16; ++i) t.data<int64_t>()[b * 16 + i] = tokens[(first + b) * 17 + i];
    EXPECT_TRUE(WriteTensorFile(Path(name), t, "input_ids").ok());
    return Path(name);
  };
  const std::vector<std::string> sgd = {"--optimizer", "sgd", "--lr", "0.1"};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), sgd.begin(), sgd.end());
    Result r = Run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return r;
  };
  Result r = run({Path("mpt"), "--data", Path("tokens.bin"), "--save", Path("tok1"),
                  "--dump-outputs", Path("tok_data1")});
  EXPECT_NE(
      r.out.find("  data       --data " + Path("tokens.bin") + " (no header, uint16, 100 tokens)"),
      std::string::npos)
      << r.out;
  const std::string w01 = windows(0, "w01.pb"), w23 = windows(2, "w23.pb");
  run({Path("mpt"), "--feed", "input_ids=" + w01, "--feed", "labels=" + w01, "--dump-outputs",
       Path("tok_feed1")});
  run({"--resume", Path("tok1"), "--dump-outputs", Path("tok_data2")});
  run({"--resume", Path("tok1"), "--data", "", "--feed", "input_ids=" + w23, "--feed",
       "labels=" + w23, "--dump-outputs", Path("tok_feed2")});
  const std::string step1 = ReadWholeFile(Path("tok_data1/loss.pb"));
  const std::string step2 = ReadWholeFile(Path("tok_data2/loss.pb"));
  ASSERT_FALSE(step1.empty());
  EXPECT_TRUE(step1 == ReadWholeFile(Path("tok_feed1/loss.pb")));
  EXPECT_TRUE(step2 == ReadWholeFile(Path("tok_feed2/loss.pb")));
  EXPECT_FALSE(step1 == step2);  // different windows, different weights

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

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

namespace foundry {
namespace FOUNDRY_TEST_NS {

// --report-json: the run's figures, planned == measured for the arena, measured <= planned in
// total, written atomically; the same output-file rules as --save and the dumps.
TEST_F(FoundryRunTest, ReportJson) {
  Result r = Run({Path("mpt"), "--steps", "2", "--report-json", Path("report.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("report " + Path("report.json") + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  arena "), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(ReadWholeFile(Path("report.json")));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["steps"], 2);
  EXPECT_GT(j["loss_first"].get<double>(), 0);
  EXPECT_GT(j["loss_last"].get<double>(), 0);
  EXPECT_GT(j["ms_per_step"].get<double>(), 0);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  const nlohmann::json& m = j["memory"];
  EXPECT_GT(m["arena_planned_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(m["arena_measured_bytes"], m["arena_planned_bytes"]);
  EXPECT_LE(m["total_measured_bytes"].get<int64_t>(), m["total_planned_bytes"].get<int64_t>());
  EXPECT_GT(m["peak_rss_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(m["outside_plan_during_steps_bytes"], 0);
  for (const char* c :
       {"parameters", "gradients", "optimizer_state", "inputs", "constants", "outputs"})
    EXPECT_EQ(m[std::string(c) + "_measured_bytes"], m[std::string(c) + "_planned_bytes"]) << c;
  // The loss figures are the printed ones.
  char first[32];
  std::snprintf(first, sizeof first, "loss %.4f", j["loss_first"].get<double>());
  EXPECT_NE(r.out.find(first), std::string::npos) << r.out;

  // SGD keeps no slots: measured below the AdamW plan, and the report says which optimizer ran.
  r = Run({Path("mpt"), "--optimizer", "sgd", "--report-json", Path("report.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("optimizer state is planned for AdamW"), std::string::npos) << r.out;
  const nlohmann::json s = nlohmann::json::parse(ReadWholeFile(Path("report.json")));
  EXPECT_EQ(s["memory"]["optimizer"], "sgd");
  EXPECT_EQ(s["memory"]["optimizer_state_measured_bytes"], 0);
  EXPECT_LT(s["memory"]["total_measured_bytes"].get<int64_t>(),
            s["memory"]["total_planned_bytes"].get<int64_t>());
}

// --profile: the phases and the per-op table add up to the step's graph time, and the graph's
// time by phase names what a checkpointed plan recomputes (nothing in the plain plan).
TEST_F(FoundryRunTest, ProfileAddsUp) {
  Result c = Exec(kCompile, {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16",
                             "--ckpt", "mptblock", "-o", Path("mpt_block")});
  ASSERT_EQ(c.code, 0) << c.err;
  for (const std::string plan : {"mpt", "mpt_block"}) {
    SCOPED_TRACE(plan);
    Result r = Run({Path(plan), "--steps", "3", "--profile", "--report-json", Path("prof.json")});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("profile: mean of 2 steps"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  graph by phase: forward "), std::string::npos) << r.out;
    const nlohmann::json p = nlohmann::json::parse(ReadWholeFile(Path("prof.json")))["profile"];
    EXPECT_EQ(p["steps"], 2);
    const double graph = p["graph_ms"].get<double>();
    const double phases = p["forward_ms"].get<double>() + p["backward_ms"].get<double>() +
                          p["recompute_ms"].get<double>();
    double ops = 0;
    int64_t nodes = 0;
    for (const nlohmann::json& op : p["ops"]) {
      ops += op["ms_per_step"].get<double>();
      nodes += op["nodes"].get<int64_t>();
    }
    EXPECT_GT(nodes, 0);
    // Node times sum to at most the graph's wall time (the executor's own work is the rest).
    EXPECT_NEAR(phases, ops, 1e-9 * std::max(1.0, ops));
    EXPECT_LE(ops, graph * 1.0001 + 1e-3);
    EXPECT_GT(p["forward_ms"].get<double>(), 0);
    EXPECT_GT(p["backward_ms"].get<double>(), 0);
    if (plan == "mpt") {
      EXPECT_EQ(p["recompute_ms"].get<double>(), 0);
    } else {
      EXPECT_GT(p["recompute_ms"].get<double>(), 0);
    }
  }
}

// --precision amp_bf16 end to end: the compile says what autocast did, the run's arena is the
// planned one to the byte (bf16 activations and the kernels' f32 staging copies included), the
// first loss is the fp32 plan's within bf16 rounding, and a wrong precision is a usage error.
TEST_F(FoundryRunTest, AmpBf16PlanRunsWithItsPlannedBytes) {
  Result c = Exec(kCompile,
                  {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16", "--precision",
                   "amp_bf16", "--report-json", Path("amp_compile.json"), "-o", Path("mpt_amp")});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("  autocast: "), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("saved for backward"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("bf16 "), std::string::npos) << c.out;
  Result r = Run({Path("mpt_amp"), "--steps", "3", "--report-json", Path("amp.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadWholeFile(Path("amp.json")));
  EXPECT_EQ(j["memory"]["arena_measured_bytes"], j["memory"]["arena_planned_bytes"]);
  EXPECT_EQ(j["memory"]["outside_plan_during_steps_bytes"], 0);
  Result f = Run({Path("mpt"), "--steps", "1", "--report-json", Path("fp32.json")});
  ASSERT_EQ(f.code, 0) << f.err;
  const nlohmann::json k = nlohmann::json::parse(ReadWholeFile(Path("fp32.json")));
  const double amp_loss = j["loss_first"], fp32_loss = k["loss_first"];
  EXPECT_NEAR(amp_loss, fp32_loss, 1e-2 * fp32_loss);
  EXPECT_NE(amp_loss, fp32_loss);  // it did compute in bf16
  // Saved for backward: bf16 activations, and no bf16 weight copy held through the backward.
  Result c32 = Exec(kCompile, {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16",
                               "--report-json", Path("fp32_compile.json"), "--dry-run"});
  ASSERT_EQ(c32.code, 0) << c32.err;
  const nlohmann::json ca = nlohmann::json::parse(ReadWholeFile(Path("amp_compile.json")));
  const nlohmann::json cf = nlohmann::json::parse(ReadWholeFile(Path("fp32_compile.json")));
  EXPECT_LT(ca["memory"]["saved_for_backward_bytes"].get<int64_t>(),
            cf["memory"]["saved_for_backward_bytes"].get<int64_t>());
  EXPECT_GT(ca["memory"]["saved_for_backward_by_dtype"]["bf16"].get<int64_t>(), 0);
  EXPECT_FALSE(cf["memory"]["saved_for_backward_by_dtype"].contains("bf16"));
  // The values live at the peak say their element type (text column and JSON key). At 4 x 32
  // the peak is in the backward's first layers, where saved bf16 activations are live (at 2 x 16
  // it is at its end, where the f32 gradients are).
  Result c4 = Exec(kCompile,
                   {kFixture + "/model.onnx", "--dim", "batch=4", "--dim", "seq=32", "--precision",
                    "amp_bf16", "--report-json", Path("amp_peak.json"), "--dry-run"});
  ASSERT_EQ(c4.code, 0) << c4.err;
  const nlohmann::json cp = nlohmann::json::parse(ReadWholeFile(Path("amp_peak.json")));
  int bf16_at_peak = 0;
  for (const auto& v : cp["largest_at_peak"]) bf16_at_peak += v.at("dtype") == "bf16";
  EXPECT_GT(bf16_at_peak, 0) << cp["largest_at_peak"].dump();
  for (const auto& v : cf["largest_at_peak"]) EXPECT_EQ(v.at("dtype"), "f32") << v.dump();
  EXPECT_NE(c4.out.find(" saved      forward    bf16  "), std::string::npos) << c4.out;
  EXPECT_NE(c.out.find(" gradient   backward   f32   "), std::string::npos) << c.out;

  Result bad = Exec(kCompile, {kFixture + "/model.onnx", "--precision", "amp_fp16", "--dry-run"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "foundry-compile: error: --precision: precision amp_fp16 is not supported: fp16 "
            "training needs loss scaling, which foundry does not have; use amp_bf16 "
            "(llm-foundry's default) or fp32\n");
  bad = Exec(kCompile, {kFixture + "/model.onnx", "--precision", "bf16", "--dry-run"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "foundry-compile: error: --precision: unknown precision 'bf16'; use amp_bf16 or "
            "fp32\n");
}

TEST_F(FoundryRunTest, ReportJsonNeverOverwritesAnInput) {
  ExpectCleanError({Path("mpt"), "--report-json", Path("mpt.plan")},
                   "--report-json '" + Path("mpt.plan") + "': writing it would change '" +
                       Path("mpt.plan") + "', an input of this run; choose another file");
  fs::copy_file(kFixture + "/inputs/labels.pb", Path("labels_in.pb"),
                fs::copy_options::overwrite_existing);
  ExpectCleanError({Path("mpt"), "--feed", "labels=" + Path("labels_in.pb"), "--report-json",
                    Path("labels_in.pb")},
                   "--report-json '" + Path("labels_in.pb") + "': writing it would change '" +
                       Path("labels_in.pb") + "', an input of this run; choose another file");
  fs::create_directories(Path("a_folder"));
  ExpectCleanError({Path("mpt"), "--report-json", Path("a_folder")},
                   "--report-json '" + Path("a_folder") + "': it is a folder; give a file name");
  ExpectCleanError({Path("mpt"), "--report-json", Path("no/such/r.json")},
                   "--report-json '" + Path("no/such/r.json") + "': the folder '" +
                       Path("no/such") + "' does not exist; create it first");
  ExpectCleanError({"--forward", kFixture + "/model.onnx", "--report-json", Path("r.json")},
                   "--report-json is for training runs, not --forward", 2);
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
