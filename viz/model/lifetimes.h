#pragma once
// Alias lifetimes as a Gantt: for one access pattern (the ops of a step), one
// row per arena view, grouped by the buffer it lives in, with its live
// intervals in op indices; intervals of different views of one buffer that
// overlap, and the run's violations and stale reads, are marked.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/runfmt/records.h"

namespace lantern::view {

struct GanttBar {
  int first = 0, last = 0;   // op indices, inclusive (clamped into the pattern)
  bool stale = false;        // read before any write in the step (first_write -1)
  bool unread = false;       // written, never read (last_read -1)
  bool overlaps = false;     // overlaps a bar of another view of the same buffer
  bool violation = false;    // a clobber or stale read the tracker reported on this view
};

struct GanttRow {
  int view = -1;             // index into MemoryMap::views
  int buffer = -1;
  std::string label;         // "q  (q_attn)"
  std::vector<GanttBar> bars;
};

struct Gantt {
  int pattern = -1;
  int ops = 0;               // columns
  std::vector<GanttRow> rows;  // by buffer, then view id
  int overlapping_pairs = 0;
};

// Converts a pattern's intervals into bars and marks overlaps between views
// that share a buffer. Two bars overlap when both hold a value at some op
// strictly between their ends (an in-place op that reads one view and writes
// the other is allowed: touching ends do not overlap).
Gantt build_gantt(const runfmt::MemoryMap& memory, int pattern_id);

// The pattern of `step` (-1 when the step has none).
int pattern_of_step(const runfmt::MemoryMap& memory, int64_t step);

}  // namespace lantern::view
