// sample variant 5 (cluster_lean): sample.4's algorithm -- its bins, fixed-point
// weights, crossing plan and integer prefixes (sample_gather.cuh), so the same
// token on every row (tested) -- with the phases that made up its time rebuilt.
//
// Why: sample.4 takes 31-35 us at b = 1 while neither the SMs nor memory are
// busy. %globaltimer stamps between its phases (docs/performance.md, session
// 10) put 2-6 us in every phase, and the phases are issue- and shared-memory-
// bound on the one SM that runs them, not latency-bound: the local histogram
// (3.8 us) costs the same for 8 as for 16 logits per thread because its cost is
// the shared atomics per SM; the plan (4.9 us) is scalar work done by all 32
// warps; the merge (5.9 us) is up to 15 binary searches per gathered token on
// rank 0 alone; the histogram merge (4.6 us) reads all 1024 bins of every peer
// (96 KB of distributed shared memory per block; 6.7k cycles alone at 8 blocks,
// 22k at 16). Here:
//   1. the row's parameters are read first and the slice with 16-byte loads, all
//      in flight at once; the draw's uniform is made by one thread while the
//      cluster barrier waits;
//   2. 16 blocks per row up to 2 rows (8016 logits per block at 128256), so the
//      histogram's shared atomics per SM halve;
//   3. the histogram merge is a reduce-scatter: block q sums its kBins / kC bins
//      over the peers (one 16-byte remote load per thread and a shuffle
//      reduction), then every block reads the 1024 totals from their owners (one
//      16-byte load per thread): 32 KB of remote reads per block at any kC;
//   4. one thread makes the plan (sample.4's make_plan) for the block;
//   5. a block's gathered tokens take slots a warp at a time (ballot) and go to
//      rank 0 unsorted, at a range one remote atomic hands out;
//   6. rank 0 sorts nothing: for each crossing it finds the bin from the global
//      prefixes, builds a 1024-bin sub-histogram (by z) of that bin's gathered
//      tokens, scans it, and ranks exactly only the few tokens of the crossing's
//      sub-bin (more than kCand: slow path).
// The slow path (bisection, flat rows) and the greedy path are sample.4's.
#include <cooperative_groups.h>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_gather.cuh"
#include "kernels/cuda/sample_lean.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
namespace cg = cooperative_groups;
using namespace cuda_detail;
using namespace sample_bins;
using namespace gather_detail;
using namespace lean_detail;

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
    add_fixed_mass(&h.y, &h.z, c.bins.fixed_weight(l));  // 1.3 atomics per logit on average
  }
  cl.sync();  // every local histogram is complete
  constexpr int kOwned = Lean<kC>::kOwned;
  {  // reduce-scatter: the kC lanes of one owned bin are adjacent (kC divides 32)
    const int peer = int(threadIdx.x) % kC, local = int(threadIdx.x) / kC;
    const uint4 h = cl.map_shared_rank(&s.hist[0], peer)[rank * kOwned + local];
    uint64_t mass = (uint64_t(h.z) << 32) + h.y;
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
  CountMass total;
  const CountMass before = block_exclusive_scan_cm(t.count, t.mass, s.cm_scratch, &total);
  s.count_before[threadIdx.x] = before.count;
  s.mass_before[threadIdx.x] = before.mass;
  if (threadIdx.x == 0) {
    s.count_before[kBins] = total.count;
    s.mass_before[kBins] = total.mass;
  }
  __syncthreads();
}

// 4. This block's tokens in the planned bins, slots a warp at a time, copied
// unsorted into rank 0's s.runs at a range rank 0 hands out (one remote atomic).
template <int kC>
__device__ void lean_push(Lean<kC>& s, const Row& c, cg::cluster_group& cl, const Plan& pl) {
  const int lane = int(threadIdx.x) % kWarp;
  for (int base = 0; base < c.n; base += kThreads) {  // whole warps: the ballot needs them
    const int i = base + int(threadIdx.x);
    bool take = false;
    float l = 0.0f;
    if (i < c.n) {
      l = c.slice[i];
      take = pl.gathers(c.bins.bin(l));
    }
    const unsigned mask = __ballot_sync(kFullMask, take);
    if (mask) {
      const int leader = __ffs(int(mask)) - 1;
      int slot = 0;
      if (lane == leader) slot = atomicAdd(&s.n_local, __popc(mask));
      slot = __shfl_sync(kFullMask, slot, leader);
      if (take) s.keys[slot + __popc(mask & ((1u << lane) - 1u))] = sort_key(l, c.begin + i);
    }
  }
  __syncthreads();
  const int n = s.n_local;
  if (threadIdx.x == 0) s.run_base = atomicAdd(cl.map_shared_rank(&s.n_gathered, 0), n);
  __syncthreads();
  uint64_t* dst = cl.map_shared_rank(&s.runs[0], 0) + s.run_base;
  for (int j = threadIdx.x; j < n; j += kThreads) dst[j] = s.keys[j];
}

// The cluster's argmax key (after the barrier that published every pub_max) into
// s.bcast: warp 0 reads the kC peers' keys at once and reduces them by shuffles.
template <int kC>
__device__ void cluster_argmax(Lean<kC>& s, cg::cluster_group& cl) {
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
  if (threadIdx.x == 0) s.u = sampling::uniform01(seed, step);  // while the peers arrive
  cluster_wait();
  cluster_argmax<kC>(s, cl);
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
  // 4. The plan (identical in every block; one thread makes it: scalar work in
  // all 32 warps costs 32 times the issue slots) and how many tokens it gathers.
  const int k = sampling::candidate_count(top_k_row, vocab);
  if (threadIdx.x == 0) {
    s.fw_max = c.bins.fixed_weight(c.bins.max_logit);
    s.plan = make_plan(s, k, vocab, p, s.u, s.fw_max);
  }
  __syncthreads();
  const Plan pl = s.plan;
  const float u = s.u;
  const uint64_t fw_max = s.fw_max;
  const uint64_t mine = pl.gathers(threadIdx.x) ? s.count_before[threadIdx.x + 1] - s.count_before[threadIdx.x] : 0;
  const int n = int(block_sum_u64(mine, s.scratch));
  bool slow = !pl.ok || n > Lean<kC>::kCap;
  if (!slow) {
    lean_push<kC>(s, c, cl, pl);
    cl.sync();  // every block's tokens have landed
    if (rank == 0) {
      lean_tag(s, c.bins, n);
      int32_t token = 0;
      const bool ok = lean_resolve(s, pl, n, vocab, p, u, fw_max, &token);
      if (threadIdx.x < kC) *cl.map_shared_rank(&s.fail, int(threadIdx.x)) = !ok;
      if (threadIdx.x == 0 && ok) out[row] = token;
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

// Blocks per row (measured, docs/performance.md session 10): 16 up to 2 rows, 8
// up to 32, 4 up to 127; from 128 rows sample.2's one block per row (as sample.3
// and sample.4). A vocabulary whose slice does not fit beside the shared state
// takes more blocks per row (4 -> 8 -> 16), then bin_select.
// LANTERN_SAMPLE_LEAN_CLUSTER = 4, 8 or 16 forces one size at every b.
constexpr int kManyRows = 128;
int lean_blocks(int rows) {
  static const int forced = forced_cluster_blocks("LANTERN_SAMPLE_LEAN_CLUSTER");
  if (forced) return forced;
  return rows <= 2 ? 16 : rows <= 32 ? 8 : rows < kManyRows ? 4 : 0;
}

template <int kC>
size_t lean_smem(int vocab) {
  return sizeof(Lean<kC>) + size_t((vocab + kC - 1) / kC) * sizeof(float);
}

template <int kC>
void launch_lean(const SampleArgs& a, const LaunchCtx& ctx) {
  const int slice_len = (a.vocab + kC - 1) / kC;
  static size_t smem_allowed = 0;
  launch_row_clusters<kC>(sample_lean_kernel<kC>, lean_smem<kC>(a.vocab), &smem_allowed, a, slice_len,
                          ctx.stream, "sample.cluster_lean");
}

}  // namespace

void sample_cluster_lean(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.cluster_lean: bad shape b=%d vocab=%d", a.b, a.vocab);
  LANTERN_CHECK(a.b <= 65535, "sample.cluster_lean: b=%d rows exceed the grid's 65535", a.b);
  if (a.b == 0) return;
  int blocks = lean_blocks(a.b);
  if (blocks == 4 && lean_smem<4>(a.vocab) > kMaxDynamicSmem) blocks = 8;
  if (blocks == 8 && lean_smem<8>(a.vocab) > kMaxDynamicSmem) blocks = 16;
  if (blocks == 16 && lean_smem<16>(a.vocab) > kMaxDynamicSmem) blocks = 0;
  switch (blocks) {
    case 16: return launch_lean<16>(a, ctx);
    case 8: return launch_lean<8>(a, ctx);
    case 4: return launch_lean<4>(a, ctx);
    default: return sample_bin_select(a, ctx);  // many rows (or a huge vocabulary): a block per row
  }
}

void register_sample_lean_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_cluster_lean, sample_cost<2>>(
      5, "cluster_lean",
      Backend::cuda,
      "cluster_gather's bins, weights and plan (the same token), rebuilt for the SM's issue and "
      "shared-memory limits: 16 blocks per row up to 2 rows, the histogram merged by a "
      "reduce-scatter (32 KB of remote reads per block, not 96-192), the plan made once per "
      "block, gathered tokens sent unsorted and each crossing found on rank 0 by a sub-histogram "
      "of its bin; bisection for flat rows; bin_select from 128 rows",
      kPreferred));
}

}  // namespace lantern::kernels
