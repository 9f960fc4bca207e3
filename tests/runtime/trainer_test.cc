#include "runtime/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/onnx_export.h"
#include "compiler/plan.h"
#include "compiler/tensor_proto.h"
#include "compiler/text.h"
#include "passes/pipeline.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
bool BitwiseEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// ---- optimizer -----------------------------------------------------------------------------

// Reference values from torch 1.13 (torch.optim.AdamW / SGD, foreach=False, CPU, float32):
//   torch.manual_seed(7); p = torch.randn(6) * 0.5; grads = [torch.randn(6) * s for s in (1, .01,
//   5)]
// printed with float.hex().
const std::vector<float> kP0 = {-0x1.2ca2e8p-4f, 0x1.92811cp-2f, 0x1.e4c5cep-2f,
                                -0x1.1d45a6p-1f, 0x1.b0d7a0p-1f, -0x1.ca26e2p-2f};
const std::vector<std::vector<float>> kGrads = {
    {-0x1.6c28f8p-2f, 0x1.3b7da2p+0f, 0x1.1afa44p-3f, -0x1.aea490p+0f, 0x1.454d76p-2f,
     0x1.0ffd1ap-3f},
    {0x1.67fca4p-10f, 0x1.3b49e2p-9f, 0x1.c942e6p-7f, 0x1.b96472p-7f, 0x1.8f79dcp-6f,
     0x1.09c264p-9f},
    {0x1.88162cp+3f, 0x1.4418a8p+3f, 0x1.1caa30p+3f, -0x1.25bce2p+2f, -0x1.25010cp+1f,
     -0x1.cfa9b4p+1f}};

TEST(OptimizerTest, AdamWMatchesTorchBitwise) {
  // AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
  const std::vector<std::vector<float>> want = {{-0x1.036030p-4f, 0x1.87dca2p-2f, 0x1.da0c44p-2f,
                                                 -0x1.17dde6p-1f, 0x1.ab4a1ap-1f, -0x1.d3ef08p-2f},
                                                {-0x1.cf93d6p-5f, 0x1.809800p-2f, 0x1.d1fb30p-2f,
                                                 -0x1.142fd6p-1f, 0x1.a7265cp-1f, -0x1.da7158p-2f},
                                                {-0x1.01197ap-4f, 0x1.7912f8p-2f, 0x1.cae210p-2f,
                                                 -0x1.0fef88p-1f, 0x1.a9922ep-1f, -0x1.d3a0f2p-2f}};
  const std::vector<float> want_m = {0x1.3253a2p+0f,  0x1.1ce322p+0f,  0x1.cdd646p-1f,
                                     -0x1.30223ap-1f, -0x1.9b9d0ap-3f, -0x1.67ba5ap-2f};
  const std::vector<float> want_v = {0x1.33b8eap-3f, 0x1.aa5cb8p-4f, 0x1.44370cp-4f,
                                     0x1.8766b8p-6f, 0x1.5e0b90p-8f, 0x1.ae8b24p-7f};
  OptimizerOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  std::vector<float> p = kP0, m(6, 0.f), v(6, 0.f);
  for (int s = 0; s < 3; ++s) {
    AdamWUpdate(o, s + 1, p.data(), kGrads[s].data(), m.data(), v.data(), 6);
    EXPECT_TRUE(BitwiseEqual(p.data(), want[s].data(), 6)) << "step " << s + 1;
  }
  EXPECT_TRUE(BitwiseEqual(m.data(), want_m.data(), 6));
  EXPECT_TRUE(BitwiseEqual(v.data(), want_v.data(), 6));
}

TEST(OptimizerTest, SgdMomentumMatchesTorchBitwise) {
  // SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
  const std::vector<std::vector<float>> want = {{-0x1.3557eap-5f, 0x1.13e7d0p-2f, 0x1.d62396p-2f,
                                                 -0x1.8db76ap-2f, 0x1.a024f2p-1f, -0x1.d74b0ep-2f},
                                                {-0x1.7b61a8p-8f, 0x1.42e384p-3f, 0x1.c711d4p-2f,
                                                 -0x1.e64e70p-3f, 0x1.8f739ep-1f, -0x1.e2db4ep-2f},
                                                {-0x1.33c882p+0f, -0x1.e96b90p-1f, -0x1.d5e00cp-2f,
                                                 0x1.6e2d6cp-2f, 0x1.f53afcp-1f, -0x1.e76704p-4f}};
  const std::vector<float> want_buf = {0x1.7ee068p+3f,  0x1.6456c6p+3f,  0x1.210b96p+3f,
                                       -0x1.7cd4e6p+2f, -0x1.fce4d4p+0f, -0x1.c341f0p+1f};
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  std::vector<float> p = kP0, buf(6, 0.f);
  for (int s = 0; s < 3; ++s) {
    SgdUpdate(o, s == 0, p.data(), kGrads[s].data(), buf.data(), 6);
    EXPECT_TRUE(BitwiseEqual(p.data(), want[s].data(), 6)) << "step " << s + 1;
  }
  EXPECT_TRUE(BitwiseEqual(buf.data(), want_buf.data(), 6));
}

TEST(OptimizerTest, AdamWByHand) {
  // One element, lr 0.1, wd 0.01, betas (0.9, 0.999), eps 1e-8.
  // Step 1, g = 0.5: p = 1 * (1 - 0.001) = 0.999; m = 0.05, v = 0.00025;
  //   m_hat = 0.05 / 0.1 = 0.5, v_hat = 0.00025 / 0.001 = 0.25; p -= 0.1 * 0.5 / (0.5 + 1e-8)
  //   -> 0.899 (to 2e-8).
  // Step 2, g = -1: p = 0.899 * 0.999 = 0.898101; m = 0.045 - 0.1 = -0.055;
  //   v = 0.00024975 + 0.001 = 0.00124975; m_hat = -0.055 / 0.19 = -0.28947368;
  //   v_hat = 0.00124975 / 0.001999 = 0.62518759, sqrt = 0.79068805;
  //   p += 0.1 * 0.28947368 / 0.79068805 = 0.03661037 -> 0.93471137.
  OptimizerOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  float p = 1.f, m = 0.f, v = 0.f;
  const float g1 = 0.5f, g2 = -1.f;
  AdamWUpdate(o, 1, &p, &g1, &m, &v, 1);
  EXPECT_NEAR(p, 0.899f, 1e-6);
  EXPECT_NEAR(m, 0.05f, 1e-8);
  EXPECT_NEAR(v, 0.00025f, 1e-10);
  AdamWUpdate(o, 2, &p, &g2, &m, &v, 1);
  EXPECT_NEAR(m, -0.055f, 1e-8);
  EXPECT_NEAR(v, 0.00124975f, 1e-10);
  EXPECT_NEAR(p, 0.93471137f, 1e-6);
}

TEST(OptimizerTest, SgdByHand) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.5;
  // Plain: p = 1 - 0.5 * 0.25 = 0.875, exact in binary.
  float p = 1.f;
  const float g = 0.25f;
  SgdUpdate(o, true, &p, &g, nullptr, 1);
  EXPECT_EQ(p, 0.875f);
  // Momentum 0.5: step 1 buf = g = 0.25, p = 1 - 0.125 = 0.875; step 2 buf = 0.125 + 0.25 =
  // 0.375, p = 0.875 - 0.1875 = 0.6875. All exact.
  o.momentum = 0.5;
  p = 1.f;
  float buf = 0.f;
  SgdUpdate(o, true, &p, &g, &buf, 1);
  EXPECT_EQ(buf, 0.25f);
  EXPECT_EQ(p, 0.875f);
  SgdUpdate(o, false, &p, &g, &buf, 1);
  EXPECT_EQ(buf, 0.375f);
  EXPECT_EQ(p, 0.6875f);
  // Coupled weight decay 0.5, no momentum: d = 0.25 + 0.5 * 1 = 0.75, p = 1 - 0.375 = 0.625.
  o.momentum = 0;
  o.weight_decay = 0.5;
  p = 1.f;
  SgdUpdate(o, true, &p, &g, nullptr, 1);
  EXPECT_EQ(p, 0.625f);
}

TEST(OptimizerTest, OptionsInRange) {
  EXPECT_TRUE(CheckOptimizerOptions(OptimizerOptions{}).ok());
  const double nan = std::nan(""), inf = INFINITY;
  auto message = [](auto set) {
    OptimizerOptions o;
    set(o);
    return CheckOptimizerOptions(o).message();
  };
  EXPECT_EQ(message([&](auto& o) { o.lr = nan; }),
            "--lr nan: the learning rate must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.lr = inf; }),
            "--lr inf: the learning rate must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.lr = 0; }),
            "--lr 0: the learning rate must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.beta1 = 1; }), "--beta1 1: must be in [0, 1)");
  EXPECT_EQ(message([&](auto& o) { o.beta1 = nan; }), "--beta1 nan: must be in [0, 1)");
  EXPECT_EQ(message([&](auto& o) { o.beta2 = -1e-9; }), "--beta2 -1e-09: must be in [0, 1)");
  EXPECT_EQ(message([&](auto& o) { o.eps = 0; }), "--eps 0: must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.eps = inf; }), "--eps inf: must be a finite number > 0");
  EXPECT_EQ(message([&](auto& o) { o.weight_decay = nan; }),
            "--weight-decay nan: must be a finite number >= 0");
  EXPECT_EQ(message([&](auto& o) { o.momentum = 1; }), "--momentum 1: must be in [0, 1)");
  // The edges that are allowed.
  EXPECT_EQ(message([&](auto& o) {
              o.beta1 = 0;
              o.weight_decay = 0;
              o.momentum = 0;
            }),
            "");
}

TEST(OptimizerTest, ParsesNames) {
  EXPECT_EQ(*ParseOptimizerName("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(*ParseOptimizerName("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(ParseOptimizerName("adam").status().message(),
            "unknown optimizer 'adam' (choose sgd or adamw)");
}

// ---- initialisation ------------------------------------------------------------------------

TEST(InitTest, RuleByName) {
  Tensor bias = InitParameter("blocks.0.attn.Wqkv.bias", {5}, 3);
  Tensor norm = InitParameter("blocks.0.norm_1.weight", {5}, 3);
  Tensor ln = InitParameter("h.0.ln_1.weight", {5}, 3);
  Tensor layer_norm = InitParameter("encoder.LayerNorm.weight", {5}, 3);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(bias.data<float>()[i], 0.f);
    EXPECT_EQ(norm.data<float>()[i], 1.f);
    EXPECT_EQ(ln.data<float>()[i], 1.f);
    EXPECT_EQ(layer_norm.data<float>()[i], 1.f);
  }
  // Rank 2: a matrix is never a norm scale, whatever its name.
  Tensor matrix = InitParameter("norm_proj.weight", {2, 3}, 3);
  EXPECT_NE(matrix.data<float>()[0], 1.f);
}

TEST(InitTest, SeededNormalIsDeterministic) {
  Tensor a = InitParameter("wte.weight", {100, 7}, 1);
  Tensor b = InitParameter("wte.weight", {100, 7}, 1);
  Tensor c = InitParameter("wte.weight", {100, 7}, 2);
  Tensor d = InitParameter("wpe.weight", {100, 7}, 1);
  EXPECT_TRUE(a.BitwiseEqual(b));
  EXPECT_FALSE(a.BitwiseEqual(c));
  EXPECT_FALSE(a.BitwiseEqual(d));
  // A value depends on (seed, name, index) only: a bigger tensor starts with the same values.
  Tensor longer = InitParameter("wte.weight", {200, 7}, 1);
  EXPECT_TRUE(BitwiseEqual(a.data<float>(), longer.data<float>(), a.numel()));
  // Pinned draws of the generator; a change here changes every --no-weights run.
  const uint64_t key = Fnv1a("w");
  EXPECT_EQ(key, 0xaf63ea4c86020456ull);
  // Cross-checked against a pure-Python Philox4x32-10 + Box-Muller.
  const double want[4] = {-0x1.0c15f6519fb4fp-3, 0x1.f30826f2d1b09p-5, 0x1.5336754067cfbp+0,
                          -0x1.fa3ac3b684d64p-3};
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(NormalSample(0, key, i), want[i]) << i;
}

TEST(InitTest, NormalStatistics) {
  // 100000 draws of 0.02 * N(0, 1): the mean's standard error is 6.3e-5, the std's 4.5e-5.
  Tensor t = InitParameter("w", {100000}, 0);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    sum += t.data<float>()[i];
    sq += double(t.data<float>()[i]) * t.data<float>()[i];
  }
  double mean = sum / t.numel(), sd = std::sqrt(sq / t.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4e-4);
  EXPECT_NEAR(sd, 0.02, 3e-4);
}

// ---- data ----------------------------------------------------------------------------------

void WriteTokens(const std::string& path, const std::vector<int64_t>& tokens, TokenDType dtype) {
  std::ofstream out(path, std::ios::binary);
  for (int64_t t : tokens) {
    if (dtype == TokenDType::kUint16) {
      uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      int32_t v = static_cast<int32_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

TEST(DataTest, WindowsWrapAround) {
  TempDir dir;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 23; ++i) tokens.push_back(i);
  WriteTokens(dir / "d.bin", tokens, TokenDType::kUint16);
  auto f = TokenFile::Open(dir / "d.bin", TokenDType::kUint16);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->num_tokens(), 23);
  // 23 tokens hold 4 whole windows of 5 (the 3-token tail is never read): window 4 is window 0.
  std::vector<int64_t> w(5);
  ASSERT_TRUE(f->ReadWindow(3, 5, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{15, 16, 17, 18, 19}));
  ASSERT_TRUE(f->ReadWindow(4, 5, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ASSERT_TRUE(f->ReadWindow(9, 5, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{5, 6, 7, 8, 9}));
  // Vocabulary check names the first bad position.
  Status st = f->ReadWindow(2, 5, 12, w.data());
  EXPECT_EQ(st.message(), "--data " + (dir / "d.bin") +
                              ": token 12 at position 12 is outside the vocabulary [0, 12)");
  // A window longer than the file.
  st = f->ReadWindow(0, 24, 0, w.data());
  EXPECT_EQ(st.message(), "--data " + (dir / "d.bin") +
                              ": 23 tokens is shorter than one window of seq + 1 = 24 tokens");
}

TEST(DataTest, Int32AndErrors) {
  TempDir dir;
  WriteTokens(dir / "i.bin", {70000, 1, -3, 4}, TokenDType::kInt32);
  auto f = TokenFile::Open(dir / "i.bin", TokenDType::kInt32);
  ASSERT_TRUE(f.ok());
  std::vector<int64_t> w(2);
  ASSERT_TRUE(f->ReadWindow(0, 2, 0, w.data()).ok());
  EXPECT_EQ(w, (std::vector<int64_t>{70000, 1}));
  EXPECT_EQ(
      f->ReadWindow(1, 2, 100, w.data()).message(),
      "--data " + (dir / "i.bin") + ": token -3 at position 2 is outside the vocabulary [0, 100)");
  // 16 bytes are 8 uint16 tokens but 5 bytes are no whole number of them.
  { std::ofstream(dir / "odd.bin", std::ios::binary) << "abcde"; }
  EXPECT_EQ(TokenFile::Open(dir / "odd.bin", TokenDType::kUint16).status().message(),
            "--data " + (dir / "odd.bin") +
                ": 5 bytes is not a whole number of uint16 tokens; is --data-dtype right?");
  EXPECT_EQ(TokenFile::Open(dir / "none.bin", TokenDType::kUint16).status().message(),
            "--data " + (dir / "none.bin") + ": cannot open it: No such file or directory");
  EXPECT_EQ(ParseTokenDType("u8").status().message(), "--data-dtype u8: choose uint16 or int32");
}

TEST(DataTest, BatchShiftFollowsLossConvention) {
  // Two windows of seq + 1 = 4 tokens.
  std::vector<int64_t> windows = {1, 2, 3, 4, 5, 6, 7, 8};
  TokenBatch in_model = MakeTokenBatch(windows, 2, 3, true, DType::kInt64, DType::kInt64);
  EXPECT_EQ(in_model.input_ids.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(in_model.labels.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  TokenBatch appended = MakeTokenBatch(windows, 2, 3, false, DType::kInt32, DType::kInt64);
  EXPECT_EQ(appended.input_ids.dtype(), DType::kInt32);
  EXPECT_EQ(appended.input_ids.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(appended.labels.ToInt64Vector(), (std::vector<int64_t>{2, 3, 4, 6, 7, 8}));
}

TEST(DataTest, SyntheticTokensAreSeededAndInRange) {
  std::vector<int64_t> a(1000), b(1000), c(1000);
  SyntheticWindow(5, 3, 1000, 7, a.data());
  SyntheticWindow(5, 3, 1000, 7, b.data());
  SyntheticWindow(5, 4, 1000, 7, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int> seen(7, 0);
  for (int64_t t : a) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 7);
    ++seen[t];
  }
  for (int n : seen) EXPECT_GT(n, 100);  // ~143 each
}

// ---- trainer -------------------------------------------------------------------------------

// A tiny language model: embedding (8 x 3) -> dropout -> linear head; foundry appends the
// cross-entropy loss over a `labels` input (so loss_in_model is false).
constexpr const char* kTinyLm = R"(graph tiny_lm opset=17 {
  input input_ids : i64[2,4]
  param emb : f32[8,3]
  param "head.weight" : f32[3,8]
  param "head.bias" : f32[8]
  const ratio : f32[] = [0.25]
  const train : bool[] = [1]
  x = Gather(emb, input_ids) #"embed"
  d, mask = Dropout(x, ratio, train) #"drop"
  h = MatMul(d, "head.weight") #"mm"
  logits = Add(h, "head.bias") #"add"
  output logits
}
)";

// Compiles `text` like foundry-compile does. `weights`: random initial values (else none).
LoadedPlan Compile(bool weights, const char* text = kTinyLm) {
  auto parsed = ParseGraph(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  Graph g = std::move(parsed).value();
  if (weights) {
    uint64_t seed = 1;
    for (const auto& p : g.parameters) {
      Value* v = g.FindValue(p);
      v->data = std::make_shared<const Tensor>(RandomTensor(v->shape, seed++));
    }
  }
  Status st = RunPasses(g, BuildPipeline(CompileOptions{}), PipelineOptions{});
  EXPECT_TRUE(st.ok()) << st.message();
  LoadedPlan lp;
  lp.plan_path = "tiny.plan";
  lp.plan.graph_file = "tiny.train.onnx";
  lp.plan.source_model = "tiny.onnx";
  lp.plan.loss = g.metadata["foundry.loss"];
  lp.plan.loss_in_model = g.metadata.count("foundry.loss_appended") == 0;
  lp.plan.inputs = g.inputs;
  lp.plan.parameters = g.parameters;
  for (size_t i = 0; i < g.parameters.size(); ++i)
    lp.plan.gradients[g.parameters[i]] = g.outputs[i + 1];
  EXPECT_TRUE(CheckPlan(lp.plan, g, lp.plan_path).ok());
  lp.graph = std::move(g);
  return lp;
}

// Writes the compiled tiny model as dir/tiny.train.onnx + dir/tiny.plan.
void WritePlanFiles(const LoadedPlan& lp, const TempDir& dir) {
  ASSERT_TRUE(ExportOnnx(lp.graph, dir / "tiny.train.onnx").ok());
  ASSERT_TRUE(WritePlan(lp.plan, dir / "tiny.plan").ok());
}

std::unique_ptr<Trainer> MakeTrainer(LoadedPlan lp, const TrainerOptions& o) {
  auto t = Trainer::Create(std::move(lp), o);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(TrainerTest, TrainsOnSyntheticTokens) {
  LoadedPlan lp = Compile(true);
  EXPECT_FALSE(lp.plan.loss_in_model);
  EXPECT_EQ(lp.plan.inputs, (std::vector<std::string>{"input_ids", "labels"}));
  TrainerOptions o;
  o.optimizer.lr = 0.05;
  auto t = MakeTrainer(std::move(lp), o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->batch(), 2);
  EXPECT_EQ(t->seq(), 4);
  EXPECT_EQ(t->vocab(), 8);
  EXPECT_EQ(t->num_parameter_elements(), 8 * 3 + 3 * 8 + 8);
  EXPECT_EQ(t->DataDescription(), "synthetic tokens (seed 0)");
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i) {
    auto r = t->Step();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->step, i + 1);
    EXPECT_GT(r->seconds, 0);
    EXPECT_NEAR(r->tokens_per_second, 8 / r->seconds, 1e-6 * r->tokens_per_second);
    losses.push_back(r->loss);
  }
  EXPECT_EQ(t->step(), 3);
  // ln(8) = 2.08 for a uniform guess over 8 classes; random weights start near it.
  EXPECT_NEAR(losses[0], std::log(8.0), 1.0);
}

TEST(TrainerTest, SeededInitForParametersWithoutData) {
  TrainerOptions o;
  o.init_seed = 42;
  auto t = MakeTrainer(Compile(false), o);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->parameter("emb").BitwiseEqual(InitParameter("emb", {8, 3}, 42)));
  EXPECT_TRUE(t->parameter("head.bias").BitwiseEqual(Tensor(DType::kFloat32, {8})));
  auto again = MakeTrainer(Compile(false), o);
  EXPECT_TRUE(again->parameter("head.weight").BitwiseEqual(t->parameter("head.weight")));
  ASSERT_TRUE(t->Step().ok());
}

TEST(TrainerTest, AllIgnoredLabelsGiveZeroLossAndGradients) {
  TempDir dir;
  Tensor labels(DType::kInt64, {2, 4});
  for (int i = 0; i < 8; ++i) labels.data<int64_t>()[i] = -100;
  ASSERT_TRUE(WriteTensorFile(dir / "labels.pb", labels, "labels").ok());
  TrainerOptions o;
  o.feeds = {"labels=" + (dir / "labels.pb")};
  o.optimizer.weight_decay = 0;  // zero gradients then leave AdamW's weights exactly as they were
  auto t = MakeTrainer(Compile(true), o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->DataDescription(), "synthetic tokens (seed 0) + --feed");
  auto before = t->parameters();
  auto r = t->Step();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->loss, 0.f);
  for (const auto& [param, gname] : t->plan().plan.gradients) {
    const Tensor& g = t->last_outputs().at(gname);
    for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(g.data<float>()[i], 0.f) << gname;
    EXPECT_TRUE(t->parameter(param).BitwiseEqual(before.at(param))) << param;
  }
}

TEST(TrainerTest, NonFiniteNamesTheFirstNode) {
  LoadedPlan lp = Compile(true);
  Tensor w = *lp.graph.FindValue("head.weight")->data;
  w.data<float>()[0] = INFINITY;
  lp.graph.FindValue("head.weight")->data = std::make_shared<const Tensor>(w);
  auto t = MakeTrainer(std::move(lp), TrainerOptions{});
  ASSERT_TRUE(t);
  auto r = t->Step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "step 1: non-finite value first produced by MatMul node 'mm' (in 'h'); lower --lr, "
            "or check the inputs and weights");
}

// Finite loss and gradients, but an update that overflows fp32 (f32(-1e300) = -inf): the step is
// an error naming it and the first parameter hit, and the trainer refuses to step or save after.
TEST(TrainerTest, NonFiniteWeightsAfterTheUpdateFailTheStep) {
  TempDir dir;
  TrainerOptions o;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.lr = 1e300;
  LoadedPlan lp = Compile(true);
  const std::string first = lp.plan.parameters.at(0);
  auto t = MakeTrainer(std::move(lp), o);
  ASSERT_TRUE(t);
  auto r = t->Step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "step 1: the optimizer update made parameter '" + first +
                                      "' non-finite (lr 1e+300); lower --lr, or check the weights");
  EXPECT_EQ(t->step(), 0);
  EXPECT_EQ(t->Step().status().message(), "an earlier step failed; the trainer cannot go on");
  EXPECT_EQ(t->Save(dir / "s").message(),
            "--save " + (dir / "s") + ": a step failed; nothing to save");
  EXPECT_FALSE(fs::exists(dir / "s"));
}

TEST(TrainerTest, DropoutSeedDependsOnRunSeedAndStep) {
  TrainerOptions a, b;
  b.seed = 1;
  auto ta = MakeTrainer(Compile(true), a);
  auto ta2 = MakeTrainer(Compile(true), a);
  auto tb = MakeTrainer(Compile(true), b);
  auto ra = ta->Step(), ra2 = ta2->Step(), rb = tb->Step();
  ASSERT_TRUE(ra.ok() && ra2.ok() && rb.ok());
  EXPECT_EQ(ra->loss, ra2->loss);
  EXPECT_NE(ra->loss, rb->loss);
  EXPECT_NE(StepSeed(0, 1), StepSeed(0, 2));
  EXPECT_NE(StepSeed(0, 1), StepSeed(1, 1));
}

TEST(TrainerTest, FeedErrors) {
  TempDir dir;
  ASSERT_TRUE(WriteTensorFile(dir / "f32.pb", Tensor(DType::kFloat32, {2, 4}), "x").ok());
  ASSERT_TRUE(WriteTensorFile(dir / "i64t.pb", Tensor(DType::kInt64, {4, 2}), "x").ok());
  auto create = [&](const std::string& feed) {
    TrainerOptions o;
    o.feeds = {feed};
    return Trainer::Create(Compile(true), o).status().message();
  };
  EXPECT_EQ(create("labels=" + (dir / "f32.pb")),
            "--feed labels=" + (dir / "f32.pb") + ": expected i64[2,4], got f32[2,4]");
  EXPECT_EQ(create("labels=" + (dir / "i64t.pb")),
            "--feed labels=" + (dir / "i64t.pb") + ": expected i64[2,4], got i64[4,2]");
  EXPECT_EQ(create("mask=" + (dir / "f32.pb")),
            "--feed mask=" + (dir / "f32.pb") +
                ": no input named 'mask'; the inputs are input_ids, labels");
  EXPECT_EQ(create("labels=" + (dir / "no.pb")), "--feed labels=" + (dir / "no.pb") +
                                                     ": cannot open '" + (dir / "no.pb") +
                                                     "': No such file or directory");
  EXPECT_EQ(create("labels"), "--feed labels: expected NAME=FILE.pb");
  ASSERT_TRUE(WriteTensorFile(dir / "ids.pb", Tensor(DType::kInt64, {2, 4}), "x").ok());
  EXPECT_EQ(create("input_ids=" + (dir / "ids.pb")),
            "input 'labels' has no data: pass it with --feed labels=FILE.pb (with --feed "
            "input_ids given, labels cannot come from token windows)");
}

TEST(TrainerTest, DataFileErrors) {
  TempDir dir;
  WriteTokens(dir / "short.bin", {1, 2, 3}, TokenDType::kUint16);
  WriteTokens(dir / "big.bin", {1, 2, 3, 4, 5, 1, 2, 9, 4, 5}, TokenDType::kUint16);
  TrainerOptions o;
  o.data_path = dir / "short.bin";
  EXPECT_EQ(Trainer::Create(Compile(true), o).status().message(),
            "--data " + (dir / "short.bin") +
                ": 3 tokens is shorter than one window of seq + 1 = 5 tokens");
  o.data_path = dir / "big.bin";
  auto t = MakeTrainer(Compile(true), o);
  ASSERT_TRUE(t);
  EXPECT_EQ(
      t->Step().status().message(),
      "--data " + (dir / "big.bin") + ": token 9 at position 7 is outside the vocabulary [0, 8)");
}

TEST(TrainerTest, DumpsGradientsAndOutputsOfTheFirstStep) {
  TempDir dir;
  TrainerOptions o;
  o.dump_grads_dir = dir / "grads";
  o.dump_outputs_dir = dir / "outs";
  auto t = MakeTrainer(Compile(true), o);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Step().ok());
  for (const auto& [param, gname] : t->plan().plan.gradients) {
    std::string name;
    auto g = ReadTensorFile(dir / ("grads/" + param + "_grad.pb"), &name);
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(name, param + "_grad");
    EXPECT_TRUE(g->BitwiseEqual(t->last_outputs().at(gname)));
  }
  for (const auto& out : t->plan().graph.outputs) {
    auto v = ReadTensorFile(dir / ("outs/" + out + ".pb"));
    ASSERT_TRUE(v.ok()) << v.status().message();
  }
  // Only the first step is dumped.
  fs::remove_all(dir / "grads");
  ASSERT_TRUE(t->Step().ok());
  EXPECT_FALSE(fs::exists(dir / "grads"));
}

TEST(TrainerTest, LoadPlanAcceptsPrefixOrPlanPath) {
  TempDir dir;
  LoadedPlan lp = Compile(true);
  WritePlanFiles(lp, dir);
  auto by_prefix = LoadPlan(dir / "tiny");
  ASSERT_TRUE(by_prefix.ok()) << by_prefix.status().message();
  EXPECT_EQ(by_prefix->plan_path, dir / "tiny.plan");
  EXPECT_EQ(by_prefix->plan.parameters, lp.plan.parameters);
  auto by_path = LoadPlan(dir / "tiny.plan");
  ASSERT_TRUE(by_path.ok());
  // The imported graph trains like the in-memory one.
  auto a = MakeTrainer(std::move(by_path).value(), TrainerOptions{});
  auto b = MakeTrainer(Compile(true), TrainerOptions{});
  auto ra = a->Step(), rb = b->Step();
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  EXPECT_EQ(ra->loss, rb->loss);

  EXPECT_EQ(LoadPlan(dir / "none").status().message(),
            "cannot open plan '" + (dir / "none.plan") +
                "': No such file or directory; create it with foundry-compile MODEL.onnx -o "
                "PREFIX");
  Plan bad = lp.plan;
  bad.inputs.push_back("attention_mask");
  ASSERT_TRUE(WritePlan(bad, dir / "bad.plan").ok());
  EXPECT_EQ(LoadPlan(dir / "bad.plan").status().message(),
            "'" + (dir / "bad.plan") +
                "' is a damaged foundry plan (input 'attention_mask' is not among the inputs of "
                "'tiny.train.onnx': input_ids, labels); recompile it with foundry-compile "
                "MODEL.onnx -o PREFIX");
  bad = lp.plan;
  bad.gradients["emb"] = "nothing";
  ASSERT_TRUE(WritePlan(bad, dir / "bad.plan").ok());
  EXPECT_EQ(LoadPlan(dir / "bad.plan").status().message(),
            "'" + (dir / "bad.plan") +
                "' is a damaged foundry plan (the gradient 'nothing' of parameter 'emb' is not "
                "an output of the graph 'tiny.train.onnx'); recompile it with foundry-compile "
                "MODEL.onnx -o PREFIX");
}

// N steps + Save + Resume + M steps must equal N + M steps bit for bit, for both optimizers,
// with dropout and a data file that wraps around (7 windows, 2 per step).
void ExpectResumeIsBitwise(const OptimizerOptions& opt) {
  TempDir dir;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 37; ++i) tokens.push_back((i * 5 + 3) % 8);
  WriteTokens(dir / "d.bin", tokens, TokenDType::kUint16);
  LoadedPlan lp = Compile(false);
  WritePlanFiles(lp, dir);
  TrainerOptions o;
  o.optimizer = opt;
  o.seed = 7;
  o.init_seed = 3;
  o.data_path = dir / "d.bin";

  auto straight = MakeTrainer(*LoadPlan(dir / "tiny"), o);
  std::vector<float> want;
  for (int i = 0; i < 5; ++i) want.push_back(straight->Step()->loss);

  auto first = MakeTrainer(*LoadPlan(dir / "tiny"), o);
  std::vector<float> got;
  for (int i = 0; i < 3; ++i) got.push_back(first->Step()->loss);
  ASSERT_TRUE(first->Save(dir / "run").ok());
  ASSERT_TRUE(fs::exists(dir / "run/model.onnx"));
  ASSERT_TRUE(fs::exists(dir / "run/state.json"));
  for (const auto& e : fs::directory_iterator(dir.path()))  // no temp folder left beside it
    EXPECT_EQ(e.path().filename().string().rfind("run.", 0), std::string::npos) << e.path();

  auto state = ReadTrainState(dir / "run");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->step, 3);
  EXPECT_EQ(state->data_position, 6);
  EXPECT_EQ(state->seed, 7u);
  EXPECT_EQ(state->init_seed, 3u);
  EXPECT_EQ(state->optimizer.kind, opt.kind);
  EXPECT_EQ(state->optimizer.lr, opt.lr);
  EXPECT_EQ(state->data_path, fs::absolute(dir / "d.bin").string());
  EXPECT_EQ(state->plan_path, fs::absolute(dir / "tiny.plan").string());

  // Resume with options rebuilt from the state, as foundry-run does.
  TrainerOptions r;
  r.optimizer = state->optimizer;
  r.seed = state->seed;
  r.init_seed = 99;  // unused: the parameters come from the save
  r.data_path = state->data_path;
  r.data_dtype = state->data_dtype;
  auto second = MakeTrainer(*LoadPlan(state->plan_path), r);
  Status st = second->Resume(dir / "run");
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(second->step(), 3);
  for (int i = 0; i < 2; ++i) {
    auto s = second->Step();
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->step, 4 + i);
    got.push_back(s->loss);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
        << "step " << i + 1 << ": " << got[i] << " vs " << want[i];
  for (const auto& [name, p] : straight->parameters())
    EXPECT_TRUE(second->parameter(name).BitwiseEqual(p)) << name;

  // The save it resumed from is an input of this run: never replaced. Another save is.
  EXPECT_EQ(second->Save(dir / "run").message(),
            "--save " + (dir / "run") +
                ": it is the --resume directory, whose files this run reads; save to another "
                "directory");
  EXPECT_EQ(ReadTrainState(dir / "run")->step, 3);
  ASSERT_TRUE(first->Save(dir / "other").ok());
  ASSERT_TRUE(second->Save(dir / "other").ok());
  EXPECT_EQ(ReadTrainState(dir / "other")->step, 5);
}

TEST(TrainerTest, ResumeIsBitwiseAdamW) {
  OptimizerOptions o;
  o.lr = 0.05;
  o.weight_decay = 0.1;
  ExpectResumeIsBitwise(o);
}

TEST(TrainerTest, ResumeIsBitwiseSgdMomentum) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.2;
  o.momentum = 0.9;
  ExpectResumeIsBitwise(o);
}

TEST(TrainerTest, SaveAndResumeErrors) {
  TempDir dir;
  auto t = MakeTrainer(Compile(true), TrainerOptions{});
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine/notes.txt") << "keep me";
  EXPECT_EQ(t->Save(dir / "mine").message(),
            "--save " + (dir / "mine") + ": '" + (dir / "mine") +
                "' exists and is not a foundry-run save (no state.json); choose another "
                "directory");
  EXPECT_TRUE(fs::exists(dir / "mine/notes.txt"));
  EXPECT_EQ(t->Resume(dir / "nothing").message(),
            "--resume " + (dir / "nothing") + ": cannot open '" + (dir / "nothing/state.json") +
                "': No such file or directory; save a run with --save DIR first");
  ASSERT_TRUE(t->Save(dir / "run").ok());
  TrainerOptions sgd;
  sgd.optimizer.kind = OptimizerKind::kSgd;
  auto u = MakeTrainer(Compile(true), sgd);
  EXPECT_EQ(u->Resume(dir / "run").message(),
            "--resume " + (dir / "run") + ": the saved run used --optimizer adamw, this one sgd");
  {
    std::ofstream(dir / "run/state.json")
        << "{\"format\": \"foundry-train-state\", \"version\": 2}";
  }
  EXPECT_EQ(ReadTrainState(dir / "run").status().message(),
            "--resume " + (dir / "run") + ": '" + (dir / "run/state.json") +
                "' has state format version 2; this foundry-run reads 1");
}

TEST(TrainerTest, FileNamesForValues) {
  EXPECT_EQ(FileNameForValue("transformer.wte.weight"), "transformer.wte.weight");
  EXPECT_EQ(FileNameForValue("/blocks/0%"), "%2Fblocks%2F0%25");
  EXPECT_EQ(FileNameForValue(".."), "%..");
}

}  // namespace
}  // namespace foundry
