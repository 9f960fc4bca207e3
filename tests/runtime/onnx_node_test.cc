// Runs the ONNX backend node test suite (Debian's libonnx-testdata) through the forward-only path:
// import, fold (shapes), run on the CPU kernels, compare with the expected outputs. Cases whose
// ops the CPU backend supports and whose tensors are f32 or f64 (int64/int32/bool index and shape
// inputs allowed) are run; the committed lists beside this file record which pass and why each
// other case is skipped, and the test holds every case to them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "compiler/onnx_import.h"
#include "compiler/op_schema.h"
#include "compiler/tensor_proto.h"
#include "kernels/cpu/kernel.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

bool IsFloatingPoint(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

bool AllowedDType(DType t) {
  return IsFloatingPoint(t) || t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool;
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
      return "skip: unsupported op " + n.op_type;
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
  for (const auto& [k, t] : feeds) any_float |= IsFloatingPoint(t.dtype());
  for (const auto& t : expected) any_float |= IsFloatingPoint(t.dtype());
  if (!any_float) return "skip: no f32 or f64 tensor";

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
    if (IsFloatingPoint(t.dtype()) && !all_constant) {
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
        return "output " + std::to_string(i) + "[" + std::to_string(e) +
               "] = " + std::to_string(a) + ", expected " + std::to_string(b);
    }
  }
  return "";
}

const fs::path kListDir = fs::path(FOUNDRY_SOURCE_DIR) / "tests" / "runtime";

// onnx_node_pass.txt: one case per line. onnx_node_skip.txt: `case: reason` per line. Lines
// starting with '#' are comments.
std::vector<std::string> ReadListLines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

void WriteLists(const std::map<std::string, std::string>& results) {
  std::ofstream pass(kListDir / "onnx_node_pass.txt"), skip(kListDir / "onnx_node_skip.txt");
  pass << "# ONNX backend node tests that pass on the CPU kernels "
          "(tests/runtime/onnx_node_test.cc).\n"
          "# Regenerate: FOUNDRY_UPDATE_NODE_LISTS=1 ctest --test-dir build -R "
          "runtime_onnx_node_test\n";
  skip << "# ONNX backend node tests that are not run, with the reason (onnx_node_test.cc).\n"
          "# Regenerate: FOUNDRY_UPDATE_NODE_LISTS=1 ctest --test-dir build -R "
          "runtime_onnx_node_test\n";
  for (const auto& [name, result] : results) {
    if (result.empty()) pass << name << "\n";
    if (result.rfind("skip: ", 0) == 0) skip << name << ": " << result.substr(6) << "\n";
  }
}

// Every case of the suite is in exactly one of the two committed lists: a listed pass that fails
// or skips fails the test, a skip must be listed with the reason it gives now, and a case that
// starts passing must be moved to the pass list. So the lists are the record of what the CPU
// backend covers, and any change to it shows up in review.
TEST(OnnxNodeTest, EveryCaseMatchesTheCommittedLists) {
  fs::path root = ONNX_NODE_TEST_DIR;
  FOUNDRY_SKIP_UNLESS(fs::exists(root), "ONNX node test data not found at " + root.string() +
                                            "; install libonnx-testdata (scripts/setup.sh)");
  for (const char* list : {"onnx_node_pass.txt", "onnx_node_skip.txt"})
    ASSERT_TRUE(fs::exists(kListDir / list)) << "missing " << (kListDir / list);
  std::set<std::string> listed_pass;
  for (const auto& line : ReadListLines(kListDir / "onnx_node_pass.txt")) {
    EXPECT_TRUE(listed_pass.insert(line).second) << line << " is listed twice";
  }
  std::map<std::string, std::string> listed_skip;
  for (const auto& line : ReadListLines(kListDir / "onnx_node_skip.txt")) {
    size_t colon = line.find(": ");
    ASSERT_NE(colon, std::string::npos)
        << "onnx_node_skip.txt: '" << line << "' is not `case: reason`";
    std::string name = line.substr(0, colon);
    EXPECT_TRUE(listed_skip.emplace(name, line.substr(colon + 2)).second)
        << name << " is listed twice";
    EXPECT_FALSE(listed_pass.count(name)) << name << " is in both lists";
  }

  std::map<std::string, std::string> results;  // case -> "" | "skip: reason" | failure
  for (const auto& e : fs::directory_iterator(root)) {
    if (!fs::exists(e.path() / "model.onnx")) continue;
    std::string result = RunCase(e.path());
    std::replace(result.begin(), result.end(), '\n', ' ');
    results[e.path().filename().string()] = result;
  }
  int passed = 0, skipped = 0, failed = 0;
  for (const auto& [name, result] : results) {
    bool is_skip = result.rfind("skip: ", 0) == 0;
    std::string reason = is_skip ? result.substr(6) : "";
    if (result.empty()) {
      ++passed;
      EXPECT_TRUE(listed_pass.count(name))
          << name << " passes: add it to onnx_node_pass.txt"
          << (listed_skip.count(name) ? " (and remove it from onnx_node_skip.txt)" : "");
    } else if (is_skip) {
      ++skipped;
      EXPECT_FALSE(listed_pass.count(name))
          << name << " is listed as passing but was skipped: " << reason;
      auto it = listed_skip.find(name);
      if (it == listed_skip.end())
        ADD_FAILURE() << name << " was skipped (" << reason
                      << ") but is not listed in onnx_node_skip.txt";
      else
        EXPECT_EQ(it->second, reason) << name << ": skipped for another reason than the listed one";
    } else {
      ++failed;
      ADD_FAILURE() << name << ": " << result;
    }
  }
  for (const auto& name : listed_pass)
    EXPECT_TRUE(results.count(name))
        << name << " is listed in onnx_node_pass.txt but is not in " << root;
  for (const auto& [name, reason] : listed_skip)
    EXPECT_TRUE(results.count(name))
        << name << " is listed in onnx_node_skip.txt but is not in " << root;
  std::cout << "ONNX node tests: " << results.size() << " cases, " << passed << " passed, "
            << skipped << " skipped, " << failed << " failed\n";
  if (const char* update = std::getenv("FOUNDRY_UPDATE_NODE_LISTS");
      update && std::string(update) == "1") {
    WriteLists(results);
    std::cout << "wrote " << (kListDir / "onnx_node_pass.txt") << " and onnx_node_skip.txt\n";
  } else if (HasFailure()) {
    std::cout << "If the change is intended, FOUNDRY_UPDATE_NODE_LISTS=1 "
                 "ctest --test-dir build -R runtime_onnx_node_test rewrites both lists from this "
                 "run: review and commit the diff.\n";
  }
  // The suite must actually exercise the kernels.
  EXPECT_GE(passed, 150);
}

}  // namespace
}  // namespace foundry
