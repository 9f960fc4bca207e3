// The memory timeline (`foundry-compile --memory-timeline FILE.svg`): live arena bytes across the
// schedule as a hand-written SVG, from a MemoryReport's per-step kinds.
//
// x is the schedule step, y the live rounded bytes (axis in KiB, MiB or GiB, whichever keeps the
// labels short). The forward and backward phases are shaded bands behind the curve; the live bytes
// are stacked by kind (saved activations at the bottom, then transients, then workspace); the
// peak (the report's peak step, where the stack reaches the lower bound) is marked and labelled.
// Further curves (the plain plan next to a checkpointed one) are drawn as lines on the same axes,
// each over its own number of steps.
//
// A graph has up to hundreds of thousands of steps and the plot is about a thousand pixels wide:
// past one step per pixel, each pixel column shows the step with the most live bytes in it, so
// the peak is never averaged away.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "passes/memory_report.h"

namespace foundry {

struct TimelineCurve {
  std::string label;                // legend text, e.g. "without checkpointing"
  std::vector<int64_t> live_bytes;  // per step
};

struct TimelineOptions {
  int width = 1200;
  int height = 700;
  std::vector<TimelineCurve> extra_curves;
};

// The plain plan's live bytes per step as a curve for extra_curves, drawn over the checkpointed
// plan's stack; labelled with its peak: "without checkpointing (peak 1.5 GiB)".
TimelineCurve PlainTimelineCurve(const MemoryReport& plain);

// "peak 1.2 GiB at step 812 (node 'MatMul_41')": the label drawn at the peak.
std::string TimelinePeakLabel(const MemoryReport& report);

// The whole SVG document.
std::string MemoryTimelineSvg(const MemoryReport& report, const TimelineOptions& options = {});

}  // namespace foundry
