// Small formatting helpers shared by the runtime's messages.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/tensor.h"

namespace foundry::runtime_internal {

// "f32[2, 16]"
inline std::string TypeOf(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + ShapeToString(shape);
}

// "a, b, c", or "(none)".
inline std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "(none)" : s;
}

inline bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A number as the user would type it back: shortest round-trip form ("0.001", "1e+300", "nan").
inline std::string Num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace foundry::runtime_internal
