#pragma once
// A generator of valid run directories of any size (tests and the viewer
// benchmark): a CUDA-like run of decode steps over `layers` layers, each op
// one kernel on one of `streams` streams, with host step/phase/layer/op
// ranges, counters, a memory map with the seed's two aliases, KV block
// events with a preemption, outputs and the timeline.bin side file. Written
// through runfmt::RunWriter, so it reads back like a recorded run.
#include <cstdint>
#include <filesystem>

namespace lantern::test {

struct SyntheticRunOptions {
  int64_t kernels = 1000;   // kernel events (rows of kernels.csv)
  int layers = 16;
  int streams = 1;
  int sequences = 8;        // concurrent sequences (KV owners)
  bool op_ranges = true;    // host op ranges too (eager launches; false: graph replays)
  bool timeline_index = true;  // write timeline.bin
  // Programmatic-dependent-launch-like overlap: every third kernel starts this
  // share of the previous kernel's duration before that one ends (0: none).
  double pdl_overlap = 0;
  uint64_t seed = 1;
};

struct SyntheticRunInfo {
  int64_t kernels = 0, steps = 0, trace_events = 0;
  double duration_us = 0;
};

SyntheticRunInfo write_synthetic_run(const std::filesystem::path& dir, const SyntheticRunOptions& options);

}  // namespace lantern::test
