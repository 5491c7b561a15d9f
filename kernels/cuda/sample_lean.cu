// sample variant 5 (cluster_lean): sample.4's algorithm -- its bins, fixed-point
// weights, crossing plan and resolution (sample_gather.cuh), so the same token on
// every row -- with the phases that made up its time rebuilt for latency.
//
// Why: sample.4 takes 31-35 us at b = 1 though neither the SMs nor memory are
// busy. Timestamps inside its kernel (docs/performance.md, session 10) put the
// time in every phase, each a chain of dependent steps: the slice load (2.8 us,
// two rounds of 4-byte loads), the local histogram (3.8 us: a returning shared
// atomic per logit for the mass's carry), the histogram merge (4.6 us: every
// block reads all 1024 bins of every peer, 96 KB of distributed shared memory
// per block; 6.7k cycles alone in a microbenchmark, 22k at 16 blocks), the plan
// (4.9 us, the row's parameters read only then), the gather (5.1 us: one shared
// atomic counter for all of a block's tokens) and rank 0's merge (5.9 us: up to
// 15 binary searches per token, one after the other). Here:
//   1. the row's parameters are read first and the slice with 16-byte loads, all
//      in flight at once;
//   2. a bin's mass is kept in three 32-bit limbs (14, 14 and 13 bits of the
//      2^40 fixed-point weight) added with non-returning shared atomics, exact as
//      sample.4's carry;
//   3. the merge is a reduce-scatter: block q sums its kBins / kC bins over the
//      peers (one 16-byte remote load per thread, a shuffle reduction), then every
//      block reads the 1024 totals from their owners (one 16-byte load per
//      thread): 32 KB of remote reads per block instead of 96-192 KB, and the
//      same at 16 blocks as at 8 (16 blocks per row become worth it at b <= 8);
//   4. a block's gathered tokens take their slots one warp at a time (ballot)
//      and rank 0 gives each run its place with one remote atomic (the merge does
//      not depend on the runs' order: the keys are unique);
//   5. rank 0 places each gathered key by lower bounds in all runs at once (its
//      own run included, where the bound is its index), four runs in lock step.
// The slow path (bisection, flat rows) and the greedy path are sample.4's.
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

// A fixed-point weight (<= 2^40) as limbs of 14, 14 and 13 bits: a block's sums
// stay below 2^32 for up to 2^18 tokens of one bin.
constexpr int kLimb = 14;
constexpr uint32_t kLimbMask = (1u << kLimb) - 1;
__device__ __forceinline__ uint64_t limbs_mass(const uint4& h) {
  return uint64_t(h.y) + (uint64_t(h.z) << kLimb) + (uint64_t(h.w) << (2 * kLimb));
}

struct alignas(16) BinTotal {  // one 16-byte remote load
  uint64_t mass;
  uint32_t count, pad;
};

template <int kC>
struct alignas(16) Lean {
  static constexpr int kCap = kC >= 8 ? 4096 : 3072;  // 4 blocks: a 125 KB slice beside
  static constexpr int kPerThread = kCap / kThreads;
  static constexpr int kOwned = kBins / kC;  // bins this block sums over the cluster
  uint4 hist[kBins];                         // this block's: x count, y/z/w mass limbs
  BinTotal owned[kOwned];                    // cluster totals of bins rank * kOwned + i
  uint32_t count_before[kBins + 1];          // global exclusive prefix of counts
  uint64_t mass_before[kBins + 1];           // global exclusive prefix of masses
  uint64_t runs[kCap];        // rank 0: the blocks' sorted runs, then the merged masses
  uint64_t keys[kCap];        // this block's gathered keys; rank 0: then all, merged
  uint32_t count_incl[kCap];  // rank 0: inclusive global counts (rank + 1)
  int run_start[kMaxC], run_end[kMaxC];  // rank 0: block q's run in runs[]
  uint64_t scratch[kWarp];
  uint64_t pub_max;  // this block's argmax key (read by the peers)
  uint64_t bis[2];   // bisection partial (parity double buffer)
  uint64_t bcast;
  int n_local;
  int n_gathered;  // rank 0: slots handed out so far (a remote atomic per block)
  int run_base;
  int fail;
  int32_t token;
};

__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// load_slice_argmax with 16-byte loads, all of a thread's in flight (4 per
// round: one round for a 128256-logit row at 8 or 16 blocks).
__device__ inline uint64_t load_slice_vec(const float* __restrict__ x, float* slice, int n, int begin) {
  if ((reinterpret_cast<uintptr_t>(x) & 15u) != 0) return load_slice_argmax(x, slice, n, begin);
  constexpr int kV = 4;
  const int n4 = n / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* s4 = reinterpret_cast<float4*>(slice);
  uint64_t best = 0;
  auto take = [&](float v, int i) {
    const uint64_t key = (uint64_t(orderable(v)) << 32) | uint32_t(~uint32_t(begin + i));
    best = key > best ? key : best;
  };
  for (int base = 0; base < n4; base += kThreads * kV) {
    float4 v[kV];
#pragma unroll
    for (int q = 0; q < kV; ++q) {
      const int i = base + q * kThreads + int(threadIdx.x);
      v[q] = i < n4 ? __ldg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int q = 0; q < kV; ++q) {
      const int i = base + q * kThreads + int(threadIdx.x);
      if (i < n4) {
        s4[i] = v[q];
        take(v[q].x, 4 * i);
        take(v[q].y, 4 * i + 1);
        take(v[q].z, 4 * i + 2);
        take(v[q].w, 4 * i + 3);
      }
    }
  }
  for (int i = 4 * n4 + int(threadIdx.x); i < n; i += kThreads) {
    const float v = __ldg(x + i);
    slice[i] = v;
    take(v, i);
  }
  return best;
}

// 2-3. The cluster's histogram and its global prefixes, in every block.
template <int kC>
__device__ void lean_histogram(Lean<kC>& s, const Row& c, cg::cluster_group& cl, int rank) {
#pragma unroll 4
  for (int i = threadIdx.x; i < c.n; i += kThreads) {
    const float l = c.slice[i];
    uint4& h = s.hist[c.bins.bin(l)];
    atomicAdd(&h.x, 1u);
    const uint64_t w = c.bins.fixed_weight(l);
    if (w) {
      atomicAdd(&h.y, uint32_t(w) & kLimbMask);
      atomicAdd(&h.z, uint32_t(w >> kLimb) & kLimbMask);
      atomicAdd(&h.w, uint32_t(w >> (2 * kLimb)));
    }
  }
  cl.sync();  // every local histogram is complete
  constexpr int kOwned = Lean<kC>::kOwned;
  {  // reduce-scatter: the kC lanes of one owned bin are adjacent (kC divides 32)
    const int peer = int(threadIdx.x) % kC, local = int(threadIdx.x) / kC;
    const uint4 h = cl.map_shared_rank(&s.hist[0], peer)[rank * kOwned + local];
    uint64_t mass = limbs_mass(h);
    uint32_t count = h.x;
#pragma unroll
    for (int o = kC / 2; o > 0; o >>= 1) {
      mass += __shfl_xor_sync(kFullMask, mass, o);
      count += __shfl_xor_sync(kFullMask, count, o);
    }
    if (peer == 0) s.owned[local] = BinTotal{mass, count, 0};
  }
  cl.sync();  // every owned total is published; no peer reads s.hist after this
  const BinTotal t = cl.map_shared_rank(&s.owned[0], int(threadIdx.x) / kOwned)[threadIdx.x % kOwned];
  uint64_t total_count, total_mass;
  const uint64_t cb = block_exclusive_scan_u64(t.count, s.scratch, &total_count);
  const uint64_t mb = block_exclusive_scan_u64(t.mass, s.scratch, &total_mass);
  s.count_before[threadIdx.x] = uint32_t(cb);
  s.mass_before[threadIdx.x] = mb;
  if (threadIdx.x == 0) {
    s.count_before[kBins] = uint32_t(total_count);
    s.mass_before[kBins] = total_mass;
  }
  __syncthreads();
}

// 4. This block's tokens in the planned bins: slots a warp at a time, sorted by
// counting, stored as one run into rank 0's s.runs at a slot range rank 0 hands out.
template <int kC>
__device__ void lean_push(Lean<kC>& s, const Row& c, cg::cluster_group& cl, int rank, const Plan& pl) {
  const int lane = int(threadIdx.x) % kWarp;
  for (int base = 0; base < c.n; base += kThreads) {  // whole warps: the ballot needs them
    const int i = base + int(threadIdx.x);
    bool take = false;
    uint64_t key = 0;
    if (i < c.n) {
      const float l = c.slice[i];
      take = pl.gathers(c.bins.bin(l));
      key = sort_key(l, c.begin + i);
    }
    const unsigned mask = __ballot_sync(kFullMask, take);
    if (mask) {
      const int leader = __ffs(int(mask)) - 1;
      int slot = 0;
      if (lane == leader) slot = atomicAdd(&s.n_local, __popc(mask));
      slot = __shfl_sync(kFullMask, slot, leader);
      if (take) s.keys[slot + __popc(mask & ((1u << lane) - 1u))] = key;
    }
  }
  __syncthreads();
  const int n = s.n_local;
  if (threadIdx.x == 0) {
    const int start = atomicAdd(cl.map_shared_rank(&s.n_gathered, 0), n);
    *cl.map_shared_rank(&s.run_start[rank], 0) = start;
    *cl.map_shared_rank(&s.run_end[rank], 0) = start + n;
    s.run_base = start;
  }
  __syncthreads();
  uint64_t* dst = cl.map_shared_rank(&s.runs[0], 0) + s.run_base;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const uint64_t key = s.keys[j];
    int before = 0;
#pragma unroll 8
    for (int q = 0; q < n; ++q) before += s.keys[q] < key;
    dst[before] = key;
  }
}

// 5. Rank 0, once every run has landed: each key's merged position is the sum of
// its lower bounds in all runs (in its own run, its index), four runs in lock step.
template <int kC>
__device__ void lean_merge(Lean<kC>& s, const ZBins& bins, int n) {
  constexpr int kGroup = kC < 4 ? kC : 4;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const uint64_t key = s.runs[j];
    int pos = 0;
#pragma unroll
    for (int g = 0; g < kC; g += kGroup) {
      int lo[kGroup], len[kGroup];
#pragma unroll
      for (int q = 0; q < kGroup; ++q) {
        lo[q] = s.run_start[g + q];
        len[q] = s.run_end[g + q] - lo[q];
      }
      bool more = true;
      while (more) {
        more = false;
#pragma unroll
        for (int q = 0; q < kGroup; ++q) {
          if (len[q] > 0) {
            const int half = len[q] / 2;
            if (s.runs[lo[q] + half] < key) {
              lo[q] += half + 1;
              len[q] -= half + 1;
            } else {
              len[q] = half;
            }
            more |= len[q] > 0;
          }
        }
      }
#pragma unroll
      for (int q = 0; q < kGroup; ++q) pos += lo[q] - s.run_start[g + q];
    }
    s.keys[pos] = key;  // rank 0's own gathered keys were consumed before the barrier
  }
  __syncthreads();  // the runs are read: s.runs takes the masses now
  scan_merged<Lean<kC>::kPerThread>(s, bins, n);
}

template <int kC>
__global__ void __launch_bounds__(kThreads, 1)
    sample_lean_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                       const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                       const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                       int32_t* __restrict__ out, int vocab, int slice_len) {
  extern __shared__ __align__(16) unsigned char smem[];
  Lean<kC>& s = *reinterpret_cast<Lean<kC>*>(smem);
  float* slice = reinterpret_cast<float*>(smem + sizeof(Lean<kC>));
  cg::cluster_group cl = cg::this_cluster();
  const int row = blockIdx.y, rank = int(cl.block_rank());
  Row c{slice, rank * slice_len, 0, ZBins{0.0f, 0.0f}};
  c.n = max(0, min(vocab - c.begin, slice_len));
  // 1. The row's parameters, then the slice; argmax over the cluster.
  const float temp = temperature[row];
  const int32_t top_k_row = top_k[row];
  const float p = top_p[row];
  const uint64_t seed = seeds[row];
  const int32_t step = steps[row];
  uint64_t best = load_slice_vec(logits + size_t(row) * vocab + c.begin, slice, c.n, c.begin);
  s.hist[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
  if (threadIdx.x == 0) {
    s.n_local = 0;
    s.n_gathered = 0;
  }
  best = block_max_u64(best, s.scratch);
  if (threadIdx.x == 0) s.pub_max = best;
  cluster_arrive();  // every block's max, zeroed histogram and counters are set
  const float u = sampling::uniform01(seed, step);  // while the peers arrive
  cluster_wait();
  if (threadIdx.x < kWarp) {
    uint64_t g = threadIdx.x < kC ? *cl.map_shared_rank(&s.pub_max, int(threadIdx.x)) : 0;
#pragma unroll
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const uint64_t v = __shfl_xor_sync(kFullMask, g, o);
      g = v > g ? v : g;
    }
    if (threadIdx.x == 0) s.bcast = g;
  }
  __syncthreads();
  const int32_t argmax = int32_t(~uint32_t(s.bcast));
  c.bins.max_logit = logit_of_orderable(uint32_t(s.bcast >> 32));
  if (sampling::is_greedy(temp) || !sampling::max_is_usable(c.bins.max_logit)) {
    if (rank == 0 && threadIdx.x == 0) out[row] = argmax;
    cl.sync();  // no block leaves while a peer may read its pub_max
    return;
  }
  c.bins.inv_temp = 1.0f / temp;
  // 2-3. The cluster's histogram and its prefixes.
  lean_histogram<kC>(s, c, cl, rank);
  // 4. The plan (identical in every block) and how many tokens it gathers.
  const int k = sampling::candidate_count(top_k_row, vocab);
  const uint64_t fw_max = c.bins.fixed_weight(c.bins.max_logit);
  const Plan pl = make_plan(s, k, vocab, p, u, fw_max);
  const uint64_t mine = pl.gathers(threadIdx.x) ? s.count_before[threadIdx.x + 1] - s.count_before[threadIdx.x] : 0;
  const int n = int(block_sum_u64(mine, s.scratch));
  bool slow = !pl.ok || n > Lean<kC>::kCap;
  if (!slow) {
    lean_push<kC>(s, c, cl, rank, pl);
    cl.sync();  // every run has landed
    if (rank == 0) {
      lean_merge<kC>(s, c.bins, n);
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

// Blocks per row: 16 up to 8 rows (one wave of 128 blocks), 8 up to 32, 4 up to
// 127; from 128 rows sample.2's one block per row (as sample.3 and sample.4).
// LANTERN_SAMPLE_LEAN_CLUSTER = 4, 8 or 16 forces one size at every b.
constexpr int kManyRows = 128;
int lean_blocks(int rows) {
  static const int forced = forced_cluster_blocks("LANTERN_SAMPLE_LEAN_CLUSTER");
  if (forced) return forced;
  return rows <= 8 ? 16 : rows <= 32 ? 8 : rows < kManyRows ? 4 : 0;
}

template <int kC>
void launch_lean(const SampleArgs& a, const LaunchCtx& ctx) {
  const int slice_len = (a.vocab + kC - 1) / kC;
  static size_t smem_allowed = 0;
  launch_row_clusters<kC>(sample_lean_kernel<kC>, sizeof(Lean<kC>) + size_t(slice_len) * sizeof(float),
                          &smem_allowed, a, slice_len, ctx.stream, "sample.cluster_lean");
}

void sample_cluster_lean(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.cluster_lean: bad shape b=%d vocab=%d", a.b, a.vocab);
  LANTERN_CHECK(a.b <= 65535, "sample.cluster_lean: b=%d rows exceed the grid's 65535", a.b);
  if (a.b == 0) return;
  switch (lean_blocks(a.b)) {
    case 16: return launch_lean<16>(a, ctx);
    case 8: return launch_lean<8>(a, ctx);
    case 4: return launch_lean<4>(a, ctx);
    default: return sample_bin_select(a, ctx);  // many rows: one block per row
  }
}

}  // namespace

void register_sample_lean_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_cluster_lean, sample_cost<2>>(
      5, "cluster_lean",
      Backend::cuda,
      "cluster_gather's bins, plan and resolution (the same token) with its latency chain cut: "
      "parameters first, 16-byte slice loads, bin masses in non-returning 32-bit limbs, the "
      "histogram merged by a reduce-scatter (32 KB of remote reads per block, not 96-192), "
      "warp-aggregated gather slots, rank 0's merge by lock-step lower bounds; 16 blocks per row "
      "up to 8 rows; bisection for flat rows; bin_select from 128 rows",
      kTestedOnly));
}

}  // namespace lantern::kernels
