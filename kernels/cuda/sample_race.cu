// sample variant 7 (grid_race): the race of kernels/sampling.h (R1-R4) -- the
// largest Gumbel key over the top-k / top-p set, found by rejection -- on
// G blocks per row, with a few grid-wide reductions instead of a sort or a
// histogram search. Its reference is sample.8 cpu_race (not cpu_ref: the race
// draws from the same restricted softmax, but other tokens for a (seed, step)).
//
// Why: sample.6 (grid_gather) spends its 22 us at b = 1 in chains of block
// barriers over a 1024-bin histogram, the list of gathered tokens and the
// crossing search (docs/performance.md, session 23). The race needs none of
// that for top-p: only counts and masses of the tokens ranked before ONE token.
// Rounds, each one reduction over the row's G blocks of 256 threads (1024 for
// slices re-read from the logits; per-field
// global atomics into the round's accumulators, a row barrier, every block
// reading the result):
//   R0  every block loads its slice (kept in shared memory), makes its tokens'
//       Gumbel keys, and adds its argmax key and its best race key; with top-k,
//       also a 256-bin histogram of the logits' top byte (the first of four
//       radix digits of the k-th logit).
//   R1-3 (top-k only) the next three digits: then theta, the k-th largest logit
//       (as an orderable 32-bit value), and how many tokens lie above it.
//   M   (the membership round, repeated only on a rejection) for the candidate
//       s: the count and fixed-point mass of the tokens ranked before s, the best
//       race key among them (the next candidate if s is rejected), and, in the
//       first M only, S (the whole row's mass; with top-k, the mass above theta).
//       Every block then decides sampling::race_in_set(s) from the same integer
//       sums: the same decision everywhere, deterministic.
// Top-p alone: R0 and one M (a second M with probability about 1 - P).
// Rows with G = 1 block (more rows than fit the GPU as grids) run the same
// rounds with __syncthreads only; slices too large for shared memory re-read
// the logits (L2) and remake the keys in every pass.
//
// Measured (H200, docs/performance.md session 26), b = 1, T 0.8: top_p 0.95
// 11.4 us per call (bench_kernels, L2 flushed; sample.6 21.9) and 8.6 us in the
// engine (CUPTI; sample.6 19.2); top_k 50 + top_p 0.9 22.4-25.5 us (sample.6
// 22.5: the four digit rounds); b = 8 29.0 us (sample.6 28.5); from 64 rows on,
// slower than sample.6 (the keys are remade from the logits in every pass).
// Hence tested only. The phases
// (LANTERN_SAMPLE_RACE_PROBE=1): the barrier ~1.3 us per round, the first
// pass ~2.2 us (cold logits), a membership pass ~0.8 us. Re-read slices (from
// 17 rows) run 1024-thread blocks: b = 64 163 us, b = 256 483 (sample.6: 115,
// 427).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_grid.cuh"
#include "kernels/cuda/sample_wide_probe.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace sample_bins;

// Threads per block: 256 (few warps: every per-thread instruction and block
// reduction is cheap), 1024 for slices re-read from the logits (more than
// kSmemSlice tokens, from 17 rows at 128256). Measured (H200, bench_kernels,
// top_p 0.95): 1024 threads from 2048 tokens made b = 8 slower (34.7 vs 29.0
// us) and b = 64 / 256 faster (163 vs 241, 483 vs 702 us).
constexpr int kSmallThreads = 256, kWideThreads = 1024;
constexpr int kWideSlice = 16384;
constexpr int kMaxWarps = kWideThreads / kWarp;
constexpr int kMaxG = 128;         // blocks per row at most
constexpr int kSlotBlocks = 256;   // grid blocks with a global record slot, per stream slot
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
  RowSync rows[kSlotBlocks];
};
// Zero at module load; every launch leaves bar, done, acc and hist zero (the
// row's last block resets them). 4 x 1.6 MB of static device memory.
__device__ RaceSlot g_race[kStreamSlots];

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

// sample_grid::row_barrier with the arrival as one release reduction (no
// separate fence): red.release.gpu orders the block's writes before it (the
// __syncthreads makes them thread 0's at CTA scope first).
// mode 1 (LANTERN_SAMPLE_RACE_BARRIER=1): polls with relaxed loads and takes
// one acquire fence after the wait instead of an acquire per poll.
__device__ __forceinline__ void row_barrier_release(unsigned int* bar, unsigned int target, int mode) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
    if (mode == 1) {
      unsigned int v;
      do {
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(bar) : "memory");
      } while (v < target);
      asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    } else {
      while (sample_grid::load_acquire(bar) < target) {
      }
    }
  }
  __syncthreads();
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
  int barrier_mode;
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
    row_barrier_release(&sync->bar, round * unsigned(G), barrier_mode);
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
    const int i = begin + 4 * j;  // a multiple of 4: one Philox block for the group
    const sampling::Philox4 r = sampling::philox4x32_10(
        sampling::Philox4{{uint32_t(step), uint32_t(i) >> 2, sampling::kRaceTag, 0u}}, uint32_t(seed),
        uint32_t(seed >> 32));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float u = (float(r.v[q] >> 9) + 0.5f) * (1.0f / 8388608.0f);
      key[q] = sampling::race_key(l[q], inv_t, -logf(-logf(u)));
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

template <bool kSmem, int kThreads>
__global__ void __launch_bounds__(kThreads)
    sample_race_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                       const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                       const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                       int32_t* __restrict__ out, int vocab, int slice_len, RaceSlot* __restrict__ slot,
                       uint64_t* probe, int barrier_mode) {
  extern __shared__ __align__(16) unsigned char smem[];
  const wide_probe::Stamp stamp{probe};
  stamp(0);
  Shared& s = *reinterpret_cast<Shared*>(smem);
  const int row = blockIdx.y, rank = blockIdx.x, G = gridDim.x, tid = threadIdx.x;
  Row rw{G, rank, G > 1 ? slot->rows + row : nullptr, logits + size_t(row) * vocab, 0u, barrier_mode, &stamp, 13, 0};
  const float temp = temperature[row];
  const float p = top_p[row];
  const int k = sampling::candidate_count(top_k[row], vocab);
  const bool greedy_t = sampling::is_greedy(temp);
  const bool with_k = k < vocab && !greedy_t;
  Slice<kSmem, kThreads> sl{logits + size_t(row) * vocab,
                  reinterpret_cast<float*>(smem + ((sizeof(Shared) + 15) & ~size_t(15))),
                  rank * slice_len,
                  max(0, min(vocab - rank * slice_len, slice_len)),
                  slice_len,
                  seeds[row],
                  steps[row],
                  greedy_t ? 0.0f : 1.0f / temp,
                  !greedy_t};

  // R0: argmax key, best race key, the top digit's histogram (top-k).
  if (tid < kDigitBins) s.hist[tid] = 0;
  __syncthreads();
  Rec mine{};
  sl.first([&](float l, float key, int32_t id) {
    const uint64_t am = (uint64_t(orderable(l)) << 32) | uint32_t(~uint32_t(id));
    mine.amax = am > mine.amax ? am : mine.amax;
    const uint64_t rk = race_pack(l, key, id);
    if (rk > mine.key) mine.key = rk, mine.key_logit = orderable(l);
    if (with_k) atomicAdd(&s.hist[orderable(l) >> 24], 1u);
  });
  stamp(1);
  const Rec mine_all = block_reduce<kKey | kAmax, kThreads>(mine, s, rw.parity);
  stamp(12);
  if (with_k) publish_hist(s, rw, 0);
  const Rec r0 = rw.exchange<kKey | kAmax>(mine_all, s);
  rw.stamp_slot = 0;
  stamp(2);
  const uint64_t top = r0.amax;
  const float max_logit = logit_of_orderable(uint32_t(top >> 32));
  int32_t token = int32_t(~uint32_t(top));
  if (!greedy_t && sampling::max_is_usable(max_logit)) {
    const ZBins bins{max_logit, sl.inv_t};
    // R1-R3 (top-k): theta, the k-th largest logit's orderable value; above_theta
    // tokens lie strictly above it.
    uint32_t theta = 0, above_theta = 0;
    if (with_k) {
      unsigned int need = unsigned(k);
      for (int level = 0;; ++level) {
        const int shift = 24 - 8 * level;
        read_hist(s, rw, level);
        pick_digit<kThreads>(s, need);
        theta |= uint32_t(s.digit) << shift;
        above_theta += s.above;
        need -= s.above;
        if (shift == 0) break;
        __syncthreads();  // s.digit and s.hist read by all before they change
        if (tid < kDigitBins) s.hist[tid] = 0;
        __syncthreads();
        const uint32_t hi_mask = ~0u << shift;  // the digits fixed so far
        const int next = shift - 8;
        sl.again([](float, int32_t) { return false; }, [&](float l, float, int32_t) {
          const uint32_t o = orderable(l);
          if ((o & hi_mask) == theta) atomicAdd(&s.hist[(o >> next) & 0xffu], 1u);
        });
        publish_hist(s, rw, level + 1);
        rw.exchange<0>(Rec{}, s);
      }
    }
    stamp(3);
    // M rounds: the candidate (s_key, s_logit) in the set, or the next one.
    uint64_t s_key = r0.key;
    float s_logit = logit_of_orderable(r0.key_logit);
    int rounds = 0;
    uint64_t set_mass = 0;  // S
    bool first_m = true;
    token = int32_t(~uint32_t(top));  // the rank-0 token: always in the set (a guard only)
    while (s_key != 0) {
      const int32_t s_id = int32_t(~uint32_t(s_key));
      const uint64_t s_sort = sort_key(s_logit, s_id);
      Rec m{};
      sl.again(
          [&](float l, int32_t id) { return sort_key(l, id) < s_sort && (!with_k || orderable(l) >= theta); },
          [&](float l, float key, int32_t id) {
        const uint32_t o = orderable(l);
        const uint64_t w = bins.fixed_weight(l);
        if (first_m) m.extra += with_k ? (o > theta ? w : 0) : w;
        if (sort_key(l, id) < s_sort) {
          m.cnt += 1;
          m.mass += w;
          if (!with_k || o >= theta) {
            const uint64_t rk = race_pack(l, key, id);
            if (rk > m.key) m.key = rk, m.key_logit = o;
          }
        }
      });
      if (rounds == 0) stamp(9);
      const Rec m_all = block_reduce<kSums | kKey, kThreads>(m, s, rw.parity);
      if (rounds == 0) stamp(10), rw.stamp_slot = 11;
      const Rec all = rw.exchange<kSums | kKey>(m_all, s);
      rw.stamp_slot = 0;
      stamp(4 + min(rounds++, 4));
      if (first_m) {
        set_mass = with_k ? all.extra + uint64_t(k - int(above_theta)) * bins.fixed_weight(logit_of_orderable(theta))
                          : all.extra;
        first_m = false;
      }
      if (sampling::race_in_set(all.cnt, all.mass, bins.fixed_weight(s_logit), k, set_mass, p)) {
        token = s_id;
        break;
      }
      s_key = all.key;
      s_logit = logit_of_orderable(all.key_logit);
    }
    stamp.set(14, uint64_t(rounds));
  }
  if (rank == 0 && tid == 0) out[row] = token;
  stamp(15);
  // The row's last block resets the barrier and the histograms for the next launch.
  if (G > 1) {
    __shared__ int is_last;
    if (tid == 0) {
      __threadfence();
      is_last = atomicAdd(&rw.sync->done, 1u) == unsigned(G - 1);
    }
    __syncthreads();
    if (is_last) {
      if (with_k)
        for (int i = tid; i < kDigits * kDigitBins; i += kThreads) (&rw.sync->hist[0][0])[i] = 0;
      if (tid < 3 * kAccFields) rw.sync->acc[tid / kAccFields][tid % kAccFields].v = 0;
      if (tid == 0) rw.sync->bar = 0, rw.sync->done = 0;
    }
  }
}

// Blocks per row at b rows: the SMs shared out, at most kDefaultG (LANTERN_SAMPLE_RACE_BLOCKS=N
// forces N; capped so the grid fits one block per SM and the record slots).
constexpr int kDefaultG = 128;
int race_blocks(int rows) {
  static const int forced = env_int("LANTERN_SAMPLE_RACE_BLOCKS");
  const int fit = std::min({kMaxG, sm_count() / std::max(rows, 1), kSlotBlocks / std::max(rows, 1)});
  return std::max(1, std::min(forced > 0 ? forced : kDefaultG, fit));
}

// LANTERN_SAMPLE_RACE_PROBE=1 (an experiment knob for bench_kernels; never
// where launches are captured): %globaltimer stamps of every block of row 0,
// printed per launch to stderr as the median block's us after the first
// block's start: loaded (first pass), r0 (after R0's exchange), radix (after
// the digits), m1.. (after each membership round), end; and the rounds taken.
wide_probe::Probe& race_probe(size_t slots) {
  static wide_probe::Probe p;
  static const bool on = env_int("LANTERN_SAMPLE_RACE_PROBE") > 0;
  if (on && slots > p.slots) {
    if (p.dev) CUDA_CHECK(cudaFree(p.dev));
    CUDA_CHECK(cudaMalloc(&p.dev, slots * sizeof(uint64_t)));
    CUDA_CHECK(cudaMemset(p.dev, 0, slots * sizeof(uint64_t)));
    p.slots = slots;
  }
  return p;
}
void print_race_probe(const wide_probe::Probe& p, int G, cudaStream_t stream) {
  using wide_probe::kProbeSlots;
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint64_t> h(size_t(G) * kProbeSlots);
  CUDA_CHECK(cudaMemcpy(h.data(), p.dev, h.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  uint64_t t0 = ~uint64_t(0);
  for (int b = 0; b < G; ++b) t0 = std::min(t0, h[size_t(b) * kProbeSlots]);
  auto median_us = [&](int at) {
    std::vector<double> us;
    for (int b = 0; b < G; ++b) {
      const uint64_t t = h[size_t(b) * kProbeSlots + at];
      if (t >= t0) us.push_back(double(t - t0) * 1e-3);
    }
    if (us.empty()) return -1.0;
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  const int rounds = int(h[14]);
  std::fprintf(stderr,
               "[sample.7 probe] %d blocks/row: loaded %.2f reduced %.2f barrier %.2f r0 %.2f radix %.2f | m1: pass "
               "%.2f reduced %.2f barrier %.2f |",
               G, median_us(1), median_us(12), median_us(13), median_us(2), median_us(3), median_us(9), median_us(10),
               median_us(11));
  for (int r = 0; r < std::min(rounds, 5); ++r) std::fprintf(stderr, " m%d %.2f", r + 1, median_us(4 + r));
  std::fprintf(stderr, " end %.2f (%d rounds)\n", median_us(15), rounds);
  CUDA_CHECK(cudaMemset(p.dev, 0, h.size() * sizeof(uint64_t)));
}

template <bool kSmem, int kThreads>
cudaError_t launch_race(const SampleArgs& a, int G, int slice_len, cudaStream_t stream) {
  RaceSlot* slot = sample_grid::stream_slot<kStreamSlots, 1>(stream, g_race);
  static size_t smem_allowed = 0;  // per instantiation
  const size_t smem = ((sizeof(Shared) + 15) & ~size_t(15)) + (kSmem ? size_t(2) * slice_len * sizeof(float) : 0);
  sample_grid::allow_smem(sample_race_kernel<kSmem, kThreads>, smem, &smem_allowed);
  // G > 1: a cooperative launch (row barriers); refused, the caller runs one block per row.
  const sample_grid::GridLaunch l(G, a.b, kThreads, smem, stream, G > 1);
  const wide_probe::Probe& probe = race_probe(size_t(G) * a.b * wide_probe::kProbeSlots);
  static const int barrier_mode = env_int("LANTERN_SAMPLE_RACE_BARRIER");
  const cudaError_t err = cudaLaunchKernelEx(&l.cfg, sample_race_kernel<kSmem, kThreads>, a.logits, a.temperature, a.top_k,
                                             a.top_p, a.seeds, a.steps, a.out, a.vocab, slice_len, slot, probe.dev,
                                             barrier_mode);
  if (err == cudaSuccess && probe.dev) print_race_probe(probe, G, stream);
  return err;
}

cudaError_t launch_race_g(const SampleArgs& a, int G, cudaStream_t stream) {
  const int slice_len = ((a.vocab + G - 1) / G + 3) / 4 * 4;  // groups of 4 tokens never straddle blocks
  static_assert(kWideSlice == kSmemSlice, "1024 threads exactly for re-read slices");
  return slice_len <= kSmemSlice ? launch_race<true, kSmallThreads>(a, G, slice_len, stream)
                                 : launch_race<false, kWideThreads>(a, G, slice_len, stream);
}

void sample_grid_race(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.grid_race: bad shape b=%d vocab=%d", a.b, a.vocab);
  if (a.b == 0) return;
  const int G = race_blocks(a.b);
  cudaError_t err = launch_race_g(a, G, ctx.stream);
  if (G > 1 && err == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();  // refused: one block per row instead
    err = launch_race_g(a, 1, ctx.stream);
  }
  if (err != cudaSuccess) ::lantern::throw_cuda_error(err, "sample.grid_race", __FILE__, __LINE__);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void register_sample_race_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_grid_race, sample_cost<2>>(
      7, "grid_race", Backend::cuda,
      "the race (kernels/sampling.h R1-R4; reference cpu_race): the largest Gumbel key over the "
      "top-k / top-p set by rejection, on up to 128 blocks of 256 threads per row: one grid-wide "
      "reduction for the argmax and the best key, one for the count and mass ranked before it "
      "(top-k: three more for the k-th logit's radix digits); no sort, no histogram search",
      kTestedOnly));
}

}  // namespace lantern::kernels
