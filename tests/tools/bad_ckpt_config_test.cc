// --ckpt-config read as strictly as OmegaConf would (llm-foundry reads its YAML with it),
// and target names quoted within bounds. Each case builds its file and holds foundry-compile to the
// bad-input contract: exit 1, exactly one error line, no file written or changed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/exec.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const std::string kCompile = FOUNDRY_BINARY_DIR "/foundry-compile";
const std::string kTiny = FOUNDRY_SOURCE_DIR "/models/fixtures/mpt_tiny/model.onnx";

class BadCkptConfigTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(testing::TempDir()) /
            ("bad_ckpt_config_test_" + std::to_string(getpid()) + "_" +
             testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  ExecResult Compile(std::vector<std::string> args) {
    args.insert(args.begin(), {kTiny, "--dim", "batch=2", "--dim", "seq=16", "--dry-run"});
    return Exec(kCompile, args, dir_);
  }
  std::map<std::string, std::string> Snapshot() const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("stdout.", 0) == 0 || name.rfind("stderr.", 0) == 0) continue;
      struct stat st {};
      ::lstat(e.path().c_str(), &st);
      files[e.path().string()] = std::to_string(st.st_ino) + " " + std::to_string(st.st_mode) +
                                 " " + (e.is_regular_file() ? ReadWholeFile(e.path()) : "");
    }
    return files;
  }
  // The file `text` as --ckpt-config: exit 1, one line "--ckpt-config PATH: <message>".
  void ExpectRefused(const std::string& text, const std::string& message) {
    Write("c.yaml", text);
    auto before = Snapshot();
    ExecResult r = Compile({"--ckpt-config", Path("c.yaml")});
    EXPECT_EQ(r.code, 1) << text << "\n" << r.err;
    EXPECT_EQ(r.err,
              "foundry-compile: error: --ckpt-config " + Path("c.yaml") + ": " + message + "\n")
        << text;
    EXPECT_EQ(Snapshot(), before);
  }
  std::string dir_;
};

const std::string kSecond =
    "a second YAML document or value follows the first; the file must hold one (a target value, "
    "or one whole llm-foundry config)";
const std::string kAnchor =
    "an anchor (&name): anchors and aliases are not accepted (an llm-foundry target never needs "
    "them); write the value out";

// Class 5: 200 aliases of a 64 KiB scalar would expand to 13 MB; refused on the first anchor,
// before any node is built.
TEST_F(BadCkptConfigTest, AliasesAreRefusedBeforeTheyExpand) {
  std::string text = "big: &big " + std::string(64 << 10, 'x') + "\nmodel:\n";
  for (int i = 0; i < 200; ++i) text += "  k" + std::to_string(i) + ": *big\n";
  const auto start = std::chrono::steady_clock::now();
  ExpectRefused(text, "line 1: " + kAnchor);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ExpectRefused("[&a mptmlp, *a]\n", "line 1: " + kAnchor);
}

// Class 6: merge keys, a second document or node, a key twice.
TEST_F(BadCkptConfigTest, MergeKeysExtraDocumentsAndDuplicateKeys) {
  ExpectRefused("model:\n  <<: {activation_checkpointing_target: mptmlp}\n",
                "line 2: a merge key '<<': merging is not accepted (nor are the aliases it "
                "needs); write the keys out");
  ExpectRefused("[mptmlp]\n[mptblock]\n", "line 2: " + kSecond);
  ExpectRefused("[mptmlp] extra\n", "line 1: " + kSecond);
  ExpectRefused("mptmlp\n---\nmptblock\n", "line 2: " + kSecond);
  ExpectRefused("{\"mptmlp\": 1} garbage\n", "line 1: " + kSecond);
  ExpectRefused("mptmlp: 1\nmptblock: 1\nmptmlp: 2\n",
                "line 3: key 'mptmlp' appears twice in one mapping (first at line 1); OmegaConf, "
                "which llm-foundry uses, rejects that: keep one");
  ExpectRefused(
      "model:\n  activation_checkpointing_target: mptmlp\n  n_layers: 2\n"
      "  activation_checkpointing_target: mptblock\nfsdp_config:\n  activation_checkpointing: "
      "true\n",
      "line 4: key 'activation_checkpointing_target' appears twice in one mapping (first at line "
      "2); OmegaConf, which llm-foundry uses, rejects that: keep one");
  ExpectRefused("{[mptmlp]: 1}\n", "line 1: a key that is a list or a mapping; keys are names");
  // yaml-cpp's own message quotes the character it stopped at: a newline there stays escaped
  // (ckpt_config_fuzz's first finding).
  ExpectRefused("\"a\\\x01\"\n",
                "YAML syntax error at line 1, column 5: unknown escape character: \\x01");
  // A key holding a newline is quoted escaped (ckpt_config_fuzz's second finding).
  Write("nl.yaml", "{\"mpt\\nmlp\": first-1}\n");
  ExecResult nl = Compile({"--ckpt-config", Path("nl.yaml")});
  EXPECT_EQ(nl.code, 1);
  EXPECT_EQ(std::count(nl.err.begin(), nl.err.end(), '\n'), 1) << nl.err;
  EXPECT_NE(nl.err.find("mpt\\x0amlp"), std::string::npos) << nl.err;
  // The same key in two mappings is fine, and so is a whole config with other keys.
  Write("ok.yaml",
        "variables:\n  n: 2\nmodel:\n  name: mpt_causal_lm\n  activation_checkpointing_target:\n"
        "    mptmlp: ${variables.n}\noptimizer:\n  name: decoupled_adamw\n  lr: 1.0e-4\n"
        "fsdp_config:\n  name: x\n  activation_checkpointing: true\n");
  ExecResult r = Compile({"--ckpt-config", Path("ok.yaml")});
  // ${variables.n} is not resolved here (the training-config issue reads variables): the value is
  // a layer spec foundry names.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  Write("ok2.yaml",
        "model:\n  name: mpt_causal_lm\n  activation_checkpointing_target: {mptmlp: 1}\n"
        "fsdp_config:\n  name: x\n  activation_checkpointing: true\n");
  r = Compile({"--ckpt-config", Path("ok2.yaml")});
  EXPECT_EQ(r.code, 0) << r.err;
}

// Class 8: a folder, a device, a pipe, an oversized file; a 10 MB name.
TEST_F(BadCkptConfigTest, NotARegularFileAndHugeInputs) {
  fs::create_directories(Path("d"));
  auto before = Snapshot();
  ExecResult r = Compile({"--ckpt-config", Path("d")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-compile: error: --ckpt-config " + Path("d") +
                       ": it is a folder; give the YAML or JSON file\n");
  r = Compile({"--ckpt-config", "/dev/zero"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "foundry-compile: error: --ckpt-config /dev/zero: it is not a regular file (a device "
            "or a pipe); give the YAML or JSON file\n");
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0666), 0);
  r = Compile({"--ckpt-config", Path("fifo")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("it is not a regular file"), std::string::npos) << r.err;
  fs::remove(Path("fifo"));
  EXPECT_EQ(Snapshot(), before);

  Write("huge.yaml", std::string((16 << 20) + 1, ' '));
  r = Compile({"--ckpt-config", Path("huge.yaml")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "foundry-compile: error: --ckpt-config " + Path("huge.yaml") +
                       ": the file is 16777217 bytes; a config is read only up to 16777216 (an "
                       "llm-foundry training YAML is a few KiB)\n");
  fs::remove(Path("huge.yaml"));

  // A 10 MB name in the file; on the command line the kernel takes at most 128 KiB per argument.
  const std::string name(10 << 20, 'q'), arg(100000, 'q');
  Write("name.yaml", "[" + name + "]\n");
  for (const auto& [args, size] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--ckpt", arg}, "100000"},
           {{"--ckpt", "mptmlp=" + arg}, "100000"},
           {{"--ckpt-config", Path("name.yaml")}, "10485760"}}) {
    r = Compile(args);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
    EXPECT_LT(r.err.size(), 2048u) << r.err.substr(0, 300);
    EXPECT_NE(r.err.find("... (" + size + " bytes)"), std::string::npos) << r.err.substr(0, 600);
  }
}

// Class 9: a newline in the model's path cannot write YAML into --emit-ckpt-config's file; the
// file reads back to the same targets.
TEST_F(BadCkptConfigTest, EmittedConfigCommentCannotInjectKeys) {
  const std::string model = Path("m\nfsdp_config:\n  activation_checkpointing: false\n.onnx");
  fs::copy_file(kTiny, model);
  ExecResult r = Exec(kCompile,
                      {model, "--dim", "batch=2", "--dim", "seq=16", "--dry-run", "--ckpt",
                       "mptmlp", "--emit-ckpt-config", Path("e.yaml")},
                      dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string emitted = ReadWholeFile(Path("e.yaml"));
  // The command line, then the fragment line, then the notes (comment lines), then the keys:
  // nothing else.
  const std::string after_command = emitted.substr(emitted.find('\n') + 1);
  std::string rest = after_command.substr(after_command.find('\n') + 1);
  while (rest.rfind("# ", 0) == 0) rest = rest.substr(rest.find('\n') + 1);
  EXPECT_EQ(rest,
            "model:\n  activation_checkpointing_target: {mptmlp: first-2}\nfsdp_config:\n"
            "  activation_checkpointing: true\n");
  EXPECT_EQ(after_command.rfind("# A fragment: ", 0), 0u) << after_command;
  EXPECT_NE(emitted.find("m\\x0afsdp_config:"), std::string::npos) << emitted;
  r = Compile({"--ckpt-config", Path("e.yaml"), "--emit-ckpt-config", Path("e2.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string again = ReadWholeFile(Path("e2.yaml"));
  EXPECT_EQ(again.substr(again.find('\n') + 1), emitted.substr(emitted.find('\n') + 1));
}

}  // namespace
}  // namespace foundry
