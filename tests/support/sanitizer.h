// The sanitizer build (-DFOUNDRY_SANITIZE=ON, Debug, as CI's second pass) runs code ~10x slower:
// a test case that searches or compiles the multi-billion-parameter structures many times there
// takes minutes and adds no coverage the small cases lack, so it skips itself; the main suite
// runs it.
#pragma once

#include <gtest/gtest.h>

#ifdef FOUNDRY_SANITIZE
#define FOUNDRY_SKIP_UNDER_SANITIZERS() \
  GTEST_SKIP() << "minutes under the sanitizers at -O0; the main suite runs this case"
#else
#define FOUNDRY_SKIP_UNDER_SANITIZERS() \
  do {                                  \
  } while (0)
#endif
