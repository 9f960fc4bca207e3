// End-to-end: foundry-run --save writes DIR/model.safetensors holding the trained parameters, and
// --init-from FILE.safetensors starts a run from such a file; every misuse is one line, exit code
// as documented, nothing written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/bfloat16.h"
#include "compiler/onnx_import.h"
#include "runtime/safetensors.h"
#include "runtime/train_state.h"
#include "tests/support/exec.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kFixture = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny";

class FoundryRunSafetensorsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::path(testing::TempDir()) /
            ("foundry_run_safetensors_test_" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ExecResult r = Exec(kCompile, {kFixture + "/model.onnx", "--dim", "batch=2", "--dim", "seq=16",
                                   "-o", dir_ + "/mpt"});
    compiled_ = r.code == 0;
    if (!compiled_) std::cerr << "foundry-compile failed:\n" << r.out << r.err;
    // The run every test starts from: 2 steps, saved.
    r = Run({dir_ + "/mpt", "--steps", "2", "--lr", "0.01", "--save", dir_ + "/run"});
    saved_ = r.code == 0;
    if (!saved_) std::cerr << "foundry-run --save failed:\n" << r.out << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(compiled_ && saved_) << "the mpt_tiny run did not work"; }

  static ExecResult Exec(const std::string& binary, const std::vector<std::string>& args) {
    return foundry::Exec(binary, args, dir_);
  }
  static ExecResult Run(const std::vector<std::string>& args) { return Exec(kRun, args); }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }
  // The parameters of a save's model.onnx.
  static std::map<std::string, Tensor> SavedOnnxParameters(const std::string& save) {
    ImportOptions io;
    io.load_weights = true;
    StatusOr<Graph> g = ImportOnnx(save + "/model.onnx", io);
    EXPECT_TRUE(g.ok()) << g.status().message();
    std::map<std::string, Tensor> out;
    if (g.ok())
      for (const auto& name : g->parameters) out[name] = *g->FindValue(name)->data;
    return out;
  }
  // Every file under the test folder (captured output aside), with its bytes.
  static std::map<std::string, std::string> Snapshot() {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && name.rfind("stdout.", 0) != 0 && name.rfind("stderr.", 0) != 0)
        files[e.path().string()] = ReadWholeFile(e.path().string());
    }
    return files;
  }
  static void ExpectCleanError(const std::vector<std::string>& args, const std::string& message,
                               int code = 1) {
    auto before = Snapshot();
    ExecResult r = Run(args);
    EXPECT_EQ(r.code, code) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-run: error: " + message + "\n");
    EXPECT_TRUE(Snapshot() == before)
        << "files changed by: foundry-run " << testing::PrintToString(args);
  }

  static std::string dir_;
  static bool compiled_, saved_;
};

std::string FoundryRunSafetensorsTest::dir_;
bool FoundryRunSafetensorsTest::compiled_ = false;
bool FoundryRunSafetensorsTest::saved_ = false;

TEST_F(FoundryRunSafetensorsTest, SaveWritesTheTrainedParametersUnderTheirPyTorchNames) {
  StatusOr<SafetensorsFile> file = ReadSafetensors(Path("run/model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  const std::map<std::string, Tensor> trained = SavedOnnxParameters(Path("run"));
  ASSERT_EQ(trained.size(), 27u);  // mpt_tiny: wte, 2 x 12 per block, norm_f weight and bias
  ASSERT_EQ(file->tensors.size(), trained.size());
  for (const auto& [name, t] : trained) {
    ASSERT_TRUE(file->tensors.count(name)) << name;
    EXPECT_TRUE(file->tensors.at(name).BitwiseEqual(t)) << name;
  }
  EXPECT_TRUE(file->tensors.count("transformer.blocks.1.attn.Wqkv.weight"));
  EXPECT_EQ(file->metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"foundry.step", "2"}}));
  // The data starts 8-aligned.
  const std::string bytes = ReadWholeFile(Path("run/model.safetensors"));
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]) % 8, 0);
  const auto state = nlohmann::json::parse(ReadWholeFile(Path("run/state.json")));
  EXPECT_EQ(state.at("init_from"), "");
}

// --init-from the save's weights and no step: the new save holds them bit for bit; from BF16 and
// F16 copies of them: the widened values, bit for bit. The state records the file.
TEST_F(FoundryRunSafetensorsTest, InitFromLoadsTheWeightsExactly) {
  ExecResult r = Run({Path("mpt"), "--init-from", Path("run/model.safetensors"), "--steps", "0",
                      "--save", Path("again")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  weights    " + Path("run/model.safetensors") + "\n"), std::string::npos)
      << r.out;
  EXPECT_EQ(ReadWholeFile(Path("again/model.safetensors")),
            ReadWholeFile(Path("run/model.safetensors"))
                .replace(ReadWholeFile(Path("run/model.safetensors")).find("\"2\""), 3, "\"0\""));
  const auto state = nlohmann::json::parse(ReadWholeFile(Path("again/state.json")));
  EXPECT_EQ(state.at("init_from"), fs::absolute(Path("run/model.safetensors")).string());
  StatusOr<TrainState> read = ReadTrainState(Path("again"));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->init_from, fs::absolute(Path("run/model.safetensors")).string());

  const std::map<std::string, Tensor> trained = SavedOnnxParameters(Path("run"));
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    std::map<std::string, Tensor> narrow, widened;
    for (const auto& [name, t] : trained) {
      Tensor n(dtype, t.shape()), w(DType::kFloat32, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) {
        const float x = t.data<float>()[i];
        if (dtype == DType::kBFloat16) {
          n.data<uint16_t>()[i] = FloatToBf16(x);
          w.data<float>()[i] = Bf16ToFloat(n.data<uint16_t>()[i]);
        } else {
          const _Float16 h = static_cast<_Float16>(x);
          n.data<uint16_t>()[i] = std::bit_cast<uint16_t>(h);
          w.data<float>()[i] = static_cast<float>(h);
        }
      }
      narrow[name] = std::move(n);
      widened[name] = std::move(w);
    }
    std::vector<std::pair<std::string, const Tensor*>> list;
    for (const auto& [name, t] : narrow) list.emplace_back(name, &t);
    const std::string tag = std::string(DTypeName(dtype));
    ASSERT_TRUE(WriteSafetensors(Path(tag + ".safetensors"), list, {}).ok());
    r = Run({Path("mpt"), "--init-from", Path(tag + ".safetensors"), "--steps", "0", "--save",
             Path("from_" + tag)});
    ASSERT_EQ(r.code, 0) << r.err;
    const std::map<std::string, Tensor> loaded = SavedOnnxParameters(Path("from_" + tag));
    ASSERT_EQ(loaded.size(), widened.size());
    for (const auto& [name, t] : widened) EXPECT_TRUE(loaded.at(name).BitwiseEqual(t)) << name;
  }
}

// Step 1 from --init-from the save's weights and the first step of a --resume of that save run
// at the same weights; on the same fed batch their losses (graph outputs, before the update) are
// the same bits.
TEST_F(FoundryRunSafetensorsTest, InitFromGivesTheLossOfTheSavedWeights) {
  const std::vector<std::string> feeds = {"--feed",
                                          "input_ids=" + kFixture + "/inputs/input_ids.pb",
                                          "--feed", "labels=" + kFixture + "/inputs/labels.pb"};
  std::vector<std::string> from = {Path("mpt"),     "--init-from", Path("run/model.safetensors"),
                                   "--steps",       "1",           "--dump-outputs",
                                   Path("from_out")};
  std::vector<std::string> resumed = {"--resume", Path("run"),      "--steps",
                                      "1",        "--dump-outputs", Path("resumed_out")};
  from.insert(from.end(), feeds.begin(), feeds.end());
  resumed.insert(resumed.end(), feeds.begin(), feeds.end());
  ExecResult a = Run(from);
  ASSERT_EQ(a.code, 0) << a.err;
  ExecResult b = Run(resumed);
  ASSERT_EQ(b.code, 0) << b.err;
  const std::string loss = ReadWholeFile(Path("from_out/loss.pb"));
  EXPECT_FALSE(loss.empty());
  EXPECT_EQ(loss, ReadWholeFile(Path("resumed_out/loss.pb")));
}

TEST_F(FoundryRunSafetensorsTest, InitFromErrors) {
  const std::string mpt = Path("mpt");
  ExpectCleanError({mpt, "--init-from", Path("run/model.safetensors"), "--resume", Path("run")},
                   "--init-from and --resume both give the weights; drop one (a resumed run "
                   "continues from its save's weights)",
                   2);
  ExpectCleanError({"--forward", kFixture + "/model.onnx", "--init-from", Path("x.safetensors")},
                   "--init-from is for training runs, not --forward", 2);
  ExpectCleanError({mpt, "--init-from", ""},
                   "--init-from is empty; give FILE.safetensors (run foundry-run --help)", 2);
  ExpectCleanError(
      {mpt, "--init-from", Path("none.safetensors")},
      "--init-from: cannot open '" + Path("none.safetensors") + "': No such file or directory");
  ExpectCleanError({mpt, "--init-from", Path("run/model.safetensors"), "--save", Path("run")},
                   "--save " + Path("run") + ": '" + Path("run") + "' holds '" +
                       Path("run/model.safetensors") +
                       "', an input of this run; save to another directory");
  // A damaged file: the header says one byte more than the file has.
  std::string bytes = ReadWholeFile(Path("run/model.safetensors"));
  bytes.pop_back();
  { std::ofstream(Path("cut.safetensors"), std::ios::binary) << bytes; }
  ExpectCleanError(
      {mpt, "--init-from", Path("cut.safetensors")},
      "--init-from: '" + Path("cut.safetensors") +
          "' is not a valid safetensors file: the data_offsets [465664, 465920] of tensor "
          "'transformer.norm_f.bias' run past the end of the data (465919 bytes)");
  // Another model's weights: names missing, one extra, one misshapen.
  Tensor small(DType::kFloat32, {3}), wte(DType::kFloat32, {255, 64});
  ASSERT_TRUE(WriteSafetensors(Path("other.safetensors"),
                               {{"transformer.wte.weight", &wte}, {"lm_head.weight", &small}}, {})
                  .ok());
  ExpectCleanError({mpt, "--init-from", Path("other.safetensors")},
                   "--init-from " + Path("other.safetensors") +
                       ": 26 parameters of the plan (of 27) are not in the file: "
                       "'transformer.blocks.0.norm_1.weight', 'transformer.blocks.0.norm_1.bias', "
                       "'transformer.blocks.0.attn.Wqkv.weight' and 23 more; the file must hold "
                       "every parameter under its PyTorch name");
}

}  // namespace
}  // namespace foundry
