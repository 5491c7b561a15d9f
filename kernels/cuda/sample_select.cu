// sample variant 2 (bin_select): the same sampling.h algorithm as the CPU
// reference and variant 1, without sorting the vocabulary.
//
// One 1024-thread block per row. The rank order (higher logit first, lower id on
// ties, NaN last) is the ascending order of the 64-bit key
//   sortkey = (~orderable(logit) << 32) | id.
// Every quantity the algorithm needs is "the token where a prefix, in rank order,
// of counts (top-k) or of weights (top-p cut, draw) crosses a target". Instead of
// sorting, the block
//   1. finds the max logit and argmax (one read of the row; greedy rows stop here);
//   2. builds a histogram of the row over kBins bins of z = (max - logit) / T
//      (1/16 nat wide; z >= 64, NaN and -inf in the last bin). z is computed with
//      IEEE subtraction and division, which are monotone, so every bin holds a
//      contiguous run of ranks. Each bin keeps its token count and its weight mass
//      in 2^-40 fixed point (64-bit integer atomics: the sums do not depend on the
//      order of the additions, so the kernel is deterministic);
//   3. for each crossing (top-k, then top-p, then the draw) scans the bins to the
//      one bin that holds it and resolves it inside that bin only: gathers the
//      bin's tokens (one more read of the row), ranks them by sortkey (each token
//      counts the tokens before it: the bins are small, at most kCap tokens), and
//      scans their weights in rank order. A bin with more than kCap tokens is
//      resolved by bisection over the sortkey (one read of the row per step, at
//      most 64 steps): slow, exact, and only for very flat rows.
// Weights are sampling::weight() (the reference's float expf) rounded to 2^-40:
// masses differ from the reference's float running sums only by rounding, so the
// drawn token differs only where sampling.h allows (a target within rounding of a
// boundary). Weights below 2^-41 (z > ~28) round to 0 and are never drawn.
//
// Measured on the H200 (docs/performance.md, "Sampling without a sort"): about
// 160-200 us per row at b <= 132 (one SM per row), 346-424 us for 256 rows;
// radix_sort: 71 us at b = 1 (top_k 50), 820 us at b = 64, 3.3 ms at b = 256. One
// SM cannot push 128256 logits through the per-logit arithmetic (IEEE divide,
// expf, a double multiply, two shared atomics) plus 3-4 passes fast enough: the
// next step, sample.3 (sample_cluster.cu), splits each row over a thread-block
// cluster (the histogram and the bin gathers merge through distributed shared
// memory) and runs this kernel itself for batches of 128 rows and more.
#include <climits>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace sample_bins;

constexpr int kBins = 1024;                 // one per thread in the bin scans
constexpr float kBinsPerNat = 16.0f;        // kBins / kBinsPerNat = 64 nats covered
constexpr int kCap = 2048;                  // tokens resolved in shared memory per bin
constexpr int kPerThread = kCap / kThreads; // 2
constexpr double kFixedScale = 1099511627776.0;  // 2^40

struct RowCtx {
  const float* x;
  int vocab;
  float max_logit, temp;
};

__device__ __forceinline__ int bin_of(const RowCtx& c, float l) {
  if (!(l > -INFINITY)) return kBins - 1;
  const float z = (c.max_logit - l) / c.temp;
  return z < float(kBins) / kBinsPerNat ? min(int(z * kBinsPerNat), kBins - 1) : kBins - 1;
}
__device__ __forceinline__ uint64_t fixed_weight(const RowCtx& c, float l) {
  return __double2ull_rn(double(sampling::weight(l, c.max_logit, c.temp)) * kFixedScale);
}

// Calls f(logit, id) for this thread's share of the row. kUnroll coalesced loads
// are issued before any is used: one thread's loop would otherwise wait a full
// memory latency per logit (the atomics in f keep the compiler from hoisting).
constexpr int kUnroll = 16;
template <class F>
__device__ __forceinline__ void for_each_logit(const RowCtx& c, F f) {
  for (int base = 0; base < c.vocab; base += kThreads * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int i = base + q * kThreads + int(threadIdx.x);
      v[q] = i < c.vocab ? __ldg(c.x + i) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int i = base + q * kThreads + int(threadIdx.x);
      if (i < c.vocab) f(v[q], i);
    }
  }
}

struct Shared {
  uint64_t mass_before[kBins + 1];   // exclusive prefix of bin masses, rank order
  uint32_t count_before[kBins + 1];  // exclusive prefix of bin counts
  uint64_t keys[kCap];               // gathered bin tokens, then their inclusive masses
  uint64_t sorted[kCap];             // the same tokens in rank order
  uint64_t scratch[kWarp];
  int n_in_bin, hit, resolved_bin;
};

// Where a crossing lands: the token, its rank within everything, and the count /
// mass of all ranks up to and including it.
struct Hit {
  int32_t id;
  uint64_t mass_incl;
};

// By count: the token of global rank `rank`. By mass: the first token whose
// inclusive prefix mass exceeds `target`. `bin` holds it.
template <bool kByCount>
__device__ Hit bisect_in_bin(Shared& s, const RowCtx& c, int bin, uint64_t target) {
  // Smallest sortkey t (among the bin's tokens) with count / mass of keys <= t
  // exceeding the target; keys span [lo, hi].
  uint64_t lo = 0, hi = ~uint64_t(0);
  const uint64_t base = kByCount ? uint64_t(s.count_before[bin]) : s.mass_before[bin];
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    uint64_t part = 0;
    for_each_logit(c, [&](float l, int i) {
      if (bin_of(c, l) == bin && sort_key(l, i) <= mid) part += kByCount ? 1 : fixed_weight(c, l);
    });
    const uint64_t sum = base + block_sum_u64(part, s.scratch);
    if (sum > target) hi = mid; else lo = mid + 1;
  }
  uint64_t part = 0;
  for_each_logit(c, [&](float l, int i) {
    if (bin_of(c, l) == bin && sort_key(l, i) <= lo) part += fixed_weight(c, l);
  });
  const uint64_t mass = s.mass_before[bin] + block_sum_u64(part, s.scratch);
  return Hit{int32_t(uint32_t(lo)), mass};
}

// Gathers bin `bin`'s tokens into s.sorted in rank order and s.keys[j] = the
// mass of all ranks up to sorted[j]. Returns false when the bin has more than kCap
// tokens (nothing usable then). Skipped when the bin is already resolved.
__device__ bool gather_bin(Shared& s, const RowCtx& c, int bin) {
  if (s.resolved_bin == bin) return true;
  const int n = int(s.count_before[bin + 1] - s.count_before[bin]);
  if (n > kCap) return false;
  __syncthreads();
  if (threadIdx.x == 0) s.n_in_bin = 0;
  __syncthreads();
  for_each_logit(c, [&](float l, int i) {
    if (bin_of(c, l) == bin) s.keys[atomicAdd(&s.n_in_bin, 1)] = sort_key(l, i);
  });
  __syncthreads();
  // Rank by counting: the bin's keys are distinct (they carry the id).
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const uint64_t key = s.keys[j];
    int before = 0;
#pragma unroll 8
    for (int q = 0; q < n; ++q) before += s.keys[q] < key;
    s.sorted[before] = key;
  }
  __syncthreads();
  // Inclusive masses in rank order: thread t owns ranks [t*kPerThread, +kPerThread).
  uint64_t w[kPerThread], local = 0;
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int j = threadIdx.x * kPerThread + q;
    w[q] = 0;
    if (j < n) {
      const int32_t id = int32_t(uint32_t(s.sorted[j]));
      w[q] = fixed_weight(c, c.x[id]);
    }
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
  if (threadIdx.x == 0) s.resolved_bin = bin;
  __syncthreads();
  return true;
}

// The bin holding global rank `rank` (by count) or the first rank whose
// inclusive mass exceeds `target` (by mass): before(b) <= t < before(b + 1).
template <bool kByCount>
__device__ int find_bin(Shared& s, uint64_t t) {
  __syncthreads();
  if (threadIdx.x == 0) s.hit = kBins - 1;
  __syncthreads();
  const int b = threadIdx.x;  // kBins == kThreads
  const uint64_t lo = kByCount ? s.count_before[b] : s.mass_before[b];
  const uint64_t hi = kByCount ? s.count_before[b + 1] : s.mass_before[b + 1];
  if (lo <= t && t < hi) s.hit = b;  // at most one bin matches
  __syncthreads();
  return s.hit;
}

template <bool kByCount>
__device__ Hit locate(Shared& s, const RowCtx& c, uint64_t t) {
  const int bin = find_bin<kByCount>(s, t);
  if (!gather_bin(s, c, bin)) return bisect_in_bin<kByCount>(s, c, bin, t);
  const int n = int(s.count_before[bin + 1] - s.count_before[bin]);
  if (kByCount) {
    const int j = min(max(int(t - s.count_before[bin]), 0), n - 1);
    return Hit{int32_t(uint32_t(s.sorted[j])), s.keys[j]};
  }
  __syncthreads();  // every thread has read find_bin's s.hit
  if (threadIdx.x == 0) s.hit = INT_MAX;
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads)
    if (s.keys[j] > t && (j == 0 || s.keys[j - 1] <= t)) s.hit = j;  // the first crossing
  __syncthreads();
  const int j = s.hit == INT_MAX ? n - 1 : s.hit;
  return Hit{int32_t(uint32_t(s.sorted[j])), s.keys[j]};
}

__global__ void __launch_bounds__(kThreads)
    sample_select_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                         const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                         const uint64_t* __restrict__ seeds, const int32_t* __restrict__ steps,
                         int32_t* __restrict__ out, int vocab) {
  __shared__ Shared s;
  const int row = blockIdx.x;
  RowCtx c{logits + size_t(row) * vocab, vocab, 0.0f, temperature[row]};
  // 1. argmax as the max of (orderable << 32 | ~id): NaN lowest, lower id first.
  uint64_t best = 0;
  for_each_logit(c, [&](float l, int i) {
    const uint64_t v = (uint64_t(orderable(l)) << 32) | uint32_t(~uint32_t(i));
    best = v > best ? v : best;
  });
  best = block_max_u64(best, s.scratch);
  const int32_t argmax = int32_t(~uint32_t(best));
  c.max_logit = c.x[argmax];
  if (sampling::is_greedy(c.temp) || !sampling::max_is_usable(c.max_logit)) {
    if (threadIdx.x == 0) out[row] = argmax;
    return;
  }
  // 2. Histogram by bin: count and fixed-point mass.
  s.count_before[threadIdx.x] = 0;
  s.mass_before[threadIdx.x] = 0;
  if (threadIdx.x == 0) s.resolved_bin = -1;
  __syncthreads();
  for_each_logit(c, [&](float l, int) {
    const int b = bin_of(c, l);
    atomicAdd(&s.count_before[b], 1u);
    const unsigned long long w = fixed_weight(c, l);
    if (w) atomicAdd(reinterpret_cast<unsigned long long*>(&s.mass_before[b]), w);
  });
  __syncthreads();
  uint64_t total_count, total_mass;
  const uint64_t cb = block_exclusive_scan_u64(s.count_before[threadIdx.x], s.scratch, &total_count);
  const uint64_t mb = block_exclusive_scan_u64(s.mass_before[threadIdx.x], s.scratch, &total_mass);
  __syncthreads();
  s.count_before[threadIdx.x] = uint32_t(cb);
  s.mass_before[threadIdx.x] = mb;
  if (threadIdx.x == 0) {
    s.count_before[kBins] = uint32_t(total_count);
    s.mass_before[kBins] = total_mass;
  }
  __syncthreads();
  // 3a. Top-k: S = the mass of ranks [0, k).
  const int k = sampling::candidate_count(top_k[row], vocab);
  uint64_t mass_k = total_mass;
  if (k < vocab) {
    const int bin = find_bin<true>(s, uint64_t(k - 1));
    // A bin without mass contributes nothing, whichever of its tokens are in.
    mass_k = s.mass_before[bin] == s.mass_before[bin + 1] ? s.mass_before[bin]
                                                          : locate<true>(s, c, uint64_t(k - 1)).mass_incl;
  }
  // 3b. Top-p: the smallest prefix with C_n >= P * S (never past rank k - 1).
  uint64_t mass_n = mass_k;
  const float p = top_p[row];
  if (sampling::top_p_active(p)) {
    const double need = ceil(double(p) * double(mass_k));
    if (need <= 0.0) {
      mass_n = fixed_weight(c, c.max_logit);  // rank 0 alone (weight 1)
    } else {
      const uint64_t t = uint64_t(need) - 1;  // C_n > need - 1
      mass_n = t < mass_k ? locate<false>(s, c, t).mass_incl : mass_k;
    }
  }
  // 3c. Draw: the first rank with C_(r+1) > u * C_n (< C_n, so inside the nucleus).
  const float u = sampling::uniform01(seeds[row], steps[row]);
  const uint64_t target = uint64_t(floor(double(u) * double(mass_n)));
  const Hit drawn = locate<false>(s, c, target);
  if (threadIdx.x == 0) out[row] = drawn.id;
}

}  // namespace

// Not in the anonymous namespace: sample.3 runs it for many rows (cuda_kernels.h).
void sample_bin_select(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.bin_select: bad shape b=%d vocab=%d", a.b, a.vocab);
  if (a.b == 0) return;
  sample_select_kernel<<<a.b, kThreads, 0, ctx.stream>>>(a.logits, a.temperature, a.top_k, a.top_p,
                                                         a.seeds, a.steps, a.out, a.vocab);
  CUDA_CHECK_LAST("sample_select_kernel");
}

void register_sample_select_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_bin_select, sample_cost<2>>(
      2, "bin_select", Backend::cuda,
      "no sort: one block per row, a histogram over 1/16-nat bins of (max - logit) / T, then "
      "top-k, top-p and the Philox draw each resolved inside the one bin that holds them "
      "(sampling.h)",
      kPreferred));
}

}  // namespace lantern::kernels
