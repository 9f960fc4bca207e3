// End-to-end: plans and training graphs that foundry-run loads are checked against the
// graph itself — its own shape inference (a value_info that lies about a kernel's output would
// size a buffer the kernel overruns), its attributes' schemas, the autodiff's naming of each
// parameter's gradient — and every integer read from a plan or a save's state.json is an integer
// in range before it is converted. Each case builds its input from a real compile of mpt_tiny
// and asserts the bad-input contract: exit 1, one `foundry-run: error:` line, nothing written.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "compiler/memory_plan.h"
#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/plan.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/loaded_plan.h"
#include "tests/support/exec.h"

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
const std::string kFix = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";

class BadPlanTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::path(testing::TempDir()) / ("bad_plan_test_" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ExecResult r = Exec(kCompile, {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16",
                                   "-o", dir_ + "/mpt"});
    compiled_ = r.code == 0;
    if (!compiled_) std::cerr << "foundry-compile failed:\n" << r.out << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(compiled_) << "the mpt_tiny plan did not compile"; }

  static ExecResult Exec(const std::string& binary, const std::vector<std::string>& args) {
    return foundry::Exec(binary, args, dir_);
  }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }

  // Size, mtime, inode and content hash of every file under the test directory (captured output
  // aside) and of the fixture: equal snapshots mean nothing was written or replaced.
  static std::map<std::string, std::string> Snapshot() {
    std::map<std::string, std::string> files;
    auto add = [&](const fs::path& p) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) return;
      files[p.string()] = S_ISDIR(st.st_mode)
                              ? std::string("(dir)")
                              : std::to_string(st.st_size) + " " + std::to_string(st.st_ino) + " " +
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
  static void ExpectCleanError(const std::vector<std::string>& args, const std::string& message) {
    auto before = Snapshot();
    ExecResult r = Exec(kRun, args);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-run: error: " + message + "\n");
    EXPECT_TRUE(Snapshot() == before)
        << "files changed by: foundry-run " << testing::PrintToString(args);
  }
  static std::string Damaged(const std::string& plan, const std::string& why) {
    return "'" + plan + "' is a damaged foundry plan (" + why + ")" + kFix;
  }
  // mpt.plan as JSON, edited and written as NAME.
  static std::string EditedPlan(const std::string& name,
                                const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json p = nlohmann::json::parse(ReadWholeFile(Path("mpt.plan")));
    edit(p);
    std::ofstream(Path(name)) << p.dump(2);
    return Path(name);
  }
  // mpt.train.onnx as foundry-run's importer reads it (declared types, no inference).
  static Graph TrainGraph() {
    auto g = ImportOnnx(Path("mpt.train.onnx"), {});
    EXPECT_TRUE(g.ok()) << g.status().message();
    return g.ok() ? std::move(g).value() : Graph();
  }

  static std::string dir_;
  static bool compiled_;
};

std::string BadPlanTest::dir_;
bool BadPlanTest::compiled_ = false;

// A .train.onnx whose value_info shrinks LayerNormalizationGrad's dX to
// [2,16,1], with a memory plan made for that lie (its 256 B slot moved past the old arena end)
// passed both plan checkers, and the kernel wrote 7.9 KB past the arena. The lie is now caught by
// re-inferring every node's output types on load.
TEST_F(BadPlanTest, ValueInfoThatShrinksAKernelOutputIsRefused) {
  Graph g = TrainGraph();
  const Node* ln_grad = nullptr;
  for (const Node& n : g.nodes)
    if (n.op_type == "LayerNormalizationGrad" && !ln_grad) ln_grad = &n;
  ASSERT_NE(ln_grad, nullptr);
  const std::string dx = ln_grad->outputs[0];
  const std::string described = ln_grad->Describe();
  Value* v = g.FindValue(dx);
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->TypeString(), "f32[2,16,64]");
  v->shape = {2, 16, 1};
  v->dim_params.clear();
  ASSERT_TRUE(ExportOnnx(g, Path("lie.train.onnx")).ok());

  // A plan for the lie, as a hostile editor would make it: planned for the declared types, then
  // dX moved to a slot of its declared size past the old end of the arena.
  auto lie = ImportOnnx(Path("lie.train.onnx"), {});
  ASSERT_TRUE(lie.ok()) << lie.status().message();
  auto plan = ReadPlan(Path("mpt.plan"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  plan->graph_file = "lie.train.onnx";
  lie->parameters = plan->parameters;
  auto memory = PlanMemory(*lie, {{"cpu", CpuWorkspaceBytes}});
  ASSERT_TRUE(memory.ok()) << memory.status().message();
  plan->memory = *memory;
  BackendLayout& cpu = plan->memory.layouts.at(0);
  ASSERT_EQ(cpu.backend, "cpu");
  ASSERT_TRUE(cpu.offsets.count(dx)) << dx << " is not an arena buffer";
  cpu.offsets[dx] = cpu.arena_bytes;
  cpu.arena_bytes += kArenaAlignment;
  // The editor names the edited graph's digest too (the plan says which graph it was made with).
  auto digest = GraphDigest(Path("lie.train.onnx"), Path("lie.train.onnx.data"));
  ASSERT_TRUE(digest.ok()) << digest.status().message();
  plan->graph_digest = *digest;
  ASSERT_TRUE(WritePlan(*plan, Path("lie.plan")).ok());
  // Before this check existed, both plan checkers accepted the pair.
  EXPECT_TRUE(CheckPlan(*plan, *lie, Path("lie.plan")).ok());
  EXPECT_TRUE(CheckMemoryPlan(*lie, plan->memory).ok());

  ExpectCleanError({Path("lie.plan"), "--steps", "1"},
                   Damaged(Path("lie.plan"), "value '" + dx + "' of " + described +
                                                 " is declared f32[2,16,1] in 'lie.train.onnx' "
                                                 "but its inputs give f32[2,16,64]"));
}

// Two parameters of one shape with their gradients swapped trained each by the
// other's gradient (loss 5.2262 instead of 5.0613 after 3 steps).
TEST_F(BadPlanTest, SwappedGradientsAreRefused) {
  const std::string a = "transformer.blocks.0.norm_1.weight";
  const std::string b = "transformer.blocks.0.norm_2.weight";
  std::string plan = EditedPlan("swap.plan", [&](nlohmann::json& p) {
    ASSERT_EQ(p["gradients"][a], a + "_grad");
    p["gradients"][a] = b + "_grad";
    p["gradients"][b] = a + "_grad";
  });
  ExpectCleanError(
      {plan, "--steps", "3"},
      Damaged(plan, "the gradient of parameter '" + a + "' is '" + b + "_grad', not '" + a +
                        "_grad', the gradient foundry-compile computes for it"));
}

// The rule LoadPlan checks holds for every compile: a model that already has a value named like a
// gradient ('b_grad', computed in the forward pass), with b's gradient passed through by Add's
// rule, gets b's gradient named 'b_grad_1' (autodiff adds an Identity), and the plan loads.
TEST_F(BadPlanTest, GradientNamesHoldWhenTheModelUsesTheName) {
  auto g = ParseGraph(R"(graph clash opset=17 {
  input x : f32[2]
  param b : f32[2] = [0.5, -0.5]
  const axes : i64[1] = [0]
  z : f32[2] = Add(x, b)
  b_grad : f32[2] = Relu(z)
  loss : f32[] = ReduceSum(b_grad, axes) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(ExportOnnx(*g, Path("clash.onnx")).ok());
  ExecResult r = Exec(kCompile, {Path("clash.onnx"), "-o", Path("clash")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json plan = nlohmann::json::parse(ReadWholeFile(Path("clash.plan")));
  EXPECT_EQ(plan["gradients"], nlohmann::json::parse(R"({"b": "b_grad_1"})"));
  auto lp = LoadPlan(Path("clash"));
  EXPECT_TRUE(lp.ok()) << lp.status().message();
}

// SoftmaxCrossEntropyLoss with reduction='junk' ran with loss 0.0000. Every
// node's attributes are validated by its schema's inference on load.
TEST_F(BadPlanTest, AttributeOutsideItsSchemaIsRefused) {
  Graph g = TrainGraph();
  std::string described;
  for (Node& n : g.nodes)
    if (n.op_type == "SoftmaxCrossEntropyLoss" && described.empty()) {
      n.attrs["reduction"] = Attribute::String("junk");
      described = n.Describe();
    }
  ASSERT_FALSE(described.empty());
  ASSERT_TRUE(ExportOnnx(g, Path("junk.train.onnx")).ok());
  auto digest = GraphDigest(Path("junk.train.onnx"), Path("junk.train.onnx.data"));
  ASSERT_TRUE(digest.ok()) << digest.status().message();
  std::string plan = EditedPlan("junk.plan", [&](nlohmann::json& p) {
    p["graph_file"] = "junk.train.onnx";
    p["graph_digest"] = *digest;
  });
  ExpectCleanError(
      {plan, "--steps", "1"},
      Damaged(plan, described + ": reduction must be \"mean\", \"sum\" or \"none\", got "
                                "\"junk\""));
  // FastGelu's form, read by its kernel, is validated on load too (a unit of the same rule).
  Graph f = TrainGraph();
  Node gelu;
  gelu.domain = "com.microsoft";
  gelu.op_type = "FastGelu";
  gelu.name = "bad_gelu";
  gelu.inputs = {"transformer.wte.weight"};
  gelu.outputs = {"bad_gelu_out"};
  gelu.attrs["form"] = Attribute::String("cubic");
  StatusOr<std::vector<TypeInfo>> t = InferNodeTypes(f, gelu);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "FastGelu node 'bad_gelu': unknown form 'cubic' (expected \"torch_tanh\" or "
            "\"gelu_new\")");
}

// Integers of a plan are integers in range before they are converted
// ("arena_bytes": 1e19 was undefined behaviour inside the JSON library).
TEST_F(BadPlanTest, PlanIntegersAreCheckedBeforeConversion) {
  using J = nlohmann::json;
  const J plan = J::parse(ReadWholeFile(Path("mpt.plan")));
  const std::string some_value = plan["memory"]["layouts"]["cpu"]["offsets"].begin().key();
  const std::string some_node = plan["memory"]["schedule"][0];
  const std::vector<std::pair<std::function<void(J&)>, std::string>> cases = {
      {[](J& p) { p["memory"]["layouts"]["cpu"]["arena_bytes"] = 1e19; },
       "layout 'cpu': arena_bytes is 1e+19, not a whole number from 0 to 2^63-1"},
      {[](J& p) { p["memory"]["layouts"]["cpu"]["arena_bytes"] = uint64_t{18446744073709551615u}; },
       "layout 'cpu': arena_bytes is 18446744073709551615, not a whole number from 0 to 2^63-1"},
      {[](J& p) { p["memory"]["layouts"]["cpu"]["lower_bound_bytes"] = -256; },
       "layout 'cpu': lower_bound_bytes is -256, not a whole number from 0 to 2^63-1"},
      {[](J& p) { p["memory"]["layouts"]["cpu"]["peak_step"] = 2.5; },
       "layout 'cpu': peak_step is 2.5, not a whole number from -1 to 2^63-1"},
      {[&](J& p) { p["memory"]["layouts"]["cpu"]["offsets"][some_value] = "256"; },
       "layout 'cpu': the offset of '" + some_value +
           "' is \"256\", not a whole number from 0 to 2^63-1"},
      {[&](J& p) { p["memory"]["layouts"]["cpu"]["offsets"][some_value] = -256; },
       "layout 'cpu': the offset of '" + some_value +
           "' is -256, not a whole number from 0 to 2^63-1"},
      {[&](J& p) {
         p["memory"]["layouts"]["cpu"]["workspace"][some_node] = {0, 1e300};
       },
       "layout 'cpu': the workspace of '" + some_node +
           "': bytes is 1e+300, not a whole number from 0 to 2^63-1"},
      {[&](J& p) {
         p["memory"]["layouts"]["cpu"]["workspace"][some_node] = {-1.5, 256};
       },
       "layout 'cpu': the workspace of '" + some_node +
           "': offset is -1.5, not a whole number from 0 to 2^63-1"},
      {[](J& p) { p["memory"]["parameter_bytes"] = true; },
       "parameter_bytes is true, not a whole number from 0 to 2^63-1"},
      {[](J& p) { p["dims"]["batch"] = 2.0; },
       "dimension 'batch' is 2.0, not a whole number of 64 bits"},
      {[](J& p) { p["dims"]["batch"] = 1e19; },
       "dimension 'batch' is 1e+19, not a whole number of 64 bits"},
  };
  int i = 0;
  for (const auto& [edit, why] : cases) {
    std::string path = EditedPlan("int" + std::to_string(i++) + ".plan", edit);
    ExpectCleanError({path, "--steps", "1"}, Damaged(path, why));
  }
  // The version: an integer compared as JSON, never narrowed.
  std::string path = EditedPlan("version.plan", [](J& p) { p["version"] = int64_t{1} << 40; });
  ExpectCleanError({path}, "'" + path +
                               "' is plan format version 1099511627776; this foundry-run reads "
                               "version 2" +
                               kFix);
}

// A name with a control character in a plan is refused before it can reach (and split) an error
// line; the error shows it escaped.
TEST_F(BadPlanTest, NamesWithControlCharactersAreRefused) {
  std::string path = EditedPlan("ctl.plan", [](nlohmann::json& p) {
    p["parameters"].push_back("w\nfoundry-run: error: fake");
  });
  ExpectCleanError({path}, Damaged(path,
                                   "\"w\\nfoundry-run: error: fake\" holds a control character; "
                                   "names never do"));
  path = EditedPlan("ctl2.plan", [](nlohmann::json& p) {
    p["memory"]["layouts"]["cpu"]["offsets"]["\x1b[31mred"] = 0;
  });
  ExpectCleanError({path},
                   Damaged(path, "\"\\u001b[31mred\" holds a control character; names never do"));
}

// The integers of a save's state.json likewise.
TEST_F(BadPlanTest, StateIntegersAreCheckedBeforeConversion) {
  ExecResult r = Exec(kRun, {Path("mpt"), "--steps", "1", "--save", Path("st")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json state = nlohmann::json::parse(ReadWholeFile(Path("st/state.json")));
  int i = 0;
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    const std::string d = Path("st" + std::to_string(i++));
    fs::remove_all(d);
    fs::copy(Path("st"), d, fs::copy_options::recursive);
    nlohmann::json s = state;
    edit(s);
    std::ofstream(d + "/state.json") << s.dump(2);
    Reseal(d);
    return d;
  };
  using J = nlohmann::json;
  const std::vector<std::pair<std::function<void(J&)>, std::string>> cases = {
      {[](J& s) { s["step"] = 1e30; },
       "step is 1e+30, not a whole number from -9223372036854775808 to 9223372036854775807"},
      {[](J& s) { s["step"] = "3"; },
       "step is \"3\", not a whole number from -9223372036854775808 to 9223372036854775807"},
      {[](J& s) { s["seed"] = -1; },
       "seed is -1, not a whole number from 0 to 18446744073709551615"},
      {[](J& s) { s["init_seed"] = 1e20; },
       "init_seed is 1e+20, not a whole number from 0 to 18446744073709551615"},
      {[](J& s) { s["data"]["position"] = 0.5; },
       "data position is 0.5, not a whole number from -9223372036854775808 to "
       "9223372036854775807"},
  };
  for (const auto& [edit, why] : cases) {
    const std::string d = edited(edit);
    ExpectCleanError({Path("mpt"), "--resume", d},
                     "--resume " + d + ": '" + d + "/state.json' is damaged (" + why + ")");
  }
}

}  // namespace
}  // namespace foundry
