#pragma once
// Per-stream sets of a kernel's device-global state (counters, row state):
// launches on different streams -- two engines in one process -- must not
// share a counter that elects the last block of a launch.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "kernels/base/cuda_check.h"

namespace lantern::kernels::cuda_detail {

// The set of a kernel's static state (a sampler's rows, a GEMV's arrival
// counters) for launches on `stream`: `symbol` is a __device__ array of kSlots
// sets of kPerSlot entries. Per device, the last kSlots streams seen keep
// their sets; a new stream takes the least recently used (two engines in one
// process run on different streams).
template <int kSlots, int kPerSlot, class T>
T* stream_slot(cudaStream_t stream, T (&symbol)[kSlots * kPerSlot]) {
  struct Slots {
    T* base = nullptr;
    cudaStream_t owner[kSlots] = {};
    uint64_t used[kSlots] = {};
    uint64_t clock = 0;
  };
  static std::mutex mu;
  static std::map<int, Slots> per_device;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  Slots& d = per_device[dev];
  if (!d.base) CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&d.base), symbol));
  int pick = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (d.owner[i] == stream && d.used[i]) {
      pick = i;
      break;
    }
    if (d.used[i] < d.used[pick]) pick = i;
  }
  d.owner[pick] = stream;
  d.used[pick] = ++d.clock;
  return d.base + size_t(pick) * kPerSlot;
}

}  // namespace lantern::kernels::cuda_detail
