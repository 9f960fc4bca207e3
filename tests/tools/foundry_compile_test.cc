// End-to-end: runs the real foundry-compile binary on good and bad input and checks its output,
// its exact one-line errors and exit codes, and that it never leaves partial files behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "compiler/onnx_export.h"
#include "compiler/text.h"
#include "tests/support/exec.h"

namespace foundry {
namespace {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kSource = FOUNDRY_SOURCE_DIR;
const std::string kTiny = kSource + "/models/fixtures/mpt_tiny/model.onnx";

class FoundryCompileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(testing::TempDir()) /
            ("foundry_compile_test_" + std::to_string(getpid()) + "_" +
             testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ExecResult Compile(const std::vector<std::string>& args) { return Exec(kCompile, args, dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  // Files the run left in the directory, other than the captured stdout/stderr.
  std::vector<std::string> Leftovers() const {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) != 0 && name.rfind("stderr.", 0) != 0) files.push_back(name);
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  void ExpectError(const std::vector<std::string>& args, const std::string& message) {
    ExecResult r = Compile(args);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-compile: error: " + message + "\n");
  }

  std::string dir_;
};

TEST_F(FoundryCompileTest, CompilesTheTinyModel) {
  ExecResult r = Compile({kTiny, "--dim", "batch=2", "--dim", "seq=16", "-o", Path("out/mpt")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("autodiff: 27 trainable parameters"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(Path("out/mpt.train.onnx")));
  EXPECT_TRUE(fs::exists(Path("out/mpt.plan")));
  // Nothing else: no temp files left next to the outputs.
  std::vector<std::string> out_files;
  for (const auto& e : fs::directory_iterator(Path("out")))
    out_files.push_back(e.path().filename().string());
  std::sort(out_files.begin(), out_files.end());
  EXPECT_EQ(out_files, (std::vector<std::string>{"mpt.plan", "mpt.train.onnx"}));
}

TEST_F(FoundryCompileTest, ListModulesShowsTreeKeysNodesAndBytes) {
  for (const char* file : {"model.onnx", "model.functions.onnx", "model.metadata.onnx"}) {
    ExecResult r = Compile({kSource + "/models/fixtures/mpt_tiny/" + file, "--list-modules"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("transformer.blocks.1.attn"), std::string::npos) << file << r.out;
    EXPECT_NE(r.out.find("MultiheadAttention  multihead_attention,grouped_query_attention"),
              std::string::npos)
        << file << r.out;
    EXPECT_NE(r.out.find("MPTBlock            mptblock"), std::string::npos) << file;
  }
}

TEST_F(FoundryCompileTest, HelpDocumentsEveryOption) {
  ExecResult r = Compile({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* opt : {"--output", "--list-modules", "--list-ops", "--dim", "--freeze",
                          "--trainable", "--forward-only", "--fold-limit", "--dump-after"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

TEST_F(FoundryCompileTest, MissingFile) {
  ExpectError({Path("nope.onnx")}, "cannot open '" + Path("nope.onnx") +
                                       "': No such file or directory");
}

TEST_F(FoundryCompileTest, EmptyFile) {
  Write("empty.onnx", "");
  ExpectError({Path("empty.onnx")},
              "'" + Path("empty.onnx") +
                  "' is empty; pass a .onnx file exported with torch.onnx.export");
}

TEST_F(FoundryCompileTest, RandomBytes) {
  std::string bytes;
  uint32_t x = 2463534242u;
  for (int i = 0; i < 4096; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    bytes += static_cast<char>(x);
  }
  Write("random.onnx", bytes);
  ExpectError({Path("random.onnx")},
              "'" + Path("random.onnx") +
                  "' is not an ONNX model (protobuf parse failed); pass a .onnx file exported "
                  "with torch.onnx.export");
}

TEST_F(FoundryCompileTest, TruncatedModel) {
  std::string whole = ReadWholeFile(kTiny);
  Write("truncated.onnx", whole.substr(0, whole.size() / 2));
  ExpectError({Path("truncated.onnx")},
              "'" + Path("truncated.onnx") +
                  "' is not an ONNX model (protobuf parse failed); pass a .onnx file exported "
                  "with torch.onnx.export");
}

TEST_F(FoundryCompileTest, UnsupportedOpNamesOpNodeAndScope) {
  auto g = ParseGraph(R"(graph g opset=17 {
  input x : f32[2,3]
  y : f32[2,3] = Celu(x) @"transformer.blocks.0.ffn.act" #"/transformer/blocks.0/ffn/act/Celu"
  output y
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(ExportOnnx(*g, Path("celu.onnx")).ok());
  ExpectError({Path("celu.onnx")},
              "Celu node '/transformer/blocks.0/ffn/act/Celu' (module transformer.blocks.0.ffn.act): "
              "operator Celu is not supported by foundry; supported ops are listed by "
              "`foundry-compile --list-ops`");
  EXPECT_EQ(Leftovers(), (std::vector<std::string>{"celu.onnx"}));
}

TEST_F(FoundryCompileTest, UnboundDimension) {
  ExpectError({kTiny, "--dim", "batch=2", "-o", Path("mpt")},
              "symbolic dimension 'seq' of input 'input_ids' is not bound; pass --dim seq=N");
  EXPECT_EQ(Leftovers(), std::vector<std::string>{});
}

TEST_F(FoundryCompileTest, MalformedDim) {
  ExpectError({kTiny, "--dim", "seq"}, "--dim seq: expected NAME=VALUE, e.g. --dim seq=2048");
  ExpectError({kTiny, "--dim", "seq=-4"}, "--dim seq=-4: VALUE must be a positive integer");
}

TEST_F(FoundryCompileTest, MissingExternalData) {
  ExecResult r = Compile({kSource + "/tests/data/onnx/external_missing.onnx"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("external data file 'missing.bin' for initializer"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("keep the .onnx file next to its data files"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(FoundryCompileTest, ListModulesWithoutAnnotationsSaysHowToExport) {
  auto g = ParseGraph(R"(graph g opset=17 {
  input x : f32[2,3]
  y : f32[2,3] = Tanh(x)
  output y
})");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(ExportOnnx(*g, Path("plain.onnx")).ok());
  ExpectError({Path("plain.onnx"), "--list-modules"},
              "'" + Path("plain.onnx") +
                  "' carries no module annotations; export it with models/export_mpt.py "
                  "(--annotations scopes or functions), or with torch.onnx.export(..., "
                  "export_modules_as_functions=...) / torch >= 2.5's dynamo exporter");
}

TEST_F(FoundryCompileTest, RefusesToWriteOverTheInput) {
  fs::copy_file(kTiny, Path("m.train.onnx"));
  std::string before = ReadWholeFile(Path("m.train.onnx"));
  ExpectError({Path("m.train.onnx"), "--dim", "batch=2", "--dim", "seq=16", "-o", Path("m")},
              "output '" + Path("m.train.onnx") + "' is the input model; choose another -o PREFIX");
  EXPECT_EQ(ReadWholeFile(Path("m.train.onnx")), before);
}

TEST_F(FoundryCompileTest, ListOps) {
  ExecResult r = Compile({"--list-ops", kTiny});
  EXPECT_EQ(r.code, 0);
  for (const char* op : {"\nMatMul\n", "\ncom.microsoft::GeluGrad\n", "\nLayerNormalization\n"})
    EXPECT_NE(("\n" + r.out).find(op), std::string::npos) << op;
}

}  // namespace
}  // namespace foundry
