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
#include "kernels/cuda/sample_gather.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
namespace cg = cooperative_groups;
using namespace cuda_detail;
using namespace sample_bins;
using namespace gather_detail;


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

// Rank 0, after every run has landed: merges the runs into s.merged and leaves
// the inclusive global mass / count of each merged token in s.local / s.count_incl.
template <int kC>
__device__ void merge_and_scan(Shared<kC>& s, const ZBins& bins, int n) {
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
  scan_merged<Shared<kC>::kPerThread>(s, bins, n);
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
