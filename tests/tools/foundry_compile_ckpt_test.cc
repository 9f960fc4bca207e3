// End-to-end: `foundry-compile MODEL --ckpt ...` as users type it — without -o (outputs in the
// current folder under the model's stem, the input untouched), the report's checkpointing
// section and JSON, the clones inspectable in PREFIX.train.onnx, --ckpt-config, the errors (one
// line, exit status), and foundry-run training the checkpointed plan to the plain plan's losses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "passes/remat.h"
#include "runtime/loaded_plan.h"
#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kSource = FOUNDRY_SOURCE_DIR;
const std::string kTiny = kSource + "/models/fixtures/mpt_tiny/model.onnx";

class FoundryCompileCkptTest : public ScratchDirTest {
 protected:
  ExecResult Compile(std::vector<std::string> args) {
    args.insert(args.end(), {"--dim", "batch=2", "--dim", "seq=16"});
    return Exec(kCompile, args, dir_);
  }
};

TEST_F(FoundryCompileCkptTest, WithoutDashOWritesTheModelsStemHereAndLeavesTheInput) {
  fs::copy_file(kTiny, Path("model.onnx"));
  const std::string before = ReadWholeFile(Path("model.onnx"));
  ExecResult r = Compile({"model.onnx", "--ckpt", "grouped_query_attention"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Files(), (std::vector<std::string>{"model.onnx", "model.plan", "model.train.onnx"}));
  EXPECT_EQ(ReadWholeFile(Path("model.onnx")), before);
  EXPECT_NE(r.out.find("  remat: 2 instances checkpointed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpointing: 2 instances of grouped_query_attention\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wrote model.train.onnx and model.plan\n"), std::string::npos) << r.out;

  // The clones are in the written graph, named and marked, and the runtime loads the plan.
  auto plan = LoadPlan(Path("model"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const char* attn : {"transformer.blocks.0.attn", "transformer.blocks.1.attn"}) {
    std::vector<const Node*> clones = RecomputeNodesOf(plan->graph, attn);
    ASSERT_FALSE(clones.empty()) << attn;
    for (const Node* n : clones) {
      EXPECT_EQ(n->name, n->marks.at(kRecomputeOfMark) + "_recompute");
      EXPECT_EQ(n->marks.at("phase"), "recompute");
    }
  }
  EXPECT_TRUE(RecomputeNodesOf(plan->graph, "transformer.blocks.0.ffn").empty());
}

TEST_F(FoundryCompileCkptTest, ReportJsonCarriesTheCheckpointObject) {
  ExecResult r = Compile({kTiny, "--dry-run", "--ckpt", "mptblock=first-1", "--ckpt", "mptmlp",
                          "--report-json", Path("r.json")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(ReadWholeFile(Path("r.json")));
  const auto& c = j.at("checkpoint");
  EXPECT_EQ(c.at("targets"), nlohmann::json({"mptblock=first-1", "mptmlp"}));
  // Block 0 whole (its ffn inside it: the outer target wins), block 1's ffn.
  ASSERT_EQ(c.at("instances").size(), 2u);
  EXPECT_EQ(c.at("instances")[0].at("module"), "transformer.blocks.0");
  EXPECT_EQ(c.at("instances")[1].at("module"), "transformer.blocks.1.ffn");
  int64_t freed = 0, nodes = 0, flops = 0;
  for (const auto& i : c.at("instances")) {
    EXPECT_GT(i.at("bytes_freed").get<int64_t>(), 0);
    freed += i.at("bytes_freed").get<int64_t>();
    nodes += i.at("nodes_recomputed").get<int64_t>();
    flops += i.at("flops_recomputed").get<int64_t>();
  }
  EXPECT_EQ(c.at("bytes_freed"), freed);
  EXPECT_EQ(c.at("nodes_recomputed"), nodes);
  EXPECT_EQ(c.at("flops_recomputed"), flops);
  EXPECT_EQ(j.at("flops").at("recompute"), flops);
  EXPECT_EQ(c.at("saved_after_bytes").get<int64_t>(), c.at("saved_before_bytes").get<int64_t>() -
                                                          c.at("bytes_freed").get<int64_t>() +
                                                          c.at("bytes_added").get<int64_t>());
  EXPECT_EQ(j.at("memory").at("saved_for_backward_bytes"), c.at("saved_after_bytes"));
  // No instance is an attention module (block 0 holds one, but the block frees far more).
  ASSERT_EQ(c.at("notes").size(), 1u);
  EXPECT_EQ(c.at("notes")[0],
            "transformer.blocks.0.ffn (mptmlp) is inside transformer.blocks.0 "
            "(mptblock=first-1): the outer target wins");
}

// Checkpointing a fused attention frees little (no seq x seq tensor is saved): the report says how
// much, in bytes and as a share of the saved bytes.
TEST_F(FoundryCompileCkptTest, CheckpointedFusedAttentionSaysHowLittleItFrees) {
  ExecResult r = Compile(
      {kTiny, "--dry-run", "--ckpt", "grouped_query_attention", "--report-json", Path("r.json")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto c = nlohmann::json::parse(ReadWholeFile(Path("r.json"))).at("checkpoint");
  ASSERT_EQ(c.at("notes").size(), 1u) << c.at("notes");
  const std::string note = c.at("notes")[0];
  EXPECT_EQ(note.rfind("2 of the 2 instances are a fused attention (foundry::Attention keeps Q, K, "
                       "V, O and one logsumexp per row",
                       0),
            0u)
      << note;
  EXPECT_NE(note.find("% of the saved-for-backward bytes"), std::string::npos) << note;
  EXPECT_NE(r.out.find("note: 2 of the 2 instances are a fused attention"), std::string::npos)
      << r.out;
}

TEST_F(FoundryCompileCkptTest, CkptConfigAndItsSwitch) {
  Write("on.yaml",
        "model:\n  activation_checkpointing_target: {mptblock: last-1}\n"
        "fsdp_config:\n  activation_checkpointing: true\n");
  ExecResult r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("on.yaml")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpointing: 1 instance of mptblock=last-1\n"), std::string::npos)
      << r.out;

  Write("off.yaml",
        "model:\n  activation_checkpointing_target: grouped_query_attention\n"
        "fsdp_config:\n  activation_checkpointing: false\n");
  r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("off.yaml")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("checkpointing:"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("foundry-compile: warning: ", 0), 0u) << r.err;
}

// llm-foundry's top-level `precision:` applies (amp_bf16 plans the autocast pass), unless
// --precision overrides it (a warning says so); a value foundry cannot train is one error line.
TEST_F(FoundryCompileCkptTest, CkptConfigReadsPrecision) {
  Write("amp.yaml",
        "precision: amp_bf16\nmodel:\n  activation_checkpointing_target: mptblock\n"
        "fsdp_config:\n  activation_checkpointing: true\n");
  ExecResult r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("amp.yaml")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\n  autocast: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(bf16 "), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");

  r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("amp.yaml"), "--precision", "fp32"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("autocast: "), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "foundry-compile: warning: --precision fp32 overrides " + Path("amp.yaml") +
                       "'s precision: amp_bf16\n");
  // The same value on both sides: nothing to say.
  r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("amp.yaml"), "--precision", "amp_bf16"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");

  Write("fp16.yaml", "precision: amp_fp16\nfsdp_config:\n  activation_checkpointing: false\n");
  r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("fp16.yaml")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-compile: error: --ckpt-config " + Path("fp16.yaml") +
                       ": key 'precision': precision amp_fp16 is not supported: fp16 training "
                       "needs loss scaling, which foundry does not have; use amp_bf16 "
                       "(llm-foundry's default) or fp32 (or give --precision to override the "
                       "file)\n");
  r = Compile({kTiny, "--dry-run", "--ckpt-config", Path("fp16.yaml"), "--precision", "fp32"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "foundry-compile: warning: --precision fp32 overrides " + Path("fp16.yaml") +
                       "'s precision: amp_fp16\n");
}

// --emit-ckpt-config with --ckpt: the targets as llm-foundry config, read back to the same plan.
TEST_F(FoundryCompileCkptTest, EmitCkptConfigReadsBackToTheSamePlan) {
  ExecResult r = Compile({kTiny, "--ckpt", "mptblock=first-1", "--ckpt", "mptmlp", "-o",
                          Path("a/m"), "--emit-ckpt-config", Path("c.yaml")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string yaml = ReadWholeFile(Path("c.yaml"));
  EXPECT_NE(yaml.find("# foundry-compile " + kTiny +
                      " --precision fp32 --ckpt mptblock=first-1 --ckpt mptmlp\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("activation_checkpointing_target: {mptblock: first-1, mptmlp: last-1}"),
            std::string::npos)
      << yaml;
  ExecResult back = Compile({kTiny, "--ckpt-config", Path("c.yaml"), "-o", Path("b/m")});
  ASSERT_EQ(back.code, 0) << back.out << back.err;
  EXPECT_EQ(ReadWholeFile(Path("a/m.plan")), ReadWholeFile(Path("b/m.plan")));
  EXPECT_EQ(ReadWholeFile(Path("a/m.train.onnx")), ReadWholeFile(Path("b/m.train.onnx")));
}

TEST_F(FoundryCompileCkptTest, ErrorsAreOneLineWithTheirExitStatus) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string starts;  // the message's beginning (its whole text is ckpt_targets_test's)
  };
  const std::vector<Case> cases = {
      {{kTiny, "--ckpt", "attention"}, 1, "--ckpt attention: unknown name 'attention'"},
      {{kTiny, "--ckpt", "mptblock=first-x"}, 2, "--ckpt 'mptblock=first-x': malformed layers"},
      {{kTiny, "--ckpt", "mptblock=[0,5]"}, 1, "--ckpt mptblock=[0,5]: layer 5 in '[0,5]'"},
      {{kTiny, "--ckpt", "mptglu"}, 1, "--ckpt mptglu: 'mptglu' (llm-foundry's key for MPTGLU)"},
      {{kTiny, "--ckpt", "mptblock", "--forward-only"},
       2,
       "--ckpt and --ckpt-config checkpoint a training step; drop --forward-only"},
      {{kTiny, "--ckpt", "mptblock", "--dry-run", "-o", Path("x")},
       2,
       "-o PREFIX and --dry-run contradict each other; drop one"},
      {{kTiny, "--ckpt-config", Path("missing.yaml")}, 1, "--ckpt-config " + Path("missing.yaml")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[2]);
    ExecResult r = Compile(c.args);
    EXPECT_EQ(r.code, c.code) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("foundry-compile: error: " + c.starts, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(Files(), std::vector<std::string>{}) << "an error wrote files";
  }
}

// The checkpointed plan trains to the plain plan's loss bits (foundry-run prints them to 4
// places; the JSON report carries the floats).
TEST_F(FoundryCompileCkptTest, FoundryRunTrainsTheCheckpointedPlanToTheSameLosses) {
  const std::string feeds = kSource + "/models/fixtures/mpt_tiny_dropout/inputs/";
  const std::string model = kSource + "/models/fixtures/mpt_tiny_dropout/model.onnx";
  ASSERT_EQ(Compile({model, "-o", Path("plain")}).code, 0);
  ExecResult r = Compile({model, "-o", Path("ckpt"), "--ckpt", "block"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::string losses[2];
  for (int k = 0; k < 2; ++k) {
    const std::string prefix = Path(k ? "ckpt" : "plain");
    ExecResult run =
        Exec(kRun,
             {prefix, "--steps", "5", "--feed", "input_ids=" + feeds + "input_ids.pb", "--feed",
              "labels=" + feeds + "labels.pb", "--report-json", prefix + ".run.json"},
             dir_);
    ASSERT_EQ(run.code, 0) << run.out << run.err;
    const auto j = nlohmann::json::parse(ReadWholeFile(prefix + ".run.json"));
    losses[k] = j.at("loss_first").dump() + " " + j.at("loss_last").dump();
    const auto& m = j.at("memory");
    EXPECT_EQ(m.at("arena_planned_bytes"), m.at("arena_measured_bytes")) << m.dump();
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace foundry
