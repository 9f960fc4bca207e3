// End-to-end: runs the real foundry-compile binary on good and bad input and checks its output,
// its exact one-line errors and exit codes, and that it never leaves partial files behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>

#include "compiler/onnx_export.h"
#include "compiler/text.h"
#include "tests/support/exec.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kSource = FOUNDRY_SOURCE_DIR;
const std::string kTiny = kSource + "/models/fixtures/mpt_tiny/model.onnx";

// A model small enough to compile in milliseconds: one trainable matmul and its own scalar loss.
constexpr const char* kMatMulModel = R"(graph mm opset=17 {
  input x : f32[batch,4]
  param w : f32[4,2] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
  const axes : i64[2] = [0, 1]
  y : f32[batch,2] = MatMul(x, w)
  loss : f32[] = ReduceSum(y, axes) {keepdims=0}
  output loss
})";

// Size, modification time and content hash of a file: equal snapshots mean it was left untouched.
std::string FileState(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "(missing)";
  // A folder's own mtime moves whenever an entry comes and goes (a temp file that was removed
  // again); its entries are compared one by one instead.
  if (S_ISDIR(st.st_mode)) return "(dir)";
  return std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + " hash " +
         std::to_string(std::hash<std::string>{}(ReadWholeFile(path)));
}

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
  // Every file and folder under the test directory (captured output aside) with its state, plus
  // the `extra` files (inputs from elsewhere).
  std::map<std::string, std::string> Snapshot(const std::vector<std::string>& extra = {}) const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) == 0 || name.rfind("stderr.", 0) == 0) continue;
      files[e.path().string()] = FileState(e.path().string());
    }
    for (const auto& path : extra) files[path] = FileState(path);
    return files;
  }
  // The bad-input contract: exit `code` (non-zero, < 128), exactly one line on stderr, the
  // prefixed `message`, and no file created, changed or removed.
  void ExpectCleanError(const std::vector<std::string>& args, const std::string& message,
                        int code = 1, const std::vector<std::string>& extra_inputs = {}) {
    auto before = Snapshot(extra_inputs);
    ExecResult r = Compile(args);
    EXPECT_EQ(r.code, code) << r.out << r.err;
    EXPECT_EQ(r.err, "foundry-compile: error: " + message + "\n");
    EXPECT_EQ(Snapshot(extra_inputs), before);
  }
  // kMatMulModel exported to `name` in the test directory; returns its path.
  std::string MatMulModel(const std::string& name, const ExportOptions& options = {}) const {
    auto g = ParseGraph(kMatMulModel);
    EXPECT_TRUE(g.ok()) << g.status().message();
    Status st = ExportOnnx(*g, Path(name), options);
    EXPECT_TRUE(st.ok()) << st.message();
    return Path(name);
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

// A stock torch.onnx.export (no foundry metadata): the tree from torch's scoped names, every
// class unknown, the blocks found as the repeated instances of transformer.blocks, and the same
// nodes and bytes per module as the annotated export (the tied head "/wte" lands in
// transformer.wte, not in a root module "wte").
TEST_F(FoundryCompileTest, ListModulesOnAStockExport) {
  ExecResult r =
      Compile({kSource + "/models/fixtures/mpt_tiny/model.stock.onnx", "--list-modules"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ExecResult annotated = Compile({kTiny, "--list-modules"});
  ASSERT_EQ(annotated.code, 0) << annotated.err;
  // module -> (nodes, params), from the last two columns.
  auto columns = [](const std::string& table) {
    std::map<std::string, std::string> out;
    std::istringstream in(table);
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
      if (w.size() >= 5 && w[0] != "module" && w[0].back() != ':')
        out[w[0]] = w[w.size() - 3] + " " + w[w.size() - 2] + " " + w.back();
    }
    return out;
  };
  EXPECT_EQ(columns(r.out).size(), 29u) << r.out;
  EXPECT_EQ(columns(r.out), columns(annotated.out));
  for (const char* line :
       {"(root)                                         ?      -                     272  455.0 "
        "KiB\n",
        "    transformer.blocks.0                       ?      block                 114  195.2 "
        "KiB\n",
        "      transformer.blocks.0.attn                ?      attn                   90   65.0 "
        "KiB\n",
        "    transformer.blocks.1                       ?      block                 111  195.2 "
        "KiB\n",
        "    transformer.wte                            ?      -                       3   64.0 "
        "KiB\n",
        "block: transformer.blocks.N, N = 0..1 (2 blocks: the repeated instances of a module "
        "list; layer ranges count N)\n",
        "?: the export names no class for the module (a plain torch.onnx.export; foundry's "
        "exporter adds the classes)\n"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "in:\n" << r.out;
  EXPECT_NE(annotated.out.find("    transformer.blocks.1                       MPTBlock            "
                               "mptblock,block"),
            std::string::npos)
      << annotated.out;
  EXPECT_EQ(annotated.out.find("?"), std::string::npos) << annotated.out;
}

TEST_F(FoundryCompileTest, HelpDocumentsEveryOption) {
  ExecResult r = Compile({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* opt :
       {"--output", "--list-modules", "--list-ops", "--dim", "--freeze", "--trainable",
        "--forward-only", "--fold-limit", "--dump-after", "--input-shape"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

TEST_F(FoundryCompileTest, MissingFile) {
  ExpectError({Path("nope.onnx")},
              "cannot open '" + Path("nope.onnx") + "': No such file or directory");
}

TEST_F(FoundryCompileTest, EmptyFile) {
  Write("empty.onnx", "");
  ExpectError(
      {Path("empty.onnx")},
      "'" + Path("empty.onnx") + "' is empty; pass a .onnx file exported with torch.onnx.export");
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
  ExpectError(
      {Path("celu.onnx")},
      "Celu node '/transformer/blocks.0/ffn/act/Celu' (module transformer.blocks.0.ffn.act): "
      "operator Celu is not supported by foundry; supported ops are listed by "
      "`foundry-compile --list-ops`");
  EXPECT_EQ(Leftovers(), (std::vector<std::string>{"celu.onnx"}));
}

TEST_F(FoundryCompileTest, UnboundDimension) {
  ExpectError({kTiny, "--dim", "batch=2", "-o", Path("mpt")},
              "symbolic dimension 'seq' of input 'input_ids' is not bound; pass --dim seq=N (the "
              "inputs' dimensions: input_ids i64[2,seq], labels i64[2,seq])");
  EXPECT_EQ(Leftovers(), std::vector<std::string>{});
}

// Axes bound by position (--dim INPUT.AXIS=N, --input-shape INPUT=N1xN2) give the plan that the
// dimension names give; what cannot be bound so is one line naming the input's axes.
TEST_F(FoundryCompileTest, DimensionsByPosition) {
  ASSERT_EQ(Compile({kTiny, "--dim", "batch=2", "--dim", "seq=16", "-o", Path("names")}).code, 0);
  ExecResult axis =
      Compile({kTiny, "--dim", "input_ids.0=2", "--dim", "input_ids.1=16", "-o", Path("axes")});
  ASSERT_EQ(axis.code, 0) << axis.err;
  ExecResult shape = Compile({kTiny, "--input-shape", "labels=2x16", "-o", Path("shape")});
  ASSERT_EQ(shape.code, 0) << shape.err;
  for (const std::string prefix : {"axes", "shape"}) {
    // The plans differ only in the graph file they name.
    std::string plan = ReadWholeFile(Path(prefix + ".plan"));
    const std::string graph = "\"" + prefix + ".train.onnx\"";
    ASSERT_NE(plan.find(graph), std::string::npos) << prefix;
    plan.replace(plan.find(graph), graph.size(), "\"names.train.onnx\"");
    EXPECT_EQ(plan, ReadWholeFile(Path("names.plan"))) << prefix;
    EXPECT_EQ(ReadWholeFile(Path(prefix + ".train.onnx")), ReadWholeFile(Path("names.train.onnx")))
        << prefix;
  }
  const std::string axes = "input input_ids [batch, seq]";
  ExpectError({kTiny, "--dim", "input_ids.2=2", "--dry-run"},
              "--dim input_ids.2=2: " + axes + " has no axis 2");
  ExpectError({kTiny, "--input-shape", "input_ids=2x16x3", "--dry-run"},
              "--input-shape input_ids=2x16x3: " + axes + " has 2 axes, not 3");
  ExpectError({kTiny, "--input-shape", "ids=2x16", "--dry-run"},
              "--input-shape ids=2x16: the model has no input 'ids' with a shape (inputs: "
              "input_ids [batch, seq], labels [batch, seq])");
  ExpectError({kTiny, "--input-shape", "input_ids=2x16", "--dim", "batch=3", "--dry-run"},
              "--input-shape input_ids=2x16: dimension 'batch' is already bound to 3");
  ExecResult bad = Compile({kTiny, "--input-shape", "input_ids=2xq", "--dry-run"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "foundry-compile: error: --input-shape input_ids=2xq: 'q' is not a size (each size a "
            "positive integer, joined by x)\n");
}

TEST_F(FoundryCompileTest, MalformedDim) {
  ExpectCleanError({kTiny, "--dim", "seq"}, "--dim seq: expected NAME=VALUE, e.g. --dim seq=2048",
                   2);
  ExpectCleanError({kTiny, "--dim", "seq=-4"}, "--dim seq=-4: VALUE must be a positive integer", 2);
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
  ExpectCleanError({Path("m.train.onnx"), "--dim", "batch=2", "--dim", "seq=16", "-o", Path("m")},
                   "-o '" + Path("m.train.onnx") + "': writing it would change '" +
                       Path("m.train.onnx") +
                       "', the model, an input of this command; choose another file");
}

// Files are compared by identity, not by name: a hard link or a symlink to the model is the
// model, whichever output path it sits at.
TEST_F(FoundryCompileTest, RefusesToWriteOverTheInputUnderAnotherName) {
  std::string model = MatMulModel("mm.onnx");
  fs::create_directory(Path("out"));
  fs::create_hard_link(model, Path("out/m.plan"));
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("out/m")},
                   "-o '" + Path("out/m.plan") + "': writing it would change '" + model +
                       "', the model, an input of this command; choose another file");
  fs::remove(Path("out/m.plan"));
  fs::create_symlink("../mm.onnx", Path("out/m.train.onnx"));
  ExpectCleanError({Path("out/../mm.onnx"), "--dim", "batch=2", "-o", Path("out/m")},
                   "-o '" + Path("out/m.train.onnx") + "': writing it would change '" +
                       Path("out/../mm.onnx") +
                       "', the model, an input of this command; choose another file");
}

// The model's external data file is an input too. The model is exported as x.train.onnx (so its
// weights go to x.train.onnx.data) and then renamed: compiling it with -o x would write
// x.train.onnx.data over the weights it reads.
TEST_F(FoundryCompileTest, RefusesToWriteOverTheModelsExternalData) {
  ExportOptions external;
  external.external_data_threshold = 0;
  external.external_data_min_bytes = 0;
  MatMulModel("x.train.onnx", external);
  ASSERT_TRUE(fs::exists(Path("x.train.onnx.data")));
  fs::rename(Path("x.train.onnx"), Path("model.onnx"));
  ExpectCleanError({Path("model.onnx"), "--dim", "batch=2", "-o", Path("x")},
                   "output '" + Path("x.train.onnx.data") + "' is the external data file '" +
                       Path("x.train.onnx.data") +
                       "' of the input model; choose another -o PREFIX");
}

// The memory line, the plan's memory section and --dump-plan, with and without -o.
TEST_F(FoundryCompileTest, PlansMemoryAndDumpsThePlan) {
  std::string model = MatMulModel("mm.onnx");
  ExecResult r =
      Compile({model, "--dim", "batch=2", "-o", Path("m"), "--dump-plan", Path("plan.txt")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // y = MatMul(x, w), 16 bytes, and the ReduceSum's workspace: 256 bytes each once rounded, both
  // live at the peak; w: 32 bytes; its gradient, 32 bytes in the arena, is made after the peak
  // (256 once rounded, placed over y's bytes); AdamW 2 x 32; x 32; constants: the axes 16, the
  // loss's seed gradient 4 and the backward's two shape constants 2 x 16; the loss 4.
  EXPECT_NE(r.out.find("  arena              512 B\n"
                       "  lower bound        512 B  (arena / bound 1.0000)\n"
                       "  peak               step "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  parameters         32 B\n"
                       "  gradients          in the arena, 0 B of 32 B live at the peak\n"
                       "  optimizer state    64 B  (AdamW)\n"
                       "  inputs             32 B\n"
                       "  constants          52 B\n"
                       "  outputs            4 B\n"
                       "  total              696 B\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wrote " + Path("plan.txt") + "\n"), std::string::npos);
  const std::string dump = ReadWholeFile(Path("plan.txt"));
  EXPECT_EQ(dump.rfind("foundry memory plan: ", 0), 0u) << dump;
  EXPECT_NE(dump.find("\nstep 0 [F] MatMul "), std::string::npos) << dump;
  // With the CUDA backend built, every plan has a cuda layout too (its arena holds the cuBLAS
  // workspace of each matrix product).
#ifdef FOUNDRY_HAVE_CUDA
  EXPECT_NE(dump.find("  out 'y' f32[2,2] 16 B arena @cpu 0 @cuda "), std::string::npos) << dump;
  EXPECT_NE(dump.find("\nlayout cuda: memory: arena "), std::string::npos) << dump;
#else
  EXPECT_NE(dump.find("  out 'y' f32[2,2] 16 B arena @cpu 0\n"), std::string::npos) << dump;
#endif
  EXPECT_NE(dump.find(" gradient @cpu "), std::string::npos) << dump;
  EXPECT_NE(dump.find("\nlayout cpu: memory: arena 512 B"), std::string::npos) << dump;
  const std::string plan = ReadWholeFile(Path("m.plan"));
  EXPECT_NE(plan.find("\"version\": 2"), std::string::npos);
  EXPECT_NE(plan.find("\"memory\": {"), std::string::npos);

  // Without -o: the dump alone.
  fs::remove(Path("plan.txt"));
  r = Compile({model, "--dim", "batch=2", "--dump-plan", Path("plan.txt")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(ReadWholeFile(Path("plan.txt")), dump);
}

TEST_F(FoundryCompileTest, DumpPlanNeverWritesOverAnInput) {
  std::string model = MatMulModel("mm.onnx");
  ExpectCleanError({model, "--dim", "batch=2", "--dump-plan", model},
                   "--dump-plan '" + model + "': writing it would change '" + model +
                       "', the model, an input of this command; choose another file");
  fs::create_hard_link(model, Path("link.txt"));
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("m"), "--dump-plan", Path("link.txt")},
                   "--dump-plan '" + Path("link.txt") + "': writing it would change '" + model +
                       "', the model, an input of this command; choose another file");
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("m"), "--dump-plan", Path("m.plan")},
                   "--dump-plan '" + Path("m.plan") + "' is also the output of -o '" +
                       Path("m.plan") + "'; give each output its own name");
  ExpectCleanError({model, "--dim", "batch=2", "--forward-only", "--dump-plan", Path("d.txt")},
                   "--dump-plan needs the training graph; drop --forward-only", 2);
}

// A plan given where the model goes is read as a model (and rejected); it is never rewritten.
TEST_F(FoundryCompileTest, PlanGivenAsModelIsLeftAlone) {
  std::string model = MatMulModel("mm.onnx");
  ExecResult r = Compile({model, "--dim", "batch=2", "-o", Path("m")});
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectCleanError({Path("m.plan"), "--dim", "batch=2", "-o", Path("m")},
                   "-o '" + Path("m.plan") + "': writing it would change '" + Path("m.plan") +
                       "', the model, an input of this command; choose another file");
  ExpectCleanError({Path("m.plan"), "--dim", "batch=2", "-o", Path("n")},
                   "'" + Path("m.plan") +
                       "' is not an ONNX model (protobuf parse failed); pass a .onnx file exported "
                       "with torch.onnx.export");
}

TEST_F(FoundryCompileTest, OutputPrefixNeedsAStem) {
  std::string model = MatMulModel("mm.onnx");
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("out/")},
                   "-o " + Path("out/") + ": PREFIX needs a file name after the folder (e.g. -o " +
                       Path("out/") + "model writes model.train.onnx and model.plan there)",
                   2);
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("out/..")},
                   "-o " + Path("out/..") +
                       ": PREFIX needs a file name after the folder (e.g. -o " + Path("out/../") +
                       "model writes model.train.onnx and model.plan there)",
                   2);
}

// The pair is written as a pair. Here the plan cannot be written (a folder has its name): found
// before the compile, so the earlier pair is still there intact and nothing new is left behind
// (a rename that fails at the end is undone: tests/base/output_set_test.cc).
TEST_F(FoundryCompileTest, WritesTheGraphAndPlanAsAPair) {
  std::string model = MatMulModel("mm.onnx");
  fs::create_directories(Path("out/m.plan/keep"));
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("out/m")},
                   "-o '" + Path("out/m.plan") + "': it is a folder; give a file name");

  // Now with an earlier compile's graph in place (compiled with batch=3): restored byte for byte.
  fs::remove_all(Path("out"));
  ASSERT_EQ(Compile({model, "--dim", "batch=3", "-o", Path("out/m")}).code, 0);
  fs::remove(Path("out/m.plan"));
  fs::create_directories(Path("out/m.plan/keep"));
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("out/m")},
                   "-o '" + Path("out/m.plan") + "': it is a folder; give a file name");
}

TEST_F(FoundryCompileTest, OutputFolderIsAFile) {
  std::string model = MatMulModel("mm.onnx");
  Write("a_file", "in the way");
  ExpectCleanError({model, "--dim", "batch=2", "-o", Path("a_file/m")},
                   "-o '" + Path("a_file/m.train.onnx") + "': '" + Path("a_file") +
                       "' is not a folder; choose another file");
}

// Output folders are created only when the outputs are written: a compile that fails leaves none.
TEST_F(FoundryCompileTest, FailedCompileCreatesNoFolder) {
  std::string model = MatMulModel("mm.onnx");
  ExpectCleanError({model, "-o", Path("new/deeper/m")},
                   "symbolic dimension 'batch' of input 'x' is not bound; pass --dim batch=N (the "
                   "inputs' dimensions: x f32[batch,4])");
}

TEST_F(FoundryCompileTest, ListOps) {
  ExecResult r = Compile({"--list-ops", kTiny});
  EXPECT_EQ(r.code, 0);
  for (const char* op :
       {"\nMatMul\n", "\ncom.microsoft::GeluGrad\n", "\nLayerNormalization\n", "\nGelu\n",
        "\nCumSum\n", "\nGatherND\n", "\ncom.microsoft::GatherNDGrad\n", "\nScatterElements\n"})
    EXPECT_NE(("\n" + r.out).find(op), std::string::npos) << op;
  // The ops the importer lowers into others are listed too, with how.
  for (const char* op :
       {"\nSplitToSequence  (lowered at import", "\nSequenceAt  (lowered at import"})
    EXPECT_NE(("\n" + r.out).find(op), std::string::npos) << op;
}

// --input-shape rebinds a size torch specialised at export (a decimal dim_param), with a
// warning; --dim INPUT.AXIS=N reaches it too.
TEST_F(FoundryCompileTest, InputShapeRebindsASizeTorchSpecialised) {
  const std::string model = kSource + "/models/fixtures/llama_tiny/dynamo/model.onnx";
  ExecResult r = Compile(
      {model, "--input-shape", "input_ids=3x12", "--input-shape", "labels=3x12", "-o", Path("re")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("foundry-compile: warning: torch specialised dimension '16' -> 12, '2' -> "
                       "3 at export"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("16=12 2=3 s2=3 s3=12"), std::string::npos) << r.out;
  r = Compile({model, "--dim", "input_ids.1=12", "--input-shape", "labels=2x12", "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  // The exported size itself needs no rebinding and warns nothing.
  r = Compile(
      {model, "--input-shape", "input_ids=2x16", "--input-shape", "labels=2x16", "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("specialised"), std::string::npos) << r.err;
}

TEST_F(FoundryCompileTest, ListOpsNeedsNoModel) {
  ExecResult r = Compile({"--list-ops"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(("\n" + r.out).find("\nMatMul\n"), std::string::npos);
}

TEST_F(FoundryCompileTest, DimNeverSwallowsTheModel) {
  std::string model = MatMulModel("mm.onnx");
  ExecResult r = Compile({"--dim", "batch=2", model, "-o", Path("a")});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Compile({"--dim", "batch=2", "--dim", "batch=2", model, "-o", Path("b")});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Compile({"--dim", "batch=2", "--dim", "seq=16", kTiny});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Compile({kTiny, "--dim", "batch=2", "--dim", "seq=16"});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(FoundryCompileTest, BadDimValues) {
  std::string model = MatMulModel("mm.onnx");
  ExpectCleanError({model, "--dim", "batch=2", "--dim", "batch=3", "-o", Path("m")},
                   "--dim batch=3: 'batch' is already bound to 2 by an earlier --dim", 2);
  ExpectCleanError({model, "--dim", "batch=0", "-o", Path("m")},
                   "--dim batch=0: VALUE must be a positive integer", 2);
  ExpectCleanError({model, "--dim", "batch=-2", "-o", Path("m")},
                   "--dim batch=-2: VALUE must be a positive integer", 2);
  ExpectCleanError({model, "--dim", "batch=9223372036854775808", "-o", Path("m")},
                   "--dim batch=9223372036854775808: VALUE is too large (at most "
                   "9223372036854775807)",
                   2);
  ExpectCleanError({model, "--dim", "batch=2x", "-o", Path("m")},
                   "--dim batch=2x: VALUE must be a positive integer", 2);
  // The same value twice is no conflict.
  ExecResult r = Compile({model, "--dim", "batch=2", "--dim", "batch=2"});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(FoundryCompileTest, BadFoldLimit) {
  std::string model = MatMulModel("mm.onnx");
  for (const char* v : {"0", "-1", "9223372036854775808"})
    ExpectCleanError({model, "--dim", "batch=2", "--fold-limit", v, "-o", Path("m")},
                     std::string("--fold-limit ") + v +
                         ": expected a positive number of bytes from 1 to 9223372036854775807",
                     2);
  ExpectCleanError({model, "--dim", "batch=2", "--fold-limit", "1k", "-o", Path("m")},
                   "--fold-limit 1k: expected a positive number of bytes", 2);
}

// CLI11's own errors: one prefixed line, exit 2, in both tools (foundry_run_test has its half).
TEST_F(FoundryCompileTest, UsageErrors) {
  std::string model = MatMulModel("mm.onnx");
  ExpectCleanError({model, "--bogus"},
                   "The following argument was not expected: --bogus (run foundry-compile --help)",
                   2);
  ExpectCleanError({model, "-o"}, "--output: 1 required TEXT missing (run foundry-compile --help)",
                   2);
  ExpectCleanError({}, "no model given: foundry-compile MODEL.onnx [-o PREFIX] (see --help)", 2);
  ExecResult r = Compile({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Exit status: 0 success; 2 a wrong command line"), std::string::npos)
      << r.out;
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
