// Small helpers shared by the tests: a node builder and a self-deleting temporary directory.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "runtime/data.h"

namespace foundry {

// A node as tests write them: op, inputs, outputs, attributes; named `name` ("n" by default,
// which is what error messages in kernel tests then quote).
Node MakeNode(const std::string& op, std::vector<std::string> inputs,
              std::vector<std::string> outputs = {"y"}, std::map<std::string, Attribute> attrs = {},
              const std::string& domain = "", const std::string& name = "n");

// True under CI (.ci/run exports FOUNDRY_CI=1): a missing optional tool or data set then fails the
// test that needs it instead of skipping it.
bool UnderCi();

// Whether Debian's /usr/bin/python3 imports onnx (the reference checker that export tests shell
// out to). Asked once per process.
bool HavePythonOnnx();

// Skips the current test when `available` is false, or fails it under CI. Use in a TEST body.
#define FOUNDRY_SKIP_UNLESS(available, what)                                        \
  do {                                                                              \
    if (!(available)) {                                                             \
      if (::foundry::UnderCi()) FAIL() << what << " (required under FOUNDRY_CI=1)"; \
      GTEST_SKIP() << what;                                                         \
    }                                                                               \
  } while (0)

// The n floats at a and b have the same bits.
bool BitwiseEqual(const float* a, const float* b, int64_t n);

// A flat token file (foundry-run --data) holding `tokens` as `dtype`, little-endian.
void WriteTokens(const std::string& path, const std::vector<int64_t>& tokens, TokenDType dtype);

// A fresh directory under the system temp dir (mkdtemp), removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string str() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // Writes `bytes` to a file in the directory and returns its path.
  std::string File(const std::string& name, const std::string& bytes) const;

 private:
  std::string path_;
};

// Every TensorProto file of `dir` (a fixture's inputs/), keyed by its file stem; a file that does
// not parse fails the calling test (EXPECT) and is left out.
std::map<std::string, Tensor> ReadFeeds(const std::filesystem::path& dir);

}  // namespace foundry
