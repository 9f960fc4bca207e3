// Data-parallel training in the Trainer (runtime/trainer.h "Data parallel", runtime/
// trainer_shard.cc) on plans sharded BY HAND as docs/design.md §10 says passes/shard shards them (this
// test's ShardByHand: each gradient written by foundry::AllReduceGradient (NO_SHARD) or
// foundry::ReduceScatterGradient (SHARD_GRAD_OP / FULL_SHARD, replacing foundry::
// AccumulateGradient when K > 1); sharded parameters f32 [c] without data, one foundry::AllGather
// per parameter before the graph; the full initial values in the plan's init safetensors file).
// Run on every rank of an mpirun world (ctest runtime_data_parallel_trainer_test_np2 starts 2; the
// plain entry, one process, checks only the refusals). Every rank also trains the one-process plan
// with --grad-accum N*K over the same global batch, the reference:
//  - losses of every step and the final weights (gathered) bitwise equal, AdamW, K = 1 and 2;
//  - a save at N (sharded: model.safetensors and full-shape slots, no model.onnx) resumed at N
//    and in one process continues bitwise as an uninterrupted run; a one-process save resumed at
//    N too;
//  - the gradient norm and clipping within 1e-6 of the one-process run's (the sums split at the
//    shard boundaries: not bitwise);
//  - refusals: no communicator for a plan of N ranks, HYBRID_SHARD, a plan for one process on N.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

#include "compiler/plan.h"
#include "driver/compile.h"
#include "kernels/cpu/kernel.h"
#include "passes/memory_plan.h"
#include "runtime/mpi_communicator.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

Communicator* World() {
  if (LauncherWorldSize() == 0 || !BuiltWithMpi()) return nullptr;
  StatusOr<Communicator*> w = MpiWorld();
  EXPECT_TRUE(w.ok()) << w.status().message();
  return w.ok() ? *w : nullptr;
}

#define NEEDS_WORLD(comm)       \
  Communicator* comm = World(); \
  if (!comm)                    \
  GTEST_SKIP() << "needs mpirun (ctest runs it as runtime_data_parallel_trainer_test_np2)"

// A folder every rank sees by the same name (rank 0's pid), made empty by rank 0.
std::string SharedDir(Communicator* comm, const std::string& name) {
  int64_t pid = getpid();
  EXPECT_TRUE(comm->Broadcast(&pid, 8, 0).ok());
  const std::string dir =
      (fs::path(testing::TempDir()) / ("dp_" + std::to_string(pid) + "_" + name)).string();
  if (comm->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  EXPECT_TRUE(comm->Barrier().ok());
  return dir;
}

LoadedPlan CompileInMemory(int64_t k, const std::string& plan_dir) {
  CompileRequest c;
  c.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny/model.onnx";
  c.dims = {{"batch", 2}, {"seq", 16}};
  c.grad_accumulation = k;
  StatusOr<CompileResult> r = Compile(c);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  LoadedPlan lp;
  lp.plan_path = (fs::path(plan_dir) / ("k" + std::to_string(k) + ".plan")).string();
  lp.plan = *r->plan;
  lp.graph = std::move(r->graph);
  return lp;
}

Value& AddValue(Graph& g, const std::string& name, const Shape& shape) {
  Value& v = g.GetOrAddValue(name);
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = shape;
  v.dim_params.assign(shape.size(), "");
  v.rank_known = true;
  return v;
}

// passes/shard's output as docs/design.md §10 gives it, built by hand on a one-process plan of K
// microbatches. The init file is written beside the plan (sharded strategies).
LoadedPlan ShardByHand(LoadedPlan lp, int64_t N, const std::string& strategy, Communicator* comm) {
  Graph& g = lp.graph;
  ShardingPlan sharding;
  sharding.world_size = N;
  sharding.strategy = strategy;
  const bool sharded = strategy != "NO_SHARD";
  std::vector<Node> gathers;
  std::map<std::string, Tensor> init;
  for (const auto& P : lp.plan.parameters) {
    const std::string G = lp.plan.gradients.at(P);
    Value* v = g.FindValue(P);
    const Shape full = v->shape;
    int64_t numel = 1;
    for (int64_t d : full) numel *= d;
    const int64_t c = (numel + N - 1) / N;
    const std::string op = sharded ? "ReduceScatterGradient" : "AllReduceGradient";
    UseDef use = BuildUseDef(g);
    const int producer = use.Producer(G);
    Node& pn = g.nodes[static_cast<size_t>(producer)];
    if (pn.domain == "foundry" && pn.op_type == "AccumulateGradient") {
      pn.op_type = op;
      pn.attrs["world_size"] = Attribute::Int(N);
    } else {
      const std::string partial = g.UniqueValueName(G + ".partial");
      AddValue(g, partial, full);
      for (auto& out : pn.outputs)
        if (out == G) out = partial;
      for (int consumer : use.Consumers(G))
        for (auto& in : g.nodes[static_cast<size_t>(consumer)].inputs)
          if (in == G) in = partial;
      Node reduce;
      reduce.name = g.UniqueNodeName(G + ".reduce");
      reduce.op_type = op;
      reduce.domain = "foundry";
      reduce.inputs = {partial};
      reduce.outputs = {G};
      reduce.attrs["world_size"] = Attribute::Int(N);
      g.nodes.insert(g.nodes.begin() + producer + 1, reduce);
    }
    if (!sharded) continue;
    v = g.FindValue(P);
    init[P] = *v->data;
    v->data = nullptr;
    const std::string gathered = g.UniqueValueName(P + ".full");
    AddValue(g, gathered, full);
    for (Node& n : g.nodes)
      for (auto& in : n.inputs)
        if (in == P) in = gathered;
    AddValue(g, P, {c});
    AddValue(g, G, {c});
    Node gather;
    gather.name = g.UniqueNodeName(P + ".gather");
    gather.op_type = "AllGather";
    gather.domain = "foundry";
    gather.inputs = {P};
    gather.outputs = {gathered};
    gather.attrs["world_size"] = Attribute::Int(N);
    gathers.push_back(gather);
    sharding.parameters[P] = {full, c};
  }
  g.nodes.insert(g.nodes.begin(), gathers.begin(), gathers.end());
  if (sharded) {  // rank 0 writes the file, every rank reads it
    const std::string file = fs::path(lp.plan_path).stem().string() + ".init.safetensors";
    std::vector<std::pair<std::string, const Tensor*>> tensors;
    for (const auto& [name, t] : init) tensors.emplace_back(name, &t);
    if (comm->rank() == 0) {
      Status st =
          WriteSafetensors((fs::path(lp.plan_path).parent_path() / file).string(), tensors, {});
      EXPECT_TRUE(st.ok()) << st.message();
    }
    EXPECT_TRUE(comm->Barrier().ok());
    sharding.init_file = file;
  }
  lp.plan.sharding = sharding;
  StatusOr<MemoryPlan> memory = PlanMemory(g, {{"cpu", CpuWorkspaceBytes}});
  EXPECT_TRUE(memory.ok()) << memory.status().message();
  if (memory.ok()) lp.plan.memory = *memory;
  return lp;
}

std::unique_ptr<Trainer> Make(LoadedPlan lp, Communicator* comm, double clip = 0,
                              TrainerOptions o = {}) {
  o.comm = comm;
  o.clip_norm = clip;
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(std::move(lp), o);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Every parameter of a (possibly sharded) trainer, full: shards gathered from every rank.
std::map<std::string, Tensor> FullParameters(const Trainer& t, Communicator* comm) {
  std::map<std::string, Tensor> out;
  for (const auto& name : t.plan().plan.parameters) {
    const Tensor& p = t.parameter(name);
    if (!t.plan().plan.sharding || t.plan().plan.sharding->strategy == "NO_SHARD") {
      out[name] = p;
      continue;
    }
    const ShardedParameter& sp = t.plan().plan.sharding->parameters.at(name);
    Tensor all(DType::kFloat32, {comm->size() * sp.shard});
    EXPECT_TRUE(comm->AllGather(p.raw(), all.raw(), sp.shard * 4).ok());
    Tensor full(DType::kFloat32, sp.shape);
    std::memcpy(full.raw(), all.raw(), full.nbytes());
    out[name] = full;
  }
  return out;
}

double MaxRelative(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-30));
  }
  return worst;
}

bool Bitwise(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Case {
  std::string strategy;
  int64_t k;
};

class DataParallelTest : public testing::TestWithParam<Case> {};

TEST_P(DataParallelTest, NRanksEqualOneProcessOverTheSameGlobalBatchBitwise) {
  NEEDS_WORLD(comm);
  const Case& c = GetParam();
  const int64_t N = comm->size();
  const std::string dir = SharedDir(comm, c.strategy + std::to_string(c.k));
  auto one = Make(CompileInMemory(N * c.k, dir), nullptr);
  auto ranks = Make(ShardByHand(CompileInMemory(c.k, dir), N, c.strategy, comm), comm);
  ASSERT_TRUE(one && ranks);
  for (int step = 1; step <= 5; ++step) {
    StatusOr<StepReport> a = one->Step();
    StatusOr<StepReport> b = ranks->Step();
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(std::memcmp(&a->loss, &b->loss, 4), 0)
        << "step " << step << ": " << a->loss << " vs " << b->loss;
  }
  const auto want = one->parameters();
  const auto got = FullParameters(*ranks, comm);
  double worst = 0;
  for (const auto& [name, t] : want) {
    worst = std::max(worst, MaxRelative(got.at(name), t));
    EXPECT_TRUE(Bitwise(got.at(name), t)) << name;
  }
  if (comm->rank() == 0)
    std::cout << c.strategy << " K " << c.k << ": weights' max relative difference " << worst
              << "\n";
  if (comm->rank() == 0) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Strategies, DataParallelTest,
                         testing::Values(Case{"NO_SHARD", 1}, Case{"NO_SHARD", 2},
                                         Case{"FULL_SHARD", 1}, Case{"FULL_SHARD", 2}),
                         [](const testing::TestParamInfo<Case>& i) {
                           return i.param.strategy + "_K" + std::to_string(i.param.k);
                         });

// An MDS folder read shuffled: rank r reads the samples of global microbatch r, disjoint from the
// other ranks', together the one process's batch; the run is bitwise the one-process run.
TEST(DataParallelMdsTest, RanksReadDisjointSamplesOfTheOneProcessBatch) {
  NEEDS_WORLD(comm);
  const int64_t N = comm->size();
  const std::string dir = SharedDir(comm, "mds");
  TrainerOptions o;
  o.data_path = std::string(FOUNDRY_SOURCE_DIR) + "/tests/data/mds/mpt_tiny/train";
  o.mds.shuffle = true;
  o.mds.shuffle_block = 8;
  o.mds.drop_last = true;
  auto one = Make(CompileInMemory(N, dir), nullptr, 0, o);
  auto ranks = Make(ShardByHand(CompileInMemory(1, dir), N, "FULL_SHARD", comm), comm, 0, o);
  ASSERT_TRUE(one && ranks);
  // Step 1's samples: rank r's rows are positions r * batch + b.
  const DataSource& mine = ranks->data_source();
  std::vector<int64_t> samples(static_cast<size_t>(mine.batch)),
      all(static_cast<size_t>(N * mine.batch));
  for (int64_t b = 0; b < mine.batch; ++b)
    samples[static_cast<size_t>(b)] = mine.mds_order->Sample(comm->rank() * mine.batch + b);
  ASSERT_TRUE(comm->AllGather(samples.data(), all.data(), mine.batch * 8).ok());
  std::set<int64_t> distinct(all.begin(), all.end()), want;
  for (int64_t p = 0; p < N * mine.batch; ++p) want.insert(one->data_source().mds_order->Sample(p));
  EXPECT_EQ(distinct.size(), all.size());
  EXPECT_EQ(distinct, want);
  for (int step = 1; step <= 5; ++step) {
    StatusOr<StepReport> a = one->Step(), b = ranks->Step();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().message() << b.status().message();
    EXPECT_EQ(std::memcmp(&a->loss, &b->loss, 4), 0)
        << step << ": " << a->loss << " vs " << b->loss;
  }
  const auto got = FullParameters(*ranks, comm);
  for (const auto& [name, t] : one->parameters()) EXPECT_TRUE(Bitwise(got.at(name), t)) << name;
  if (comm->rank() == 0) fs::remove_all(dir);
}

// Saves at N (sharded) and in one process, resumed on the other: every continuation bitwise the
// uninterrupted one-process run.
TEST(DataParallelSaveTest, SavesResumeOnAnyWorldSizeBitwise) {
  NEEDS_WORLD(comm);
  const int64_t N = comm->size();
  const std::string dir = SharedDir(comm, "save");
  auto sharded_plan = [&] { return ShardByHand(CompileInMemory(1, dir), N, "FULL_SHARD", comm); };
  // The uninterrupted reference: 6 steps in one process.
  auto ref = Make(CompileInMemory(N, dir), nullptr);
  ASSERT_TRUE(ref);
  std::vector<float> ref_losses;
  for (int i = 0; i < 6; ++i) {
    auto s = ref->Step();
    ASSERT_TRUE(s.ok()) << s.status().message();
    ref_losses.push_back(s->loss);
  }
  const std::string at_n = dir + "/at_n", at_one = dir + "/at_one";
  {
    auto t = Make(sharded_plan(), comm);
    ASSERT_TRUE(t);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->Step().ok());
    Status st = comm->rank() == 0 ? t->Save(at_n) : t->JoinSave();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  EXPECT_FALSE(fs::exists(at_n + "/model.onnx"));  // a sharded graph cannot hold full weights
  auto saved = ReadSafetensors(at_n + "/model.safetensors");
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  EXPECT_EQ(saved->tensors.size(), ref->plan().plan.parameters.size());
  if (comm->rank() == 0) {
    auto one = Make(CompileInMemory(N, dir), nullptr);
    ASSERT_TRUE(one);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(one->Step().ok());
    ASSERT_TRUE(one->Save(at_one).ok());
  }
  ASSERT_TRUE(comm->Barrier().ok());
  auto continue_from = [&](std::unique_ptr<Trainer> t, const std::string& from, const char* what) {
    ASSERT_TRUE(t);
    Status st = t->Resume(from);
    ASSERT_TRUE(st.ok()) << st.message();
    for (int i = 3; i < 6; ++i) {
      auto s = t->Step();
      ASSERT_TRUE(s.ok()) << s.status().message();
      EXPECT_EQ(std::memcmp(&s->loss, &ref_losses[static_cast<size_t>(i)], 4), 0)
          << what << ", step " << i + 1 << ": " << s->loss << " vs "
          << ref_losses[static_cast<size_t>(i)];
    }
    const auto want = ref->parameters();
    const auto got = t->world_size() > 1 ? FullParameters(*t, comm) : t->parameters();
    for (const auto& [name, w] : want)
      EXPECT_TRUE(Bitwise(got.at(name), w)) << what << ": " << name;
  };
  continue_from(Make(sharded_plan(), comm), at_n, "N-rank save resumed on N ranks");
  continue_from(Make(CompileInMemory(N, dir), nullptr), at_n, "N-rank save resumed in one process");
  continue_from(Make(sharded_plan(), comm), at_one, "one-process save resumed on N ranks");
  ASSERT_TRUE(comm->Barrier().ok());
  if (comm->rank() == 0) fs::remove_all(dir);
}

TEST(DataParallelNormTest, GradientNormAndClippingWithinTheIssuesBound) {
  NEEDS_WORLD(comm);
  const int64_t N = comm->size();
  const std::string dir = SharedDir(comm, "norm");
  auto one = Make(CompileInMemory(N, dir), nullptr, 0.05);
  auto ranks = Make(ShardByHand(CompileInMemory(1, dir), N, "FULL_SHARD", comm), comm, 0.05);
  ASSERT_TRUE(one && ranks);
  double worst_norm = 0, worst_loss = 0;
  for (int step = 1; step <= 5; ++step) {
    auto a = one->Step();
    auto b = ranks->Step();
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(a->grad_norm && b->grad_norm);
    worst_norm =
        std::max(worst_norm, std::abs(double(*a->grad_norm) - *b->grad_norm) / *a->grad_norm);
    worst_loss = std::max(worst_loss, std::abs(double(a->loss) - b->loss) / std::abs(a->loss));
  }
  double worst_weight = 0;
  const auto want = one->parameters();
  const auto got = FullParameters(*ranks, comm);
  for (const auto& [name, w] : want)
    worst_weight = std::max(worst_weight, MaxRelative(got.at(name), w));
  if (comm->rank() == 0)
    std::cout << "clip 0.05: norm " << worst_norm << ", loss " << worst_loss << ", weights "
              << worst_weight << " max relative difference\n";
  EXPECT_LT(worst_norm, 1e-6);
  EXPECT_LT(worst_loss, 1e-6);
  EXPECT_LT(worst_weight, 1e-5);
  if (comm->rank() == 0) fs::remove_all(dir);
}

TEST(DataParallelRefusalTest, PlansAndWorldsThatDoNotMatch) {
  const std::string dir = testing::TempDir();
  LoadedPlan lp = CompileInMemory(1, dir);
  ShardingPlan s;
  s.world_size = 2;
  s.strategy = "NO_SHARD";
  {
    LoadedPlan p = lp;
    p.plan.sharding = s;
    auto t = Trainer::Create(std::move(p), TrainerOptions{});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().message(),
              BuiltWithMpi() ? "this plan is for 2 ranks; run it with mpirun -n 2 foundry-run ..."
                             : "this plan is for 2 ranks and foundry was built without MPI; "
                               "install it (scripts/setup.sh), rebuild, and run it with mpirun "
                               "-n 2 foundry-run ...");
  }
  {
    LoadedPlan p = lp;
    s.strategy = "HYBRID_SHARD";
    p.plan.sharding = s;
    auto t = Trainer::Create(std::move(p), TrainerOptions{});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().message(),
              "'" + lp.plan_path +
                  "' is sharded HYBRID_SHARD, which foundry plans but does not run yet; compile "
                  "it with --sharding FULL_SHARD, SHARD_GRAD_OP or NO_SHARD");
  }
  Communicator* comm = World();
  if (!comm || comm->size() < 2) GTEST_SKIP() << "the world check needs mpirun";
  TrainerOptions o;
  o.comm = comm;
  auto t = Trainer::Create(lp, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "'" + lp.plan_path + "' is a plan for one process and this run has " +
                std::to_string(comm->size()) +
                " ranks; compile it with foundry-compile "
                "--world-size " +
                std::to_string(comm->size()) + " --sharding FULL_SHARD (or run it without mpirun)");
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef NEEDS_WORLD
