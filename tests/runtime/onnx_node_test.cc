// Runs the ONNX backend node test suite (Debian's libonnx-testdata) through the forward-only path:
// import, fold (shapes), run on the CPU kernels, compare with the expected outputs. Every case
// whose ops the CPU backend supports and whose tensors are float32 (int64/int32/bool index and
// shape inputs allowed) must pass; the rest are listed with the reason they were skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/tensor_proto.h"
#include "kernels/cpu/kernel.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"

namespace fs = std::filesystem;

namespace foundry {
namespace {

bool AllowedDType(DType t) {
  return t == DType::kFloat32 || t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool;
}

std::string RunWithFeeds(Graph g, const std::map<std::string, Tensor>& feeds,
                         const std::vector<Tensor>& expected, bool all_constant);

// Returns "" when the case passed, "skip: <reason>" when it is out of scope, or the failure.
std::string RunCase(const fs::path& dir) {
  ImportOptions options;
  options.check_versions = false;  // the suite spans opsets 1..17; ops accept both forms
  std::string path = (dir / "model.onnx").string();
  auto graph = ImportOnnx(path, options);
  if (!graph.ok()) {
    std::string why = graph.status().message();
    if (why.rfind("'" + path + "'", 0) == 0) why = "the model" + why.substr(path.size() + 2);
    return "skip: import: " + why;
  }
  for (const Node& n : graph->nodes) {
    if (!OpSchemas().Find(n.domain, n.op_type) || !CpuKernels().Find(n.domain, n.op_type))
      return "skip: op " + n.op_type;
    if (n.op_type == "Dropout" && n.inputs.size() >= 3)
      return "skip: training-mode dropout (masks come from numpy's generator)";
  }
  fs::path data = dir / "test_data_set_0";
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < graph->inputs.size(); ++i) {
    auto t = ReadTensorFile((data / ("input_" + std::to_string(i) + ".pb")).string());
    if (!t.ok()) return "skip: input: " + t.status().message();
    if (!AllowedDType(t->dtype())) return "skip: dtype " + std::string(DTypeName(t->dtype()));
    feeds[graph->inputs[i]] = std::move(*t);
  }
  std::vector<Tensor> expected;
  for (size_t i = 0; i < graph->outputs.size(); ++i) {
    auto t = ReadTensorFile((data / ("output_" + std::to_string(i) + ".pb")).string());
    if (!t.ok()) return "skip: output: " + t.status().message();
    if (!AllowedDType(t->dtype())) return "skip: dtype " + std::string(DTypeName(t->dtype()));
    expected.push_back(std::move(*t));
  }
  bool any_float = false;
  for (const auto& [k, t] : feeds) any_float |= t.dtype() == DType::kFloat32;
  for (const auto& t : expected) any_float |= t.dtype() == DType::kFloat32;
  if (!any_float) return "skip: no float32 tensor";

  // Integer inputs (shapes, axes, indices) become compile-time constants, as they are in real
  // exports after folding; float inputs stay run-time inputs. A case whose output shape depends on
  // a float input's value (Range over floats, OneHot's depth) is run again with every input a
  // constant: the whole graph is then evaluated by the same kernels during folding.
  for (bool all_constant : {false, true}) {
    std::string result = RunWithFeeds(*graph, feeds, expected, all_constant);
    if (result.rfind("fold: ", 0) == 0 && !all_constant) continue;
    return result;
  }
  return "unreachable";
}

std::string RunWithFeeds(Graph g, const std::map<std::string, Tensor>& feeds,
                         const std::vector<Tensor>& expected, bool all_constant) {
  std::vector<std::string> runtime_inputs;
  std::map<std::string, Tensor> runtime_feeds;
  for (const auto& name : g.inputs) {
    Value* v = g.FindValue(name);
    const Tensor& t = feeds.at(name);
    v->dtype = t.dtype();
    v->shape = t.shape();
    v->rank_known = true;
    v->dim_params.clear();
    if (t.dtype() == DType::kFloat32 && !all_constant) {
      runtime_inputs.push_back(name);
      runtime_feeds[name] = t;
    } else {
      v->data = std::make_shared<const Tensor>(t);
      g.initializers.push_back(name);
    }
  }
  g.inputs = runtime_inputs;
  // Float inputs are run-time inputs, so only integer shape arithmetic can fold.
  FoldPass fold({.dims = {}, .max_folded_bytes = all_constant ? (int64_t{1} << 30) : (1 << 20)});
  auto folded = fold.Run(g);
  if (!folded.ok()) return "fold: " + folded.status().message();
  if (all_constant && !g.nodes.empty()) return "fold: not everything folded";
  auto out = Interpret(g, runtime_feeds);
  if (!out.ok()) return "run: " + out.status().message();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const Tensor& want = expected[i];
    const Tensor& got = out->at(g.outputs[i]);
    if (got.shape() != want.shape())
      return "output " + std::to_string(i) + " shape " + ShapeToString(got.shape()) + " vs " +
             ShapeToString(want.shape());
    if (got.dtype() != want.dtype())
      return "output " + std::to_string(i) + " dtype " + std::string(DTypeName(got.dtype())) +
             " vs " + std::string(DTypeName(want.dtype()));
    for (int64_t e = 0; e < want.numel(); ++e) {
      double a = got.GetAsDouble(e), b = want.GetAsDouble(e);
      if (std::isnan(a) && std::isnan(b)) continue;
      if (std::isinf(a) && a == b) continue;
      // The ONNX backend test runner's default tolerance: rtol 1e-3, atol 1e-7.
      if (!(std::fabs(a - b) <= 1e-7 + 1e-3 * std::fabs(b)))
        return "output " + std::to_string(i) + "[" + std::to_string(e) + "] = " +
               std::to_string(a) + ", expected " + std::to_string(b);
    }
  }
  return "";
}

TEST(OnnxNodeTest, EverySupportedFloatCasePasses) {
  fs::path root = ONNX_NODE_TEST_DIR;
  if (!fs::exists(root)) GTEST_SKIP() << "ONNX node test data not found at " << root
                                      << "; install libonnx-testdata (scripts/setup.sh)";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int ran = 0;
  std::map<std::string, std::vector<std::string>> skipped;  // reason -> cases
  std::vector<std::string> failures;
  for (const auto& c : cases) {
    std::string result = RunCase(c);
    std::string name = c.filename().string();
    if (result.empty()) {
      ++ran;
    } else if (result.rfind("skip: ", 0) == 0) {
      std::string reason = result.substr(6);
      if (reason.rfind("op ", 0) == 0) reason = "unsupported op " + reason.substr(3);
      skipped[reason].push_back(name);
    } else {
      failures.push_back(name + ": " + result);
    }
  }
  std::cout << "ONNX node tests: " << cases.size() << " cases, " << ran << " passed, "
            << failures.size() << " failed, "
            << cases.size() - ran - failures.size() << " skipped\n";
  for (const auto& [reason, names] : skipped) {
    std::cout << "  skipped (" << reason << "): " << names.size() << ":";
    for (size_t i = 0; i < names.size() && i < 8; ++i) std::cout << " " << names[i];
    if (names.size() > 8) std::cout << " ...";
    std::cout << "\n";
  }
  for (const auto& f : failures) ADD_FAILURE() << f;
  // The suite must actually exercise the kernels.
  EXPECT_GE(ran, 150);
}

}  // namespace
}  // namespace foundry
