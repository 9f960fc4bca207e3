// What the gradient rules keep for the backward, on whole training graphs: the values the memory
// report counts as saved (passes/memory_report.h) after the pipeline (fold, canonicalize,
// autodiff, schedule) and the memory plan. A rule must read only what its formula needs, and of
// two equivalent operands the one the backward keeps anyway.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "passes/memory_report.h"
#include "passes/pipeline.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

struct Saved {
  int64_t bytes = -1;
  std::set<std::string> values;  // the saved buffers' data values
};

Saved SavedForBackward(const char* text, bool fuse_attention = true) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return {};
  CompileOptions options;
  options.canonicalize.fuse_attention = fuse_attention;
  Status st = RunPasses(*g, BuildPipeline(options), {});
  EXPECT_TRUE(st.ok()) << st.message();
  auto plan = PlanMemory(*g, {{"cpu", CpuWorkspaceBytes}});
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!st.ok() || !plan.ok()) return {};
  auto report = BuildMemoryReport(*g, *plan, "cpu", "test", {});
  EXPECT_TRUE(report.ok()) << report.status().message();
  if (!report.ok()) return {};
  Saved saved{report->saved_for_backward_bytes, {}};
  for (const auto& [owner, data] : SavedBuffers(*g, *plan)) saved.values.insert(data);
  return saved;
}

// One OPT decoder layer, cut down to one head (batch 2, seq 8, hidden 16, ffn 64): Hugging Face
// OPT's attention clamps the masked scores, torch.max(scores + mask, finfo(f32).min), exported as
// Max(x, constant), and its MLP is fc1 -> ReLU -> fc2.
constexpr const char* kOptLayer = R"(graph opt {
  input x : f32[2,8,16]
  param wq : f32[16,16]
  param wk : f32[16,16]
  param wv : f32[16,16]
  param fc1 : f32[16,64]
  param fc2 : f32[64,16]
  const mask : f32[1,8] = [0, 0, 0, 0, 0, 0, -3.40282347e+38, -3.40282347e+38]
  const lowest : f32[] = [-3.40282347e+38]
  q = MatMul(x, wq)
  k = MatMul(x, wk)
  v = MatMul(x, wv)
  kt = Transpose(k) {perm=[0, 2, 1]}
  s = MatMul(q, kt)
  m = Add(s, mask)
  c = Max(m, lowest)
  p = Softmax(c) {axis=-1}
  a = MatMul(p, v)
  h = Add(x, a)
  f = MatMul(h, fc1)
  r = Relu(f)
  o = MatMul(r, fc2)
  loss = ReduceSum(o) {keepdims=0}
  output loss
})";

// Saved, in bytes (f32): q, kt, v, h 2·8·16·4 = 1024 each (the matrix products' operands);
// p 2·8·8·4 = 512 (Softmax's gradient and P·V's); m 512 (the clamp's input, its gradient's only
// read); r 2·8·64·4 = 4096 (fc2's input). Total 4·1024 + 2·512 + 4096 = 9216 B.
// Before (ReluGrad reading X, Max's gradient reading X and Y) the clamp's output c (512) and fc1's
// output f (4096) were saved too: 13824 B (measured with the old rules), 33 % more.
TEST(SavedBytesTest, OptClampAndReluKeepOneTensorEach) {
  const Saved saved = SavedForBackward(kOptLayer, /*fuse_attention=*/false);
  EXPECT_EQ(saved.values, (std::set<std::string>{"q", "kt", "v", "p", "m", "h", "r"}));
  EXPECT_EQ(saved.bytes, 4 * 1024 + 2 * 512 + 4096);
}

// The same layer with attention fused (the default): the clamp is no obstacle (Max with the lowest
// f32 is the identity on finite scores), one foundry::Attention takes the single head through
// rank-4 views, and it keeps Q, Kᵀ, V, its output (a view of it is `a`) and a logsumexp per row
// (2·8·4 = 64 B) instead of the probabilities and the clamp's input. Saved: 4·1024 + 64 + 1024
// (h) + 4096 (r) = 9280 B; at seq 8 the probabilities (2·512 B) are smaller than O and the
// logsumexp, at any real length they are not.
TEST(SavedBytesTest, OptLayerFusesThroughTheClamp) {
  const Saved saved = SavedForBackward(kOptLayer, /*fuse_attention=*/true);
  EXPECT_EQ(saved.bytes, 4 * 1024 + 64 + 1024 + 4096);
  EXPECT_EQ(saved.values.count("p"), 0u);
  EXPECT_EQ(saved.values.count("m"), 0u);
}

// Llama's SwiGLU MLP, down(silu(gate(x)) * up(x)) (batch 2, seq 8, hidden 16, ffn 32): SiLU is
// fused into QuickGelu, whose gradient reads its input only. Saved (x is a feed, not counted):
// g, u, a = silu(g), t = a·u, each 2·8·32·4 = 2048 B: 8192 B. Unfused, the Sigmoid's output
// (2048 B more, 10240 B) was saved too, for SigmoidGrad and for the product's gradient.
TEST(SavedBytesTest, SiluKeepsItsInputOnly) {
  const Saved saved = SavedForBackward(R"(graph mlp {
  input x : f32[2,8,16]
  param gate : f32[16,32]
  param up : f32[16,32]
  param down : f32[32,16]
  g = MatMul(x, gate)
  sg = Sigmoid(g)
  a = Mul(g, sg)
  u = MatMul(x, up)
  t = Mul(a, u)
  o = MatMul(t, down)
  loss = ReduceSum(o) {keepdims=0}
  output loss
})");
  EXPECT_EQ(saved.values, (std::set<std::string>{"g", "a", "u", "t"}));
  EXPECT_EQ(saved.bytes, 4 * 2048);
}

}  // namespace
}  // namespace foundry
