// The main of every test binary: gtest's, plus the switches every test runs under.
#include <gtest/gtest.h>

#include "kernels/cpu/kernel.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // Kernel outputs start as NaN / 0xA5 bytes, never zeros: a kernel that does not write every
  // element fails the test that runs it (kernels/cpu/kernel.h).
  foundry::SetPoisonKernelOutputs(true);
  return RUN_ALL_TESTS();
}
