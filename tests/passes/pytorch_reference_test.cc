// The training graph against PyTorch: for every committed fixture with reference numbers
// (models/fixtures/<config>/reference/, made by models/make_fixtures.py from torch autograd),
// compile each export of the model (fold, canonicalize, autodiff), run one forward+backward on the
// CPU backend with the fixture's inputs and compare the loss and every parameter's gradient:
// per tensor, max|foundry - torch| / max|torch| <= kBound (below). The exports are the three
// annotation formats of foundry's exporter (scopes, functions, metadata), which must give the
// same bits, and the stock torch.onnx.export (model.stock.onnx), held to PyTorch only. A NaN or
// Inf fails every comparison.
//
// One refinement: a gradient that is mathematically zero (qk_ln's k_ln.bias: a bias added to
// every key shifts all scores of a query equally and cancels in the softmax) is rounding noise in
// both frameworks, and noise divided by noise says nothing. The denominator is therefore
// max(max|torch|, floor), the floor 1e-3 * the largest |torch| gradient element of the fixture.
// Every other tensor of the committed fixtures is above that floor (the smallest, llama_tiny's
// layer-1 q_proj, is 4.7e-3 of its fixture's largest), so for them the measure is exactly
// max|diff| / max|torch|. The zero gradient's noise depends on the BLAS kernels the CPU gets
// (OpenBLAS's AVX-512 kernels: 1.3e-8 * the largest on the dynamo export, above the 1e-8 that
// floor allows): its floor is one float32 ulp of the largest, |diff| <= 2^-23 * largest.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/file_util.h"
#include "base/quote.h"
#include "compiler/ckpt_targets.h"
#include "compiler/module_tree.h"
#include "compiler/onnx_import.h"
#include "compiler/onnx_proto_util.h"
#include "compiler/tensor_proto.h"
#include "passes/canonicalize.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

// The bound on every relative error: 3.2x the worst measured (3.1e-6, mpt_tiny_qkln's k_ln.weight
// on the dynamo export with OpenBLAS's AVX-512 kernels; 1.7e-6 with its AVX2 ones; every other
// fixture's worst is at most 1e-6, stock and dynamo exports included).
constexpr double kBound = 1e-5;

// The floor of a tensor's relative error (the file's header): 1e-3 * the fixture's largest
// gradient element; for the gradient that is zero in exact arithmetic, one float32 ulp of it.
double Floor(const std::string& param, double largest) {
  if (param.ends_with(".k_ln.bias")) return 0x1p-23 / kBound * largest;
  return 1e-3 * largest;
}

double MaxAbs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.GetAsDouble(i)));
  return m;
}

// max|got - want| / max(max|want|, floor), or +inf when either side holds a NaN or an Inf:
// `std::max(worst, NaN)` keeps `worst`, so without this a NaN gradient would compare as exact.
double RelativeError(const Tensor& got, const Tensor& want, double floor = 0) {
  if (got.numel() != want.numel() || !AllFinite(got) || !AllFinite(want))
    return std::numeric_limits<double>::infinity();
  double max_diff = 0, max_ref = floor;
  for (int64_t i = 0; i < want.numel(); ++i) {
    max_diff = std::max(max_diff, std::fabs(got.GetAsDouble(i) - want.GetAsDouble(i)));
    max_ref = std::max(max_ref, std::fabs(want.GetAsDouble(i)));
  }
  return max_ref == 0 ? max_diff : max_diff / max_ref;
}

::testing::AssertionResult WithinBound(const Tensor& got, const Tensor& want, double bound,
                                       double floor = 0) {
  double err = RelativeError(got, want, floor);
  if (err <= bound) return ::testing::AssertionSuccess() << "relative error " << err;
  return ::testing::AssertionFailure()
         << "relative error " << err << " above " << bound
         << (AllFinite(got) ? "" : " (foundry's value is not finite)");
}

// Two annotation formats of one model: the same bits, and finite ones (NaN == NaN bitwise).
::testing::AssertionResult SameFiniteBits(const Tensor& a, const Tensor& b) {
  if (!AllFinite(a) || !AllFinite(b)) return ::testing::AssertionFailure() << "not finite";
  if (!a.BitwiseEqual(b)) return ::testing::AssertionFailure() << "different bits";
  return ::testing::AssertionSuccess();
}

struct Outcome {
  std::map<std::string, Tensor> outputs;
  Graph graph;
};

// Every attention instance of a fixture is fused: the canonicalize counts say so, and
// the training graph holds one foundry::Attention and one AttentionGrad per layer (the layer count
// from the fixture's config.json) and no Softmax.
void ExpectAttentionFused(const Graph& g, const fs::path& fixture_dir) {
  auto text = ReadFile((fixture_dir / "config.json").string());
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto config = nlohmann::json::parse(*text);
  int64_t layers = -1;
  for (const char* key : {"n_layers", "num_hidden_layers", "n_layer"})
    if (config.contains(key)) layers = config.at(key).get<int64_t>();
  ASSERT_GT(layers, 0) << "no layer count in " << fixture_dir / "config.json";
  auto it = g.metadata.find(kAttentionFusionKey);
  ASSERT_NE(it, g.metadata.end()) << "canonicalize left no attention counts";
  EXPECT_EQ(it->second.rfind("fused=" + std::to_string(layers) + " unfused=0 ", 0), 0u)
      << it->second;
  // Gemma-2-style configs: each sliding layer fused with its window, every layer soft-capped.
  int64_t sliding = 0;
  if (config.contains("layer_types"))
    for (const auto& t : config.at("layer_types")) sliding += t == "sliding_attention";
  const int64_t capped = config.contains("attn_logit_softcapping") ? layers : 0;
  EXPECT_NE(
      it->second.find(" window=" + std::to_string(sliding) + " softcap=" + std::to_string(capped)),
      std::string::npos)
      << it->second;
  int64_t fwd = 0, bwd = 0, softmax = 0;
  for (const Node& n : g.nodes) {
    fwd += n.domain == "foundry" && n.op_type == "Attention";
    bwd += n.domain == "foundry" && n.op_type == "AttentionGrad";
    softmax += n.domain.empty() && n.op_type == "Softmax";
  }
  EXPECT_EQ(fwd, layers);
  EXPECT_EQ(bwd, layers);
  EXPECT_EQ(softmax, 0);
}

// `ckpt`: --ckpt arguments (none: the plain training graph).
StatusOr<Outcome> CompileAndRun(const fs::path& model, const std::map<std::string, Tensor>& feeds,
                                const std::vector<std::string>& ckpt = {}) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(model.string(), {}));
  std::map<std::string, int64_t> dims;
  for (const auto& in : g.inputs) {
    const Value* v = g.FindValue(in);
    auto it = feeds.find(in);
    if (it == feeds.end()) continue;
    for (size_t d = 0; d < v->dim_params.size(); ++d)
      if (!v->dim_params[d].empty()) dims[v->dim_params[d]] = it->second.shape()[d];
  }
  CompileOptions options;
  options.fold.dims = dims;
  if (!ckpt.empty()) {
    std::vector<CkptTarget> targets;
    for (const auto& a : ckpt) {
      ASSIGN_OR_RETURN(CkptTarget t, ParseCkptArg(a));
      targets.push_back(std::move(t));
    }
    ASSIGN_OR_RETURN(CkptSelection selection, SelectCkptTargets(g, targets));
    for (const CkptInstance& i : selection.instances) options.remat.instances.push_back(i.module);
    if (options.remat.instances.empty()) return Error("--ckpt selected nothing");
  }
  RETURN_IF_ERROR(RunPasses(g, BuildPipeline(options), {}));
  ASSIGN_OR_RETURN(auto out, Interpret(g, feeds));
  return Outcome{std::move(out), std::move(g)};
}

TEST(PyTorchReferenceTest, NanOrInfFailsEveryComparison) {
  Tensor ref = Tensor::FromVector<float>(DType::kFloat32, {3}, {0.5f, -2.f, 1.f});
  EXPECT_TRUE(WithinBound(ref, ref, 0.0));
  EXPECT_TRUE(SameFiniteBits(ref, ref));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    for (int64_t at : {0, 2}) {
      Tensor got = ref;
      got.data<float>()[at] = bad;
      EXPECT_FALSE(WithinBound(got, ref, kBound));
      EXPECT_FALSE(WithinBound(got, ref, kBound, /*floor=*/1.0));
      EXPECT_FALSE(WithinBound(ref, got, kBound));  // a corrupt reference fails too
      EXPECT_FALSE(SameFiniteBits(got, got));
      EXPECT_FALSE(SameFiniteBits(got, ref));
    }
  }
}

// What foundry's exporter says about the model beyond the graph, read from the annotated file.
struct Annotations {
  // The float initializers that are not parameters: the model's buffers (ALiBi slopes, RoPE's
  // inv_freq).
  std::vector<std::string> float_buffers;
  // `foundry.padding_idx` (BERT's word embeddings): parameter -> the row torch's embedding
  // backward leaves out of the lookup's gradient. A stock export cannot carry it, so there foundry
  // gives that row the lookup's gradient too (models/README.md, padding_idx).
  std::map<std::string, int64_t> padding_rows;
};

Annotations ReadAnnotations(const fs::path& annotated) {
  Annotations out;
  auto g = ImportOnnx(annotated.string(), {});
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return out;
  for (const auto& name : g->initializers) {
    const Value* v = g->FindValue(name);
    if (!g->IsParameter(name) && v && IsFloat(v->dtype)) out.float_buffers.push_back(name);
  }
  auto key = g->metadata.find("foundry.padding_idx");
  if (key != g->metadata.end()) {
    auto table = nlohmann::json::parse(key->second, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(table.is_object()) << key->second;
    if (table.is_object())
      for (const auto& [name, row] : table.items()) {
        EXPECT_TRUE(row.is_number_integer()) << name << ": " << row.dump();
        if (row.is_number_integer()) out.padding_rows[name] = row.get<int64_t>();
      }
  }
  return out;
}

// Row `row` of `t`'s first axis, and `t` without it.
std::pair<Tensor, Tensor> SplitRow(const Tensor& t, int64_t row) {
  const int64_t rows = t.shape()[0], width = t.numel() / rows;
  Shape one = t.shape(), rest = t.shape();
  one[0] = 1;
  rest[0] = rows - 1;
  Tensor picked(DType::kFloat32, one), others(DType::kFloat32, rest);
  const float* src = t.data<float>();
  std::copy(src + row * width, src + (row + 1) * width, picked.data<float>());
  std::copy(src, src + row * width, others.data<float>());
  std::copy(src + (row + 1) * width, src + rows * width, others.data<float>() + row * width);
  return {std::move(picked), std::move(others)};
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The fixture's inputs, by file stem (input_ids, labels).
// torch's numbers: reference/loss.pb and reference/grads/<parameter>_grad.pb.
struct Reference {
  Tensor loss;
  std::map<std::string, Tensor> grads;  // parameter -> gradient
  double largest = 0;                   // the largest |gradient element|
};

Reference ReadReference(const fs::path& dir) {
  Reference out;
  auto loss = ReadTensorFile((dir / "loss.pb").string());
  EXPECT_TRUE(loss.ok()) << dir;
  if (!loss.ok()) return out;
  out.loss = std::move(*loss);
  for (const auto& e : fs::directory_iterator(dir / "grads")) {
    std::string file = e.path().filename().string();
    EXPECT_TRUE(EndsWith(file, "_grad.pb")) << file;
    auto ref = ReadTensorFile(e.path().string());
    EXPECT_TRUE(ref.ok()) << ref.status().message();
    if (!ref.ok() || !EndsWith(file, "_grad.pb")) return {};
    out.largest = std::max(out.largest, MaxAbs(*ref));
    out.grads[file.substr(0, file.size() - std::string("_grad.pb").size())] = std::move(*ref);
  }
  return out;
}

// Every fixture x {scopes, functions, metadata, stock}. The annotated formats train exactly
// PyTorch's parameters and agree bit for bit. The stock export (plain torch.onnx.export, no
// parameter list) trains its *.weight/*.bias initializers, which must be exactly PyTorch's
// parameters (the float buffers stay constants), and the import warning must name every float
// buffer. The stock numbers are compared with PyTorch only: nothing promises them the annotated
// formats' bits (the count that agree is printed).
TEST(PyTorchReferenceTest, LossAndEveryGradientMatchTorch) {
  fs::path root = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";
  ASSERT_TRUE(fs::exists(root)) << "no fixtures under " << root;
  std::vector<fs::path> fixtures;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "reference" / "loss.pb")) fixtures.push_back(e.path());
  std::sort(fixtures.begin(), fixtures.end());
  ASSERT_GE(fixtures.size(), 5u);
  double overall = 0;
  std::string overall_name;
  for (const auto& dir : fixtures) {
    SCOPED_TRACE(dir.filename().string());
    const std::map<std::string, Tensor> feeds = ReadFeeds(dir / "inputs");
    Reference reference = ReadReference(dir / "reference");
    ASSERT_FALSE(reference.grads.empty()) << dir;
    const Tensor* ref_loss = &reference.loss;
    const std::map<std::string, Tensor>& refs = reference.grads;
    const double largest = reference.largest;
    const Annotations annotations = ReadAnnotations(dir / "model.onnx");
    ASSERT_TRUE(fs::exists(dir / "model.stock.onnx")) << "regenerate with make_fixtures.py";
    std::optional<Outcome> first;
    for (const char* file :
         {"model.onnx", "model.functions.onnx", "model.metadata.onnx", "model.stock.onnx"}) {
      if (!fs::exists(dir / file)) continue;
      SCOPED_TRACE(file);
      const bool stock = std::string(file) == "model.stock.onnx";
      auto run = CompileAndRun(dir / file, feeds);
      ASSERT_TRUE(run.ok()) << run.status().message();
      const Graph& g = run->graph;
      ExpectAttentionFused(g, dir);
      const Tensor& loss = run->outputs.at(g.outputs[0]);
      double worst = RelativeError(loss, *ref_loss);
      std::string worst_name = "loss";
      EXPECT_TRUE(WithinBound(loss, *ref_loss, kBound))
          << "loss " << loss.GetAsDouble(0) << " vs torch " << ref_loss->GetAsDouble(0);
      int compared = 0, same_bits = 0;
      std::vector<std::string> no_reference;
      std::string padding_notes;
      for (size_t k = 0; k < g.parameters.size(); ++k) {
        const std::string& p = g.parameters[k];
        const Tensor& got = run->outputs.at(g.outputs[k + 1]);
        auto ref = refs.find(p);
        if (ref == refs.end()) {
          EXPECT_TRUE(stock) << "no torch gradient for parameter " << p;
          EXPECT_TRUE(AllFinite(got)) << p << " (trained buffer)";
          no_reference.push_back(p);
          continue;
        }
        ASSERT_EQ(got.shape(), ref->second.shape()) << p;
        auto padding = annotations.padding_rows.find(p);
        if (stock && padding != annotations.padding_rows.end()) {
          // The padding row differs by design (no foundry.padding_idx in a stock export): the
          // other rows are held to the bound, the row's difference is printed.
          ASSERT_EQ(got.dtype(), DType::kFloat32) << p;
          ASSERT_TRUE(padding->second >= 0 && padding->second < got.shape()[0]) << p;
          auto [got_row, got_rest] = SplitRow(got, padding->second);
          auto [ref_row, ref_rest] = SplitRow(ref->second, padding->second);
          EXPECT_TRUE(AllFinite(got_row)) << p << " padding row " << padding->second;
          padding_notes += "; " + p + " row " + std::to_string(padding->second) +
                           " (padding, no foundry.padding_idx here) off by " +
                           std::to_string(RelativeError(
                               got_row, ref_row, std::max(Floor(p, largest), MaxAbs(ref->second)))) +
                           ", the other rows compared";
          double err = RelativeError(got_rest, ref_rest, Floor(p, largest));
          EXPECT_TRUE(WithinBound(got_rest, ref_rest, kBound, Floor(p, largest))) << p;
          if (err > worst) {
            worst = err;
            worst_name = p + " (all rows but " + std::to_string(padding->second) + ")";
          }
          ++compared;
          continue;
        }
        double err = RelativeError(got, ref->second, Floor(p, largest));
        EXPECT_TRUE(WithinBound(got, ref->second, kBound, Floor(p, largest))) << p;
        if (err > worst) {
          worst = err;
          worst_name = p;
        }
        ++compared;
        if (stock && first) {
          const Graph& fg = first->graph;
          auto at = std::find(fg.parameters.begin(), fg.parameters.end(), p);
          if (at != fg.parameters.end() &&
              first->outputs.at(fg.outputs[at - fg.parameters.begin() + 1]).BitwiseEqual(got))
            ++same_bits;
        }
      }
      EXPECT_EQ(static_cast<size_t>(compared), refs.size())
          << "torch has gradients foundry does not train";
      std::cout << dir.filename().string() << " (" << file << "): loss " << loss.GetAsDouble(0)
                << ", " << compared << " gradients, worst relative error " << worst << " ("
                << worst_name << ")";
      if (stock) {
        // By name and value alone, a stock export trains exactly PyTorch's parameters: its float
        // buffers (inv_freq, alibi_slopes) are not named *.weight/*.bias and stay constants, and
        // the warning names every one of them.
        EXPECT_TRUE(no_reference.empty())
            << "trained initializers without a torch gradient: " << no_reference.size();
        auto warning = g.metadata.find(kImportWarningKey);
        ASSERT_NE(warning, g.metadata.end()) << "a stock export trains by name and the import must "
                                                "say so";
        for (const auto& b : annotations.float_buffers)
          EXPECT_NE(warning->second.find(QuoteName(b)), std::string::npos)
              << b << " not named in: " << warning->second;
        std::cout << "; " << no_reference.size() << " trained buffer"
                  << (no_reference.size() == 1 ? "" : "s") << " without a torch gradient";
        for (const auto& b : no_reference) std::cout << " " << b;
        std::cout << padding_notes << "; loss and " << same_bits << " of " << compared
                  << " gradients bitwise equal to the annotated formats'"
                  << (first && first->outputs.at(first->graph.outputs[0]).BitwiseEqual(loss)
                          ? ""
                          : " (loss differs)");
      }
      std::cout << "\n";
      if (worst > overall) {
        overall = worst;
        overall_name = dir.filename().string() + " " + file + " " + worst_name;
      }
      if (stock) continue;
      if (!first) {
        first = std::move(*run);
      } else {
        // Same model, another annotation format: the same bits.
        ASSERT_EQ(first->graph.outputs.size(), g.outputs.size());
        for (size_t k = 0; k < first->graph.outputs.size(); ++k)
          EXPECT_TRUE(SameFiniteBits(first->outputs.at(first->graph.outputs[k]),
                                     run->outputs.at(g.outputs[k])))
              << first->graph.outputs[k];
      }
    }
  }
  std::cout << "worst relative error over all fixtures and formats: " << overall << " ("
            << overall_name << "), bound " << kBound << "\n";
}

// Every initializer and graph input a dynamo export marks as a BUFFER (ValueInfoProto
// metadata_props, pkg.torch.export.graph_signature.InputSpec.kind).
std::set<std::string> MarkedBuffers(const fs::path& model) {
  std::set<std::string> out;
  onnx::ModelProto m;
  auto bytes = ReadFile(model.string());
  EXPECT_TRUE(bytes.ok() && m.ParseFromString(*bytes)) << model;
  auto scan = [&](const auto& infos) {
    for (const auto& vi : infos)
      for (const auto& [k, v] : onnx_util::ValueInfoMetadataProps(vi))
        if (k == "pkg.torch.export.graph_signature.InputSpec.kind" && v == "BUFFER")
          out.insert(vi.name());
  };
  scan(m.graph().input());
  scan(m.graph().value_info());
  return out;
}

// The direct children of the first block, by their name in the block (attn, ffn, norm_1, ...):
// each is a --ckpt target relative to the blocks.
std::vector<std::string> BlockChildren(const fs::path& model) {
  auto g = ImportOnnx(model.string(), {});
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  auto selection = SelectCkptTargets(*g, {CkptTarget{"block", "", "test"}});
  EXPECT_TRUE(selection.ok() && !selection->instances.empty()) << model;
  if (!selection.ok() || selection->instances.empty()) return {};
  const std::string block = selection->instances[0].module + ".";
  std::set<std::string> children;
  for (const auto& [path, module] : g->modules)
    if (path.rfind(block, 0) == 0 && path.find('.', block.size()) == std::string::npos)
      children.insert(path.substr(block.size()));
  return {children.begin(), children.end()};
}

// torch 2.6's own exporter (models/fixtures/<config>/dynamo*/, made with make_fixtures.py
// --dynamo in the torch2 environment): compiled with the dimension names torch wrote (bound from
// the inputs' shapes), the loss and every gradient within kBound of torch 2.6's; exactly torch's
// parameters train and no initializer the export marks BUFFER does; and --ckpt block, every child
// of a block by name and a path glob each give the plain gradients bit for bit.
TEST(PyTorchReferenceTest, DynamoExportsMatchTorch26) {
  fs::path root = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";
  std::vector<fs::path> exports;
  for (const auto& fixture : fs::directory_iterator(root)) {
    if (!fixture.is_directory()) continue;
    for (const auto& e : fs::directory_iterator(fixture.path()))
      if (e.is_directory() && e.path().filename().string().rfind("dynamo", 0) == 0)
        exports.push_back(e.path());
  }
  std::sort(exports.begin(), exports.end());
  ASSERT_GE(exports.size(), 6u) << "regenerate with make_fixtures.py --dynamo";
  double overall = 0;
  for (const auto& dir : exports) {
    const std::string label = dir.parent_path().filename().string() + "/" + dir.filename().string();
    SCOPED_TRACE(label);
    const std::map<std::string, Tensor> feeds = ReadFeeds(dir.parent_path() / "inputs");
    Reference reference = ReadReference(dir / "reference");
    ASSERT_FALSE(reference.grads.empty()) << dir;
    const Tensor* ref_loss = &reference.loss;
    const std::map<std::string, Tensor>& refs = reference.grads;
    const double largest = reference.largest;
    // A tied parameter's other names -> the name torch's gradient file has.
    std::map<std::string, std::string> tied;
    {
      auto text = ReadFile((dir / "reference" / "tied.json").string());
      ASSERT_TRUE(text.ok()) << text.status().message();
      auto table = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(table.is_object()) << *text;
      for (const auto& [first, others] : table.items())
        for (const auto& other : others) tied[other.get<std::string>()] = first;
    }
    auto torch_name = [&](const std::string& name) {
      auto it = tied.find(name);
      return it == tied.end() ? name : it->second;
    };
    const fs::path model = dir / "model.onnx";
    const Annotations annotations = ReadAnnotations(dir.parent_path() / "model.onnx");
    auto plain = CompileAndRun(model, feeds);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    ExpectAttentionFused(plain->graph, dir.parent_path());
    const Graph& g = plain->graph;
    std::set<std::string> trained;
    for (const auto& p : g.parameters) trained.insert(torch_name(p));
    std::set<std::string> torch_params;
    for (const auto& [name, t] : refs) torch_params.insert(name);
    EXPECT_EQ(trained, torch_params) << "foundry trains other tensors than torch's parameters";
    for (const auto& [path, module] : g.modules)
      EXPECT_EQ(path.find("_empty_nn_module_stack"), std::string::npos)
          << "torch's placeholder scope is no module: " << path;
    const std::set<std::string> buffers = MarkedBuffers(model);
    for (const auto& b : buffers) EXPECT_EQ(trained.count(b), 0u) << "BUFFER " << b << " trains";
    for (const auto& b : annotations.float_buffers)
      EXPECT_EQ(trained.count(b), 0u) << "the model's buffer " << b << " trains";

    double worst = RelativeError(plain->outputs.at(g.outputs[0]), *ref_loss);
    std::string worst_name = "loss";
    EXPECT_TRUE(WithinBound(plain->outputs.at(g.outputs[0]), *ref_loss, kBound)) << "loss";
    std::string padding_notes;
    for (size_t k = 0; k < g.parameters.size(); ++k) {
      const std::string p = torch_name(g.parameters[k]);
      auto ref = refs.find(p);
      if (ref == refs.end()) continue;  // reported by the set comparison above
      const Tensor& got = plain->outputs.at(g.outputs[k + 1]);
      ASSERT_EQ(got.shape(), ref->second.shape()) << p;
      auto padding = annotations.padding_rows.find(p);
      double err;
      if (padding != annotations.padding_rows.end()) {
        // No foundry.padding_idx in torch's export: the padding row is compared apart (as for
        // the stock export) and its difference printed.
        auto [got_row, got_rest] = SplitRow(got, padding->second);
        auto [ref_row, ref_rest] = SplitRow(ref->second, padding->second);
        err = RelativeError(got_rest, ref_rest, Floor(p, largest));
        EXPECT_TRUE(WithinBound(got_rest, ref_rest, kBound, Floor(p, largest))) << p;
        padding_notes += "; " + p + " row " + std::to_string(padding->second) +
                         " (padding) off by " +
                         std::to_string(RelativeError(got_row, ref_row, Floor(p, largest)));
      } else {
        err = RelativeError(got, ref->second, Floor(p, largest));
        EXPECT_TRUE(WithinBound(got, ref->second, kBound, Floor(p, largest))) << p;
      }
      if (err > worst) {
        worst = err;
        worst_name = p;
      }
    }
    overall = std::max(overall, worst);

    std::vector<std::vector<std::string>> ckpts = {{"block"}};
    for (const auto& child : BlockChildren(model)) ckpts.push_back({child});
    const std::string first_block =
        SelectCkptTargets(g, {CkptTarget{"block", "", "test"}})->instances.at(0).module;
    const std::string list = first_block.substr(0, first_block.rfind('.'));
    ckpts.push_back({list + ".*"});  // every block by a path glob
    int bitwise = 0, empty = 0;
    for (const auto& ckpt : ckpts) {
      SCOPED_TRACE("--ckpt " + ckpt[0]);
      auto run = CompileAndRun(model, feeds, ckpt);
      if (!run.ok() && run.status().message().find("has no forward node") != std::string::npos) {
        ++empty;  // a child whose nodes canonicalize removed (a ratio-0 Dropout)
        continue;
      }
      ASSERT_TRUE(run.ok()) << run.status().message();
      ASSERT_EQ(run->graph.outputs, g.outputs);
      bool same = true;
      for (const auto& out : g.outputs)
        same &= run->outputs.at(out).BitwiseEqual(plain->outputs.at(out));
      EXPECT_TRUE(same) << "gradients differ from the plain graph's";
      bitwise += same;
    }
    std::cout << label << ": loss " << plain->outputs.at(g.outputs[0]).GetAsDouble(0) << ", "
              << refs.size() << " gradients, worst relative error vs torch 2.6 " << worst << " ("
              << worst_name << ")" << padding_notes << "; " << buffers.size()
              << " BUFFERs untrained; " << bitwise << " --ckpt forms bitwise equal to plain ("
              << empty << " children with no node left)\n";
  }
  std::cout << "dynamo exports: worst relative error " << overall << ", bound " << kBound << "\n";
}

}  // namespace
}  // namespace foundry
