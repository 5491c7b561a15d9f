// sample variant 3 (cluster_select): sample.2's sort-free algorithm with each
// row split over a thread-block cluster, and cheaper work per logit.
//
// Why: sample.2 runs a whole 128256-logit row on one SM, 3-4 passes, with an IEEE
// divide, expf, a double multiply and a 64-bit shared atomic (a CAS loop) per
// logit: 165-200 us per row (docs/performance.md). Here a cluster of C blocks
// (8 up to b = 32, then 4; from 128 rows sample.2 itself) shares a row, block r
// holding the slice [r * ceil(V / C), ...) in its shared memory, so the row is
// read from global memory once and every later pass is a shared-memory pass over
// V / C logits:
//   1. load the slice, local argmax; the cluster's max merges through
//      distributed shared memory (DSMEM). Greedy rows stop here.
//   2. local histogram over kBins bins of z = (max - logit) * (1 / T) (a
//      multiply: monotone like the divide, so each bin is still a contiguous run
//      of ranks): token count (32-bit shared atomic) and weight mass in 2^-40
//      fixed point, added as two 32-bit atomics with an explicit carry (exact,
//      order-independent: deterministic). The weight is exp2(-z * log2 e) (MUFU
//      ex2), not the reference's expf((l - m) / T): they differ by a few float
//      ulps (about 2e-6 relative at z = 28), far inside the test's rounding
//      tolerance, and the SAME function gives the masses and the in-bin scans,
//      so prefixes stay consistent. Every block then sums the C local histograms
//      (DSMEM reads, all in flight at once) and scans them: all blocks hold the
//      same global prefixes.
//   3. each crossing (top-k count, top-p cut, draw) is located to one bin by
//      every block alike; the bin's tokens are pushed by all blocks into rank
//      0's shared memory (block q's run starts after the lower ranks' local
//      counts of that bin: plain remote stores, no remote atomics), which ranks
//      them by the 64-bit key, scans their weights and publishes the hit; a bin
//      of more than kCap tokens is resolved by a cluster-wide bisection over the
//      key (flat rows only).
// Same sampling.h algorithm, same Philox draw: the token equals the reference's
// except at rounding ties (the test's near_tie rule).
//
// Measured on the H200 (docs/performance.md, session 5): 33 us at b = 1 (sample.2:
// 162), 112 us at b = 64 (166). The time is a fixed ~25-30 us per block, not the
// per-logit work (16 blocks per row were no faster than 8): the in-bin ranking
// on rank 0 and the cluster barriers were the suspects. sample.4
// (sample_gather.cu) removed both and gained only the top-p case's second
// locate (44 -> 34 us; session 7): the rest lies in the steps both share.
#include <cooperative_groups.h>

#include <climits>

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

constexpr int kBins = ZBins::kBins;          // == kThreads: one bin per thread in the scans
constexpr int kCap = 2048;                   // tokens of one bin ranked in shared memory
constexpr int kPerThread = kCap / kThreads;  // 2
constexpr int kLocates = 3;  // top-k, top-p, draw: one result slot each

struct Shared {
  uint32_t cnt[kBins], mlo[kBins], mhi[kBins];  // this block's histogram (mass = hi:lo)
  uint64_t mloc[kBins];                          // this block's bin masses, hi:lo joined
  uint32_t count_before[kBins + 1];              // global exclusive prefix of counts
  uint64_t mass_before[kBins + 1];               // global exclusive prefix of masses
  uint64_t keys[kCap];    // rank 0: pushed keys, then inclusive masses in rank order
  uint64_t sorted[kCap];  // rank 0: the bin's keys in rank order
  uint64_t scratch[kWarp];
  uint64_t pub_max;         // this block's argmax key (read by the peers)
  uint64_t bis[2];          // this block's bisection partial (parity double buffer)
  uint64_t result_id[kLocates], result_mass[kLocates];  // rank 0: published hits
  uint64_t bcast;
  int push_n[kLocates];     // this block's push counters (its run in rank 0's keys)
  int hit, resolved_bin;
};

struct RowCtx {
  const float* x;      // the row in global memory
  const float* slice;  // this block's slice in shared memory
  int begin, n;        // slice = x[begin, begin + n)
  float max_logit, inv_temp;
};

// The binning and weights live in sample_bins.cuh (sample.4 shares them).
__device__ __forceinline__ int bin_of(const RowCtx& c, float l) {
  return ZBins{c.max_logit, c.inv_temp}.bin(l);
}
__device__ __forceinline__ uint64_t fixed_weight(const RowCtx& c, float l) {
  return ZBins{c.max_logit, c.inv_temp}.fixed_weight(l);
}

struct Hit {
  int32_t id;
  uint64_t mass_incl;
};

// Sums one value per block over the cluster; every thread gets the sum.
// `slot` is this block's parity slot, written by thread 0 before the call.
template <int kC>
__device__ uint64_t cluster_sum(Shared& s, cg::cluster_group& cl, int parity) {
  cl.sync();
  if (threadIdx.x == 0) {
    uint64_t sum = 0;
#pragma unroll
    for (int q = 0; q < kC; ++q) sum += cl.map_shared_rank(&s.bis[0], q)[parity];
    s.bcast = sum;
  }
  __syncthreads();
  const uint64_t v = s.bcast;
  __syncthreads();
  return v;
}

// Bisection over the sort key inside `bin` (more than kCap tokens): the smallest
// key whose count / mass of keys <= it, added to the bin's base, exceeds t.
template <int kC, bool kByCount>
__device__ Hit bisect_in_bin(Shared& s, const RowCtx& c, cg::cluster_group& cl, int bin, uint64_t t,
                             int* parity) {
  const uint64_t base = kByCount ? uint64_t(s.count_before[bin]) : s.mass_before[bin];
  auto partial = [&](uint64_t bound, bool mass) {
    uint64_t part = 0;
    for (int i = threadIdx.x; i < c.n; i += kThreads) {
      const float l = c.slice[i];
      if (bin_of(c, l) == bin && sort_key(l, c.begin + i) <= bound) part += mass ? fixed_weight(c, l) : 1;
    }
    part = block_sum_u64(part, s.scratch);
    if (threadIdx.x == 0) s.bis[*parity] = part;
    const uint64_t sum = cluster_sum<kC>(s, cl, *parity);
    *parity ^= 1;
    return sum;
  };
  uint64_t lo = 0, hi = ~uint64_t(0);
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (base + partial(mid, !kByCount) > t) hi = mid; else lo = mid + 1;
  }
  return Hit{int32_t(uint32_t(lo)), s.mass_before[bin] + partial(lo, true)};
}

// The bin holding count / mass position t: before(b) <= t < before(b + 1).
template <bool kByCount>
__device__ int find_bin(Shared& s, uint64_t t) {
  __syncthreads();
  if (threadIdx.x == 0) s.hit = kBins - 1;
  __syncthreads();
  const int b = threadIdx.x;
  const uint64_t lo = kByCount ? s.count_before[b] : s.mass_before[b];
  const uint64_t hi = kByCount ? s.count_before[b + 1] : s.mass_before[b + 1];
  if (lo <= t && t < hi) s.hit = b;
  __syncthreads();
  const int hit = s.hit;
  __syncthreads();
  return hit;
}

// Rank 0: s.keys[0, n) hold the bin's pushed keys; leaves them in rank order in
// s.sorted and the inclusive masses in s.keys.
__device__ void rank_and_scan(Shared& s, const RowCtx& c, int bin, int n) {
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const uint64_t key = s.keys[j];
    int before = 0;
#pragma unroll 8
    for (int q = 0; q < n; ++q) before += s.keys[q] < key;
    s.sorted[before] = key;
  }
  __syncthreads();
  uint64_t w[kPerThread], local = 0;
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int j = threadIdx.x * kPerThread + q;
    w[q] = j < n ? fixed_weight(c, c.x[int32_t(uint32_t(s.sorted[j]))]) : 0;
    local += w[q];
  }
  uint64_t total;
  uint64_t run = s.mass_before[bin] + block_exclusive_scan_u64(local, s.scratch, &total);
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int j = threadIdx.x * kPerThread + q;
    run += w[q];
    if (j < n) s.keys[j] = run;
  }
  __syncthreads();
}

// Locates crossing `slot` (0 top-k, 1 top-p, 2 draw) at position t. Every block
// runs it with the same arguments (the control flow is uniform over the cluster).
template <int kC, bool kByCount>
__device__ Hit locate(Shared& s, const RowCtx& c, cg::cluster_group& cl, uint64_t t, int slot,
                      int* parity) {
  const int bin = find_bin<kByCount>(s, t);
  const int n = int(s.count_before[bin + 1] - s.count_before[bin]);
  if (n > kCap) return bisect_in_bin<kC, kByCount>(s, c, cl, bin, t, parity);
  const bool rank0 = cl.block_rank() == 0;
  if (s.resolved_bin != bin) {
    // This block's run in rank 0's keys starts after the lower ranks' tokens of
    // the bin (their local counts): plain remote stores, no remote atomics.
    if (threadIdx.x == 0) {
      int before = 0;
#pragma unroll
      for (int q = 0; q < kC; ++q) before += q < cl.block_rank() ? int(cl.map_shared_rank(&s.cnt[0], q)[bin]) : 0;
      s.push_n[slot] = before;
    }
    __syncthreads();
    Shared* r0 = cl.map_shared_rank(&s, 0);
    for (int i = threadIdx.x; i < c.n; i += kThreads) {
      const float l = c.slice[i];
      if (bin_of(c, l) == bin) r0->keys[atomicAdd(&s.push_n[slot], 1)] = sort_key(l, c.begin + i);
    }
    cl.sync();  // every push has landed
    if (rank0) rank_and_scan(s, c, bin, n);
    __syncthreads();
    if (threadIdx.x == 0) s.resolved_bin = bin;
  }
  if (rank0) {
    int j;
    if (kByCount) {
      j = min(max(int(t - s.count_before[bin]), 0), n - 1);
    } else {
      __syncthreads();
      if (threadIdx.x == 0) s.hit = INT_MAX;
      __syncthreads();
      for (int q = threadIdx.x; q < n; q += kThreads)
        if (s.keys[q] > t && (q == 0 || s.keys[q - 1] <= t)) s.hit = q;
      __syncthreads();
      j = s.hit == INT_MAX ? n - 1 : s.hit;
    }
    if (threadIdx.x == 0) {
      s.result_id[slot] = uint32_t(s.sorted[j]);
      s.result_mass[slot] = s.keys[j];
    }
  }
  cl.sync();  // rank 0's result is published
  const Shared* r0 = cl.map_shared_rank(&s, 0);
  return Hit{int32_t(uint32_t(r0->result_id[slot])), r0->result_mass[slot]};
}

template <int kC>
__global__ void __launch_bounds__(kThreads)
    sample_cluster_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                          const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                          const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                          int32_t* __restrict__ out, int vocab, int slice_len) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& s = *reinterpret_cast<Shared*>(smem);
  float* slice = reinterpret_cast<float*>(smem + sizeof(Shared));
  cg::cluster_group cl = cg::this_cluster();
  const int row = blockIdx.y;
  const int rank = int(cl.block_rank());
  RowCtx c{logits + size_t(row) * vocab, slice, rank * slice_len, 0, 0.0f, 0.0f};
  c.n = max(0, min(vocab - c.begin, slice_len));
  // 1. Slice into shared memory, local argmax (sample_bins.cuh).
  uint64_t best = load_slice_argmax(c.x + c.begin, slice, c.n, c.begin);
  s.cnt[threadIdx.x] = s.mlo[threadIdx.x] = s.mhi[threadIdx.x] = 0;
  if (threadIdx.x == 0) s.resolved_bin = -1;
  best = block_max_u64(best, s.scratch);
  if (threadIdx.x == 0) s.pub_max = best;
  cl.sync();  // every block's max, histogram zeros and push counters are set
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
  c.max_logit = c.x[argmax];
  const float temp = temperature[row];
  if (sampling::is_greedy(temp) || !sampling::max_is_usable(c.max_logit)) {
    if (rank == 0 && threadIdx.x == 0) out[row] = argmax;
    cl.sync();  // no block leaves while a peer may read its pub_max
    return;
  }
  c.inv_temp = 1.0f / temp;
  // 2. Local histogram, then the global one (sum of the cluster's) and its prefixes.
  for (int i = threadIdx.x; i < c.n; i += kThreads) {
    const float l = slice[i];
    const int b = bin_of(c, l);
    atomicAdd(&s.cnt[b], 1u);
    add_fixed_mass(&s.mlo[b], &s.mhi[b], fixed_weight(c, l));
  }
  __syncthreads();
  s.mloc[threadIdx.x] = (uint64_t(s.mhi[threadIdx.x]) << 32) + s.mlo[threadIdx.x];
  cl.sync();  // every local histogram is complete
  uint32_t cnt[kC];
  uint64_t mloc[kC];
#pragma unroll
  for (int q = 0; q < kC; ++q) {  // all 2 kC remote loads in flight at once
    const Shared* p = cl.map_shared_rank(&s, q);
    cnt[q] = p->cnt[threadIdx.x];
    mloc[q] = p->mloc[threadIdx.x];
  }
  uint64_t count = 0, mass = 0;
#pragma unroll
  for (int q = 0; q < kC; ++q) {
    count += cnt[q];
    mass += mloc[q];
  }
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
  // 3. The crossings, as sample.2 (sample_select.cu) computes them.
  int parity = 0;
  const int k = sampling::candidate_count(top_k[row], vocab);
  uint64_t mass_k = total_mass;
  if (k < vocab) {
    const int bin = find_bin<true>(s, uint64_t(k - 1));
    mass_k = s.mass_before[bin] == s.mass_before[bin + 1]
                 ? s.mass_before[bin]
                 : locate<kC, true>(s, c, cl, uint64_t(k - 1), 0, &parity).mass_incl;
  }
  uint64_t mass_n = mass_k;
  const float p = top_p[row];
  if (sampling::top_p_active(p)) {
    const double need = ceil(double(p) * double(mass_k));
    if (need <= 0.0) {
      mass_n = fixed_weight(c, c.max_logit);
    } else {
      const uint64_t t = uint64_t(need) - 1;
      mass_n = t < mass_k ? locate<kC, false>(s, c, cl, t, 1, &parity).mass_incl : mass_k;
    }
  }
  const float u = sampling::uniform01(seeds[row], steps[row]);
  const uint64_t target = uint64_t(floor(double(u) * double(mass_n)));
  const Hit drawn = locate<kC, false>(s, c, cl, target, 2, &parity);
  if (rank == 0 && threadIdx.x == 0) out[row] = drawn.id;
  cl.sync();  // no block leaves while a peer may read its shared memory
}

// Blocks per row (measured, docs/performance.md): 8 up to b = 32 (16 was no
// faster at b = 1 and half as fast at b = 8), 4 up to b = 127; from b = 128 the
// rows alone fill the GPU and sample.2's one block per row is as fast, so the
// launcher hands them to it (0 here). LANTERN_SAMPLE_CLUSTER = 4, 8 or 16 (read
// once) forces one size: an experiment knob for docs/performance.md.
constexpr int kManyRows = 128;
int cluster_blocks(int rows) {
  static const int forced = forced_cluster_blocks("LANTERN_SAMPLE_CLUSTER");
  if (forced) return forced;
  return rows <= 32 ? 8 : rows < kManyRows ? 4 : 0;
}

template <int kC>
void launch_cluster(const SampleArgs& a, const LaunchCtx& ctx) {
  const int slice_len = (a.vocab + kC - 1) / kC;
  static size_t smem_allowed = 0;  // per instantiation: the attribute set once per larger size
  launch_row_clusters<kC>(sample_cluster_kernel<kC>, sizeof(Shared) + size_t(slice_len) * sizeof(float),
                          &smem_allowed, a, slice_len, ctx.stream, "sample.cluster_select");
}

void sample_cluster_select(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.cluster_select: bad shape b=%d vocab=%d", a.b,
                a.vocab);
  LANTERN_CHECK(a.b <= 65535, "sample.cluster_select: b=%d rows exceed the grid's 65535", a.b);
  if (a.b == 0) return;
  switch (cluster_blocks(a.b)) {
    case 16: return launch_cluster<16>(a, ctx);
    case 8: return launch_cluster<8>(a, ctx);
    case 4: return launch_cluster<4>(a, ctx);
    default: return sample_bin_select(a, ctx);  // many rows: one block per row
  }
}

}  // namespace

void register_sample_cluster_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_cluster_select, sample_cost<2>>(
      3, "cluster_select", Backend::cuda,
      "bin_select's algorithm with each row split over a thread-block cluster (8 blocks up "
      "to b = 32, 4 below b = 128, bin_select itself from 128 rows): the row read once into "
      "shared memory, max and "
      "histogram merged through distributed shared memory, bins from (max - logit) * (1/T), "
      "crossing bins pushed to rank 0 and ranked there",
      kPreferred));
}

}  // namespace lantern::kernels
