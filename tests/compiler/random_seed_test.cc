#include "compiler/random_seed.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "base/hash.h"
#include "compiler/onnx_import.h"
#include "compiler/text.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr const char* kTwoDropouts = R"(graph g {
  input x : f32[64]
  const ratio : f32[] = [0.5]
  const train : bool[] = [1]
  a = Dropout(x, ratio, train) #"drop"
  b = Dropout(x, ratio, train) {seed=7} #"other"
  output a
  output b
})";

TEST(RandomSeedTest, AssignsOnceKeepsGivenSeedsAndNeverShares) {
  auto g = ParseGraph(kTwoDropouts);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(AssignRandomSeeds(*g), 1);
  EXPECT_EQ(g->nodes[0].GetInt("seed", 0), static_cast<int64_t>(Fnv1a("drop")));
  EXPECT_EQ(g->nodes[1].GetInt("seed", 0), 7);
  EXPECT_EQ(AssignRandomSeeds(*g), 0);  // idempotent

  // A second node that (wrongly) carries the same name still gets its own stream.
  auto dup = ParseGraph(kTwoDropouts);
  ASSERT_TRUE(dup.ok());
  dup->nodes[1].name = "drop";
  dup->nodes[1].attrs.erase("seed");
  EXPECT_EQ(AssignRandomSeeds(*dup), 2);
  EXPECT_EQ(dup->nodes[0].GetInt("seed", 0), static_cast<int64_t>(Fnv1a("drop")));
  EXPECT_EQ(dup->nodes[1].GetInt("seed", 0), static_cast<int64_t>(Fnv1a("drop") + 1));
}

// The mask follows the seed, not the name: renaming the node after assignment changes no bit,
// and two nodes that end up with one name still draw different masks.
TEST(RandomSeedTest, MaskDoesNotDependOnTheNodeName) {
  auto g = ParseGraph(kTwoDropouts);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  AssignRandomSeeds(*g);
  std::map<std::string, Tensor> feeds = {{"x", RandomTensor({64}, 3, 1.f, 2.f)}};
  auto before = Interpret(*g, feeds);
  ASSERT_TRUE(before.ok()) << before.status().message();
  Graph renamed = *g;
  renamed.nodes[0].name = "renamed";
  renamed.nodes[1].name = "renamed";
  auto after = Interpret(renamed, feeds);
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_TRUE(before->at("a").BitwiseEqual(after->at("a")));
  EXPECT_TRUE(before->at("b").BitwiseEqual(after->at("b")));
  EXPECT_FALSE(after->at("a").BitwiseEqual(after->at("b")));
}

// Import gives every dropout of an exported model its own seed, the same one on every import.
TEST(RandomSeedTest, ImportSeedsEveryDropoutOfAnExport) {
  std::map<std::string, std::map<std::string, int64_t>> first;
  for (const char* file :
       {"model.onnx", "model.metadata.onnx", "model.onnx", "model.metadata.onnx"}) {
    auto g =
        ImportOnnx(std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny_dropout/" + file);
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::map<std::string, int64_t> seeds;
    std::set<int64_t> distinct;
    for (const Node& n : g->nodes) {
      if (n.op_type != "Dropout") continue;
      auto it = n.attrs.find("seed");
      ASSERT_NE(it, n.attrs.end()) << n.name;
      int64_t seed = it->second.i;
      seeds[n.name] = seed;
      distinct.insert(seed);
    }
    EXPECT_GE(seeds.size(), 3u) << file;
    EXPECT_EQ(distinct.size(), seeds.size()) << file;
    if (!first.count(file)) first[file] = seeds;
    EXPECT_EQ(seeds, first[file]) << file;
  }
}

}  // namespace
}  // namespace foundry
