// The plan file, format version 2: the memory section round-trips, older formats and damaged
// memory sections are refused with a "recompile" message, and no mutation of a plan crashes
// ReadPlan or the memory plan checker.
#include "compiler/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "compiler/text.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr const char* kTinyLm = R"(graph tiny_lm opset=17 {
  input input_ids : i64[2,4]
  param emb : f32[8,3]
  param "head.weight" : f32[3,8]
  const shape : i64[2] = [8, 3]
  x = Gather(emb, input_ids)
  flat = Reshape(x, shape)
  h = MatMul(flat, "head.weight")
  r = Relu(h)
  output r
})";

const std::string kFix = "; recompile it with foundry-compile MODEL.onnx -o PREFIX";

class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto parsed = ParseGraph(kTinyLm);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    graph_ = std::move(parsed).value();
    Status st = RunPasses(graph_, BuildPipeline(CompileOptions{}), PipelineOptions{});
    ASSERT_TRUE(st.ok()) << st.message();
    plan_.graph_file = "tiny.train.onnx";
    plan_.source_model = "tiny.onnx";
    plan_.loss = graph_.metadata["foundry.loss"];
    plan_.loss_in_model = false;
    plan_.inputs = graph_.inputs;
    plan_.parameters = graph_.parameters;
    for (size_t i = 0; i < graph_.parameters.size(); ++i)
      plan_.gradients[graph_.parameters[i]] = graph_.outputs[i + 1];
    // Two backends; one with scratch for every MatMul, so the workspace section is not empty.
    WorkspaceFn scratch = [](const Graph&, const Node& n) -> int64_t {
      return n.op_type == "MatMul" || n.op_type == "FusedMatMul" ? 300 : 0;
    };
    auto memory = PlanMemory(graph_, {{"cpu", nullptr}, {"scratch", scratch}});
    ASSERT_TRUE(memory.ok()) << memory.status().message();
    plan_.memory = std::move(memory).value();
  }
  std::string Path() const { return dir_ / "p.plan"; }
  // The plan's JSON with `edit` applied, written to Path().
  void WriteEdited(const std::function<void(nlohmann::json&)>& edit) {
    auto text = PlanToJson(plan_);
    ASSERT_TRUE(text.ok());
    nlohmann::json j = nlohmann::json::parse(*text);
    edit(j);
    dir_.File("p.plan", j.dump());
  }
  std::string ReadError() {
    auto p = ReadPlan(Path());
    return p.ok() ? "ok" : p.status().message();
  }

  TempDir dir_;
  Graph graph_;
  Plan plan_;
};

TEST_F(PlanFileTest, MemoryRoundTrips) {
  ASSERT_TRUE(WritePlan(plan_, Path()).ok());
  auto back = ReadPlan(Path());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->version, 2);
  const MemoryPlan& a = plan_.memory;
  const MemoryPlan& b = back->memory;
  EXPECT_EQ(b.schedule, a.schedule);
  ASSERT_EQ(b.alias.size(), a.alias.size());
  EXPECT_FALSE(a.alias.empty());
  for (const auto& [v, alias] : a.alias) {
    EXPECT_EQ(b.alias.at(v).owner, alias.owner) << v;
    EXPECT_EQ(b.alias.at(v).kind, alias.kind) << v;
  }
  ASSERT_EQ(b.layouts.size(), 2u);
  for (const BackendLayout& la : a.layouts) {
    const BackendLayout* lb = b.Layout(la.backend);
    ASSERT_NE(lb, nullptr) << la.backend;
    EXPECT_EQ(lb->arena_bytes, la.arena_bytes);
    EXPECT_EQ(lb->lower_bound_bytes, la.lower_bound_bytes);
    EXPECT_EQ(lb->peak_step, la.peak_step);
    EXPECT_EQ(lb->offsets, la.offsets);
    EXPECT_EQ(lb->workspace_bytes, la.workspace_bytes);
    EXPECT_EQ(lb->workspace_offsets, la.workspace_offsets);
  }
  int64_t scratch = 0;
  for (int64_t w : b.Layout("scratch")->workspace_bytes) scratch += w;
  EXPECT_GT(scratch, 0);
  EXPECT_EQ(b.outside[MemoryClass::kParameter], a.outside[MemoryClass::kParameter]);
  EXPECT_EQ(b.outside[MemoryClass::kGradient], a.outside[MemoryClass::kGradient]);
  EXPECT_EQ(b.outside[MemoryClass::kOutput], a.outside[MemoryClass::kOutput]);
  EXPECT_EQ(b.outside[MemoryClass::kInput], a.outside[MemoryClass::kInput]);
  EXPECT_EQ(b.outside[MemoryClass::kConstant], a.outside[MemoryClass::kConstant]);
  EXPECT_EQ(b.outside[MemoryClass::kOptimizerState], a.outside[MemoryClass::kOptimizerState]);
  EXPECT_TRUE(CheckMemoryPlan(graph_, b).ok());
}

TEST_F(PlanFileTest, VersionOneIsRefused) {
  WriteEdited([](nlohmann::json& j) {
    j["version"] = 1;
    j.erase("memory");
  });
  EXPECT_EQ(ReadError(),
            "'" + Path() + "' is plan format version 1; this foundry-run reads version 2" + kFix);
}

TEST_F(PlanFileTest, DamagedMemorySections) {
  WriteEdited([](nlohmann::json& j) { j.erase("memory"); });
  EXPECT_EQ(ReadError(), "'" + Path() +
                             "' is a damaged foundry plan ([json.exception.out_of_range.403] key "
                             "'memory' not found)" +
                             kFix);
  WriteEdited([](nlohmann::json& j) {
    auto& alias = j["memory"]["alias"];
    alias[alias.begin().key()]["kind"] = "copy";
  });
  EXPECT_NE(ReadError().find("' has kind 'copy'; kinds are view and in_place)"), std::string::npos)
      << ReadError();
  WriteEdited([](nlohmann::json& j) {
    j["memory"]["layouts"]["cpu"]["workspace"]["nowhere"] = {0, 256};
  });
  EXPECT_EQ(ReadError(), "'" + Path() +
                             "' is a damaged foundry plan (layout 'cpu' gives workspace to "
                             "'nowhere', which is not a scheduled node)" +
                             kFix);
  WriteEdited([](nlohmann::json& j) {
    auto& ws = j["memory"]["layouts"]["scratch"]["workspace"];
    ws[ws.begin().key()] = {0};
  });
  EXPECT_NE(ReadError().find("is not [offset, bytes])"), std::string::npos) << ReadError();
  WriteEdited([](nlohmann::json& j) {
    auto& s = j["memory"]["schedule"];
    s.push_back(s[0]);
  });
  EXPECT_NE(ReadError().find("' is scheduled twice)"), std::string::npos) << ReadError();
  WriteEdited([](nlohmann::json& j) { j["memory"]["layouts"]["cpu"]["arena_bytes"] = "big"; });
  EXPECT_NE(ReadError().find("' is a damaged foundry plan (layout 'cpu': arena_bytes is \"big\", "
                             "not a whole number from 0 to 2^63-1)"),
            std::string::npos)
      << ReadError();
  // A float is never converted to an integer (1e19 overflows int64: undefined behaviour).
  WriteEdited([](nlohmann::json& j) { j["memory"]["layouts"]["cpu"]["arena_bytes"] = 1e19; });
  EXPECT_NE(ReadError().find("(layout 'cpu': arena_bytes is 1e+19, not a whole number from 0 to "
                             "2^63-1)"),
            std::string::npos)
      << ReadError();
}

// One number of the memory section nudged, or one name swapped for another, per trial: ReadPlan
// and the checker answer (ok or an error) and never crash.
TEST_F(PlanFileTest, MutatedMemorySectionsNeverCrash) {
  auto text = PlanToJson(plan_);
  ASSERT_TRUE(text.ok());
  const nlohmann::json original = nlohmann::json::parse(*text);
  std::mt19937_64 rng(42);
  const int64_t nudges[] = {-1, 1, -256, 256, 1 << 20, INT64_MAX, INT64_MIN, 0};
  int refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    nlohmann::json j = original;
    std::vector<nlohmann::json*> leaves;
    std::function<void(nlohmann::json&)> collect = [&](nlohmann::json& v) {
      if (v.is_structured())
        for (auto& c : v) collect(c);
      else
        leaves.push_back(&v);
    };
    collect(j["memory"]);
    nlohmann::json& leaf = *leaves[rng() % leaves.size()];
    if (leaf.is_number_integer()) {
      const int64_t n = nudges[rng() % std::size(nudges)];
      leaf = n == INT64_MAX || n == INT64_MIN || n == 0 ? n : leaf.get<int64_t>() + n;
    } else if (leaf.is_string()) {
      leaf = (*leaves[rng() % leaves.size()]).is_string() ? *leaves[rng() % leaves.size()]
                                                          : nlohmann::json("x");
    }
    dir_.File("m.plan", j.dump());
    auto p = ReadPlan(dir_ / "m.plan");
    if (!p.ok()) {
      ++refused;
      continue;
    }
    if (!CheckMemoryPlan(graph_, p->memory).ok()) ++refused;
  }
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace foundry
