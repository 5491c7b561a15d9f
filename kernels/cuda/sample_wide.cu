// sample variant 6 (grid_gather): sample.5's algorithm -- its bins, fixed-point
// weights, crossing plan, gather and sub-bin search (sample_gather.cuh,
// sample_lean.cuh), so the same token on every row (tested) -- spread over the
// SMs of the whole GPU instead of one 16-block cluster, the merges through L2.
//
// Why: sample.5 takes 26 us at b = 1 on a GPU that is otherwise idle. Its
// phases (docs/performance.md, session 10) are each bound by the issue slots or
// the shared-memory pipe of the 16 SMs that run them: every block bins 8016
// logits, and the histogram merge reads the peers' shared memory. Here a row
// gets min(64, sm_count / b) blocks (64 at b = 1: 2004 logits each, two per
// thread, held in registers), so a block's share of every per-logit phase is
// 4-8x smaller, and the merges are global atomics into one L2-resident histogram:
//   1. each block loads its slice (registers) and publishes its argmax key;
//      a row barrier (one atomic per block, a spin on L2);
//   2. every block reads the row's keys (the max), bins its logits into a
//      shared histogram and adds its non-empty bins to the row's global one
//      (integer atomics: exact and order-free, so deterministic); a second
//      row barrier;
//   3. every block reads the global histogram, scans it and makes the plan
//      (identical everywhere), then appends its tokens of the planned bins to
//      the row's global list (a warp-aggregated atomic per warp);
//   4. the row's last block to finish (a counter) copies the list into shared
//      memory and resolves the crossings as sample.5's rank 0 does
//      (lean_resolve), writes the token and resets the row's state for the
//      next launch. A plan that gathers more than kCap tokens, or a crossing
//      sub-bin with more than kCand, takes the exact bisection on that block
//      alone (slow: flat rows only).
// The row barriers need every block of the grid resident at once: the grid is
// at most sm_count blocks of 1024 threads at one block per SM (194 KB of shared
// memory each), and the launch is cooperative, so the driver refuses a grid
// that could not be (that call then runs sample.5). The row state lives in a
// static device array (zero at module load, left zero by every launch), one set
// per stream for up to kStreamSlots streams of a device running it at once (an
// engine runs its steps on one stream). More than kMaxRows rows, or a slice that
// needs more than 16 logits per thread, run sample.5.
//
// Measured (H200, docs/performance.md session 23): b = 1 21.8-23.0 us against
// sample.5's 25.3-26.1 (bench_kernels, L2 flushed); in the engine 18.4 vs
// 22.8 us per call (CUPTI), the sampled batch-1 step 0.910-0.918 ms against
// 0.929-0.939. Tried and dropped: the plan
// and the crossing search on one warp (no block barriers) -- 4.0 and 14 us
// instead of 1.3 and 5.5 -- and a single-pass bucket resolve (6.2 us).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/base/env_knob.h"
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_gather.cuh"
#include "kernels/cuda/sample_grid.cuh"
#include "kernels/cuda/sample_lean.cuh"
#include "kernels/cuda/sample_wide_probe.cuh"
#include "kernels/cuda/stream_slot.h"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace sample_bins;
using namespace gather_detail;
using namespace lean_detail;
using namespace wide_probe;
using sample_grid::row_barrier;

constexpr int kMaxRows = 16;     // rows with a grid of their own; more: sample.5
constexpr int kMaxBlocks = 1024;  // blocks per row at most (pub_max slots; <= kThreads)
constexpr int kMaxPer = 16;      // logits per thread at most (registers)
constexpr int kListCap = 8192;   // gathered tokens per row (the last block ranks them in shared memory)

struct alignas(16) GlobalBin {
  unsigned long long mass;
  unsigned int count, pad;
};

// One row's state between its blocks. Zero at module load; every launch leaves
// it zero (the last block resets it), except pub_max and list, which are always
// written before they are read.
struct RowState {
  GlobalBin hist[kBins];
  unsigned long long pub_max[kMaxBlocks];
  unsigned int bar, done, n_gathered, pad;
  unsigned long long list[kListCap];
};
// kStreamSlots sets of rows: launches on different streams of one device (two
// engines in one process) take different sets, round robin over the streams seen.
// 64 rows of 88 KB: 5.6 MB of static device memory, allocated when the module loads.
constexpr int kStreamSlots = 4;
__device__ RowState g_rows[kStreamSlots * kMaxRows];

// The block's shared state. The fields lean_tag / lean_resolve use have
// sample.5's names (sample_lean.cuh).
struct alignas(16) Wide {
  static constexpr int kCap = kListCap;
  uint4 hist[kBins];  // this block's bins (x count, y/z mass lo/hi); last block: then sub-bins
  uint32_t count_before[kBins + 1];  // global exclusive prefix of counts
  uint64_t mass_before[kBins + 1];   // global exclusive prefix of masses
  uint64_t runs[kCap];               // last block: every gathered key (unsorted)
  uint64_t keys[kCap];               // last block: their weights
  uint32_t count_incl[kCap];         // last block: each key's bin << 10 | sub-bin
  uint64_t scratch[kWarp];
  CountMass cm_scratch[kWarp];
  float u;
  uint64_t fw_max;
  int hit_sub, n_cand;
  uint64_t hit_before_count, hit_before_mass;
  uint64_t cand[kCand];
  uint64_t found_key, found_mass;
  int found;
  int is_last;
  int find_slot;
};
static_assert(sizeof(Wide) <= kMaxDynamicSmem, "sample.6's shared state must fit one block per SM");

// find_bin's contract with every thread of the block calling together: the one
// thread whose bin holds t says so (the prefixes never decrease, so exactly one).
// Measured faster than one thread's binary searches or one warp's (the plan:
// 1.3 us here; 4.0 us with the searches on warp 0).
struct ParallelFind {
  int* slot;
  template <class T>
  __device__ int operator()(const T* before, uint64_t t) const {
    const int b = int(threadIdx.x);
    if (uint64_t(before[b]) <= t && (b == kBins - 1 || uint64_t(before[b + 1]) > t)) *slot = b;
    __syncthreads();
    const int found = *slot;
    __syncthreads();  // read by all before the next call writes
    return found;
  }
};

// Slow path on one block: sample.5's bisection (sample_gather.cuh) with the
// partial sums taken over the whole row, read from global memory.
__device__ int32_t row_by_bisection(Wide& s, const float* __restrict__ x, int vocab, const ZBins& bins,
                                    int k, float p, float u, uint64_t fw_max) {
  auto partial = [&](uint64_t bound, bool mass) {
    uint64_t part = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float l = __ldg(x + i);
      if (sort_key(l, i) <= bound) part += mass ? bins.fixed_weight(l) : 1;
    }
    return block_sum_u64(part, s.scratch);
  };
  return sample_by_bisection_with(partial, s.mass_before[kBins], k, vocab, p, u, fw_max);
}

// 1. This block's slice into registers (all loads in flight) and its argmax key.
template <int kPer>
__device__ __forceinline__ uint64_t wide_load(const float* __restrict__ x, int begin, int n, float (&v)[kPer]) {
  uint64_t best = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int i = q * kThreads + int(threadIdx.x);
    v[q] = i < n ? __ldg(x + i) : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int i = q * kThreads + int(threadIdx.x);
    if (i < n) {
      const uint64_t key = (uint64_t(orderable(v[q])) << 32) | uint32_t(~uint32_t(begin + i));
      best = key > best ? key : best;
    }
  }
  return best;
}

// 2. This block's histogram (s.hist, zeroed), its non-empty bins added to the row's.
template <int kPer>
__device__ __forceinline__ void wide_histogram(Wide& s, RowState& g, const ZBins& bins, const float (&v)[kPer],
                                               int n) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    if (q * kThreads + tid < n) {
      uint4& h = s.hist[bins.bin(v[q])];
      atomicAdd(&h.x, 1u);
      add_fixed_mass(&h.y, &h.z, bins.fixed_weight(v[q]));
    }
  }
  __syncthreads();
  const uint4 h = s.hist[tid];
  if (h.x) {
    GlobalBin& to = g.hist[tid];
    atomicAdd(&to.count, h.x);
    atomicAdd(&to.mass, (static_cast<unsigned long long>(h.z) << 32) + h.y);
  }
}

// 3a. The row's global prefixes into s.count_before / s.mass_before, then the
// plan (the same in every block); *n_gathered: the tokens it gathers.
__device__ __forceinline__ Plan wide_plan(Wide& s, const RowState& g, const ZBins& bins, int k, int vocab,
                                          float p, const Stamp& stamp, int* n_gathered) {
  const int tid = threadIdx.x;
  CountMass total;
  const CountMass before =
      block_exclusive_scan_cm(__ldcg(&g.hist[tid].count), __ldcg(&g.hist[tid].mass), s.cm_scratch, &total);
  s.count_before[tid] = before.count;
  s.mass_before[tid] = before.mass;
  stamp(12);
  if (tid == 0) {
    s.count_before[kBins] = total.count;
    s.mass_before[kBins] = total.mass;
  }
  __syncthreads();
  const uint64_t fw_max = bins.fixed_weight(bins.max_logit);
  if (tid == 0) s.fw_max = fw_max;  // for the last block's resolve
  const Plan pl = make_plan(s, k, vocab, p, s.u, fw_max, ParallelFind{&s.find_slot});
  stamp(5);
  const uint64_t mine = pl.gathers(tid) ? s.count_before[tid + 1] - s.count_before[tid] : 0;
  *n_gathered = int(block_sum_u64(mine, s.scratch));
  return pl;
}

// 3b. This block's tokens of the planned bins onto the row's list, slots a warp
// at a time.
template <int kPer>
__device__ __forceinline__ void wide_gather(RowState& g, const Plan& pl, const ZBins& bins, const float (&v)[kPer],
                                            int begin, int n) {
  const int tid = threadIdx.x, lane = tid % kWarp;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int i = q * kThreads + tid;
    const bool take = i < n && pl.gathers(bins.bin(v[q]));
    const unsigned mask = __ballot_sync(kFullMask, take);
    if (mask) {
      const int leader = __ffs(int(mask)) - 1;
      unsigned slot = 0;
      if (lane == leader) slot = atomicAdd(&g.n_gathered, unsigned(__popc(mask)));
      slot = __shfl_sync(kFullMask, slot, leader);
      if (take) g.list[slot + __popc(mask & ((1u << lane) - 1u))] = sort_key(v[q], begin + i);
    }
  }
}

// 4. The row's last block: the gathered list into shared memory and sample.5's
// crossing search, else the bisection over the whole row.
__device__ __forceinline__ int32_t wide_resolve(Wide& s, const RowState& g, const Plan& pl, const ZBins& bins,
                                                const float* __restrict__ x_row, int n_gathered, bool slow, int k,
                                                int vocab, float p, const Stamp& stamp) {
  const float u = s.u;
  const uint64_t fw_max = s.fw_max;
  int32_t token = 0;
  bool ok = false;
  if (!slow) {
    for (int j = threadIdx.x; j < n_gathered; j += kThreads) s.runs[j] = __ldcg(&g.list[j]);
    __syncthreads();
    stamp(7);
    lean_tag(s, bins, n_gathered);
    stamp(8);
    ok = lean_resolve(s, pl, n_gathered, vocab, p, u, fw_max, &token);
    stamp(9);
    stamp.set(11, uint64_t(n_gathered));
  }
  if (!ok) token = row_by_bisection(s, x_row, vocab, bins, k, p, u, fw_max);
  return token;
}

template <int kPer>
__global__ void __launch_bounds__(kThreads, 1)
    sample_wide_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                       const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                       const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                       int32_t* __restrict__ out, int vocab, int slice_len, RowState* __restrict__ rows,
                       uint64_t* probe) {
  extern __shared__ __align__(16) unsigned char smem[];
  Wide& s = *reinterpret_cast<Wide*>(smem);
  const Stamp stamp{probe};
  stamp(0);
  const int row = blockIdx.y, rank = blockIdx.x, G = gridDim.x, tid = threadIdx.x;
  RowState& g = rows[row];
  const int begin = rank * slice_len, n = max(0, min(vocab - begin, slice_len));
  const float* __restrict__ x_row = logits + size_t(row) * vocab;
  // 1. The row's parameters and this block's slice; the block's argmax key
  // published; the draw's uniform made while the loads land.
  const float temp = temperature[row];
  const int32_t top_k_row = top_k[row];
  const float p = top_p[row];
  float v[kPer];
  uint64_t best = wide_load(x_row + begin, begin, n, v);
  s.hist[tid] = make_uint4(0u, 0u, 0u, 0u);
  if (tid == kWarp) s.u = sampling::uniform01(seeds[row], steps[row]);
  best = block_max_u64(best, s.scratch);
  if (tid == 0) g.pub_max[rank] = best;
  stamp(1);
  row_barrier(&g.bar, unsigned(G));
  stamp(2);
  // 2-3. The row's max, the histograms, the plan and the gather.
  const uint64_t top = block_max_u64(tid < G ? __ldcg(&g.pub_max[tid]) : 0, s.scratch);
  ZBins bins{logit_of_orderable(uint32_t(top >> 32)), 0.0f};
  const bool greedy = sampling::is_greedy(temp) || !sampling::max_is_usable(bins.max_logit);
  const int k = sampling::candidate_count(top_k_row, vocab);
  Plan pl{};
  int n_gathered = 0;
  bool slow = false;
  if (!greedy) {
    bins.inv_temp = 1.0f / temp;
    wide_histogram(s, g, bins, v, n);
    stamp(3);
    row_barrier(&g.bar, 2u * unsigned(G));
    stamp(4);
    pl = wide_plan(s, g, bins, k, vocab, p, stamp, &n_gathered);
    slow = !pl.ok || n_gathered > Wide::kCap;
    if (!slow) wide_gather(g, pl, bins, v, begin, n);
  }
  // 4. The row's last block resolves, writes the token and resets the state.
  __syncthreads();
  stamp(6);
  if (tid == 0) {
    __threadfence();
    s.is_last = atomicAdd(&g.done, 1u) == unsigned(G - 1);
    __threadfence();
  }
  __syncthreads();
  if (!s.is_last) return;
  const int32_t token =
      greedy ? int32_t(~uint32_t(top)) : wide_resolve(s, g, pl, bins, x_row, n_gathered, slow, k, vocab, p, stamp);
  if (tid == 0) {
    out[row] = token;
    g.bar = 0;
    g.done = 0;
    g.n_gathered = 0;
  }
  g.hist[tid] = GlobalBin{0ull, 0u, 0u};
  stamp(10);
}

// Blocks per row: the SMs shared out, at most kDefaultBlocks (measured at b = 1,
// H200: 64 blocks 21.8 / 22.5 us, 132 blocks 22.8 / 23.4, 32 blocks 22.3 / 22.8
// -- fewer blocks, fewer same-address atomics into the row's histogram).
// LANTERN_SAMPLE_WIDE_BLOCKS=N forces N, capped so the grid still fits one
// block per SM.
constexpr int kDefaultBlocks = 64;
int wide_blocks(int rows) {
  static const int forced = env_int("LANTERN_SAMPLE_WIDE_BLOCKS");
  const int fit = std::min(kMaxBlocks, sm_count() / std::max(rows, 1));
  return std::min(forced > 0 ? forced : kDefaultBlocks, fit);
}

// The set of rows for launches on `stream` (see g_rows).
RowState* rows_for(cudaStream_t stream) { return stream_slot<kStreamSlots, kMaxRows>(stream, g_rows); }

// False: the grid cannot be resident at once here (the caller runs sample.5).
template <int kPer>
bool launch_wide(const SampleArgs& a, int blocks, int slice_len, cudaStream_t stream) {
  RowState* rows = rows_for(stream);
  static size_t smem_allowed = 0;  // per instantiation
  const size_t smem = sizeof(Wide);
  const Probe& probe = probe_buffer(size_t(blocks) * a.b * kProbeSlots);
  allow_smem(sample_wide_kernel<kPer>, smem, &smem_allowed);
  // A cooperative launch (refused: sample.5 runs this call).
  const sample_grid::GridLaunch l(blocks, a.b, kThreads, smem, stream, true);
  const cudaError_t err = cudaLaunchKernelEx(&l.cfg, sample_wide_kernel<kPer>, a.logits, a.temperature, a.top_k,
                                             a.top_p, a.seeds, a.steps, a.out, a.vocab, slice_len, rows, probe.dev);
  if (err == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();
    return false;
  }
  if (err != cudaSuccess) ::lantern::throw_cuda_error(err, "sample.grid_gather", __FILE__, __LINE__);
  CUDA_CHECK(cudaGetLastError());
  if (probe.dev) print_probe(probe, blocks, a.b, stream);
  return true;
}

void sample_grid_gather(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.grid_gather: bad shape b=%d vocab=%d", a.b, a.vocab);
  if (a.b == 0) return;
  const int blocks = a.b <= kMaxRows ? wide_blocks(a.b) : 0;
  const int slice_len = blocks > 0 ? (a.vocab + blocks - 1) / blocks : 0;
  const int per = (slice_len + kThreads - 1) / kThreads;
  if (blocks < 2 || per > kMaxPer) return sample_cluster_lean(a, ctx);
  const bool launched = per <= 1   ? launch_wide<1>(a, blocks, slice_len, ctx.stream)
                        : per <= 2 ? launch_wide<2>(a, blocks, slice_len, ctx.stream)
                        : per <= 4 ? launch_wide<4>(a, blocks, slice_len, ctx.stream)
                        : per <= 8 ? launch_wide<8>(a, blocks, slice_len, ctx.stream)
                                   : launch_wide<16>(a, blocks, slice_len, ctx.stream);
  if (!launched) sample_cluster_lean(a, ctx);
}

}  // namespace

void register_sample_wide_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_grid_gather, sample_cost<2>>(
      6, "grid_gather", Backend::cuda,
      "cluster_lean's bins, plan and crossing search (the same token) on sm_count / b blocks per "
      "row instead of one 16-block cluster: one logit per thread at b = 1, the histogram merged by "
      "global integer atomics, two row barriers, the crossings resolved by the row's last block; "
      "cluster_lean above 16 rows",
      kPreferred));
}

}  // namespace lantern::kernels
