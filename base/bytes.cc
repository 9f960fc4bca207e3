#include "base/bytes.h"

#include <cstdio>

namespace foundry {

std::string HumanBytes(int64_t bytes, int decimals) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  // Dividing by 1024 is exact in binary floating point: the unit is the one the count reaches.
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, kUnits[u]);
  return buf;
}

std::string InMiB(int64_t bytes, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f MiB", decimals, static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace foundry
