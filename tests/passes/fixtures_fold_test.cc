// Every committed fixture, in every annotation format: imports, folds to concrete shapes with no
// shape arithmetic left (no Shape/Size/ConstantOfShape/Range node, and no node computed from
// constants alone: what remains reads run-time data or parameters), and the folded graph
// exports back to ONNX that both our importer and Python's onnx.load read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/text.h"
#include "passes/fold.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(FixturesFoldTest, FoldsToConcreteShapesWithNoShapeArithmeticLeft) {
  fs::path root = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";
  fs::path tmp = fs::path(testing::TempDir()) / ("fixtures_fold_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  bool have_python = HavePythonOnnx();
  ASSERT_TRUE(have_python || !UnderCi()) << "/usr/bin/python3 with onnx is required under CI";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    for (const char* file : {"model.onnx", "model.functions.onnx", "model.metadata.onnx"}) {
      fs::path model = e.path() / file;
      if (!fs::exists(model)) continue;
      SCOPED_TRACE(model.string());
      auto g = ImportOnnx(model.string(), {});
      ASSERT_TRUE(g.ok()) << g.status().message();
      auto changed = FoldPass({.dims = {{"batch", 2}, {"seq", 16}}}).Run(*g);
      ASSERT_TRUE(changed.ok()) << changed.status().message();
      for (const Node& n : g->nodes) {
        for (const auto& out : n.outputs)
          if (!out.empty()) EXPECT_TRUE(g->FindValue(out)->ShapeKnown()) << out;
        for (const char* op : {"Shape", "Size", "ConstantOfShape", "Range"})
          EXPECT_NE(n.op_type, op) << n.Describe() << " left after folding";
        bool reads_runtime = false;
        for (const auto& in : n.inputs) {
          const Value* v = in.empty() ? nullptr : g->FindValue(in);
          reads_runtime |= v && (!v->data || g->IsParameter(in));
        }
        EXPECT_TRUE(reads_runtime) << n.Describe() << " computes from constants only";
      }
      fs::path out = tmp / (e.path().filename().string() + "." + file);
      ASSERT_TRUE(ExportOnnx(*g, out.string()).ok());
      auto back = ImportOnnx(out.string(), {});
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(PrintGraph(*back), PrintGraph(*g));
      if (have_python) {
        std::string cmd = "/usr/bin/python3 -c \"import onnx, sys; onnx.load(sys.argv[1])\" '" +
                          out.string() + "'";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << "onnx.load failed on " << out;
      }
      ++checked;
    }
  }
  fs::remove_all(tmp);
  EXPECT_GE(checked, 21);
}

}  // namespace
}  // namespace foundry
