// --emit-ckpt-config OUT --merge-into TRAIN.yaml (compiler/yaml_merge.h): the two checkpointing
// keys set, every other line of the user's YAML kept, comments included; read back by --config.
#include "compiler/yaml_merge.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "compiler/train_config.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::string Read(const std::string& rel) {
  std::ifstream in(std::string(FOUNDRY_SOURCE_DIR) + "/" + rel);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> LinesOf(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The lines of `after` that `before` lacks, and those it dropped (a line-multiset difference).
std::pair<std::vector<std::string>, std::vector<std::string>> Diff(const std::string& before,
                                                                   const std::string& after) {
  std::multiset<std::string> a, b;
  for (auto& l : LinesOf(before)) a.insert(l);
  for (auto& l : LinesOf(after)) b.insert(l);
  std::vector<std::string> added, dropped;
  for (auto& l : b)
    if (a.count(l) < b.count(l) && std::count(added.begin(), added.end(), l) == 0)
      for (size_t i = 0; i < b.count(l) - a.count(l); ++i) added.push_back(l);
  for (auto& l : a)
    if (b.count(l) < a.count(l) && std::count(dropped.begin(), dropped.end(), l) == 0)
      for (size_t i = 0; i < a.count(l) - b.count(l); ++i) dropped.push_back(l);
  return {added, dropped};
}

TEST(YamlMerge, IntoLlmFoundrysLayoutKeepsEveryOtherLine) {
  const std::string before = Read("configs/mpt-125m.yaml");  // activation_checkpointing: false
  auto merged = MergeCkptIntoYaml(before, "mpt-125m.yaml", "{mptblock: first-3}", "set by x");
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  auto [added, dropped] = Diff(before, *merged);
  EXPECT_EQ(added, (std::vector<std::string>{"  # set by x", "  # set by x",
                                             "  activation_checkpointing: true",
                                             "  activation_checkpointing_target: {mptblock: "
                                             "first-3}"}));
  EXPECT_EQ(dropped, std::vector<std::string>{"  activation_checkpointing: false"});
  // --config reads it back: the target, the flag, and everything else as before.
  auto c = ParseTrainConfigText(*merged, "m.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->ckpt.enabled);
  ASSERT_EQ(c->ckpt.targets.size(), 1u);
  EXPECT_EQ(c->ckpt.targets[0].Text(), "mptblock=first-3");
  auto o = ParseTrainConfigText(before, "m.yaml");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(c->model.d_model, o->model.d_model);
  EXPECT_EQ(c->ignored, o->ignored);
  EXPECT_EQ(c->fsdp.at("sharding_strategy"), "FULL_SHARD");
}

TEST(YamlMerge, ReplacesATargetWrittenAsABlockAndTurnsCheckpointingOff) {
  const std::string before =
      "# top comment\n"
      "model:\n"
      "  d_model: 64   # width\n"
      "  activation_checkpointing_target:\n"
      "    - grouped_query_attention\n"
      "    - mptmlp\n"
      "  # a comment after the target stays\n"
      "  n_layers: 2\n"
      "\n"
      "fsdp_config:\n"
      "  activation_checkpointing: true\n"
      "seed: 1\n";
  auto merged = MergeCkptIntoYaml(before, "t.yaml", "mptblock", "");
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ(*merged,
            "# top comment\n"
            "model:\n"
            "  d_model: 64   # width\n"
            "  activation_checkpointing_target: mptblock\n"
            "  # a comment after the target stays\n"
            "  n_layers: 2\n"
            "\n"
            "fsdp_config:\n"
            "  activation_checkpointing: true\n"
            "seed: 1\n");
  auto off = MergeCkptIntoYaml(before, "t.yaml", "", "");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(*off,
            "# top comment\n"
            "model:\n"
            "  d_model: 64   # width\n"
            "  # a comment after the target stays\n"
            "  n_layers: 2\n"
            "\n"
            "fsdp_config:\n"
            "  activation_checkpointing: false\n"
            "seed: 1\n");
}

TEST(YamlMerge, AddsMissingSectionsAndRefusesWhatItCannotEditByLine) {
  auto merged = MergeCkptIntoYaml("seed: 1\n", "t.yaml", "mptblock", "");
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ(*merged,
            "seed: 1\n\nmodel:\n  activation_checkpointing_target: mptblock\n\nfsdp_config:\n"
            "  activation_checkpointing: true\n");
  EXPECT_EQ(
      MergeCkptIntoYaml("model: {d_model: 64}\n", "t.yaml", "mptblock", "").status().message(),
      "--merge-into t.yaml: 'model:' (line 1) has its value on the key line ({d_model: "
      "64}); foundry merges into block mappings as llm-foundry writes them: set "
      "model.activation_checkpointing_target by hand");
  EXPECT_EQ(
      MergeCkptIntoYaml("model:\n  a: 1\n  a: 2\n", "t.yaml", "mptblock", "").status().message(),
      "--merge-into t.yaml: line 3: key 'a' appears twice in one mapping (first at line 2); "
      "OmegaConf, which llm-foundry uses, rejects that: keep one");
  EXPECT_EQ(MergeCkptIntoYaml("- 1\n", "t.yaml", "mptblock", "").status().message(),
            "--merge-into t.yaml: the file is not an llm-foundry training YAML (a mapping)");
}

}  // namespace
}  // namespace foundry
