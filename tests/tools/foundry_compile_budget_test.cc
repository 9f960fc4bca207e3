// End-to-end: `foundry-compile MODEL --memory-budget SIZE` — the choice fits and is printed as
// llm-foundry config, --emit-ckpt-config reads back through --ckpt-config to the same plan, the
// report carries the budget, the chosen plan trains with the plain plan's gradient bits, the
// frontier picture is written, and the errors are one line with their exit status.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/support/exec.h"
#include "tests/support/scratch_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kRun = FOUNDRY_BINARY_DIR "/foundry-run";
const std::string kFixture = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny_dropout/";
const std::string kModel = kFixture + "model.onnx";

class FoundryCompileBudgetTest : public ScratchDirTest {
 protected:
  // 4 x 32: a shape where the activations outweigh the gradients, so checkpointing lowers the
  // peak (at 2 x 16 it sits at the end of the backward, where every gradient is live).
  ExecResult Compile(std::vector<std::string> args, const std::string& batch = "4",
                     const std::string& seq = "32") {
    args.insert(args.begin(), kModel);
    args.insert(args.end(), {"--dim", "batch=" + batch, "--dim", "seq=" + seq});
    return Exec(kCompile, args, dir_);
  }
  nlohmann::json Json(const std::string& name) const {
    return nlohmann::json::parse(ReadWholeFile(Path(name)));
  }
  // The planned total of the plain plan and of every block checkpointed.
  std::pair<int64_t, int64_t> PlainAndAllBlocks() {
    EXPECT_EQ(Compile({"--dry-run", "--report-json", Path("plain.json")}).code, 0);
    EXPECT_EQ(Compile({"--dry-run", "--ckpt", "block", "--report-json", Path("all.json")}).code, 0);
    return {Json("plain.json").at("memory").at("total_bytes").get<int64_t>(),
            Json("all.json").at("memory").at("total_bytes").get<int64_t>()};
  }
};

TEST_F(FoundryCompileBudgetTest, FitsPrintsTheConfigAndReadsBackToTheSamePlan) {
  auto [plain, all] = PlainAndAllBlocks();
  ASSERT_LT(all, plain);
  const int64_t budget = (plain + all) / 2;
  ExecResult r = Compile({"--memory-budget", std::to_string(budget), "-o", Path("a/m"),
                          "--emit-ckpt-config", Path("ckpt.yaml"), "--report-json", Path("a.json"),
                          "--memory-frontier", Path("f.svg")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("memory budget: planned total "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  activation_checkpointing_target: {"), std::string::npos) << r.out;
  const auto j = Json("a.json");
  EXPECT_LE(j.at("memory").at("total_bytes").get<int64_t>(), budget);
  EXPECT_EQ(j.at("checkpoint").at("budget_bytes").get<int64_t>(), budget);
  EXPECT_FALSE(j.at("checkpoint").at("instances").empty());
  EXPECT_EQ(ReadWholeFile(Path("f.svg")).rfind("<?xml", 0), 0u);

  // The search's result is in the JSON as printed, so no script reads stdout: the chosen
  // selection (the plan's instances, its YAML the printed line's), the cheapest uniform target
  // that fits, the plans tried.
  const auto& b = j.at("budget");
  EXPECT_EQ(b.at("budget_bytes").get<int64_t>(), budget);
  const auto& chosen = b.at("chosen");
  std::vector<std::string> planned;
  for (const auto& i : j.at("checkpoint").at("instances")) planned.push_back(i.at("module"));
  EXPECT_EQ(chosen.at("instances").get<std::vector<std::string>>(), planned);
  EXPECT_EQ(chosen.at("total_bytes"), j.at("memory").at("total_bytes"));
  EXPECT_NE(r.out.find("  activation_checkpointing_target: " +
                       chosen.at("yaml").get<std::string>() + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(chosen.at("activation_checkpointing_target").is_object());
  EXPECT_GT(chosen.at("flops_recomputed").get<int64_t>(), 0);
  const auto& uniform = b.at("uniform");
  ASSERT_TRUE(uniform.is_object()) << b.dump();  // every block fits, so some uniform target does
  EXPECT_LE(uniform.at("total_bytes").get<int64_t>(), budget);
  EXPECT_GE(uniform.at("flops_recomputed").get<int64_t>(),
            chosen.at("flops_recomputed").get<int64_t>());
  EXPECT_NE(r.out.find("cheapest uniform llm-foundry target that fits: " +
                       uniform.at("target").get<std::string>() + ","),
            std::string::npos)
      << r.out;
  const int plans = b.at("plans_tried").get<int>();
  EXPECT_GT(plans, 1);
  EXPECT_NE(r.out.find("; " + std::to_string(plans) + " plans evaluated"), std::string::npos)
      << r.out;

  // The emitted config, read back, gives the same plan and training graph.
  ExecResult back = Compile({"--ckpt-config", Path("ckpt.yaml"), "-o", Path("b/m")});
  ASSERT_EQ(back.code, 0) << back.out << back.err;
  EXPECT_EQ(back.err, "");
  EXPECT_EQ(ReadWholeFile(Path("a/m.plan")), ReadWholeFile(Path("b/m.plan")));
  EXPECT_EQ(ReadWholeFile(Path("a/m.train.onnx")), ReadWholeFile(Path("b/m.train.onnx")));

  // The chosen plan's first-step gradients are the plain plan's, bit for bit (dropout on).
  ASSERT_EQ(Compile({"-o", Path("p/m")}).code, 0);
  for (const char* prefix : {"a/m", "p/m"}) {
    ExecResult run = Exec(
        kRun, {Path(prefix), "--steps", "1", "--dump-grads", Path(std::string(prefix) + ".grads")},
        dir_);
    ASSERT_EQ(run.code, 0) << run.out << run.err;
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(Path("p/m.grads"))) {
    ++files;
    EXPECT_EQ(ReadWholeFile(e.path().string()),
              ReadWholeFile(Path("a/m.grads/" + e.path().filename().string())))
        << e.path().filename();
  }
  EXPECT_GT(files, 10);
}

TEST_F(FoundryCompileBudgetTest, AGenerousBudgetCheckpointsNothing) {
  auto [plain, all] = PlainAndAllBlocks();
  ExecResult r =
      Compile({"--memory-budget", std::to_string(plain), "--dry-run", "--emit-ckpt-config",
               Path("none.yaml"), "--report-json", Path("n.json")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("the plain plan fits: nothing to checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpointing: none\n"), std::string::npos) << r.out;
  const auto j = Json("n.json");
  EXPECT_EQ(j.at("memory").at("total_bytes").get<int64_t>(), plain);
  EXPECT_EQ(j.at("checkpoint").at("budget_bytes").get<int64_t>(), plain);
  EXPECT_TRUE(j.at("checkpoint").at("instances").empty());
  EXPECT_TRUE(j.at("budget").at("chosen").at("instances").empty());
  EXPECT_EQ(j.at("budget").at("chosen").at("yaml"), "");
  EXPECT_EQ(j.at("budget").at("uniform").at("target"), "none");
  const std::string yaml = ReadWholeFile(Path("none.yaml"));
  EXPECT_NE(yaml.find("activation_checkpointing: false"), std::string::npos) << yaml;
  ExecResult back = Compile({"--ckpt-config", Path("none.yaml"), "--dry-run"});
  ASSERT_EQ(back.code, 0) << back.out << back.err;
  EXPECT_EQ(back.out.find("checkpointing:"), std::string::npos) << back.out;
}

// --memory-budget plans in the precision given. On this tiny fixture amp_bf16's plain
// plan is the larger one (its bf16 weight copies and staging outweigh the activations it halves);
// a budget of the smaller plain total needs no checkpointing in that precision and some in the
// other. The emitted file's header names the precision; read back under it, the same plan.
TEST_F(FoundryCompileBudgetTest, PlansInTheChosenPrecision) {
  std::map<std::string, int64_t> plain;
  for (const char* p : {"fp32", "amp_bf16"}) {
    const std::string json = std::string(p) + ".json";
    ASSERT_EQ(Compile({"--dry-run", "--precision", p, "--report-json", Path(json)}).code, 0);
    plain[p] = Json(json).at("memory").at("total_bytes").get<int64_t>();
  }
  ASSERT_NE(plain["fp32"], plain["amp_bf16"]);
  const bool amp_smaller = plain["amp_bf16"] < plain["fp32"];
  const std::string fits = amp_smaller ? "amp_bf16" : "fp32";
  const std::string needs = amp_smaller ? "fp32" : "amp_bf16";
  const std::string budget = std::to_string(plain[fits]);
  for (const std::string& p : {fits, needs}) {
    SCOPED_TRACE(p);
    ExecResult r =
        Compile({"--memory-budget", budget, "--precision", p, "-o", Path(p + "/m"),
                 "--emit-ckpt-config", Path(p + ".yaml"), "--report-json", Path(p + ".b.json")});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const auto j = Json(p + ".b.json");
    EXPECT_LE(j.at("memory").at("total_bytes").get<int64_t>(), plain[fits]);
    EXPECT_EQ(j.at("checkpoint").at("instances").empty(), p == fits) << r.out;
    EXPECT_EQ(ReadWholeFile(Path(p + ".yaml"))
                  .rfind("# foundry-compile " + kModel + " --precision " + p + " --memory-budget " +
                             budget + ": ",
                         0),
              0u);
    ExecResult back =
        Compile({"--ckpt-config", Path(p + ".yaml"), "--precision", p, "-o", Path(p + "/back/m")});
    ASSERT_EQ(back.code, 0) << back.out << back.err;
    EXPECT_TRUE(ReadWholeFile(Path(p + "/m.plan")) == ReadWholeFile(Path(p + "/back/m.plan")))
        << "the emitted config read back gives another plan";
  }
}

TEST_F(FoundryCompileBudgetTest, Errors) {
  auto [plain, all] = PlainAndAllBlocks();
  // At 2 x 16, half the every-block plan is below anything checkpointing can reach (the
  // optimizer state, gradients and parameters alone are more; the optimizer state is the
  // largest class).
  ASSERT_EQ(
      Compile({"--dry-run", "--ckpt", "block", "--report-json", Path("small.json")}, "2", "16")
          .code,
      0);
  const std::string small =
      std::to_string(Json("small.json").at("memory").at("total_bytes").get<int64_t>() / 2);
  ExecResult r = Compile({"--memory-budget", small, "--dry-run"}, "2", "16");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("foundry-compile: error: --memory-budget " + small + ": budget ", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find("is below the smallest plan foundry finds"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("its largest part is the optimizer state"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> usage = {
      {{"--memory-budget", "20GiB", "--ckpt", "block"},
       "--memory-budget chooses the checkpointing itself; drop --ckpt / --ckpt-config"},
      {{"--memory-budget", "20GiB", "--forward-only"},
       "--memory-budget plans a training step; drop --forward-only"},
      {{"--emit-ckpt-config", Path("x.yaml")},
       "--emit-ckpt-config writes the checkpointing of --memory-budget or --ckpt; give one"},
      {{"--memory-frontier", Path("x.svg")},
       "--memory-frontier draws the --memory-budget search; give --memory-budget"},
  };
  for (const Case& c : usage) {
    ExecResult u = Compile(c.args);
    EXPECT_EQ(u.code, 2) << u.err;
    EXPECT_EQ(u.err, "foundry-compile: error: " + c.message + "\n");
  }
  ExecResult bad = Compile({"--memory-budget", "twenty"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_EQ(bad.err.rfind("foundry-compile: error: --memory-budget: ", 0), 0u) << bad.err;
  EXPECT_FALSE(fs::exists(Path("model.plan")));
}

// --ckpt-syntax: llm-foundry (the default) and foundry; every note and warning of the answer is a
// comment of the emitted file, and the file reads back to the same plan.
TEST_F(FoundryCompileBudgetTest, CkptSyntaxNotesAreCommentsOfTheFile) {
  auto [plain, all] = PlainAndAllBlocks();
  const std::string budget = std::to_string((plain + all) / 2);
  for (const std::string syntax : {"", "llm-foundry", "foundry"}) {
    SCOPED_TRACE("syntax '" + syntax + "'");
    std::vector<std::string> args = {
        "--memory-budget", budget, "--emit-ckpt-config", Path("c.yaml"), "--report-json",
        Path("c.json"),    "-o",   Path("c/m")};
    if (!syntax.empty()) args.insert(args.end(), {"--ckpt-syntax", syntax});
    ExecResult r = Compile(args);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const auto b = Json("c.json").at("budget");
    EXPECT_EQ(b.at("ckpt_syntax"), syntax.empty() ? "llm-foundry" : syntax);
    const std::string file = ReadWholeFile(Path("c.yaml"));
    for (const auto& n : b.at("notes")) {
      EXPECT_NE(file.find("\n# note: " + n.get<std::string>() + "\n"), std::string::npos) << file;
      EXPECT_NE(r.out.find("  note: " + n.get<std::string>() + "\n"), std::string::npos) << r.out;
    }
    for (const auto& w : b.at("warnings"))
      EXPECT_NE(file.find("\n# warning: " + w.get<std::string>() + "\n"), std::string::npos)
          << file;
    EXPECT_EQ(b.at("notes").empty(), syntax == "foundry");
    EXPECT_NE(file.find("\n# note: llm-foundry reads activation_checkpointing_target in the "
                        "training YAML's model section and activation_checkpointing in its "
                        "fsdp_config section"),
              std::string::npos)
        << file;
    if (syntax != "foundry") EXPECT_TRUE(b.at("warnings").empty()) << b.dump();
    ExecResult back = Compile({"--ckpt-config", Path("c.yaml"), "-o", Path("d/m")});
    ASSERT_EQ(back.code, 0) << back.out << back.err;
    EXPECT_EQ(ReadWholeFile(Path("c/m.plan")), ReadWholeFile(Path("d/m.plan")));
  }
  ExecResult bad = Compile({"--memory-budget", budget, "--ckpt-syntax", "upstream"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "foundry-compile: error: --ckpt-syntax: 'upstream' is not a checkpoint syntax; write "
            "llm-foundry (only answers upstream llm-foundry accepts) or foundry (any selection "
            "foundry reads)\n");
  ExecResult alone = Compile({"--ckpt-syntax", "foundry", "--dry-run"});
  EXPECT_EQ(alone.code, 2);
  EXPECT_EQ(alone.err,
            "foundry-compile: error: --ckpt-syntax says what --memory-budget may answer; give "
            "--memory-budget\n");
}

// A Hugging Face model under the default syntax: every block, said by the flag alone (llm-foundry
// reads no target for it), which reads back to the same plan; --merge-into refuses to write it.
TEST_F(FoundryCompileBudgetTest, LlamaIsEveryBlockByTheFlag) {
  const std::string llama = std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/llama_tiny/";
  auto compile = [&](std::vector<std::string> args) {
    args.insert(args.begin(), llama + "model.onnx");
    args.insert(args.end(), {"--dim", "batch=4", "--dim", "seq=32"});
    return Exec(kCompile, args, dir_);
  };
  ASSERT_EQ(compile({"--dry-run", "--report-json", Path("p.json")}).code, 0);
  ASSERT_EQ(compile({"--dry-run", "--ckpt", "block", "--report-json", Path("b.json")}).code, 0);
  const int64_t plain = Json("p.json").at("memory").at("total_bytes").get<int64_t>();
  const int64_t every = Json("b.json").at("memory").at("total_bytes").get<int64_t>();
  ASSERT_LT(every, plain);
  const std::string budget = std::to_string(plain - 1);
  ExecResult r = compile({"--memory-budget", budget, "--emit-ckpt-config", Path("l.yaml"),
                          "--report-json", Path("l.json"), "-o", Path("l/m")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("  fsdp_config.activation_checkpointing: true (every block, no target)\n"),
            std::string::npos)
      << r.out;
  const auto j = Json("l.json");
  EXPECT_EQ(j.at("memory").at("total_bytes").get<int64_t>(), every);
  EXPECT_TRUE(j.at("budget").at("every_block_by_flag").get<bool>());
  const std::string file = ReadWholeFile(Path("l.yaml"));
  EXPECT_EQ(file.substr(file.rfind("\n# note: ") + 1),
            "# note: " + j.at("budget").at("notes").at(0).get<std::string>() +
                "\nfsdp_config:\n  activation_checkpointing: true\n");
  ExecResult back = compile({"--ckpt-config", Path("l.yaml"), "-o", Path("k/m")});
  ASSERT_EQ(back.code, 0) << back.out << back.err;
  EXPECT_EQ(ReadWholeFile(Path("l/m.plan")), ReadWholeFile(Path("k/m.plan")));
  // --ckpt-syntax foundry finds a finer selection at the same budget.
  r = compile({"--memory-budget", budget, "--ckpt-syntax", "foundry", "--dry-run", "--report-json",
               Path("f.json")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_LT(Json("f.json").at("budget").at("chosen").at("instances").size(), 2u);
  std::ofstream(Path("train.yaml")) << "model:\n  name: hf_causal_lm\nfsdp_config:\n"
                                       "  sharding_strategy: FULL_SHARD\n";
  r = compile({"--memory-budget", budget, "--dry-run", "--emit-ckpt-config", Path("m.yaml"),
               "--merge-into", Path("train.yaml")});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(r.err, "foundry-compile: error: --merge-into " + Path("train.yaml") +
                       ": the answer is fsdp_config.activation_checkpointing: true with no "
                       "model.activation_checkpointing_target (a non-MPT model), which "
                       "--merge-into does not write; set the flag by hand, or drop --merge-into "
                       "for the fragment\n");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

namespace foundry {
namespace FOUNDRY_TEST_NS {

// A per-GPU answer (--world-size) plans against the budget less the device reserve (1 GiB by
// default, --device-reserve to change it) and says so; one process plans the bytes alone.
TEST_F(FoundryCompileBudgetTest, PerGpuAnswersKeepTheDeviceReserve) {
  const int64_t gib = int64_t{1} << 30;
  ExecResult r = Compile({"--world-size", "2", "--memory-budget", std::to_string(gib + (8 << 20)),
                          "--dry-run", "--report-json", Path("r.json")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" + device reserve 1.0 GiB <= budget "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: planned against the budget less a device reserve of 1.0 GiB"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(Json("r.json").at("budget").at("device_reserve_bytes").get<int64_t>(), gib);
  EXPECT_LE(Json("r.json").at("memory").at("total_bytes").get<int64_t>(), 8 << 20);
  r = Compile({"--world-size", "2", "--memory-budget", "1GiB", "--dry-run"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --memory-budget 1GiB: the budget is not above the device "
            "reserve, 1.0 GiB; give a larger budget, or a smaller --device-reserve\n");
  r = Compile(
      {"--world-size", "2", "--memory-budget", "8MiB", "--device-reserve", "0", "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("device reserve"), std::string::npos) << r.out;
  r = Compile({"--memory-budget", "8MiB", "--dry-run"});  // one process: no reserve
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("device reserve"), std::string::npos) << r.out;
  r = Compile({"--device-reserve", "1GiB", "--dry-run"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --device-reserve is taken off --memory-budget; give "
            "--memory-budget\n");
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
