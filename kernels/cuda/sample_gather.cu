// sample variant 4 (cluster_gather): sample.3's cluster and histogram, with the
// three crossings (top-k count, top-p cut, draw) resolved from ONE gather and
// without the O(n^2) in-bin ranking on one block.
//
// Why: sample.3 takes 32 us at b = 1 (top_k 50) and 44 us (top_p 0.95): a fixed
// cost, not per-logit work (docs/performance.md, session 5). Each crossing there
// is its own round: locate the bin (4 block barriers), push the bin's tokens to
// rank 0 (a cluster barrier), rank them there by counting (one thread per token,
// n 64-bit compares each: ~400 tokens per 1/16-nat bin), publish (another
// cluster barrier); 8-9 cluster barriers in all.
//
// Here, after the cluster-wide histogram (sample.3's bins and fixed-point
// weights, sample_bins.cuh), every block works out from the bin prefixes alone
// which bins can hold each crossing: the top-k bin is known from the counts; the
// top-p cut t = ceil(P * S) - 1 is monotone in S = C_k, which lies within the
// top-k bin's mass range, so the cut lies in a known bin interval; the drawn
// mass floor(u * C_n) is monotone in C_n, which lies between t + 1 and the end
// of the cut's last bin, so the draw lies in a known interval too. Every block
// then
//   1. collects its tokens in those bins (usually 1-3 bins, a few hundred
//      tokens over the cluster), sorts its few by counting (n_local ~ 50-150
//      compares per token) and stores them as one sorted run into rank 0's
//      shared memory (runs ordered by block rank: the offsets come from the
//      per-bin counts every block already read in the histogram merge);
//   2. rank 0 merges the C sorted runs (each token's position = its index in
//      its run + a binary search in each other run), scans the merged tokens'
//      weights and counts where each bin's first token adds the mass / count of
//      the bins in between (so every inclusive prefix is the global one), and
//      thread 0 finds the three crossings by binary search, exactly as sample.3
//      decides them (same weights, same integer prefixes: the same token).
// 4 cluster barriers instead of 8-9. Each search checks that the crossing it
// found has its exclusive prefix at or below the target (so its bin was
// gathered); if not, or if the bins hold more than kCap tokens (flat rows),
// rank 0 tells every block to take the slow path: the three crossings one
// after the other by a cluster-wide bisection over the 64-bit key (about 65
// rounds of a pass over the slice each). The greedy path is sample.3's.
#include <cooperative_groups.h>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
namespace cg = cooperative_groups;
using namespace cuda_detail;
using namespace sample_bins;

constexpr int kBins = ZBins::kBins;  // == kThreads
constexpr int kMaxC = 16;            // blocks per row at most

// kCap: tokens gathered into rank 0, as many as fit beside the slice (4 blocks
// per row: a 125 KB slice of a 128256-logit row).
template <int kC>
struct Shared {
  static constexpr int kCap = kC >= 8 ? 4096 : 3072;
  static constexpr int kPerThread = kCap / kThreads;
  uint32_t cnt[kBins], mlo[kBins], mhi[kBins];  // this block's histogram (mass = hi:lo)
  uint64_t mloc[kBins];                          // this block's bin masses, hi:lo joined
  uint32_t count_before[kBins + 1];              // global exclusive prefix of counts
  uint64_t mass_before[kBins + 1];               // global exclusive prefix of masses
  uint64_t runs[kCap];  // rank 0: the blocks' sorted runs of gathered keys, then
                        // the merged tokens' inclusive global masses
  uint64_t keys[kCap];  // this block's gathered keys; rank 0: then all, merged
  uint32_t count_incl[kCap];  // rank 0: inclusive global counts (rank + 1)
  uint32_t warp_part[kWarp][kMaxC];
  uint32_t run_start[kMaxC + 1];  // block q's run: runs[run_start[q], run_start[q + 1])
  uint64_t scratch[kWarp];
  uint64_t pub_max;  // this block's argmax key (read by the peers)
  uint64_t bis[2];   // this block's bisection partial (parity double buffer)
  uint64_t bcast;
  int n_local;
  int fail;       // written by rank 0 into every block: take the bisection path
  int32_t token;  // rank 0: the drawn token
};

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

__device__ uint64_t target_of(float u, uint64_t mass) {
  return uint64_t(floor(double(u) * double(mass)));
}

template <class S>
__device__ Plan make_plan(const S& s, int k, int vocab, float p, float u, uint64_t fw_max) {
  Plan pl{k, -1, false, 1, 0, 1, 0, true};
  const uint64_t total = s.mass_before[kBins];
  uint64_t mk_lo = total, mk_hi = total;  // the range of S = C_k
  if (k < vocab) {
    pl.kbin = find_bin(s.count_before, uint64_t(k - 1));
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
        pl.p_lo = find_bin(s.mass_before, t_lo);
        pl.p_hi = find_bin(s.mass_before, t_hi < mk_hi - 1 ? t_hi : mk_hi - 1);
        mn_hi = s.mass_before[pl.p_hi + 1];
      }
      const uint64_t cut_at_k = t_hi < mk_hi ? t_hi : mk_hi;  // t >= C_k: C_n = C_k <= t
      if (t_hi >= mk_lo && cut_at_k > mn_hi) mn_hi = cut_at_k;
      if (mn_hi > mk_hi) mn_hi = mk_hi;
    }
  }
  pl.d_lo = find_bin(s.mass_before, target_of(u, mn_lo));
  pl.d_hi = find_bin(s.mass_before, target_of(u, mn_hi));
  return pl;
}

// run_start[0..kC] from per-thread counts v[q] (block q's gathered tokens in this
// thread's bin). Two block barriers.
template <int kC>
__device__ void run_offsets(Shared<kC>& s, const uint32_t (&v)[kC]) {
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

// Rank 0, after every run has landed: merges the runs into s.merged and leaves
// the inclusive global mass / count of each merged token in s.local / s.count_incl.
template <int kC>
__device__ void merge_and_scan(Shared<kC>& s, const ZBins& bins, int n) {
  constexpr int kPerThread = Shared<kC>::kPerThread;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    int r = 0;
#pragma unroll
    for (int q = 1; q < kC; ++q) r += int(s.run_start[q]) <= j;
    const uint64_t key = s.runs[j];
    int pos = j - int(s.run_start[r]);
#pragma unroll
    for (int q = 0; q < kC; ++q)
      if (q != r)
        pos += lower_bound_u64(s.runs + s.run_start[q], int(s.run_start[q + 1] - s.run_start[q]), key);
    s.keys[pos] = key;  // rank 0's own gathered keys were consumed before the barrier
  }
  __syncthreads();  // the runs are read: s.runs takes the masses now
  // Each bin's first token also carries the bins skipped since the previous
  // gathered bin (whose tokens are all here and sum to its histogram mass).
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
  uint64_t mass_n = mass_k;
  if (sampling::top_p_active(p)) {
    const double need = ceil(double(p) * double(mass_k));
    if (need <= 0.0) {
      mass_n = fw_max;
    } else {
      const uint64_t t = uint64_t(need) - 1;
      if (t < mass_k) {
        if (!locate(s, bins, n, t, false, &j)) return false;
        mass_n = s.runs[j];
      }
    }
  }
  if (!locate(s, bins, n, target_of(u, mass_n), false, &j)) return false;
  s.token = id_of_key(s.keys[j]);
  return true;
}

// Sums one partial per block over the cluster (a cluster barrier); every thread
// gets the sum. Parity double-buffers s.bis so a round never overwrites a value
// a peer may still be reading.
template <int kC>
__device__ uint64_t cluster_total(Shared<kC>& s, cg::cluster_group& cl, uint64_t part, int* parity) {
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
// bisection over the 64-bit key (one pass over the slice and one cluster barrier
// per step).
template <int kC>
__device__ Found bisect(Shared<kC>& s, const Row& c, cg::cluster_group& cl, uint64_t t, bool by_count,
                        int* parity) {
  auto partial = [&](uint64_t bound, bool mass) {
    uint64_t part = 0;
    for (int i = threadIdx.x; i < c.n; i += kThreads) {
      const float l = c.slice[i];
      if (sort_key(l, c.begin + i) <= bound) part += mass ? c.bins.fixed_weight(l) : 1;
    }
    return cluster_total<kC>(s, cl, part, parity);
  };
  uint64_t lo = 0, hi = ~uint64_t(0);
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (partial(mid, !by_count) > t) hi = mid; else lo = mid + 1;
  }
  return Found{lo, partial(lo, true)};
}

// Slow path: sample.3's three steps, each by bisection. Every block runs it.
template <int kC>
__device__ int32_t sample_by_bisection(Shared<kC>& s, const Row& c, cg::cluster_group& cl, int k,
                                       int vocab, float p, float u, uint64_t fw_max) {
  int parity = 0;
  uint64_t mass_k = s.mass_before[kBins];
  if (k < vocab) mass_k = bisect<kC>(s, c, cl, uint64_t(k - 1), true, &parity).mass_le;
  uint64_t mass_n = mass_k;
  if (sampling::top_p_active(p)) {
    const double need = ceil(double(p) * double(mass_k));
    if (need <= 0.0) {
      mass_n = fw_max;
    } else {
      const uint64_t t = uint64_t(need) - 1;
      if (t < mass_k) mass_n = bisect<kC>(s, c, cl, t, false, &parity).mass_le;
    }
  }
  return id_of_key(bisect<kC>(s, c, cl, target_of(u, mass_n), false, &parity).key);
}

// The cluster's histogram: local counts and masses, then (after a cluster
// barrier) every block sums the peers' bins and scans them. Leaves this
// thread's bin counts per block in cnt[] (the gather offsets need them).
template <int kC>
__device__ void histogram(Shared<kC>& s, const Row& c, cg::cluster_group& cl, uint32_t (&cnt)[kC]) {
  for (int i = threadIdx.x; i < c.n; i += kThreads) {
    const float l = c.slice[i];
    const int b = c.bins.bin(l);
    atomicAdd(&s.cnt[b], 1u);
    add_fixed_mass(&s.mlo[b], &s.mhi[b], c.bins.fixed_weight(l));
  }
  __syncthreads();
  s.mloc[threadIdx.x] = (uint64_t(s.mhi[threadIdx.x]) << 32) + s.mlo[threadIdx.x];
  cl.sync();  // every local histogram is complete
  uint64_t mloc[kC];
#pragma unroll
  for (int q = 0; q < kC; ++q) {  // all 2 kC remote loads in flight at once
    const Shared<kC>* peer = cl.map_shared_rank(&s, q);
    cnt[q] = peer->cnt[threadIdx.x];
    mloc[q] = peer->mloc[threadIdx.x];
  }
  uint64_t count = 0, mass = 0;
#pragma unroll
  for (int q = 0; q < kC; ++q) count += cnt[q], mass += mloc[q];
  uint64_t total_count, total_mass;
  const uint64_t cb = block_exclusive_scan_u64(count, s.scratch, &total_count);
  const uint64_t mb = block_exclusive_scan_u64(mass, s.scratch, &total_mass);
  s.count_before[threadIdx.x] = uint32_t(cb);
  s.mass_before[threadIdx.x] = mb;
  if (threadIdx.x == 0) {
    s.count_before[kBins] = uint32_t(total_count);
    s.mass_before[kBins] = total_mass;
  }
  __syncthreads();
}

// This block's tokens in the planned bins, sorted by counting, stored as one
// run into rank 0's s.runs.
template <int kC>
__device__ void push_run(Shared<kC>& s, const Row& c, cg::cluster_group& cl, const Plan& pl) {
  for (int i = threadIdx.x; i < c.n; i += kThreads) {
    const float l = c.slice[i];
    if (pl.gathers(c.bins.bin(l))) s.keys[atomicAdd(&s.n_local, 1)] = sort_key(l, c.begin + i);
  }
  __syncthreads();
  const int n = s.n_local;
  uint64_t* dst = cl.map_shared_rank(&s.runs[0], 0) + s.run_start[cl.block_rank()];
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const uint64_t key = s.keys[j];
    int before = 0;
#pragma unroll 8
    for (int q = 0; q < n; ++q) before += s.keys[q] < key;
    dst[before] = key;
  }
}

template <int kC>
__global__ void __launch_bounds__(kThreads, 1)
    sample_gather_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                         const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                         const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                         int32_t* __restrict__ out, int vocab, int slice_len) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared<kC>& s = *reinterpret_cast<Shared<kC>*>(smem);
  float* slice = reinterpret_cast<float*>(smem + sizeof(Shared<kC>));
  cg::cluster_group cl = cg::this_cluster();
  const int row = blockIdx.y, rank = int(cl.block_rank());
  Row c{slice, rank * slice_len, 0, ZBins{0.0f, 0.0f}};
  c.n = max(0, min(vocab - c.begin, slice_len));
  // 1. Slice into shared memory, argmax over the cluster (greedy rows stop).
  uint64_t best = load_slice_argmax(logits + size_t(row) * vocab + c.begin, slice, c.n, c.begin);
  s.cnt[threadIdx.x] = s.mlo[threadIdx.x] = s.mhi[threadIdx.x] = 0;
  if (threadIdx.x == 0) s.n_local = 0;
  best = block_max_u64(best, s.scratch);
  if (threadIdx.x == 0) s.pub_max = best;
  cl.sync();  // every block's max, zeroed histogram and counter are set
  if (threadIdx.x == 0) {
    uint64_t g = 0;
#pragma unroll
    for (int q = 0; q < kC; ++q) {
      const uint64_t v = *cl.map_shared_rank(&s.pub_max, q);
      g = v > g ? v : g;
    }
    s.bcast = g;
  }
  __syncthreads();
  const int32_t argmax = int32_t(~uint32_t(s.bcast));
  c.bins.max_logit = logit_of_orderable(uint32_t(s.bcast >> 32));
  const float temp = temperature[row];
  if (sampling::is_greedy(temp) || !sampling::max_is_usable(c.bins.max_logit)) {
    if (rank == 0 && threadIdx.x == 0) out[row] = argmax;
    cl.sync();  // no block leaves while a peer may read its pub_max
    return;
  }
  c.bins.inv_temp = 1.0f / temp;
  // 2. The cluster's histogram and its prefixes (in every block).
  uint32_t cnt[kC];
  histogram<kC>(s, c, cl, cnt);
  // 3. Plan the gather; every block computes the same plan and run offsets.
  const int k = sampling::candidate_count(top_k[row], vocab);
  const float p = top_p[row];
  const float u = sampling::uniform01(seeds[row], steps[row]);
  const uint64_t fw_max = c.bins.fixed_weight(c.bins.max_logit);
  const Plan pl = make_plan(s, k, vocab, p, u, fw_max);
  const bool mine = pl.gathers(threadIdx.x);  // thread b owns bin b
#pragma unroll
  for (int q = 0; q < kC; ++q) cnt[q] = mine ? cnt[q] : 0;
  run_offsets<kC>(s, cnt);
  const int n = int(s.run_start[kC]);
  bool slow = !pl.ok || n > Shared<kC>::kCap;
  if (!slow) {
    // 4. One gather: runs into rank 0, merged and resolved there.
    push_run<kC>(s, c, cl, pl);
    cl.sync();  // every run has landed
    if (rank == 0) {
      merge_and_scan<kC>(s, c.bins, n);
      if (threadIdx.x == 0) s.fail = !resolve(s, pl, c.bins, n, vocab, p, u, fw_max);
      __syncthreads();
      if (threadIdx.x < kC) *cl.map_shared_rank(&s.fail, int(threadIdx.x)) = s.fail;
      if (threadIdx.x == 0 && !s.fail) out[row] = s.token;
    }
    cl.sync();  // every block has rank 0's verdict; no remote access follows on success
    slow = s.fail;
  }
  if (slow) {
    const int32_t token = sample_by_bisection<kC>(s, c, cl, k, vocab, p, u, fw_max);
    if (rank == 0 && threadIdx.x == 0) out[row] = token;
    cl.sync();  // no block leaves while a peer may read its shared memory
  }
}

// Blocks per row: 8 up to b = 32, 4 up to b = 127 (sample.3's measured policy);
// from 128 rows sample.2's one block per row (0 here).
// LANTERN_SAMPLE_GATHER_CLUSTER = 4, 8 or 16 forces one size at every b.
constexpr int kManyRows = 128;
int gather_blocks(int rows) {
  static const int forced = forced_cluster_blocks("LANTERN_SAMPLE_GATHER_CLUSTER");
  if (forced) return forced;
  return rows <= 32 ? 8 : rows < kManyRows ? 4 : 0;
}

template <int kC>
void launch_gather(const SampleArgs& a, const LaunchCtx& ctx) {
  const int slice_len = (a.vocab + kC - 1) / kC;
  static size_t smem_allowed = 0;
  launch_row_clusters<kC>(sample_gather_kernel<kC>, sizeof(Shared<kC>) + size_t(slice_len) * sizeof(float),
                          &smem_allowed, a, slice_len, ctx.stream, "sample.cluster_gather");
}

void sample_cluster_gather(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.cluster_gather: bad shape b=%d vocab=%d", a.b,
                a.vocab);
  LANTERN_CHECK(a.b <= 65535, "sample.cluster_gather: b=%d rows exceed the grid's 65535", a.b);
  if (a.b == 0) return;
  switch (gather_blocks(a.b)) {
    case 16: return launch_gather<16>(a, ctx);
    case 8: return launch_gather<8>(a, ctx);
    case 4: return launch_gather<4>(a, ctx);
    default: return sample_bin_select(a, ctx);  // many rows: one block per row
  }
}

}  // namespace

void register_sample_gather_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_cluster_gather, sample_cost<2>>(
      4, "cluster_gather", Backend::cuda,
      "cluster_select's cluster and histogram, but the bins that can hold the top-k, top-p and "
      "draw crossings are planned from the bin prefixes and gathered once: each block sorts its "
      "few tokens there, rank 0 merges the sorted runs and finds all three crossings (4 cluster "
      "barriers, no O(n^2) ranking); bisection for flat rows; bin_select from 128 rows",
      kTestedOnly));
}

}  // namespace lantern::kernels
