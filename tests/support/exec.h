// Runs a real binary (the CLIs under test) with arguments, capturing exit code, stdout, stderr.
#pragma once

#include <string>
#include <vector>

namespace foundry {

struct ExecResult {
  int code = -1;  // exit status; -1 when killed by a signal (a crash); 124 after 300 s (a hang)
  std::string out, err;
};

// Runs in `scratch_dir` (its current folder), which also holds the captured output files.
ExecResult Exec(const std::string& binary, const std::vector<std::string>& args,
                const std::string& scratch_dir);

std::string ReadWholeFile(const std::string& path);

}  // namespace foundry
