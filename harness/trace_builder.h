#pragma once
// Builds trace.json's events from what the observers recorded:
//   pid 1 (host)      tid 1: step > phase > layer > op ranges (host clock;
//                     ops replayed from a CUDA graph have no host range)
//                     tid 100+n: CUDA runtime/driver API calls of host thread n
//   pid 2 (GPU)       tid = CUDA stream: kernels (with op, layer, step, rates,
//                     grid, block, registers, shared memory, occupancy),
//                     memcpy and memset
//   pid 3 (counters)  "kv blocks", "kv fragmentation", "device memory",
//                     "host memory"
// All times are microseconds since `origin_ns`.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/gpu_records.h"
#include "harness/memory_recorder.h"
#include "harness/runfmt/records.h"
#include "harness/timeline.h"

namespace lantern::harness {

struct TraceSources {
  uint64_t origin_ns = 0;
  const Timeline* timeline = nullptr;                    // host ranges
  const std::vector<runfmt::KernelRow>* gpu_kernels = nullptr;  // CUPTI rows (cuda)
  const GpuRecords* gpu = nullptr;                       // memcpy/memset/API calls
  const runfmt::KvData* kv = nullptr;
  const std::vector<MemoryRecorder::Sample>* memory = nullptr;
  std::string gpu_name;                                  // for the GPU track's name
};

struct TraceStats {
  int64_t trimmed_overlaps = 0;  // GPU records on one stream overlapping by clock jitter
};

std::vector<runfmt::TraceEvent> build_trace(const TraceSources& sources, TraceStats* stats = nullptr);

}  // namespace lantern::harness
