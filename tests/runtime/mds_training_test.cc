// Training from an MDS folder (runtime/data.h DataSource::mds) on the shipped tiny MPT:
//  - bitwise the same run as from the same tokens as an llm.c .bin file (the fixture's train.bin:
//    window k = sample k and one token more, unused under the model's own loss);
//  - a shuffled, drop_last read resumed mid-epoch continues bitwise as the uninterrupted run, and
//    the save records how the folder was read;
//  - each epoch of a shuffled read visits every sample of its whole global batches once;
//  - with foundry's appended loss (shifted labels), a sample's last label is the ignore_index;
//  - a resume on other data, and ids beyond the vocabulary, are refused in one line.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "compiler/plan.h"
#include "driver/compile.h"
#include "runtime/train_state.h"
#include "runtime/trainer.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kMds = std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/mds/mpt_tiny";

class MdsTrainingTest : public ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    CompileRequest c;
    c.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
    c.dims = {{"batch", 4}, {"seq", 16}};
    c.output_prefix = Path("m");
    StatusOr<CompileResult> r = Compile(c);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_TRUE(WriteCompiledOutputs(r->graph, &*r->plan, c.output_prefix).ok());
  }
  std::unique_ptr<Trainer> Make(const TrainerOptions& o) {
    StatusOr<LoadedPlan> lp = LoadPlan(Path("m"));
    EXPECT_TRUE(lp.ok()) << lp.status().message();
    if (!lp.ok()) return nullptr;
    StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(std::move(lp).value(), o);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::move(t).value() : nullptr;
  }
};

bool SameLoss(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST_F(MdsTrainingTest, BitwiseTheRunOfTheSameTokensAsAnLlmcFile) {
  TrainerOptions o;
  o.seed = 5;
  o.data_path = kMds + "/train";
  auto mds = Make(o);
  o.data_path = kMds + "/train.bin";
  auto bin = Make(o);
  ASSERT_TRUE(mds && bin);
  EXPECT_NE(mds->data_source().Describe(5).find("MDS, 3 shards, 64 samples"), std::string::npos)
      << mds->data_source().Describe(5);
  // 64 samples, 4 a step: 20 steps wrap into the second epoch.
  for (int step = 1; step <= 20; ++step) {
    StatusOr<StepReport> a = mds->Step(), b = bin->Step();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().message() << b.status().message();
    EXPECT_TRUE(SameLoss(a->loss, b->loss)) << step << ": " << a->loss << " vs " << b->loss;
  }
  for (const auto& [name, p] : bin->parameters())
    EXPECT_TRUE(mds->parameter(name).BitwiseEqual(p)) << name;
}

TEST_F(MdsTrainingTest, AShuffledReadResumesMidEpochBitwise) {
  TrainerOptions o;
  o.seed = 5;
  o.data_path = kMds + "/train";
  o.mds.shuffle = true;
  o.mds.shuffle_seed = 17;
  o.mds.shuffle_block = 8;
  o.mds.drop_last = true;
  auto straight = Make(o);
  ASSERT_TRUE(straight);
  std::vector<float> want;
  for (int i = 0; i < 7; ++i) want.push_back(straight->Step()->loss);

  auto first = Make(o);
  ASSERT_TRUE(first);
  std::vector<float> got;
  for (int i = 0; i < 3; ++i) got.push_back(first->Step()->loss);
  ASSERT_TRUE(first->Save(Path("run")).ok());
  StatusOr<TrainState> state = ReadTrainState(Path("run"));
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->data_position, 12);
  EXPECT_TRUE(state->mds.shuffle);
  EXPECT_EQ(state->mds.shuffle_seed, 17u);
  EXPECT_EQ(state->mds.shuffle_block, 8);
  EXPECT_TRUE(state->mds.drop_last);
  EXPECT_EQ(state->mds_samples, 64);

  TrainerOptions r;  // as foundry-run rebuilds them from the save
  r.seed = state->seed;
  r.data_path = state->data_path;
  r.mds = state->mds;
  auto second = Make(r);
  ASSERT_TRUE(second);
  Status st = second->Resume(Path("run"));
  ASSERT_TRUE(st.ok()) << st.message();
  for (int i = 0; i < 4; ++i) got.push_back(second->Step()->loss);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(SameLoss(got[i], want[i])) << i + 1 << ": " << got[i] << " vs " << want[i];
  for (const auto& [name, p] : straight->parameters())
    EXPECT_TRUE(second->parameter(name).BitwiseEqual(p)) << name;

  // The index-order run is another run.
  TrainerOptions plain;
  plain.seed = 5;
  plain.data_path = kMds + "/train";
  auto ordered = Make(plain);
  ASSERT_TRUE(ordered);
  EXPECT_FALSE(SameLoss(ordered->Step()->loss, want[0]));

  // Resuming on a folder of other samples would read other samples at the position: refused.
  r.data_path = kMds + "/val";
  auto other = Make(r);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->Resume(Path("run")).message(),
            "--resume " + Path("run") + ": the save read 64 samples of its MDS data, but --data " +
                kMds +
                "/val has 16; its position would name other samples: resume with the same "
                "data");
}

TEST_F(MdsTrainingTest, EachEpochVisitsEveryWholeGlobalBatchSampleOnce) {
  TrainerOptions o;
  o.data_path = kMds + "/train";
  o.mds.shuffle = true;
  o.mds.shuffle_block = 16;
  o.mds.drop_last = true;
  auto t = Make(o);
  ASSERT_TRUE(t);
  DataSource s = t->data_source();
  ASSERT_TRUE(SetMdsEpoch(s, 12).ok());  // 64 samples: 5 whole batches of 12 an epoch
  ASSERT_EQ(s.mds_order->epoch_samples(), 60);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t p = 0; p < 60; ++p) seen.insert(s.mds_order->Sample(epoch * 60 + p));
    EXPECT_EQ(seen.size(), 60u) << "epoch " << epoch;
    EXPECT_TRUE(*seen.begin() >= 0 && *seen.rbegin() < 64);
  }
  EXPECT_NE(s.mds_order->Sample(0), s.mds_order->Sample(60));  // a new order each epoch
  EXPECT_EQ(
      SetMdsEpoch(s, 65).message(),
      "--data " + kMds + "/train: its 64 samples hold no whole global batch of 65 (drop_last)");
}

// foundry's appended loss does not shift the labels: labels = window[1:seq+1], and the last of a
// sample's is the loss's ignore_index (llm-foundry's labels end with the sample).
TEST_F(MdsTrainingTest, ShiftedLabelsEndWithTheIgnoreIndex) {
  StatusOr<LoadedPlan> lp = LoadPlan(Path("m"));
  ASSERT_TRUE(lp.ok());
  StatusOr<DataSource> s =
      ChooseDataSource(lp->graph, lp->plan.inputs, {}, kMds + "/train", TokenDType::kAuto,
                       /*loss_in_model=*/true, LabelRule::kShifted);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->mds_label_pad, -100);  // the model's SoftmaxCrossEntropyLoss ignore_index
  std::vector<int64_t> windows;
  ASSERT_TRUE(ReadStepWindows(*s, 0, 3, windows).ok());
  TokenBatch b = MakeTokenBatch(windows, 4, 16, /*shift=*/true, DType::kInt64, DType::kInt64);
  for (int64_t row = 0; row < 4; ++row) {
    for (int64_t t = 0; t < 15; ++t)
      EXPECT_EQ(b.labels.data<int64_t>()[row * 16 + t],
                b.input_ids.data<int64_t>()[row * 16 + t + 1]);
    EXPECT_EQ(b.labels.data<int64_t>()[row * 16 + 15], -100);
  }
}

TEST_F(MdsTrainingTest, IdsBeyondTheVocabularyAreRefusedByPlace) {
  // The fixture's ids are bytes of text; a model of 256 rows reads them, one of 60 does not
  // (its first sample has upper-case letters).
  fs::copy(kMds + "/train", Path("train"));
  TrainerOptions o;
  o.data_path = Path("train");
  auto ok = Make(o);
  ASSERT_TRUE(ok);
  CompileRequest c;
  c.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
  c.dims = {{"batch", 4}, {"seq", 16}};
  StatusOr<CompileResult> r = Compile(c);
  ASSERT_TRUE(r.ok());
  StatusOr<DataSource> s =
      ChooseDataSource(r->graph, r->plan->inputs, {}, Path("train"), TokenDType::kAuto);
  ASSERT_TRUE(s.ok());
  s->vocab = 60;
  std::vector<int64_t> w;
  Status st = ReadStepWindows(*s, 0, 0, w);
  EXPECT_NE(st.message().find("is outside the vocabulary [0, 60)"), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().rfind("--data " + Path("train") + ": sample ", 0), 0u) << st.message();
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
