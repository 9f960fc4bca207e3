// GPU kernel checks against the CPU reference: run one node on the CPU kernels (RunSingleNode) and
// on the CUDA kernels with the same inputs, compare every output. Compiled into every test binary;
// the functions need a GPU (skip first with FOUNDRY_REQUIRE_GPU).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry {

// Whether the CUDA backend is built and a GPU is usable; `why` says what is missing.
bool HaveGpu(std::string* why);
// FOUNDRY_REQUIRE_GPU=1 in the environment (scripts/gpu-check.sh sets it): a missing GPU fails.
bool GpuRequired();

// Skips the test when there is no GPU (or fails it under FOUNDRY_REQUIRE_GPU=1), with the reason.
#define FOUNDRY_REQUIRE_GPU()                                                             \
  do {                                                                                    \
    std::string foundry_why_;                                                             \
    if (!::foundry::HaveGpu(&foundry_why_)) {                                             \
      if (::foundry::GpuRequired()) FAIL() << foundry_why_ << " (FOUNDRY_REQUIRE_GPU=1)"; \
      GTEST_SKIP() << foundry_why_;                                                       \
    }                                                                                     \
  } while (0)

// Runs `node` on the GPU: `inputs` (run time) and `constants` (also handed to the kernel as host
// constants, as the executor does) copied to the device; outputs shaped and typed as `like`
// (normally the CPU outputs). seed / node_key as the interpreter sets them (seed 0, NodeKey).
StatusOr<std::vector<Tensor>> RunSingleNodeOnCuda(const Node& node,
                                                  const std::map<std::string, Tensor>& inputs,
                                                  const std::map<std::string, Tensor>& constants,
                                                  const std::vector<Tensor>& like,
                                                  bool tf32 = false);

// CPU vs GPU for one node: float outputs within atol + rtol * |cpu|, every other dtype equal.
// Returns the first mismatch (output, element, both values) or OK.
Status CompareCudaWithCpu(const Node& node, const std::map<std::string, Tensor>& inputs,
                          const std::map<std::string, Tensor>& constants = {}, double atol = 1e-5,
                          double rtol = 1e-5);

}  // namespace foundry
