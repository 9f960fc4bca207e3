// What both CLIs share: the one-line error contract, exit codes, and strict parsing of numbers and
// --dim bindings. Header-only: each tool is one translation unit (CMakeLists.txt).
//
// Exit codes: 0 success; 2 the command line itself is wrong, which is known before any file is
// read (unknown option, missing or malformed value, a value out of range, options that do not
// go together); 1 anything found in the inputs or while running (model, plan, data, a step).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace foundry::cli {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// `message` with control characters (a newline in a file name or an option's value) written as
// \xNN, so that it stays one line whatever it quotes.
inline std::string OneLine(const std::string& message) {
  std::string out;
  for (unsigned char c : message) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
      continue;
    }
    static const char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// Prints `<tool>: error: <message>` (the only error line, in one write) and returns `code`. The
// libraries clip the names they quote; a message that still runs past 4 KiB keeps its head and
// its tail (where the advice is).
inline int Fail(const std::string& tool, const std::string& message, int code = kExitError) {
  std::string line = OneLine(message);
  if (line.size() > 4096)
    line = line.substr(0, 3000) + " [... " + std::to_string(line.size() - 3800) +
           " bytes cut ...] " + line.substr(line.size() - 800);
  // One write: under mpirun the line must not be split by another process's output.
  std::cerr << (tool + ": error: " + line + "\n") << std::flush;
  return code;
}

// An option given an empty value (--report-json '', --memory-budget '') is a mistake, never
// "not given": the usage error, before anything else is checked, except for the options in
// `may_be_empty` (whose empty value means something). nullopt: none.
inline std::optional<int> RejectEmptyValues(const CLI::App& app, const std::string& tool,
                                            const std::vector<std::string>& may_be_empty = {}) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0) continue;  // a flag
    if (std::find(may_be_empty.begin(), may_be_empty.end(), opt->get_name()) !=
        may_be_empty.end())
      continue;
    for (const std::string& value : opt->results())
      if (value.empty()) {
        const std::string name = opt->get_name();
        std::string what = opt->get_type_name();
        if (what.empty() || what == "TEXT" || what == "FLOAT" || what == "INT" || what == "UINT")
          what = "a value";
        return Fail(tool,
                    (opt->get_positional() ? "the " + name + " argument" : name) +
                        " is empty; give " + what + " (run " + tool + " --help)",
                    kExitUsage);
      }
  }
  return std::nullopt;
}

// Runs a tool's `main`. The libraries report errors as Status; an exception reaching here is a
// bug, but the user still gets the one-line error contract rather than std::terminate.
template <class Main>
int RunMain(const std::string& tool, Main&& main) {
  try {
    return main();
  } catch (const std::exception& e) {
    return Fail(tool, std::string("internal error: ") + e.what());
  }
}

// Parses the command line. nullopt: go on. Otherwise the exit code: 0 after --help (printed on
// stdout), kExitUsage after one prefixed error line for any CLI11 parse error.
inline std::optional<int> Parse(CLI::App& app, int argc, char** argv, const std::string& tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    while (!what.empty() && what.back() == '\n') what.pop_back();
    for (char& c : what)
      if (c == '\n') c = ' ';
    return Fail(tool, what + " (run " + tool + " --help)", kExitUsage);
  }
  return std::nullopt;
}

// The whole of `text` as a decimal integer in [min, max] (no sign for unsigned, no hex, no
// clamping: strtoll's silent LLONG_MAX on overflow is exactly what this avoids).
template <class T>
StatusOr<T> ParseInteger(const std::string& option, const std::string& text, T min, T max,
                         const std::string& what) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  // A negative number for an unsigned option is a number out of range, not a typo.
  bool negative = std::is_unsigned_v<T> && text.size() > 1 && text[0] == '-' &&
                  text.find_first_not_of("0123456789", 1) == std::string::npos;
  if (!negative &&
      (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size()))
    return Error(option + " " + text + ": expected " + what);
  if (negative || ec == std::errc::result_out_of_range || v < min || v > max)
    return Error(option + " " + text + ": expected " + what + " from " + std::to_string(min) +
                 " to " + std::to_string(max));
  return v;
}

// --dim NAME=VALUE bindings: VALUE a positive integer that fits int64; a name bound twice must
// be bound to the same value.
inline StatusOr<std::map<std::string, int64_t>> ParseDims(const std::vector<std::string>& specs) {
  std::map<std::string, int64_t> dims;
  for (const auto& s : specs) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return Error("--dim " + s + ": expected NAME=VALUE, e.g. --dim seq=2048");
    const std::string name = s.substr(0, eq), text = s.substr(eq + 1);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || end != text.data() + text.size() ||
        (ec != std::errc() && ec != std::errc::result_out_of_range) ||
        (ec == std::errc() && v <= 0))
      return Error("--dim " + s + ": VALUE must be a positive integer");
    if (ec == std::errc::result_out_of_range)
      return Error("--dim " + s + ": VALUE is too large (at most " + std::to_string(INT64_MAX) +
                   ")");
    auto [it, inserted] = dims.emplace(name, v);
    if (!inserted && it->second != v)
      return Error("--dim " + s + ": '" + name + "' is already bound to " +
                   std::to_string(it->second) + " by an earlier --dim");
  }
  return dims;
}

// --input-shape NAME=N1xN2x... bindings (the form ONNX tools use: input_ids=8x2048): every size a
// positive integer; an input given twice must be given the same shape.
inline StatusOr<std::map<std::string, std::vector<int64_t>>> ParseInputShapes(
    const std::vector<std::string>& specs) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& s : specs) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
      return Error("--input-shape " + s + ": expected NAME=N1xN2..., e.g. input_ids=8x2048");
    std::vector<int64_t> shape;
    for (size_t at = eq + 1; at <= s.size();) {
      size_t x = s.find('x', at);
      if (x == std::string::npos) x = s.size();
      const std::string text = s.substr(at, x - at);
      int64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || end != text.data() + text.size() || ec != std::errc() || v <= 0)
        return Error("--input-shape " + s + ": '" + text +
                     "' is not a size (each size a positive integer, joined by x)");
      shape.push_back(v);
      at = x + 1;
    }
    auto [it, inserted] = shapes.emplace(s.substr(0, eq), shape);
    if (!inserted && it->second != shape)
      return Error("--input-shape " + s + ": '" + it->first +
                   "' already has another shape from an earlier --input-shape");
  }
  return shapes;
}

// Repeatable options take exactly one value per occurrence, so `--dim batch=2 model.onnx` never
// reads the positional model as a second --dim.
inline CLI::Option* OneValueEach(CLI::Option* o) { return o->allow_extra_args(false); }

}  // namespace foundry::cli
