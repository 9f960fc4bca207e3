#include "tests/support/exec.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace foundry {

namespace {

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ExecResult Exec(const std::string& binary, const std::vector<std::string>& args,
                const std::string& scratch_dir) {
  static int n = 0;
  std::string out = scratch_dir + "/stdout." + std::to_string(n),
              err = scratch_dir + "/stderr." + std::to_string(n);
  ++n;
  // A hang is a failure too, not a stalled suite: coreutils' timeout ends the run with 124.
  // In the scratch folder, so that outputs a CLI writes to its current folder by default land
  // there, never in the source tree the suite runs from.
  std::string cmd = "cd " + Quote(scratch_dir) + " && timeout -k 5 300 " + Quote(binary);
  for (const auto& a : args) cmd += " " + Quote(a);
  cmd += " >" + Quote(out) + " 2>" + Quote(err);
  int status = std::system(cmd.c_str());
  ExecResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadWholeFile(out);
  r.err = ReadWholeFile(err);
  return r;
}

}  // namespace foundry
