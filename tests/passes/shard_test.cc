// The shard pass (passes/shard.h) through the compile foundry-compile runs (driver/compile.h), on
// the committed mpt_tiny fixture: the structure each sharding strategy gives (shards, gathers per
// unit and phase, gradient collectives), where the schedule puts the gathers, the per-rank bytes
// of the memory plan, the communication figures, the plan file's sharding section, and the
// errors.
#include "passes/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "compiler/memory_liveness.h"
#include "compiler/phase.h"
#include "compiler/plan.h"
#include "compiler/verifier.h"
#include "driver/compile.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

const std::string kModel =
    (fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures/mpt_tiny/model.onnx").string();

CompileResult CompileTiny(int64_t world, ShardingStrategy s, int64_t accum = 1,
                          std::vector<CkptTarget> ckpt = {}, const std::string& mixed = "") {
  CompileRequest r;
  r.model = kModel;
  r.dims = {{"batch", 2}, {"seq", 16}};
  r.world_size = world;
  r.sharding = s;
  r.grad_accumulation = accum;
  r.ckpt_targets = std::move(ckpt);
  if (!mixed.empty()) {
    r.precision = Precision::kAmpBf16;
    auto mp = ParseFsdpMixedPrecision(mixed, DType::kBFloat16);
    EXPECT_TRUE(mp.ok()) << mp.status().message();
    if (mp.ok()) r.mixed_precision = *mp;
  }
  auto c = Compile(r);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : CompileResult{};
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<const Node*> NodesOf(const Graph& g, const std::string& op) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes)
    if (n.domain == "foundry" && n.op_type == op) out.push_back(&n);
  return out;
}

TEST(ShardPassTest, OneRankChangesNothing) {
  CompileResult one = CompileTiny(1, ShardingStrategy::kFullShard);
  EXPECT_FALSE(one.shard);
  EXPECT_FALSE(one.plan->sharding);
  EXPECT_TRUE(NodesOf(one.graph, "AllGather").empty());
  EXPECT_TRUE(NodesOf(one.graph, "ReduceScatterGradient").empty());
}

TEST(ShardPassTest, FullShardShardsEveryParameterAndGathersEachBlockTwice) {
  CompileResult plain = CompileTiny(1, ShardingStrategy::kFullShard);
  CompileResult c = CompileTiny(2, ShardingStrategy::kFullShard);
  ASSERT_TRUE(c.shard && c.plan && c.plan->sharding);
  ASSERT_TRUE(VerifyGraph(c.graph).ok());
  const Graph& g = c.graph;
  // Every parameter: this rank's f32 [ceil(numel / 2)], without data; the gradient the same.
  int64_t shard_bytes = 0;
  for (size_t i = 0; i < g.parameters.size(); ++i) {
    const std::string& p = g.parameters[i];
    const Value& full = *plain.graph.FindValue(p);
    const Value& v = *g.FindValue(p);
    const int64_t c2 = (Numel(full.shape) + 1) / 2;
    EXPECT_EQ(v.shape, Shape{c2}) << p;
    EXPECT_EQ(v.data, nullptr) << p;
    EXPECT_EQ(g.FindValue(g.outputs[i + 1])->shape, Shape{c2}) << p;
    EXPECT_EQ(c.plan->sharding->parameters.at(p).shape, full.shape) << p;
    EXPECT_EQ(c.plan->sharding->parameters.at(p).shard, c2) << p;
    ASSERT_TRUE(c.shard_init.count(p)) << p;  // the fixture has weights: kept for the init file
    EXPECT_EQ(c.shard_init.at(p)->shape(), full.shape) << p;
    shard_bytes += c2 * 4;
  }
  // The plan holds one rank's parameters, gradients and AdamW slots.
  EXPECT_EQ(c.plan->memory.outside[MemoryClass::kParameter], shard_bytes);
  // One graph run per step: the gradient shards live in the arena from their reduce-scatter on.
  EXPECT_TRUE(c.plan->memory.gradients_in_arena);
  EXPECT_EQ(c.plan->memory.outside[MemoryClass::kGradient], 0);
  EXPECT_EQ(c.report->arena_gradient_bytes, shard_bytes);
  EXPECT_EQ(c.plan->memory.outside[MemoryClass::kOptimizerState], 2 * shard_bytes);
  EXPECT_EQ(c.shard->shard_param_bytes, shard_bytes);
  EXPECT_EQ(c.shard->full_param_bytes, plain.plan->memory.outside[MemoryClass::kParameter]);
  // One reduce-scatter per gradient, nothing accumulates otherwise.
  EXPECT_EQ(NodesOf(g, "ReduceScatterGradient").size(), g.parameters.size());
  EXPECT_TRUE(NodesOf(g, "AccumulateGradient").empty());
  // mpt_tiny has 2 blocks: each gathered before its forward and its backward; the root once.
  std::multiset<std::string> scopes;
  for (const Node* n : NodesOf(g, "AllGather")) {
    scopes.insert(n->scope);
    EXPECT_EQ(n->GetInt("world_size", 0), 2);
  }
  EXPECT_EQ(scopes.count("transformer.blocks.0"), 2u);
  EXPECT_EQ(scopes.count("transformer.blocks.1"), 2u);
  EXPECT_EQ(scopes.count(""), 1u);
  EXPECT_EQ(scopes.size(), 5u);
  ASSERT_EQ(c.shard->units.size(), 3u);
  EXPECT_EQ(c.shard->units[0].path, "");
}

// FSDP's resharding: a block's forward gather is read by forward nodes only, and its backward
// gather by backward and recompute nodes only; each gather is scheduled right before its first
// reader (only other pulled nodes between).
TEST(ShardPassTest, GathersAreFreedAfterTheirPhaseAndRunJustBeforeUse) {
  CompileResult c = CompileTiny(2, ShardingStrategy::kFullShard);
  const Graph& g = c.graph;
  const UseDef use = BuildUseDef(g);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.op_type != "AllGather") continue;
    const bool backward = PhaseOf(n) == Phase::kBackward;
    size_t first = g.nodes.size();
    for (const auto& out : n.outputs)
      for (int r : use.Consumers(out)) {
        first = std::min(first, static_cast<size_t>(r));
        const auto phase = PhaseOf(g.nodes[static_cast<size_t>(r)]);
        if (n.scope.empty()) continue;  // the root unit serves both phases
        if (backward)
          EXPECT_TRUE(phase == Phase::kBackward || phase == Phase::kRecompute) << n.name;
        else
          EXPECT_TRUE(!phase || phase == Phase::kForward) << n.name;
      }
    ASSERT_LT(first, g.nodes.size()) << n.name;
    for (size_t m = k + 1; m < first; ++m)
      EXPECT_TRUE(g.nodes[m].op_type == "AllGather" || PhaseOf(g.nodes[m]) == Phase::kRecompute)
          << n.name << " is scheduled at " << k << ", its first reader at " << first << ", with "
          << g.nodes[m].Describe() << " between";
  }
}

// FSDP reshards a unit at its post-backward hook: the unit's last gather (the backward's under
// FULL_SHARD, the only one under SHARD_GRAD_OP and for the root) is live until the last node that
// makes one of the unit's gradients, which the shard pass marks (kHoldsMark), and the memory plan
// keeps it that long.
TEST(ShardPassTest, GatheredParametersLiveUntilTheUnitsLastGradient) {
  for (ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
    CompileResult c = CompileTiny(2, s);
    const Graph& g = c.graph;
    const UseDef use = BuildUseDef(g);
    const GraphIndex ix(g, c.plan->memory.gradients_in_arena);
    // Per unit (the gather's scope), its last gather's outputs.
    std::map<std::string, std::vector<std::string>> last_gather;
    for (const Node& n : g.nodes)
      if (n.op_type == "AllGather") last_gather[n.scope] = n.outputs;
    ASSERT_GE(last_gather.size(), 3u);         // two blocks and the root
    std::map<std::string, int64_t> last_grad;  // per unit: the last step making a gradient
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const Node& n = g.nodes[k];
      if (n.op_type != "ReduceScatterGradient") continue;
      // The gradient's maker: through the Casts that widen it (none in fp32).
      int maker = use.Producer(n.inputs[0]);
      ASSERT_GE(maker, 0) << n.name;
      const Node& m = g.nodes[static_cast<size_t>(maker)];
      auto mark = m.marks.find(kHoldsMark);
      ASSERT_NE(mark, m.marks.end()) << m.name << " makes " << n.outputs[0];
      const std::vector<std::string> held = HeldValues(mark->second);
      ASSERT_FALSE(held.empty());
      std::string unit;
      for (const auto& [scope, outs] : last_gather)
        if (std::find(outs.begin(), outs.end(), held[0]) != outs.end()) unit = scope;
      EXPECT_EQ(std::set<std::string>(held.begin(), held.end()),
                std::set<std::string>(last_gather[unit].begin(), last_gather[unit].end()))
          << m.name;
      last_grad[unit] = std::max(last_grad[unit], static_cast<int64_t>(maker));
    }
    for (const auto& [unit, outs] : last_gather)
      for (const std::string& v : outs) {
        EXPECT_GE(ix.LastRead(v), last_grad.at(unit)) << v << " of unit '" << unit << "'";
      }
  }
}

TEST(ShardPassTest, ShardGradOpGathersOncePerUnit) {
  CompileResult c = CompileTiny(2, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(NodesOf(c.graph, "AllGather").size(), 3u);
  EXPECT_EQ(NodesOf(c.graph, "ReduceScatterGradient").size(), c.graph.parameters.size());
  EXPECT_EQ(c.plan->sharding->strategy, "SHARD_GRAD_OP");
  // Keeping the gathered parameters from forward to backward costs arena bytes FULL_SHARD frees.
  CompileResult full = CompileTiny(2, ShardingStrategy::kFullShard);
  EXPECT_GE(c.plan->memory.layouts[0].arena_bytes, full.plan->memory.layouts[0].arena_bytes);
}

TEST(ShardPassTest, NoShardKeepsParametersAndAllReducesGradients) {
  CompileResult plain = CompileTiny(1, ShardingStrategy::kNoShard);
  CompileResult c = CompileTiny(2, ShardingStrategy::kNoShard);
  EXPECT_TRUE(NodesOf(c.graph, "AllGather").empty());
  EXPECT_EQ(NodesOf(c.graph, "AllReduceGradient").size(), c.graph.parameters.size());
  EXPECT_EQ(c.plan->memory.outside[MemoryClass::kParameter],
            plain.plan->memory.outside[MemoryClass::kParameter]);
  EXPECT_EQ(c.plan->memory.outside[MemoryClass::kOptimizerState],
            plain.plan->memory.outside[MemoryClass::kOptimizerState]);
  EXPECT_TRUE(c.plan->sharding->parameters.empty());
  EXPECT_TRUE(c.shard_init.empty());
}

TEST(ShardPassTest, AccumulationNodesBecomeTheCollectives) {
  CompileResult c = CompileTiny(2, ShardingStrategy::kFullShard, /*accum=*/4);
  EXPECT_TRUE(NodesOf(c.graph, "AccumulateGradient").empty());
  EXPECT_EQ(NodesOf(c.graph, "ReduceScatterGradient").size(), c.graph.parameters.size());
  EXPECT_EQ(c.plan->grad_accumulation, 4);
  ASSERT_TRUE(c.comm);
  EXPECT_EQ(c.comm->runs, 4);
}

TEST(ShardPassTest, CheckpointedBlocksRecomputeFromTheBackwardGather) {
  CompileResult c =
      CompileTiny(2, ShardingStrategy::kFullShard, 1, {CkptTarget{"mptblock", {}, {}}});
  const Graph& g = c.graph;
  int recompute_reading_gather = 0;
  const UseDef use = BuildUseDef(g);
  for (const Node& n : g.nodes) {
    if (n.op_type != "AllGather" || PhaseOf(n) != Phase::kBackward) continue;
    for (const auto& out : n.outputs)
      for (int r : use.Consumers(out))
        if (PhaseOf(g.nodes[static_cast<size_t>(r)]) == Phase::kRecompute)
          ++recompute_reading_gather;
  }
  EXPECT_GT(recompute_reading_gather, 0);
}

// What one rank moves, counted from the plan's shard sizes: each gathered parameter's shard once
// per gather that reads it (N - 1 = 1 shard received each time: a block's weights twice, its
// biases, which no backward node reads, once), every gradient reduce-scattered (1 shard sent).
TEST(ShardPassTest, CommunicationPerStep) {
  CompileResult c = CompileTiny(2, ShardingStrategy::kFullShard, 3);
  int64_t gathered = 0, reduced = 0;
  for (const Node* n : NodesOf(c.graph, "AllGather"))
    for (const auto& p : n->inputs) gathered += c.plan->sharding->parameters.at(p).shard * 4;
  for (const auto& [p, sp] : c.plan->sharding->parameters) reduced += sp.shard * 4;
  const int64_t half = c.shard->shard_param_bytes;  // one gather of everything
  EXPECT_GT(gathered, half);                        // the blocks' weights twice
  EXPECT_LT(gathered, 2 * half);                    // the root once
  ASSERT_TRUE(c.comm);
  EXPECT_EQ(c.comm->gather_bytes, gathered);
  EXPECT_EQ(c.comm->reduce_bytes, reduced);
  EXPECT_EQ(c.comm->PerStep(), 3 * (gathered + reduced));
  EXPECT_DOUBLE_EQ(c.comm->Seconds(8.0), 3.0 * static_cast<double>(gathered + reduced) / 1e9);
}

// FSDP mixed precision (compiler/sharding.h) as Composer maps llm-foundry's names.
TEST(ShardPassTest, MixedPrecisionNames) {
  auto full = ParseFsdpMixedPrecision("FULL", DType::kBFloat16);
  auto def = ParseFsdpMixedPrecision("default", DType::kBFloat16);
  auto pure = ParseFsdpMixedPrecision("PURE", DType::kBFloat16);
  auto fp32 = ParseFsdpMixedPrecision("DEFAULT", DType::kFloat32);
  auto dict =
      ParseFsdpMixedPrecision("param_dtype=bf16, reduce_dtype=torch.float32", DType::kBFloat16);
  ASSERT_TRUE(full.ok() && def.ok() && pure.ok() && fp32.ok() && dict.ok());
  EXPECT_EQ(MixedPrecisionDTypes(*full), "param f32, reduce f32, buffers f32");
  EXPECT_EQ(MixedPrecisionDTypes(*def), "param bf16, reduce f32, buffers bf16");
  EXPECT_EQ(MixedPrecisionDTypes(*pure), "param bf16, reduce bf16, buffers bf16");
  EXPECT_EQ(MixedPrecisionDTypes(*fp32), "param f32, reduce f32, buffers f32");
  EXPECT_EQ(MixedPrecisionDTypes(*dict), "param bf16, reduce f32, buffers f32");  // None: f32
  EXPECT_EQ(def->name, "DEFAULT");
  for (const char* bad : {"HALF", "param_dtype=fp16", "param_dtype=bf16,param_dtype=bf16",
                          "grad_dtype=bf16", "param_dtype=int8"}) {
    auto r = ParseFsdpMixedPrecision(bad, DType::kBFloat16);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_FALSE(ParseFsdpMixedPrecision("param_dtype=bf16", DType::kFloat32).ok());
}

// DEFAULT and PURE: every parameter is read through one bf16 copy, which the gathers write
// straight from a bf16 shard (half FULL's bytes on the link); PURE reduces bf16 gradients, DEFAULT
// their f32 widening; the verifier accepts every graph, and the per-rank plan shrinks.
TEST(ShardPassTest, MixedPrecisionGathersBf16AndReducesInItsType) {
  CompileResult full = CompileTiny(2, ShardingStrategy::kFullShard, 1, {}, "FULL");
  CompileResult def = CompileTiny(2, ShardingStrategy::kFullShard, 1, {}, "DEFAULT");
  CompileResult pure = CompileTiny(2, ShardingStrategy::kFullShard, 1, {}, "PURE");
  for (const CompileResult* c : {&full, &def, &pure}) {
    ASSERT_TRUE(c->plan);
    EXPECT_TRUE(VerifyGraph(c->graph).ok());
  }
  auto gather_types = [](const Graph& g) {
    std::set<DType> types;
    for (const Node* n : NodesOf(g, "AllGather"))
      for (const auto& o : n->outputs) types.insert(g.FindValue(o)->dtype);
    return types;
  };
  auto reduce_types = [](const Graph& g) {
    std::set<DType> types;
    for (const Node* n : NodesOf(g, "ReduceScatterGradient"))
      types.insert(g.FindValue(n->inputs[0])->dtype);
    return types;
  };
  EXPECT_EQ(gather_types(full.graph), std::set<DType>{DType::kFloat32});
  EXPECT_EQ(gather_types(def.graph), std::set<DType>{DType::kBFloat16});
  EXPECT_EQ(gather_types(pure.graph), std::set<DType>{DType::kBFloat16});
  EXPECT_EQ(reduce_types(def.graph), std::set<DType>{DType::kFloat32});
  EXPECT_EQ(reduce_types(pure.graph), std::set<DType>{DType::kBFloat16});
  // Each gather reads the bf16 casts of the shards, placed just before it.
  for (const Node* n : NodesOf(def.graph, "AllGather"))
    for (const auto& in : n->inputs) {
      EXPECT_EQ(def.graph.FindValue(in)->dtype, DType::kBFloat16) << in;
      EXPECT_NE(in.find("/shard_bf16"), std::string::npos) << in;
    }
  // Parameters, gradients and optimizer state stay f32 shards.
  for (size_t i = 0; i < pure.graph.parameters.size(); ++i) {
    EXPECT_EQ(pure.graph.FindValue(pure.graph.parameters[i])->dtype, DType::kFloat32);
    EXPECT_EQ(pure.graph.FindValue(pure.graph.outputs[i + 1])->dtype, DType::kFloat32);
  }
  ASSERT_TRUE(full.comm && def.comm && pure.comm);
  EXPECT_EQ(2 * def.comm->gather_bytes, full.comm->gather_bytes);
  EXPECT_EQ(def.comm->reduce_bytes, full.comm->reduce_bytes);
  EXPECT_EQ(2 * pure.comm->reduce_bytes, full.comm->reduce_bytes);
  EXPECT_LT(def.report->layout.total_bytes, full.report->layout.total_bytes);
  EXPECT_LE(pure.report->layout.total_bytes, def.report->layout.total_bytes);
  // The report and the budget answers say which mixed precision they plan.
  EXPECT_NE(def.shard->ToString().find("FULL_SHARD"), std::string::npos);
}

// One FSDP rank under DEFAULT (no shard pass): the forward computes on bf16 weights — every
// parameter read only through its one bf16 Cast — so the residual stream and the norms' outputs
// are bf16 (statistics f32), the loss f32; parameters and gradients f32. Against FULL (autocast
// alone, norms in f32) it saves fewer bytes.
TEST(ShardPassTest, OneFsdpRankComputesOnBf16Weights) {
  CompileResult def = CompileTiny(1, ShardingStrategy::kFullShard, 1, {}, "DEFAULT");
  CompileResult full = CompileTiny(1, ShardingStrategy::kFullShard, 1, {}, "FULL");
  ASSERT_TRUE(def.plan && full.plan);
  const Graph& g = def.graph;
  const UseDef use = BuildUseDef(g);
  for (const std::string& p : g.parameters) {
    EXPECT_EQ(g.FindValue(p)->dtype, DType::kFloat32) << p;
    for (int c : use.Consumers(p)) {
      const Node& n = g.nodes[static_cast<size_t>(c)];
      EXPECT_TRUE(n.op_type == "Cast" && n.GetInt("to", 0) == int64_t(DType::kBFloat16))
          << p << " read by " << n.Describe();
    }
  }
  int norms = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type != "LayerNormalization" || PhaseOf(n) != Phase::kForward) continue;
    ++norms;
    EXPECT_EQ(g.FindValue(n.outputs[0])->dtype, DType::kBFloat16) << n.Describe();
    if (n.outputs.size() > 1 && !n.outputs[1].empty())
      EXPECT_EQ(g.FindValue(n.outputs[1])->dtype, DType::kFloat32) << n.Describe();
  }
  EXPECT_GT(norms, 0);
  EXPECT_EQ(g.FindValue(g.outputs[0])->dtype, DType::kFloat32);
  for (size_t i = 1; i < g.outputs.size(); ++i)
    EXPECT_EQ(g.FindValue(g.outputs[i])->dtype, DType::kFloat32) << g.outputs[i];
  EXPECT_LT(def.report->saved_for_backward_bytes, full.report->saved_for_backward_bytes);
}

TEST(ShardPassTest, PlanFileRoundTripsTheShardingSection) {
  CompileResult c = CompileTiny(2, ShardingStrategy::kFullShard);
  c.plan->sharding->init_file = "p.init.safetensors";
  auto json = PlanToJson(*c.plan);
  ASSERT_TRUE(json.ok());
  auto back = ParsePlan(*json, "p.plan");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->sharding);
  EXPECT_EQ(back->sharding->world_size, 2);
  EXPECT_EQ(back->sharding->strategy, "FULL_SHARD");
  EXPECT_EQ(back->sharding->shard_group, 2);
  EXPECT_EQ(back->sharding->init_file, "p.init.safetensors");
  EXPECT_EQ(back->sharding->parameters.size(), c.plan->parameters.size());
  for (const auto& [name, sp] : c.plan->sharding->parameters) {
    EXPECT_EQ(back->sharding->parameters.at(name).shape, sp.shape);
    EXPECT_EQ(back->sharding->parameters.at(name).shard, sp.shard);
  }
}

TEST(ShardPassTest, DamagedShardingSectionsAreRefused) {
  CompileResult c = CompileTiny(2, ShardingStrategy::kFullShard);
  const std::string name = c.plan->parameters[0];
  auto with = [&](auto edit) {
    Plan p = *c.plan;
    edit(*p.sharding);
    auto json = PlanToJson(p);
    EXPECT_TRUE(json.ok());
    auto back = ParsePlan(*json, "p.plan");
    return back.ok() ? std::string() : back.status().message();
  };
  const std::string fix = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";
  EXPECT_EQ(with([](ShardingPlan& s) { s.strategy = "ZERO_3"; }),
            "'p.plan' is a damaged foundry plan (sharding: strategy 'ZERO_3' is not one of "
            "NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD)" +
                fix);
  EXPECT_EQ(with([](ShardingPlan& s) { s.shard_group = 3; }),
            "'p.plan' is a damaged foundry plan (sharding: shard_group 3 does not divide "
            "world_size 2)" +
                fix);
  EXPECT_EQ(with([&](ShardingPlan& s) {
              s.parameters[name].shard += 1;
            }).find("the shard of '" + name + "' is "),
            std::string("'p.plan' is a damaged foundry plan (sharding: ").size());
  EXPECT_EQ(with([&](ShardingPlan& s) { s.parameters.erase(name); }),
            "'p.plan' is a damaged foundry plan (sharding: every parameter is sharded under "
            "FULL_SHARD)" +
                fix);
  EXPECT_EQ(with([&](ShardingPlan& s) { s.parameters["nope"] = s.parameters[name]; }),
            "'p.plan' is a damaged foundry plan (sharding: 'nope' is not a parameter of the "
            "plan)" +
                fix);
}

TEST(ShardPassTest, Errors) {
  CompileRequest r;
  r.model = kModel;
  r.dims = {{"batch", 2}, {"seq", 16}};
  r.world_size = 4;
  r.sharding = ShardingStrategy::kHybridShard;
  r.shard_group = 3;
  auto c = Compile(r);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "HYBRID_SHARD over 4 ranks needs a shard group of 2 or more ranks that divides the "
            "world size; give --shard-group G with 4 % G == 0 (G = GPUs per node)");
  r.world_size = 2;
  r.sharding = ShardingStrategy::kFullShard;
  r.training = false;
  c = Compile(r);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "--world-size plans a rank of a training step; drop --forward-only");
}

TEST(ShardPassTest, HybridShardPlansFullShardInsideTheGroup) {
  CompileRequest r;
  r.model = kModel;
  r.dims = {{"batch", 2}, {"seq", 16}};
  r.world_size = 4;
  r.sharding = ShardingStrategy::kHybridShard;
  r.shard_group = 2;
  auto c = Compile(r);
  ASSERT_TRUE(c.ok()) << c.status().message();
  CompileResult full = CompileTiny(2, ShardingStrategy::kFullShard);
  EXPECT_EQ(c->plan->memory.outside[MemoryClass::kParameter],
            full.plan->memory.outside[MemoryClass::kParameter]);
  EXPECT_EQ(c->plan->sharding->shard_group, 2);
  EXPECT_EQ(c->plan->sharding->world_size, 4);
  // The gradient shards are all-reduced across the 2 replicas on top of FULL_SHARD's traffic.
  EXPECT_GT(c->comm->reduce_bytes, full.comm->reduce_bytes);
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
