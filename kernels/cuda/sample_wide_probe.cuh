#pragma once
// sample.6's phase probe (LANTERN_SAMPLE_WIDE_PROBE=1, an experiment knob for
// bench_kernels): %globaltimer stamps written by thread 0 of every block, and
// the host side that reads and prints them. Read by sample_wide.cu only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/base/cuda_check.h"
#include "kernels/base/env_knob.h"

namespace lantern::kernels::wide_probe {

constexpr int kProbeSlots = 16;  // stamps per block

// Device: the slots of this block; a null probe stamps nothing.
struct Stamp {
  uint64_t* probe;
  __device__ __forceinline__ void set(int at, uint64_t value) const {
    if (probe && threadIdx.x == 0) probe[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * kProbeSlots + at] = value;
  }
  __device__ __forceinline__ void operator()(int at) const {
    if (probe && threadIdx.x == 0) {
      uint64_t t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      probe[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * kProbeSlots + at] = t;
    }
  }
};

// LANTERN_SAMPLE_WIDE_PROBE=1 (an experiment knob, bench_kernels): stamps every
// block's phases, synchronises after each launch and prints, per launch, the
// median and the last block's times (us after the first block's start) to
// stderr. Never set it where launches are captured into a graph.
struct Probe {
  uint64_t* dev = nullptr;
  size_t slots = 0;
};
inline Probe& probe_buffer(size_t slots) {
  static Probe p;
  static const bool on = env_int("LANTERN_SAMPLE_WIDE_PROBE") > 0;
  if (on && slots > p.slots) {
    if (p.dev) CUDA_CHECK(cudaFree(p.dev));
    CUDA_CHECK(cudaMalloc(&p.dev, slots * sizeof(uint64_t)));
    p.slots = slots;
  }
  return p;
}
inline void print_probe(const Probe& p, int blocks, int rows, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint64_t> h(size_t(blocks) * rows * kProbeSlots);
  CUDA_CHECK(cudaMemcpy(h.data(), p.dev, h.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  const uint64_t* r0 = h.data();  // row 0
  uint64_t t0 = ~uint64_t(0);
  int last = 0;
  for (int b = 0; b < blocks; ++b) {
    t0 = std::min(t0, r0[b * kProbeSlots]);
    if (r0[b * kProbeSlots + 10] > r0[last * kProbeSlots + 10]) last = b;
  }
  auto sorted_us = [&](int at) {  // slot `at` of every block, us after t0, ascending
    std::vector<double> us;
    for (int b = 0; b < blocks; ++b) us.push_back(double(r0[b * kProbeSlots + at] - t0) * 1e-3);
    std::sort(us.begin(), us.end());
    return us;
  };
  std::fprintf(stderr, "[sample.6 probe] %d blocks/row:", blocks);
  const char* names[] = {"start", "max", "bar1", "hist", "bar2", "plan", "gathered"};
  for (int at = 0; at < 7; ++at) {
    const std::vector<double> us = sorted_us(at);
    std::fprintf(stderr, " %s %.2f/%.2f", names[at], us[us.size() / 2], us.back());
  }
  std::fprintf(stderr, " (scanned %.2f)", sorted_us(12)[size_t(blocks) / 2]);
  const uint64_t* L = r0 + size_t(last) * kProbeSlots;
  std::fprintf(stderr, " | last block %d: copied %.2f tagged %.2f resolved %.2f end %.2f, %llu gathered\n", last,
               double(L[7] - t0) * 1e-3, double(L[8] - t0) * 1e-3, double(L[9] - t0) * 1e-3,
               double(L[10] - t0) * 1e-3, (unsigned long long)L[11]);
  CUDA_CHECK(cudaMemset(p.dev, 0, h.size() * sizeof(uint64_t)));
}

}  // namespace lantern::kernels::wide_probe
