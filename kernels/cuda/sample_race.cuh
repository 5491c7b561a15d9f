#pragma once
// sample.7 grid_race's device pieces (the kernel and its launch:
// sample_race.cu): the per-round record and its warp / block / row reductions,
// the row's exchange through global atomics and sample_grid's row barrier, the
// radix digit search, and the slice of logits (and Gumbel keys) a block owns.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_grid.cuh"
#include "kernels/cuda/sample_wide_probe.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels::race_detail {
using cuda_detail::kFullMask;
using cuda_detail::kWarp;
using sample_bins::orderable;

// Threads per block: 256 (few warps: every per-thread instruction and block
// reduction is cheap), 1024 for slices re-read from the logits (more than
// kSmemSlice tokens, from 17 rows at 128256). Measured (H200, bench_kernels,
// top_p 0.95): 1024 threads from 2048 tokens made b = 8 slower (34.7 vs 29.0
// us) and b = 64 / 256 faster (163 vs 241, 483 vs 702 us).
constexpr int kSmallThreads = 256, kWideThreads = 1024;
constexpr int kMaxWarps = kWideThreads / kWarp;
constexpr int kMaxG = 128;         // blocks per row at most
constexpr int kSlotRows = 256;     // rows with a grid of their own (G > 1), per stream slot
constexpr int kSmemSlice = 16384;  // tokens of a slice kept in shared memory (logit + key: 128 KB)
constexpr int kStreamSlots = 4;
constexpr int kDigitBins = 256;
constexpr int kDigits = 4;

// One block's contribution to one round. Reduced over threads and blocks field
// by field: cnt, mass, extra summed; (key, key_logit) the pair with the larger
// key; amax the largest.
struct alignas(16) Rec {
  unsigned long long cnt, mass, extra, key, amax;
  unsigned int key_logit, pad;
};
// A round's reduction over the row's blocks: each block adds its sums and
// raises its maxima with one global atomic per live field (each field on its
// own 128-byte line, so the blocks' atomics on different fields go to different
// L2 slices), then every block reads the result after the barrier. Rounds use
// the three buffers in turn: rank 0 zeroes round r-1's buffer after barrier r
// (every block has read it by then), before anyone adds to it in round r+2.
constexpr int kAccFields = 5;  // cnt, mass, extra, key, amax
struct alignas(128) AccLine {
  unsigned long long v;
  unsigned long long pad[15];
};
struct RowSync {
  unsigned int bar, done, pad[30];
  AccLine acc[3][kAccFields];
  unsigned int hist[kDigits][kDigitBins];  // the row's digit histograms (global atomics; the last block zeroes them)
};
struct RaceSlot {
  RowSync rows[kSlotRows];
};

struct alignas(16) Shared {
  Rec part[2][kMaxWarps];  // warp partials, alternating between reductions
  Rec total;
  unsigned int hist[kDigitBins];
  unsigned int scan[kMaxWarps];
  int digit;
  unsigned int above;
};

__device__ __forceinline__ Rec combine(const Rec& a, const Rec& b) {
  Rec r;
  r.cnt = a.cnt + b.cnt;
  r.mass = a.mass + b.mass;
  r.extra = a.extra + b.extra;
  const bool take_b = b.key > a.key;
  r.key = take_b ? b.key : a.key;
  r.key_logit = take_b ? b.key_logit : a.key_logit;
  r.amax = b.amax > a.amax ? b.amax : a.amax;
  r.pad = 0;
  return r;
}

// Warp reductions on the redux unit (one instruction per 32-bit word).
__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
  const uint32_t hi = __reduce_max_sync(kFullMask, uint32_t(v >> 32));
  const uint32_t lo = __reduce_max_sync(kFullMask, uint32_t(v >> 32) == hi ? uint32_t(v) : 0u);
  return (uint64_t(hi) << 32) | lo;
}
// A per-lane value below 2^53 (a thread's mass: at most 2^44 here): 26-bit halves.
__device__ __forceinline__ uint64_t warp_sum_u53(uint64_t v) {
  const uint32_t lo = __reduce_add_sync(kFullMask, uint32_t(v & 0x3ffffffu));
  const uint32_t hi = __reduce_add_sync(kFullMask, uint32_t(v >> 26));
  return (uint64_t(hi) << 26) + lo;
}
// kFields: which fields are live (the others stay 0).
constexpr int kSums = 1, kKey = 2, kAmax = 4;
template <int kFields>
__device__ __forceinline__ Rec warp_reduce(const Rec& v) {
  Rec r{};
  if (kFields & kSums) {
    r.cnt = __reduce_add_sync(kFullMask, uint32_t(v.cnt));
    r.mass = warp_sum_u53(v.mass);
    r.extra = warp_sum_u53(v.extra);
  }
  if (kFields & kKey) {
    r.key = warp_max_u64(v.key);
    const unsigned who = __ballot_sync(kFullMask, v.key == r.key);
    r.key_logit = __shfl_sync(kFullMask, v.key_logit, __ffs(int(who)) - 1);
  }
  if (kFields & kAmax) r.amax = warp_max_u64(v.amax);
  return r;
}
// The block's reduction of every thread's v, returned to every thread (one
// __syncthreads; the partials alternate between two buffers, so a reduction
// never overwrites the one a slow thread is still reading).
template <int kFields, int kThreads>
__device__ __forceinline__ Rec block_reduce(const Rec& v, Shared& s, int& parity) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const Rec w = warp_reduce<kFields>(v);
  Rec* part = s.part[parity];
  parity ^= 1;
  if (lane == 0) part[warp] = w;
  __syncthreads();
  Rec t = part[0];
#pragma unroll
  for (int i = 1; i < kThreads / kWarp; ++i) t = combine(t, part[i]);
  return t;
}

// The race key of a token as a max-ordered 64-bit value (ties: lower index);
// 0 for tokens that never race (NaN, -inf).
__device__ __forceinline__ uint64_t race_pack(float l, float key, int32_t id) {
  if (!(l > -INFINITY)) return 0;
  return (uint64_t(orderable(key)) << 32) | uint32_t(~uint32_t(id));
}

// The row's blocks and where they exchange records.
struct Row {
  int G, rank;
  RowSync* sync;  // this row's barrier, accumulators and histograms (G > 1)
  const float* x;  // the row's logits (the race winner's logit is read back)
  unsigned int round;
  const wide_probe::Stamp* stamp;
  int stamp_slot;  // > 0: stamp it when the barrier returns
  int parity;      // block_reduce's buffer
  // Adds this block's reduced record (its kFields) to the round's accumulators,
  // waits for the row, and returns the row's reduction to every thread. With
  // G == 1 only a __syncthreads.
  template <int kFields>
  __device__ Rec exchange(const Rec& mine, Shared& s) {
    const int tid = threadIdx.x;
    if (G == 1) {
      __syncthreads();
      ++round;
      return mine;
    }
    AccLine* acc = sync->acc[round % 3];
    if (tid == 0) {
      if (kFields & kSums) {
        if (mine.cnt) atomicAdd(&acc[0].v, mine.cnt);
        if (mine.mass) atomicAdd(&acc[1].v, mine.mass);
        if (mine.extra) atomicAdd(&acc[2].v, mine.extra);
      }
      if ((kFields & kKey) && mine.key) atomicMax(&acc[3].v, mine.key);
      if ((kFields & kAmax) && mine.amax) atomicMax(&acc[4].v, mine.amax);
    }
    ++round;
    sample_grid::row_barrier(&sync->bar, round * unsigned(G));
    if (stamp_slot) (*stamp)(stamp_slot);
    if (tid == 0) {
      Rec v{};
      if (kFields & kSums) v.cnt = __ldcg(&acc[0].v), v.mass = __ldcg(&acc[1].v), v.extra = __ldcg(&acc[2].v);
      if (kFields & kKey) {
        v.key = __ldcg(&acc[3].v);
        if (v.key) v.key_logit = orderable(__ldg(x + int32_t(~uint32_t(v.key))));
      }
      if (kFields & kAmax) v.amax = __ldcg(&acc[4].v);
      s.total = v;
      if (rank == 0 && round >= 2) {  // round r - 1's buffer (see AccLine)
        AccLine* old = sync->acc[(round - 2) % 3];
        for (int f = 0; f < kAccFields; ++f) old[f].v = 0;
      }
    }
    __syncthreads();
    return s.total;
  }
};

// From the row's histogram of one digit (s.hist) and the ranks still to place
// (need >= 1): the digit of the need-th largest value among those in play, and
// how many in play lie above it (s.digit, s.above). One bin per thread.
template <int kThreads>
__device__ __forceinline__ void pick_digit(Shared& s, unsigned int need) {
  static_assert(kThreads >= kDigitBins, "one digit bin per thread");
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int bin = kDigitBins - 1 - tid;  // thread 0: the highest bin
  const unsigned int c = tid < kDigitBins ? s.hist[bin] : 0u;
  unsigned int inc = c;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const unsigned int n = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += n;
  }
  if (lane == kWarp - 1) s.scan[warp] = inc;
  __syncthreads();
  unsigned int before = 0;
  for (int w = 0; w < warp; ++w) before += s.scan[w];
  const unsigned int above = before + inc - c;
  if (tid < kDigitBins && above < need && above + c >= need) {
    s.digit = bin;
    s.above = above;
  }
  __syncthreads();
}

// Runs f(l, key, id) over this block's tokens, 4 consecutive ones per thread
// and group: from shared memory (kSmem), else reloaded and their keys remade.
template <bool kSmem, int kThreads>
struct Slice {
  const float* __restrict__ x;  // the row's logits
  float* lg;                    // kSmem: the slice's logits, then (from lg + cap) its keys
  int begin, n, cap;            // token ids [begin, begin + n); cap: the slice length
  uint64_t seed;
  int32_t step;
  float inv_t;
  bool racing;  // keys are needed (not greedy)
  bool early;   // kSmem (sample.9): the keys' Gumbel noise is already in lg + cap (make_noise)

  __device__ __forceinline__ void load4(int j, float (&l)[4]) const {
    const int i = begin + 4 * j;
    if (4 * j + 3 < n && ((reinterpret_cast<uintptr_t>(x + i) & 15u) == 0)) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(x + i));
      l[0] = v.x, l[1] = v.y, l[2] = v.z, l[3] = v.w;
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) l[q] = 4 * j + q < n ? __ldg(x + i + q) : -INFINITY;
    }
  }
  __device__ __forceinline__ void keys4(int j, const float (&l)[4], float (&key)[4]) const {
    if (!racing) {
#pragma unroll
      for (int q = 0; q < 4; ++q) key[q] = -INFINITY;
      return;
    }
    if (kSmem && early) {  // the noise make_noise left in the key slots: the same floats, one FMA each
      const float4 g = reinterpret_cast<const float4*>(lg + cap)[j];
      key[0] = sampling::race_key(l[0], inv_t, g.x), key[1] = sampling::race_key(l[1], inv_t, g.y);
      key[2] = sampling::race_key(l[2], inv_t, g.z), key[3] = sampling::race_key(l[3], inv_t, g.w);
      return;
    }
    // begin + 4 j is a multiple of 4: one Philox block serves the group.
    const sampling::Philox4 r = sampling::race_words(seed, step, begin + 4 * j);
#pragma unroll
    for (int q = 0; q < 4; ++q) key[q] = sampling::race_key(l[q], inv_t, sampling::race_gumbel(r.v[q]));
  }
  // sample.9, before the dependency wait (the logits are not there yet; the
  // seed and step are step metadata, written before the step's first kernel):
  // every group's Gumbel noise into the key slots, with first()'s thread
  // mapping, so each thread reads back only what it wrote.
  __device__ __forceinline__ void make_noise() const {
    const int groups = (n + 3) / 4;
    for (int j = threadIdx.x; j < groups; j += kThreads) {
      const sampling::Philox4 r = sampling::race_words(seed, step, begin + 4 * j);
      reinterpret_cast<float4*>(lg + cap)[j] =
          make_float4(sampling::race_gumbel(r.v[0]), sampling::race_gumbel(r.v[1]), sampling::race_gumbel(r.v[2]),
                      sampling::race_gumbel(r.v[3]));
    }
  }
  // The first pass: loads, makes keys, keeps both (kSmem).
  template <class F>
  __device__ __forceinline__ void first(F&& f) const {
    const int groups = (n + 3) / 4;
    if (kSmem) {
      // Every load in flight first (the thread reads back only its own groups).
#pragma unroll 4
      for (int j = threadIdx.x; j < groups; j += kThreads) {
        float l[4];
        load4(j, l);
        reinterpret_cast<float4*>(lg)[j] = make_float4(l[0], l[1], l[2], l[3]);
      }
    }
    for (int j = threadIdx.x; j < groups; j += kThreads) {
      float l[4], key[4];
      if (kSmem) {
        const float4 a = reinterpret_cast<const float4*>(lg)[j];
        l[0] = a.x, l[1] = a.y, l[2] = a.z, l[3] = a.w;
      } else {
        load4(j, l);
      }
      keys4(j, l, key);
      if (kSmem) reinterpret_cast<float4*>(lg + cap)[j] = make_float4(key[0], key[1], key[2], key[3]);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (4 * j + q < n) f(l[q], key[q], begin + 4 * j + q);
    }
  }
  // Later passes. Re-read slices (!kSmem) remake a group's keys only when
  // needs_key(l, id) holds for one of its tokens (the others get -inf).
  template <class P, class F>
  __device__ __forceinline__ void again(P&& needs_key, F&& f) const {
    const int groups = (n + 3) / 4;
    for (int j = threadIdx.x; j < groups; j += kThreads) {
      float l[4], key[4];
      if (kSmem) {
        const float4 a = reinterpret_cast<const float4*>(lg)[j];
        const float4 b = reinterpret_cast<const float4*>(lg + cap)[j];
        l[0] = a.x, l[1] = a.y, l[2] = a.z, l[3] = a.w;
        key[0] = b.x, key[1] = b.y, key[2] = b.z, key[3] = b.w;
      } else {
        load4(j, l);
        bool any = false;
#pragma unroll
        for (int q = 0; q < 4; ++q) any |= 4 * j + q < n && needs_key(l[q], begin + 4 * j + q);
        if (any) {
          keys4(j, l, key);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) key[q] = -INFINITY;
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (4 * j + q < n) f(l[q], key[q], begin + 4 * j + q);
    }
  }
};

// The digit histogram of this block's tokens in play (s.hist, zeroed first) added
// to the row's (G > 1: global atomics for the non-empty bins; a barrier follows).
__device__ __forceinline__ void publish_hist(Shared& s, Row& rw, int level) {
  __syncthreads();
  if (rw.G > 1 && threadIdx.x < kDigitBins) {
    const unsigned int c = s.hist[threadIdx.x];
    if (c) atomicAdd(&rw.sync->hist[level][threadIdx.x], c);
  }
}
// After the barrier: the row's totals into s.hist (G > 1).
__device__ __forceinline__ void read_hist(Shared& s, const Row& rw, int level) {
  if (rw.G > 1) {
    if (threadIdx.x < kDigitBins) s.hist[threadIdx.x] = __ldcg(&rw.sync->hist[level][threadIdx.x]);
    __syncthreads();
  }
}

}  // namespace lantern::kernels::race_detail
