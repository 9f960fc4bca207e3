#include "compiler/onnx_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/onnx_import.h"
#include "compiler/text.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

std::string Data(const std::string& name) {
  return std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/" + name;
}

Graph MustImport(const std::string& path, const ImportOptions& options = {}) {
  auto g = ImportOnnx(path, options);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : Graph();
}

// Runs ONNX's own checker (Python, the reference implementation) on the file: check_model
// (full_check: also ONNX shape inference).
int PythonCheck(const std::string& path, bool full_check = true) {
  std::string cmd =
      "/usr/bin/python3 -c 'import sys, onnx; "
      "onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=sys.argv[2] == \"1\")' '" +
      path + "' " + (full_check ? "1" : "0");
  return std::system(cmd.c_str());
}

// import -> export -> import gives the same IR (text form).
void ExpectRoundTrip(const std::string& model, const ImportOptions& options = {}) {
  SCOPED_TRACE(model);
  Graph g = MustImport(model, options);
  TempDir tmp;
  std::string out = tmp / "model.onnx";
  Status st = ExportOnnx(g, out);
  ASSERT_TRUE(st.ok()) << st.message();
  Graph again = MustImport(out);
  EXPECT_EQ(PrintGraph(again), PrintGraph(g));
  EXPECT_EQ(again.metadata["foundry.annotation_format"], "foundry");
  EXPECT_EQ(again.inputs, g.inputs);
  EXPECT_EQ(again.outputs, g.outputs);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(OnnxExportTest, RoundTripsEveryAnnotationFormat) {
  ExpectRoundTrip(Data("toy.scopes.onnx"));
  ExpectRoundTrip(Data("toy.functions.onnx"));
  ExpectRoundTrip(Data("toy.metadata.onnx"));
  ExpectRoundTrip(Data("toy.noweights.onnx"));
  ExpectRoundTrip(Data("func_refs.onnx"));
  ExpectRoundTrip(Data("opset18.onnx"));
  ExpectRoundTrip(Data("quoted_ir10.onnx"));
  ImportOptions bound;
  bound.dims = {{"batch", 2}};
  bound.load_weights = false;
  ExpectRoundTrip(Data("toy.scopes.onnx"), bound);
}

TEST(OnnxExportTest, RoundTripsFixtures) {
  std::string dir = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny";
  if (!fs::exists(dir + "/model.onnx")) GTEST_SKIP() << "no " << dir;
  ExpectRoundTrip(dir + "/model.onnx");
  ExpectRoundTrip(dir + "/model.functions.onnx");
  ExpectRoundTrip(dir + "/model.metadata.onnx");
}

constexpr const char* kHandWritten = R"(graph hand opset=17 {
  module "" : toy.Root
  module "blocks.0" : toy.Block, toy.Base
  input x : f32[batch,4]
  param w : f32[4,2] = [0.1, 0.2, 0.30000001, 0.4, 0.5, 0.6, 0.7, -0.8]
  param big : f32[3,5]
  const axes : i64[1] = [0]
  y : f32[batch,2] = MatMul(x, w) @"blocks.0" #"mm"
  s : f32[2] = toy.ops::Summarize(y, axes) {keepdims=0, note="a \"q\"\nnext", fs=[1.5, 2.0], e=[:f]} #"sum"
  g : f32[batch,2] = com.microsoft::GeluGrad(y, y) @"blocks.0" #"gg" marks{recompute_of="mm", note="two\nlines \\ ok"}
  t : f32[2] = Constant() {value=tensor(f32[2] = [1.0, inf])} #"c"
  u : f32[2] = Add(s, t) #"add"
  output u
  output g
}
)";

TEST(OnnxExportTest, HandWrittenGraphKeepsEverything) {
  auto g = ParseGraph(kHandWritten);
  ASSERT_TRUE(g.ok()) << g.status().message();
  g->modules["blocks.0.empty"] = Module{};  // a module whose class the export did not name
  TempDir tmp;
  std::string out = tmp / "hand.onnx";
  Status st = ExportOnnx(*g, out);
  ASSERT_TRUE(st.ok()) << st.message();
  Graph again = MustImport(out);
  EXPECT_EQ(PrintGraph(again), PrintGraph(*g));
  EXPECT_EQ(again.modules.at("blocks.0.empty").classes.size(), 0u);
  EXPECT_EQ(again.nodes[2].marks.at("note"), "two\nlines \\ ok");
  // `big` has no data: it travels as a typed graph input and comes back a parameter.
  EXPECT_EQ(again.FindValue("big")->data, nullptr);
  EXPECT_EQ(again.initializers, (std::vector<std::string>{"w", "big", "axes"}));
  EXPECT_EQ(again.metadata["foundry.parameters"], "[\"w\",\"big\"]");
  EXPECT_EQ(again.metadata["foundry.buffers"], "[\"axes\"]");
  FOUNDRY_SKIP_UNLESS(HavePythonOnnx(), "/usr/bin/python3 with onnx not available");
  // com.microsoft gets its opset import, so ONNX's checker accepts the custom op.
  EXPECT_EQ(PythonCheck(out, /*full_check=*/false), 0);
}

TEST(OnnxExportTest, PassesOnnxChecker) {
  FOUNDRY_SKIP_UNLESS(HavePythonOnnx(), "/usr/bin/python3 with onnx not available");
  TempDir tmp;
  for (const char* name : {"toy.scopes.onnx", "toy.functions.onnx", "toy.metadata.onnx",
                           "toy.noweights.onnx", "func_refs.onnx"}) {
    SCOPED_TRACE(name);
    Graph g = MustImport(Data(name));
    std::string out = tmp / (std::string(name) + ".out.onnx");
    ASSERT_TRUE(ExportOnnx(g, out).ok());
    EXPECT_EQ(PythonCheck(out), 0);
  }
}

TEST(OnnxExportTest, ScopesTravelInDocStringsAndMetadata) {
  Graph g = MustImport(Data("toy.scopes.onnx"));
  auto bytes = ExportOnnxToBytes(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_NE(bytes->find("scope=transformer.blocks.0.attn.Wqkv"), std::string::npos);
  EXPECT_NE(bytes->find("foundry.module_classes"), std::string::npos);
  auto again = ImportOnnxFromBytes(*bytes);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(PrintGraph(*again), PrintGraph(g));
  // The source's own metadata is kept.
  EXPECT_EQ(again->metadata.at("foundry.scopes"), g.metadata.at("foundry.scopes"));
}

TEST(OnnxExportTest, LargeInitializersGoToExternalData) {
  Graph g = MustImport(Data("toy.scopes.onnx"));
  TempDir tmp;
  std::string out = tmp / "big.onnx";
  ExportOptions options;
  options.external_data_threshold = 0;  // pretend the weights are over the limit
  options.external_data_min_bytes = 512;
  Status st = ExportOnnx(g, out, options);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(fs::exists(tmp / "big.onnx.data"));
  // Weights of 512 bytes and more moved out: the model file shrank.
  EXPECT_LT(fs::file_size(out), fs::file_size(Data("toy.scopes.onnx")));
  Graph again = MustImport(out);
  EXPECT_EQ(PrintGraph(again), PrintGraph(g));
  if (HavePythonOnnx()) {
    EXPECT_EQ(PythonCheck(out), 0);
  }
}

TEST(OnnxExportTest, WriteErrors) {
  Graph g = MustImport(Data("opset18.onnx"));
  Status st = ExportOnnx(g, "/nonexistent-dir/model.onnx");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "cannot write '/nonexistent-dir/model.onnx': No such file or directory");
}

TEST(OnnxExportTest, ReplacesAnExistingFileAtomically) {
  TempDir tmp;
  std::string out = tmp / "m.onnx";
  std::ofstream(out) << "old contents";
  Graph g = MustImport(Data("opset18.onnx"));
  ASSERT_TRUE(ExportOnnx(g, out).ok());
  Graph again = MustImport(out);
  EXPECT_EQ(again.opset, 18);
  EXPECT_EQ(again.nodes.size(), 4u);
}

}  // namespace
}  // namespace foundry
