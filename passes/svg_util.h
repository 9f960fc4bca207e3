// Small pieces the hand-written SVG pictures share (memory_timeline.cc, memory_frontier.cc).
#pragma once

#include <cstdint>
#include <string>

namespace foundry::svg {

// Text escaped for XML content and attribute values.
std::string Xml(const std::string& s);
// "12.3": a coordinate with one decimal.
std::string Num(double v);

// The byte unit that keeps an axis's top label between 1 and 1024.
struct Unit {
  const char* name;
  double bytes;
};
Unit UnitFor(int64_t max_bytes);

// A tick spacing of 1, 2 or 5 times a power of ten giving about `target` ticks over `range`.
double NiceStep(double range, int target);
// A tick label: integers without decimals, others as %g.
std::string FormatTick(double v);

}  // namespace foundry::svg
