// Train(RunRequest) with --save on a model whose export renamed a parameter ("onnx::MatMul_5",
// as torch's constant folding names a transposed Linear weight): model.safetensors keeps it under
// its ONNX name, lists it in the metadata, and the run's log says so in one warning line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "compiler/onnx_export.h"
#include "compiler/text.h"
#include "driver/compile.h"
#include "driver/train.h"
#include "runtime/safetensors.h"
#include "tests/support/grad_check.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Embedding -> linear head over a `labels` input (foundry appends the loss); the head's weight
// carries the name a folded export gives it.
constexpr const char* kRenamed = R"(graph renamed opset=17 {
  input input_ids : i64[2,4]
  param emb : f32[8,3]
  param "onnx::MatMul_5" : f32[3,8]
  param "head.bias" : f32[8]
  x : f32[2,4,3] = Gather(emb, input_ids) #"embed"
  h : f32[2,4,8] = MatMul(x, "onnx::MatMul_5") #"mm"
  logits : f32[2,4,8] = Add(h, "head.bias") #"add"
  output logits
}
)";

class TrainSafetensorsTest : public ScratchDirTest {};

TEST_F(TrainSafetensorsTest, ARenamedParameterKeepsItsOnnxNameAndIsReported) {
  StatusOr<Graph> g = ParseGraph(kRenamed);
  ASSERT_TRUE(g.ok()) << g.status().message();
  uint64_t seed = 1;
  for (const auto& p : g->parameters) {
    Value* v = g->FindValue(p);
    v->data = std::make_shared<const Tensor>(RandomTensor(v->shape, seed++));
  }
  ASSERT_TRUE(ExportOnnx(*g, Path("renamed.onnx")).ok());
  CompileRequest c;
  c.model = Path("renamed.onnx");
  c.output_prefix = Path("m");
  StatusOr<CompileResult> compiled = Compile(c);
  ASSERT_TRUE(compiled.ok()) << compiled.status().message();
  ASSERT_TRUE(WriteCompiledOutputs(compiled->graph, &*compiled->plan, c.output_prefix).ok());

  std::ostringstream log;
  RunRequest r;
  r.plan = Path("m");
  r.steps = 1;
  r.save_dir = Path("save");
  r.log = &log;
  StatusOr<RunResult> result = Train(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_NE(log.str().find("saved " + Path("save") +
                           " (step 1)\nwarning: --save: 1 of 3 parameters have no PyTorch name "
                           "foundry can know (the export renamed them, e.g. 'onnx::MatMul_5'); "
                           "model.safetensors holds them under their ONNX names, listed in its "
                           "metadata \"foundry.unmapped\"\n"),
            std::string::npos)
      << log.str();
  StatusOr<SafetensorsFile> file = ReadSafetensors(Path("save/model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->metadata.at("foundry.unmapped"), R"(["onnx::MatMul_5"])");
  EXPECT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->tensors.at("onnx::MatMul_5").shape(), (Shape{3, 8}));
  EXPECT_TRUE(file->tensors.count("emb") && file->tensors.count("head.bias"));

  // The file loads back into the plan under the same names.
  std::ostringstream log2;
  r.save_dir.clear();
  r.trainer.init_from = Path("save/model.safetensors");
  r.log = &log2;
  result = Train(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(log2.str().find("warning"), std::string::npos) << log2.str();
  // --init-from with --resume, as a library call too.
  r.resume_dir = Path("save");
  result = Train(r);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "--init-from and --resume both give the weights; drop one (a resumed run continues "
            "from its save's weights)");
}

}  // namespace
}  // namespace foundry
