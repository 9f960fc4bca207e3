// End-to-end: foundry-compile's memory report (the text after a training compile, --report-json,
// --memory-timeline) and the output rules its files follow: written whole, with or without -o,
// never over an input, and not at all when the compile fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compiler/onnx_export.h"
#include "compiler/text.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kTiny = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny/model.onnx";

class FoundryCompileReportTest : public ScratchDirTest {
 protected:
  ExecResult Compile(std::vector<std::string> args) {
    args.insert(args.end(), {"--dim", "batch=2", "--dim", "seq=16"});
    return Exec(kCompile, args, dir_);
  }
  // Files in the test directory and below it, other than the captured stdout/stderr.
  std::vector<std::string> Files() const {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      std::string name = e.path().lexically_relative(dir_).string();
      if (name.rfind("stdout.", 0) != 0 && name.rfind("stderr.", 0) != 0) files.push_back(name);
    }
    std::sort(files.begin(), files.end());
    return files;
  }
};

TEST_F(FoundryCompileReportTest, WritesBothFilesWithDryRun) {
  ExecResult r = Compile(
      {kTiny, "--dry-run", "--report-json", Path("r.json"), "--memory-timeline", Path("t.svg")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Files(), (std::vector<std::string>{"r.json", "t.svg"}));
  const auto j = nlohmann::json::parse(ReadWholeFile(Path("r.json")));
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("model"), kTiny);
  EXPECT_EQ(j.at("dims"), (nlohmann::json{{"batch", 2}, {"seq", 16}}));
  const auto& m = j.at("memory");
  for (const char* key : {"arena_bytes", "lower_bound_bytes", "peak_step",
                          "saved_for_backward_bytes", "parameter_bytes", "gradient_bytes",
                          "optimizer_state_bytes", "input_bytes", "constant_bytes", "total_bytes"})
    EXPECT_TRUE(m.at(key).is_number_integer()) << key;
  EXPECT_TRUE(m.at("peak_node").is_string());
  EXPECT_GE(m.at("arena_bytes").get<int64_t>(), m.at("lower_bound_bytes").get<int64_t>());
  EXPECT_GT(j.at("flops").at("backward").get<int64_t>(),
            j.at("flops").at("forward").get<int64_t>());
  EXPECT_EQ(j.at("flops").at("recompute"), 0);
  int64_t sum = 0;
  for (const auto& row : j.at("modules")) sum += row.at("saved_for_backward_bytes").get<int64_t>();
  EXPECT_EQ(sum, m.at("saved_for_backward_bytes").get<int64_t>());

  // The text report carries the same numbers.
  const std::string saved = std::to_string(m.at("saved_for_backward_bytes").get<int64_t>());
  EXPECT_NE(r.out.find("saved for backward "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(" + saved + " B)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest values live at the peak (step " +
                       std::to_string(m.at("peak_step").get<int64_t>()) + "):"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wrote " + Path("r.json") + "\n"), std::string::npos);
  EXPECT_NE(r.out.find("(--dry-run: no plan written)"), std::string::npos);
  EXPECT_EQ(ReadWholeFile(Path("t.svg")).rfind("<?xml", 0), 0u);
}

TEST_F(FoundryCompileReportTest, WritesThemNextToTheDashOPair) {
  ExecResult r = Compile({kTiny, "-o", Path("out/m"), "--report-json", Path("out/m.json"),
                          "--memory-timeline", Path("out/m.svg")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Files(), (std::vector<std::string>{"out", "out/m.json", "out/m.plan", "out/m.svg",
                                               "out/m.train.onnx"}));
}

TEST_F(FoundryCompileReportTest, RefusesToWriteOverTheModel) {
  fs::copy_file(kTiny, Path("m.onnx"));
  const std::string before = ReadWholeFile(Path("m.onnx"));
  ExecResult r = Compile({Path("m.onnx"), "--report-json", Path("m.onnx")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-compile: error: --report-json '" + Path("m.onnx") +
                       "': writing it would change '" + Path("m.onnx") +
                       "', the model, an input of this command; choose another file\n");
  fs::create_symlink("m.onnx", Path("t.svg"));
  r = Compile({Path("m.onnx"), "-o", Path("x"), "--memory-timeline", Path("t.svg")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-compile: error: --memory-timeline '" + Path("t.svg") +
                       "': writing it would change '" + Path("m.onnx") +
                       "', the model, an input of this command; choose another file\n");
  EXPECT_EQ(ReadWholeFile(Path("m.onnx")), before);
  EXPECT_EQ(Files(), (std::vector<std::string>{"m.onnx", "t.svg"}));
}

TEST_F(FoundryCompileReportTest, RefusesToWriteOverTheModelsExternalData) {
  // One trainable matmul and its own loss, its weight in external data.
  auto g = ParseGraph(R"(graph mm opset=17 {
  input x : f32[2,4]
  param w : f32[4,2] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
  const axes : i64[2] = [0, 1]
  y : f32[2,2] = MatMul(x, w)
  loss : f32[] = ReduceSum(y, axes) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ExportOptions external;
  external.external_data_threshold = 0;
  external.external_data_min_bytes = 0;
  ASSERT_TRUE(ExportOnnx(*g, Path("m.onnx"), external).ok());
  ASSERT_TRUE(fs::exists(Path("m.onnx.data")));
  const std::string before = ReadWholeFile(Path("m.onnx.data"));
  ExecResult r = Exec(kCompile, {Path("m.onnx"), "--report-json", Path("m.onnx.data")}, dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-compile: error: output '" + Path("m.onnx.data") +
                       "' is the external data file '" + Path("m.onnx.data") +
                       "' of the input model; choose another --report-json FILE\n");
  EXPECT_EQ(ReadWholeFile(Path("m.onnx.data")), before);
}

TEST_F(FoundryCompileReportTest, NeedsATrainingGraph) {
  ExecResult r = Compile({kTiny, "--forward-only", "--memory-timeline", Path("t.svg")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --memory-timeline describes a training step; drop "
            "--forward-only\n");
  EXPECT_TRUE(Files().empty());
}

// A failed -o pair leaves no report behind either (the report files are written last).
TEST_F(FoundryCompileReportTest, FailedDashOWritesNoReport) {
  fs::create_directories(Path("out/m.plan/keep"));
  ExecResult r = Compile({kTiny, "-o", Path("out/m"), "--report-json", Path("r.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-compile: error: -o '" + Path("out/m.plan") + "': it is a folder; give a file name\n");
  EXPECT_FALSE(fs::exists(Path("r.json")));
}

TEST_F(FoundryCompileReportTest, HelpDocumentsTheOptions) {
  ExecResult r = Exec(kCompile, {"--help"}, dir_);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--report-json FILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--memory-timeline FILE.svg"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace foundry
