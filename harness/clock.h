#pragma once
// The harness clock: monotonic nanoseconds (CLOCK_MONOTONIC). Host ranges,
// KV and memory events use it directly; CUPTI is told to stamp its records
// with it too (cupti_collector.cpp), so host and GPU times share one axis.
#include <cstdint>
#include <ctime>

namespace lantern::harness {

inline uint64_t clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace lantern::harness
