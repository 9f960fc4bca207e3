// Bad input at import: every case is a clean one-line Status error, built here, that never
// crashes, hangs or reads outside the model's folder.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/quote.h"
#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/onnx_proto_util.h"
#include "tests/support/exec.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

constexpr const char* kUtf8Hint =
    " is not valid UTF-8 (ONNX strings are UTF-8; re-export the model)";

void SetF32Vector(onnx::ValueInfoProto* v) {
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(4);
}

// x (f32[4]) -> Relu "r" -> y, IR 8, opset 17.
onnx::ModelProto SmallModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* x = g->add_input();
  x->set_name("x");
  SetF32Vector(x);
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->set_name("r");
  n->add_input("x");
  n->add_output("y");
  auto* y = g->add_output();
  y->set_name("y");
  SetF32Vector(y);
  return m;
}

StatusOr<Graph> Import(const onnx::ModelProto& m) {
  return ImportOnnxFromBytes(m.SerializeAsString(), {}, "", "m.onnx");
}

std::string ImportError(const onnx::ModelProto& m) {
  auto g = Import(m);
  if (g.ok()) return "(imported)";
  EXPECT_EQ(g.status().message().find('\n'), std::string::npos);
  return g.status().message();
}

TEST(QuoteNameTest, EscapesControlCharactersAndInvalidBytes) {
  EXPECT_EQ(QuoteName("blocks.0/attn"), "'blocks.0/attn'");
  EXPECT_EQ(QuoteName("a\nb\x1b[31m\x7f"), "'a\\x0ab\\x1b[31m\\x7f'");
  EXPECT_EQ(QuoteName("caf\xc3\xa9"), "'caf\xc3\xa9'");       // valid UTF-8 stays
  EXPECT_EQ(QuoteName("x\xff\xc3"), "'x\\xff\\xc3'");         // a stray byte, a cut sequence
  EXPECT_EQ(QuoteName("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");  // a surrogate is not UTF-8
  EXPECT_EQ(QuoteName("a\\b"), "'a\\\\b'");
  EXPECT_EQ(QuoteName(std::string("n\0m", 3)), "'n\\x00m'");
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x99\x82"));
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
}

TEST(OnnxImportBadInputTest, ControlCharactersInNamesAreEscaped) {
  Node n;
  n.op_type = "Relu";
  n.name = "a\nb\x1b[2J";
  n.scope = "blocks.0\r";
  EXPECT_EQ(n.Describe(), "Relu node 'a\\x0ab\\x1b[2J' (module blocks.0\\x0d)");

  onnx::ModelProto m = SmallModel();
  m.mutable_graph()->mutable_node(0)->set_name("r\x1b[31m");
  m.mutable_graph()->mutable_node(0)->set_input(0, "nope\x07");
  ImportOptions no_checker;  // ONNX's checker would refuse the undefined input first
  no_checker.run_checker = false;
  auto g = ImportOnnxFromBytes(m.SerializeAsString(), no_checker, "", "m.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'m.onnx': Relu node 'r\\x1b[31m' reads 'nope\\x07', which is not a graph input, an "
            "initializer or an earlier node's output (nodes must be in topological order)");
}

TEST(OnnxImportBadInputTest, InvalidUtf8Names) {
  {
    onnx::ModelProto m = SmallModel();
    m.mutable_graph()->mutable_node(0)->set_name("r\xff");
    EXPECT_EQ(ImportError(m), std::string("'m.onnx': node name 'r\\xff'") + kUtf8Hint);
  }
  {
    onnx::ModelProto m = SmallModel();
    m.mutable_graph()->mutable_node(0)->set_output(0, "y\xc3");
    EXPECT_EQ(ImportError(m),
              std::string("'m.onnx': output name of node 'r' 'y\\xc3'") + kUtf8Hint);
  }
  {
    onnx::ModelProto m = SmallModel();
    m.mutable_graph()->mutable_input(0)->set_name("x\xfe");
    EXPECT_EQ(ImportError(m), std::string("'m.onnx': graph input name 'x\\xfe'") + kUtf8Hint);
  }
  {
    onnx::ModelProto m = SmallModel();
    auto* w = m.mutable_graph()->add_initializer();
    w->set_name("w\x80");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_float_data(1.0f);
    EXPECT_EQ(ImportError(m), std::string("'m.onnx': initializer name 'w\\x80'") + kUtf8Hint);
  }
  {
    onnx::ModelProto m = SmallModel();
    auto* f = m.add_functions();
    f->set_name("F\xe2\x82");
    f->set_domain("local");
    EXPECT_EQ(ImportError(m), std::string("'m.onnx': function name 'F\\xe2\\x82'") + kUtf8Hint);
  }
  {
    onnx::ModelProto m = SmallModel();
    auto* p = m.add_metadata_props();
    p->set_key("k\xff");
    p->set_value("v");
    EXPECT_EQ(ImportError(m), std::string("'m.onnx': model metadata key 'k\\xff'") + kUtf8Hint);
  }
  {
    onnx::ModelProto m = SmallModel();
    auto* p = m.add_metadata_props();
    p->set_key("foundry.parameters");
    p->set_value("[\"w\xff\"]");
    EXPECT_EQ(ImportError(m), std::string("'m.onnx': model metadata 'foundry.parameters' value "
                                          "'[\"w\\xff\"]'") +
                                  kUtf8Hint);
  }
}

// foundry.padding_idx (compiler/padding_rows.h) must name an initializer and a row inside it: a
// typo would otherwise leave the padding row's gradient silently unzeroed.
TEST(OnnxImportBadInputTest, PaddingIdxMustNameARowOfAnInitializer) {
  auto with_padding = [](const std::string& value) {
    onnx::ModelProto m = SmallModel();
    auto* w = m.mutable_graph()->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(4);
    for (int i = 0; i < 4; ++i) w->add_float_data(1.0f);
    auto* p = m.add_metadata_props();
    p->set_key("foundry.padding_idx");
    p->set_value(value);
    return m;
  };
  auto g = Import(with_padding(R"({"w": 3})"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->metadata.at("foundry.padding_idx"), R"({"w": 3})");
  EXPECT_EQ(ImportError(with_padding(R"({"wte": 0})")),
            "'m.onnx': model metadata 'foundry.padding_idx' names 'wte', which is not an "
            "initializer of the model; fix or remove the key");
  EXPECT_EQ(
      ImportError(with_padding(R"({"w": 4})")),
      "'m.onnx': model metadata 'foundry.padding_idx': row 4 of 'w' (f32[4]) is out of range");
  EXPECT_EQ(ImportError(with_padding("0")),
            "'m.onnx': model metadata 'foundry.padding_idx' is not a JSON object of parameter name "
            "-> padding row (e.g. {\"bert.embeddings.word_embeddings.weight\": 0}); fix or remove "
            "the key");
}

TEST(OnnxImportBadInputTest, ExportNeverAbortsOnInvalidUtf8) {
  auto g = Import(SmallModel());
  ASSERT_TRUE(g.ok()) << g.status().message();
  Graph graph = std::move(g).value();
  ASSERT_TRUE(ExportOnnxToBytes(graph).ok());
  graph.modules["blocks.\xff"].classes = {"Block"};
  auto bytes = ExportOnnxToBytes(graph);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().message(),
            "cannot export module path 'blocks.\\xff': it is not valid UTF-8, which the model's "
            "JSON metadata needs");
  graph.modules.erase("blocks.\xff");
  graph.modules["blocks.0"].classes = {"Blo\xc3"};
  bytes = ExportOnnxToBytes(graph);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().message(),
            "cannot export module class 'Blo\\xc3': it is not valid UTF-8, which the model's JSON "
            "metadata needs");
}

TEST(OnnxImportBadInputTest, NonRegularFiles) {
  auto zero = ImportOnnx("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "cannot read '/dev/zero': not a regular file (a device, FIFO or socket); pass a file");

  TempDir tmp;
  std::string fifo = tmp / "model.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = ImportOnnx(fifo);  // would block in open() without a writer
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(
      f.status().message(),
      "cannot read '" + fifo + "': not a regular file (a device, FIFO or socket); pass a file");

  auto dir = ImportOnnx(tmp.path());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().message(), "cannot read '" + tmp.path() + "': it is a directory");
}

TEST(OnnxImportBadInputTest, FileOverProtobufLimitIsRejectedBeforeReading) {
  TempDir tmp;
  std::string big = tmp.File("big.onnx", "");
  // Sparse: no disk space used, and nothing is read.
  ASSERT_EQ(::truncate(big.c_str(), (int64_t{1} << 31) + 16), 0);
  auto g = ImportOnnx(big);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'" + big +
                "' is larger than 2 GiB, protobuf's limit; export the weights as external data "
                "(torch.onnx.export does so for models over 2 GiB)");
}

// model.onnx in `dir` whose initializer `w` (f32[2]) lives in external file `location`.
std::string ExternalModel(const TempDir& dir, const std::string& location) {
  onnx::ModelProto m = SmallModel();
  auto* g = m.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = w->add_external_data();
  e->set_key("location");
  e->set_value(location);
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->set_name("rw");
  n->add_input("w");
  n->add_output("z");
  auto* z = g->add_output();
  z->set_name("z");
  SetF32Vector(z);
  return dir.File("model.onnx", m.SerializeAsString());
}

TEST(OnnxImportBadInputTest, ExternalDataSymlinkOutOfTheFolder) {
  TempDir outside, model_dir;
  std::string secret = outside.File("secret.bin", std::string(8, '\x01'));
  std::string model = ExternalModel(model_dir, "weights.bin");
  fs::create_symlink(secret, model_dir / "weights.bin");
  auto g = ImportOnnx(model);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'" + model + "': initializer 'w': external data location 'weights.bin' resolves to '" +
                fs::canonical(secret).string() +
                "', outside the model's directory; copy the data file next to the model");

  // A symlink that stays inside the folder is fine.
  fs::remove(model_dir / "weights.bin");
  float data[2] = {1.5f, -2.0f};
  model_dir.File("real.bin", std::string(reinterpret_cast<const char*>(data), sizeof data));
  fs::create_symlink("real.bin", model_dir / "weights.bin");
  auto ok = ImportOnnx(model);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->FindValue("w")->data->data<float>()[1], -2.0f);
}

TEST(OnnxImportBadInputTest, ExternalDataThatIsNotARegularFile) {
  TempDir dir;
  std::string model = ExternalModel(dir, "weights.bin");
  ASSERT_EQ(::mkfifo((dir / "weights.bin").c_str(), 0600), 0);
  auto g = ImportOnnx(model);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "'" + model + "': external data file '" + (dir / "weights.bin") +
                "' for initializer 'w' is not a regular file (a directory, device, FIFO or "
                "socket)");
}

TEST(OnnxImportBadInputTest, StockExportWithoutParameterListWarns) {
  onnx::ModelProto m = SmallModel();
  auto* g = m.mutable_graph();
  for (const char* name :
       {"model.l.weight", "model.l.bias", "model.rotary_emb.inv_freq", "scale"}) {
    auto* w = g->add_initializer();
    w->set_name(name);
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(4);
    for (int i = 0; i < 4; ++i) w->add_float_data(1.0f);
    auto* n = g->add_node();
    n->set_op_type("Add");
    n->set_name(std::string("add_") + name);
    n->add_input("x");
    n->add_input(name);
    n->add_output(std::string("s_") + name);
  }
  auto* ids = g->add_initializer();  // an integer buffer: not trained, not counted
  ids->set_name("position_ids");
  ids->set_data_type(onnx::TensorProto::INT64);
  ids->add_int64_data(0);
  auto graph = Import(m);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ(graph->parameters, (std::vector<std::string>{"model.l.weight", "model.l.bias"}));
  EXPECT_EQ(graph->metadata.at(kImportWarningKey),
            "'m.onnx' declares no trainable parameters (no foundry.parameters, no torch.export "
            "signature): training the 2 floating-point initializers named *.weight or *.bias, not "
            "the 2 others (buffers): 'model.rotary_emb.inv_freq', 'scale'; train one with "
            "--trainable GLOB");
  // Exported, the model lists its parameters: no warning on the way back.
  auto bytes = ExportOnnxToBytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto again = ImportOnnxFromBytes(*bytes, {}, "", "again.onnx");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->metadata.count(kImportWarningKey), 0u);
  EXPECT_EQ(again->parameters, graph->parameters);

  // A warning the file carries itself is not the importer's.
  auto* fake = m.add_metadata_props();
  fake->set_key(kImportWarningKey);
  fake->set_value("fake");
  auto* list = m.add_metadata_props();
  list->set_key("foundry.parameters");
  list->set_value("[\"model.l.weight\"]");
  auto listed = Import(m);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(listed->metadata.count(kImportWarningKey), 0u);
}

// Named like a parameter but holding -inf (Hugging Face GPT-2 keeps its causal mask in
// `attn.bias`): a buffer, frozen, and the warning says why.
TEST(OnnxImportBadInputTest, NonFiniteInitializerIsNeverAParameter) {
  onnx::ModelProto m = SmallModel();
  auto* g = m.mutable_graph();
  for (const char* name : {"h.0.attn.c_attn.weight", "h.0.attn.bias"}) {
    auto* w = g->add_initializer();
    w->set_name(name);
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(4);
    for (int i = 0; i < 4; ++i)
      w->add_float_data(std::string(name) == "h.0.attn.bias" && i % 2 ? -INFINITY : 1.0f);
    auto* n = g->add_node();
    n->set_op_type("Add");
    n->set_name(std::string("add_") + name);
    n->add_input("x");
    n->add_input(name);
    n->add_output(std::string("s_") + name);
  }
  auto graph = Import(m);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ(graph->parameters, std::vector<std::string>{"h.0.attn.c_attn.weight"});
  EXPECT_EQ(graph->metadata.at(kImportWarningKey),
            "'m.onnx' declares no trainable parameters (no foundry.parameters, no torch.export "
            "signature): training the 1 floating-point initializers named *.weight or *.bias, not "
            "the 1 others (buffers): 'h.0.attn.bias' (1 of them hold non-finite values); train "
            "one with --trainable GLOB");
}

TEST(OnnxImportBadInputTest, WarningWhenEveryNameLooksLikeAParameter) {
  auto g = ImportOnnx(std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/func_refs.notable.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->metadata.at(kImportWarningKey),
            "'" + std::string(FOUNDRY_SOURCE_DIR) +
                "/tests/data/onnx/func_refs.notable.onnx' declares no trainable parameters (no "
                "foundry.parameters, no torch.export signature): training all 2 floating-point "
                "initializers; use --freeze GLOB to keep buffers fixed");
}

TEST(OnnxImportBadInputTest, FoundryCompilePrintsTheWarningOnce) {
  TempDir tmp;
  std::string model = std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/onnx/ln_nobias.functions.onnx";
  ExecResult r =
      Exec(FOUNDRY_BINARY_DIR "/foundry-compile", {model, "-o", tmp / "out"}, tmp.path());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "foundry-compile: warning: '" + model +
                       "' declares no trainable parameters (no foundry.parameters, no torch.export "
                       "signature): training all 4 floating-point initializers; use --freeze "
                       "GLOB to keep buffers fixed\n");
}

// torch.export writes a size it specialised as a dim_param of digits ("2", "16"): that is the
// static size, not a symbol the user must bind with --dim.
TEST(OnnxImportTest, DecimalDimParamsAreStaticSizes) {
  EXPECT_EQ(onnx_util::DecimalDimParam("16"), 16);
  EXPECT_EQ(onnx_util::DecimalDimParam("0"), 0);
  EXPECT_EQ(onnx_util::DecimalDimParam("s0"), std::nullopt);
  EXPECT_EQ(onnx_util::DecimalDimParam("-2"), std::nullopt);
  EXPECT_EQ(onnx_util::DecimalDimParam(""), std::nullopt);
  EXPECT_EQ(onnx_util::DecimalDimParam("1234567890123456789"), std::nullopt);  // past 18 digits

  onnx::ModelProto m = SmallModel();
  auto* dim = m.mutable_graph()
                  ->mutable_input(0)
                  ->mutable_type()
                  ->mutable_tensor_type()
                  ->mutable_shape()
                  ->mutable_dim(0);
  dim->clear_dim_value();
  dim->set_dim_param("4");
  auto g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->FindValue("x")->TypeString(), "f32[4]");
  EXPECT_TRUE(g->FindValue("x")->dim_params.empty());

  dim->set_dim_param("s0");
  g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->FindValue("x")->TypeString(), "f32[s0]");
}

// A dynamo export says per value what it is (ValueInfoProto.metadata_props, field 4, unknown to
// Debian's ONNX 1.12): exactly the PARAMETERs train, a BUFFER such as rotary inv_freq does not.
TEST(OnnxImportTest, TorchExportInputSpecKindsTellParametersFromBuffers) {
  onnx::ModelProto m = SmallModel();
  auto* g = m.mutable_graph();
  g->mutable_node(0)->set_op_type("Add");
  g->mutable_node(0)->add_input("w");
  g->mutable_node(0)->set_output(0, "a");
  auto* mul = g->add_node();
  mul->set_op_type("Mul");
  mul->set_name("mul");
  mul->add_input("a");
  mul->add_input("inv_freq");
  mul->add_output("y");
  for (const char* name : {"w", "inv_freq"}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(4);
    for (int i = 0; i < 4; ++i) t->add_float_data(0.5f);
  }
  auto plain = Import(m);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(plain->parameters.empty());  // by name neither is a module's weight or bias

  auto kind = [&](const std::string& name, const std::string& value) {
    auto* vi = g->add_value_info();
    vi->set_name(name);
    SetF32Vector(vi);
    onnx::StringStringEntryProto entry;
    entry.set_key("pkg.torch.export.graph_signature.InputSpec.kind");
    entry.set_value(value);
    vi->GetReflection()->MutableUnknownFields(vi)->AddLengthDelimited(4, entry.SerializeAsString());
    EXPECT_EQ(onnx_util::ValueInfoMetadataProps(*vi),
              (std::vector<std::pair<std::string, std::string>>{
                  {"pkg.torch.export.graph_signature.InputSpec.kind", value}}));
  };
  kind("w", "PARAMETER");
  kind("inv_freq", "BUFFER");
  auto dynamo = Import(m);
  ASSERT_TRUE(dynamo.ok()) << dynamo.status().message();
  EXPECT_EQ(dynamo->parameters, std::vector<std::string>{"w"});
  EXPECT_NE(dynamo->FindValue("inv_freq")->data, nullptr);  // a constant with its data
}

}  // namespace
}  // namespace foundry
