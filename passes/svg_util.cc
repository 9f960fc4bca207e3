#include "passes/svg_util.h"

#include <cmath>
#include <cstdio>

namespace foundry::svg {

std::string Xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

Unit UnitFor(int64_t max_bytes) {
  if (max_bytes >= (int64_t{1} << 30)) return {"GiB", double(int64_t{1} << 30)};
  if (max_bytes >= (int64_t{1} << 20)) return {"MiB", double(int64_t{1} << 20)};
  if (max_bytes >= 1024) return {"KiB", 1024.0};
  return {"B", 1.0};
}

double NiceStep(double range, int target) {
  if (range <= 0) return 1;
  const double raw = range / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

std::string FormatTick(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9)
    std::snprintf(buf, sizeof buf, "%.0f", std::round(v));
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace foundry::svg
