// The precompiled header of every test source (CMakeLists.txt, target_precompile_headers): gtest
// and the headers most test files include, parsed once per build. Each test file still includes
// what it uses (a file must compile without this header: tests/kernels/cuda/optimizer_host_test.cc
// does).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "runtime/interpreter.h"
#include "tests/support/test_util.h"
