#pragma once
// The pieces sample.4 (cluster_gather, sample_gather.cu) and sample.5
// (cluster_lean, sample_lean.cu) share: the crossing plan from the bin prefixes,
// the gather's run offsets, the crossings' resolution on rank 0 and the
// bisection slow path. Both kernels decide with these, so they draw the same
// token (tested). The design is in sample_gather.cu's header comment.
#include <cooperative_groups.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels::gather_detail {
namespace cg = cooperative_groups;
using namespace cuda_detail;
using namespace sample_bins;

constexpr int kBins = ZBins::kBins;  // == kThreads
constexpr int kMaxC = 16;            // blocks per row at most

struct Row {
  const float* slice;  // this block's slice in shared memory
  int begin, n;        // slice = logits[begin, begin + n)
  ZBins bins;
};

// The bin holding count / mass position t: the last b with before[b] <= t
// (kBins - 1 when t is past the total, as sample.3's find_bin).
template <class T>
__device__ int find_bin(const T* before, uint64_t t) {
  int lo = 0, hi = kBins - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (uint64_t(before[mid]) <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Which bins can hold the crossings, from the global prefixes alone (see the
// header). Identical in every block.
struct Plan {
  int k, kbin;           // kbin: the top-k bin (-1: top-k inactive)
  bool k_resolve;        // the top-k bin has mass: its cut must be resolved
  int p_lo, p_hi;        // top-p cut bins (empty when p_lo > p_hi)
  int d_lo, d_hi;        // draw bins
  bool ok;
  __device__ bool gathers(int b) const {
    return (k_resolve && b == kbin) || (p_lo <= b && b <= p_hi) || (d_lo <= b && b <= d_hi);
  }
};

__device__ inline uint64_t target_of(float u, uint64_t mass) {
  return uint64_t(floor(double(u) * double(mass)));
}

// find_bin by one thread (sample.4 and sample.5 make the plan on one thread).
struct BinarySearch {
  template <class T>
  __device__ int operator()(const T* before, uint64_t t) const {
    return find_bin(before, t);
  }
};

// `find` locates a bin (find_bin's contract); sample.6 passes one that every
// thread of the block calls together.
template <class S, class Find = BinarySearch>
__device__ Plan make_plan(const S& s, int k, int vocab, float p, float u, uint64_t fw_max, Find find = {}) {
  Plan pl{k, -1, false, 1, 0, 1, 0, true};
  const uint64_t total = s.mass_before[kBins];
  uint64_t mk_lo = total, mk_hi = total;  // the range of S = C_k
  if (k < vocab) {
    pl.kbin = find(s.count_before, uint64_t(k - 1));
    mk_lo = mk_hi = s.mass_before[pl.kbin];
    if (s.mass_before[pl.kbin] != s.mass_before[pl.kbin + 1]) {
      // The bin's first token weighs the most in it (> 0): C_k >= before + 1.
      pl.k_resolve = true;
      mk_lo = s.mass_before[pl.kbin] + 1;
      mk_hi = s.mass_before[pl.kbin + 1];
    }
  }
  uint64_t mn_lo = mk_lo, mn_hi = mk_hi;  // the range of C_n
  if (sampling::top_p_active(p)) {
    const double need_lo = ceil(double(p) * double(mk_lo)), need_hi = ceil(double(p) * double(mk_hi));
    if (need_hi <= 0.0) {
      mn_lo = mn_hi = fw_max;
    } else if (need_lo <= 0.0) {
      pl.ok = false;  // P > 0 and S >= 1 make this impossible; the slow path is exact anyway
    } else {
      const uint64_t t_lo = uint64_t(need_lo) - 1, t_hi = uint64_t(need_hi) - 1;
      mn_lo = t_lo + 1;  // a located cut ends past t; else C_n = C_k >= mk_lo > t_lo
      mn_hi = 0;
      if (t_lo < mk_hi) {  // t < C_k possible: the cut is located in these bins
        pl.p_lo = find(s.mass_before, t_lo);
        pl.p_hi = find(s.mass_before, t_hi < mk_hi - 1 ? t_hi : mk_hi - 1);
        mn_hi = s.mass_before[pl.p_hi + 1];
      }
      const uint64_t cut_at_k = t_hi < mk_hi ? t_hi : mk_hi;  // t >= C_k: C_n = C_k <= t
      if (t_hi >= mk_lo && cut_at_k > mn_hi) mn_hi = cut_at_k;
      if (mn_hi > mk_hi) mn_hi = mk_hi;
    }
  }
  pl.d_lo = find(s.mass_before, target_of(u, mn_lo));
  pl.d_hi = find(s.mass_before, target_of(u, mn_hi));
  return pl;
}

// run_start[0..kC] from per-thread counts v[q] (block q's gathered tokens in this
// thread's bin). Two block barriers.
template <int kC, class S>
__device__ void run_offsets(S& s, const uint32_t (&v)[kC]) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int q = 0; q < kC; ++q) {
    uint32_t x = v[q];
#pragma unroll
    for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
    if (lane == 0) s.warp_part[warp][q] = x;
  }
  __syncthreads();
  if (warp == 0) {
    uint32_t len = 0;
    if (lane < kC)
      for (int w = 0; w < kWarp; ++w) len += s.warp_part[w][lane];
    // Inclusive prefix over the lanes (runs in block-rank order).
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
      const uint32_t n = __shfl_up_sync(kFullMask, len, o);
      if (lane >= o) len += n;
    }
    if (lane < kC) s.run_start[lane + 1] = len;
    if (lane == 0) s.run_start[0] = 0;
  }
  __syncthreads();
}

// Number of keys < key in the sorted run a[0, n).
__device__ __forceinline__ int lower_bound_u64(const uint64_t* a, int n, uint64_t key) {
  int lo = 0;
  while (n > 0) {
    const int half = n / 2;
    if (a[lo + half] < key) {
      lo += half + 1;
      n -= half + 1;
    } else {
      n = half;
    }
  }
  return lo;
}

// Rank 0, once the merged keys s.keys[0, n) are in rank order: the inclusive
// global mass / count of each (into s.runs / s.count_incl). Each bin's first
// token also carries the bins skipped since the previous gathered bin (whose
// tokens are all here and sum to its histogram mass).
template <int kPerThread, class S>
__device__ void scan_merged(S& s, const ZBins& bins, int n) {
  uint64_t vm[kPerThread], vc[kPerThread], sum_m = 0, sum_c = 0;
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int j = threadIdx.x * kPerThread + q;
    vm[q] = vc[q] = 0;
    if (j < n) {
      const float l = logit_of_key(s.keys[j]);
      const int b = bins.bin(l);
      const int prev = j > 0 ? bins.bin(logit_of_key(s.keys[j - 1])) : -1;
      vm[q] = bins.fixed_weight(l);
      vc[q] = 1;
      if (b != prev) {
        vm[q] += s.mass_before[b] - (prev < 0 ? 0 : s.mass_before[prev + 1]);
        vc[q] += s.count_before[b] - (prev < 0 ? 0 : s.count_before[prev + 1]);
      }
    }
    sum_m += vm[q];
    sum_c += vc[q];
  }
  uint64_t total;
  uint64_t run_m = block_exclusive_scan_u64(sum_m, s.scratch, &total);
  uint64_t run_c = block_exclusive_scan_u64(sum_c, s.scratch, &total);
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int j = threadIdx.x * kPerThread + q;
    run_m += vm[q];
    run_c += vc[q];
    if (j < n) {
      s.runs[j] = run_m;
      s.count_incl[j] = uint32_t(run_c);
    }
  }
  __syncthreads();
}

// Rank 0, thread 0: the first merged token whose inclusive count / mass exceeds
// t. False when none does or its exclusive prefix is past t (its bin was not
// gathered): the caller then takes the slow path.
template <class S>
__device__ bool locate(const S& s, const ZBins& bins, int n, uint64_t t, bool by_count, int* hit) {
  int lo = 0, hi = n;  // first j in [0, n) with incl(j) > t, n if none
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const uint64_t incl = by_count ? uint64_t(s.count_incl[mid]) : s.runs[mid];
    if (incl > t) hi = mid; else lo = mid + 1;
  }
  if (lo == n) return false;
  *hit = lo;
  if (by_count) return uint64_t(s.count_incl[lo]) - 1 <= t;
  return s.runs[lo] - bins.fixed_weight(logit_of_key(s.keys[lo])) <= t;
}

// The top-p step every resolver shares (sampling.h step 4, in integers): false
// when the cut needs no search (*mass_n is final: C_k, or the top weight when
// P * S rounds to 0); true when C_n is the inclusive mass of the first token
// whose inclusive mass exceeds *t (the caller searches for it).
__device__ __forceinline__ bool top_p_cut(float p, uint64_t mass_k, uint64_t fw_max, uint64_t* t, uint64_t* mass_n) {
  *mass_n = mass_k;
  if (!sampling::top_p_active(p)) return false;
  const double need = ceil(double(p) * double(mass_k));
  if (need <= 0.0) {
    *mass_n = fw_max;
    return false;
  }
  *t = uint64_t(need) - 1;
  return *t < mass_k;
}

// Rank 0, thread 0: sample.3's three steps on the merged tokens. False: slow path.
template <class S>
__device__ bool resolve(S& s, const Plan& pl, const ZBins& bins, int n, int vocab, float p,
                        float u, uint64_t fw_max) {
  int j = 0;
  uint64_t mass_k = s.mass_before[kBins];
  if (pl.k < vocab) {
    if (!pl.k_resolve) {
      mass_k = s.mass_before[pl.kbin];
    } else {
      if (!locate(s, bins, n, uint64_t(pl.k - 1), true, &j)) return false;
      mass_k = s.runs[j];
    }
  }
  uint64_t mass_n, t = 0;
  if (top_p_cut(p, mass_k, fw_max, &t, &mass_n)) {
    if (!locate(s, bins, n, t, false, &j)) return false;
    mass_n = s.runs[j];
  }
  if (!locate(s, bins, n, target_of(u, mass_n), false, &j)) return false;
  s.token = id_of_key(s.keys[j]);
  return true;
}

// Sums one partial per block over the cluster (a cluster barrier); every thread
// gets the sum. Parity double-buffers s.bis so a round never overwrites a value
// a peer may still be reading.
template <int kC, class S>
__device__ uint64_t cluster_total(S& s, cg::cluster_group& cl, uint64_t part, int* parity) {
  part = block_sum_u64(part, s.scratch);
  if (threadIdx.x == 0) s.bis[*parity] = part;
  cl.sync();
  if (threadIdx.x == 0) {
    uint64_t sum = 0;
#pragma unroll
    for (int q = 0; q < kC; ++q) sum += cl.map_shared_rank(&s.bis[0], q)[*parity];
    s.bcast = sum;
  }
  __syncthreads();
  const uint64_t v = s.bcast;
  __syncthreads();
  *parity ^= 1;
  return v;
}

struct Found {
  uint64_t key, mass_le;  // the key, and the mass of every key <= it
};

// Slow path: the smallest key K whose count / mass of keys <= K exceeds t, by
// bisection over the 64-bit key. partial(bound, mass) sums the count (mass
// false) or mass of the row's keys <= bound; every thread gets the sum.
template <class Partial>
__device__ Found bisect_keys(Partial&& partial, uint64_t t, bool by_count) {
  uint64_t lo = 0, hi = ~uint64_t(0);
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (partial(mid, !by_count) > t) hi = mid; else lo = mid + 1;
  }
  return Found{lo, partial(lo, true)};
}

// Slow path: sample.3's three steps, each by bisection (partial as above;
// total: the row's mass).
template <class Partial>
__device__ int32_t sample_by_bisection_with(Partial&& partial, uint64_t total, int k, int vocab, float p,
                                            float u, uint64_t fw_max) {
  uint64_t mass_k = total;
  if (k < vocab) mass_k = bisect_keys(partial, uint64_t(k - 1), true).mass_le;
  uint64_t mass_n = mass_k;
  if (sampling::top_p_active(p)) {
    const double need = ceil(double(p) * double(mass_k));
    if (need <= 0.0) {
      mass_n = fw_max;
    } else {
      const uint64_t t = uint64_t(need) - 1;
      if (t < mass_k) mass_n = bisect_keys(partial, t, false).mass_le;
    }
  }
  return id_of_key(bisect_keys(partial, target_of(u, mass_n), false).key);
}

// The cluster samplers' slow path: the partial sums over the blocks' slices, one
// cluster barrier per step. Every block runs it.
template <int kC, class S>
__device__ int32_t sample_by_bisection(S& s, const Row& c, cg::cluster_group& cl, int k,
                                       int vocab, float p, float u, uint64_t fw_max) {
  int parity = 0;
  auto partial = [&](uint64_t bound, bool mass) {
    uint64_t part = 0;
    for (int i = threadIdx.x; i < c.n; i += kThreads) {
      const float l = c.slice[i];
      if (sort_key(l, c.begin + i) <= bound) part += mass ? c.bins.fixed_weight(l) : 1;
    }
    return cluster_total<kC>(s, cl, part, &parity);
  };
  return sample_by_bisection_with(partial, s.mass_before[kBins], k, vocab, p, u, fw_max);
}

}  // namespace lantern::kernels::gather_detail
