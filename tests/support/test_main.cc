// The main of every test binary: gtest's, plus the switches every test runs under.
//
// A test binary holds every test file of one layer (tests/LAYER/**/*_test.cc -> LAYER_tests,
// CMakeLists.txt); ctest runs it once per file with --foundry_test_file=tests/LAYER/x_test.cc,
// which runs exactly the tests written in that file (gtest records each test's source file) and
// prints them as its filter. A --gtest_filter given as well narrows that further. A file that holds
// no test of this binary is an error, so a renamed or misspelt file never passes by running
// nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/kernel.h"

namespace {

constexpr std::string_view kFileFlag = "--foundry_test_file=";
// --foundry_check_test_files=A,B,...: checks that every test is written in one of the files
// (TestsOutside) and runs nothing; ctest's LAYER_tests_files entries.
constexpr std::string_view kFilesFlag = "--foundry_check_test_files=";

// True when `recorded` (the test's __FILE__, absolute or relative to the build) names the
// repository-relative `wanted`: equal, or ending in "/" + wanted.
bool SameFile(std::string_view recorded, std::string_view wanted) {
  if (recorded == wanted) return true;
  return recorded.size() > wanted.size() && recorded.ends_with(wanted) &&
         recorded[recorded.size() - wanted.size() - 1] == '/';
}

// gtest's filter syntax: '*' any run of characters, '?' one character.
bool Glob(std::string_view pattern, std::string_view name) {
  if (pattern.empty()) return name.empty();
  if (pattern[0] == '*')
    return Glob(pattern.substr(1), name) || (!name.empty() && Glob(pattern, name.substr(1)));
  return !name.empty() && (pattern[0] == '?' || pattern[0] == name[0]) &&
         Glob(pattern.substr(1), name.substr(1));
}

bool AnyGlob(std::string_view patterns, std::string_view name) {
  while (true) {
    size_t colon = patterns.find(':');
    if (Glob(patterns.substr(0, colon), name)) return true;
    if (colon == std::string_view::npos) return false;
    patterns.remove_prefix(colon + 1);
  }
}

// "POSITIVE[-NEGATIVE]", each a ':'-separated list of patterns; an empty positive part is "*".
bool MatchesFilter(std::string_view filter, std::string_view name) {
  size_t dash = filter.find('-');
  std::string_view positive = filter.substr(0, dash);
  if (!positive.empty() && !AnyGlob(positive, name)) return false;
  return dash == std::string_view::npos || !AnyGlob(filter.substr(dash + 1), name);
}

// Replaces gtest's filter with the tests written in `file` that the filter selects: "Suite.*"
// for a suite all of whose tests are selected, each test's full name otherwise. Returns the
// number of tests the file holds.
int RestrictToFile(const std::string& file) {
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  const std::string user_filter = GTEST_FLAG_GET(filter);
  std::string filter;
  int in_file = 0;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    std::vector<std::string> selected;
    bool whole_suite = true;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& info = *suite.GetTestInfo(t);
      std::string name = std::string(suite.name()) + "." + info.name();
      if (!SameFile(info.file(), file)) {
        whole_suite = false;
        continue;
      }
      ++in_file;
      if (MatchesFilter(user_filter, name))
        selected.push_back(name);
      else
        whole_suite = false;
    }
    if (whole_suite && !selected.empty()) selected = {std::string(suite.name()) + ".*"};
    for (const std::string& name : selected) filter += (filter.empty() ? "" : ":") + name;
  }
  // Nothing selected (the given filter leaves out every test of the file): "-*" runs none.
  GTEST_FLAG_SET(filter, filter.empty() ? std::string("-*") : filter);
  return in_file;
}

// Every test of the binary must be written in one of `files` (','-separated): a test written
// elsewhere (a header, a file the build does not list) would have no ctest entry and never run.
// Returns the number of tests outside them, each named on stderr.
int TestsOutside(std::string_view files) {
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  int outside = 0;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& info = *suite.GetTestInfo(t);
      bool listed = false;
      for (std::string_view rest = files; !listed;) {
        size_t comma = rest.find(',');
        listed = SameFile(info.file(), rest.substr(0, comma));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      if (!listed) {
        std::fprintf(stderr, "%s.%s is written in %s, which has no ctest entry\n", suite.name(),
                     info.name(), info.file());
        ++outside;
      }
    }
  }
  return outside;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // InitGoogleTest leaves the flags it does not know: ours.
  std::string file;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with(kFileFlag)) {
      file = std::string(arg.substr(kFileFlag.size()));
    } else if (arg.starts_with(kFilesFlag)) {
      int outside = TestsOutside(arg.substr(kFilesFlag.size()));
      if (outside > 0) {
        std::fprintf(stderr, "%s: error: %d tests are written outside the binary's test files\n",
                     argv[0], outside);
        return 1;
      }
      std::printf("every test of %s is written in one of its test files\n", argv[0]);
      return 0;
    } else {
      std::fprintf(stderr,
                   "%s: error: unknown argument '%s' (gtest's flags and "
                   "--foundry_test_file=tests/LAYER/FILE_test.cc are accepted)\n",
                   argv[0], argv[i]);
      return 2;
    }
  }
  if (!file.empty() && RestrictToFile(file) == 0) {
    std::fprintf(stderr,
                 "%s: error: no test of this binary is written in '%s' (give the path from the "
                 "repository root, as ctest -N --verbose shows it)\n",
                 argv[0], file.c_str());
    return 2;
  }
  // Kernel outputs start as NaN / 0xA5 bytes, never zeros: a kernel that does not write every
  // element fails the test that runs it (kernels/cpu/kernel.h).
  foundry::SetPoisonKernelOutputs(true);
  return RUN_ALL_TESTS();
}
