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
// One knob's buffer: allocated (zeroed) once the knob is set and a launch
// needs more slots than it has; otherwise dev stays null (no stamps).
struct ProbeSwitch {
  explicit ProbeSwitch(const char* env) : on(env_int(env) > 0) {}
  Probe& buffer(size_t slots) {
    if (on && slots > p.slots) {
      if (p.dev) CUDA_CHECK(cudaFree(p.dev));
      CUDA_CHECK(cudaMalloc(&p.dev, slots * sizeof(uint64_t)));
      CUDA_CHECK(cudaMemset(p.dev, 0, slots * sizeof(uint64_t)));
      p.slots = slots;
    }
    return p;
  }
  bool on;
  Probe p;
};
inline Probe& probe_buffer(size_t slots) {
  static ProbeSwitch sw("LANTERN_SAMPLE_WIDE_PROBE");
  return sw.buffer(slots);
}

// Row 0's stamps after a launch (it synchronises, then zeroes the buffer for the
// next launch); times in us after the row's first block started.
struct ProbeRead {
  std::vector<uint64_t> h;  // [blocks][kProbeSlots]
  int blocks = 0;
  uint64_t t0 = ~uint64_t(0);
  const uint64_t* block(int b) const { return h.data() + size_t(b) * kProbeSlots; }
  // Slot `at` of every block that stamped it, ascending.
  std::vector<double> sorted_us(int at) const {
    std::vector<double> us;
    for (int b = 0; b < blocks; ++b)
      if (block(b)[at] >= t0) us.push_back(double(block(b)[at] - t0) * 1e-3);
    std::sort(us.begin(), us.end());
    return us;
  }
  double median_us(int at) const {
    const std::vector<double> us = sorted_us(at);
    return us.empty() ? -1.0 : us[us.size() / 2];
  }
};
inline ProbeRead read_probe(const Probe& p, int blocks, int rows, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  ProbeRead r;
  r.blocks = blocks;
  r.h.resize(size_t(blocks) * kProbeSlots);
  CUDA_CHECK(cudaMemcpy(r.h.data(), p.dev, r.h.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemset(p.dev, 0, size_t(blocks) * rows * kProbeSlots * sizeof(uint64_t)));
  for (int b = 0; b < blocks; ++b) r.t0 = std::min(r.t0, r.block(b)[0]);
  return r;
}

inline void print_probe(const Probe& p, int blocks, int rows, cudaStream_t stream) {
  const ProbeRead r = read_probe(p, blocks, rows, stream);
  int last = 0;
  for (int b = 0; b < blocks; ++b)
    if (r.block(b)[10] > r.block(last)[10]) last = b;
  const uint64_t t0 = r.t0;
  std::fprintf(stderr, "[sample.6 probe] %d blocks/row:", blocks);
  const char* names[] = {"start", "max", "bar1", "hist", "bar2", "plan", "gathered"};
  for (int at = 0; at < 7; ++at) {
    const std::vector<double> us = r.sorted_us(at);
    std::fprintf(stderr, " %s %.2f/%.2f", names[at], r.median_us(at), us.empty() ? -1.0 : us.back());
  }
  std::fprintf(stderr, " (scanned %.2f)", r.median_us(12));
  const uint64_t* L = r.block(last);
  std::fprintf(stderr, " | last block %d: copied %.2f tagged %.2f resolved %.2f end %.2f, %llu gathered\n", last,
               double(L[7] - t0) * 1e-3, double(L[8] - t0) * 1e-3, double(L[9] - t0) * 1e-3,
               double(L[10] - t0) * 1e-3, (unsigned long long)L[11]);
}

}  // namespace lantern::kernels::wide_probe
