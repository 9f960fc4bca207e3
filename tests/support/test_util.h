// Small helpers shared by the tests: a node builder and a self-deleting temporary directory.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/ir.h"

namespace foundry {

// A node as tests write them: op, inputs, outputs, attributes; named `name` ("n" by default,
// which is what error messages in kernel tests then quote).
Node MakeNode(const std::string& op, std::vector<std::string> inputs,
              std::vector<std::string> outputs = {"y"}, std::map<std::string, Attribute> attrs = {},
              const std::string& domain = "", const std::string& name = "n");

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

}  // namespace foundry
