#include "tests/support/test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/tensor_proto.h"

namespace foundry {

Node MakeNode(const std::string& op, std::vector<std::string> inputs,
              std::vector<std::string> outputs, std::map<std::string, Attribute> attrs,
              const std::string& domain, const std::string& name) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

bool UnderCi() {
  const char* ci = std::getenv("FOUNDRY_CI");
  return ci && std::string(ci) == "1";
}

bool HavePythonOnnx() {
  static const bool have = std::system("/usr/bin/python3 -c 'import onnx' > /dev/null 2>&1") == 0;
  return have;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "foundry_test_XXXXXX").string();
  if (mkdtemp(tmpl.data())) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string TempDir::File(const std::string& name, const std::string& bytes) const {
  std::string p = *this / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

bool BitwiseEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

void WriteTokens(const std::string& path, const std::vector<int64_t>& tokens, TokenDType dtype) {
  std::ofstream out(path, std::ios::binary);
  for (int64_t t : tokens) {
    if (dtype == TokenDType::kUint16) {
      uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      int32_t v = static_cast<int32_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

std::map<std::string, Tensor> ReadFeeds(const std::filesystem::path& dir) {
  std::map<std::string, Tensor> feeds;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    auto t = ReadTensorFile(e.path().string());
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (t.ok()) feeds[e.path().stem().string()] = std::move(*t);
  }
  return feeds;
}

}  // namespace foundry
