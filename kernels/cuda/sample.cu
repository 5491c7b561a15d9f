// sample: per-row temperature / top-k / top-p sampling on the GPU, following
// kernels/sampling.h step by step (the same helpers the CPU reference calls), so
// a row draws the same token as the CPU given the same inputs, except when the
// draw falls within float rounding of a boundary (sums in another order).
//
// Variant 1 (radix_sort): the exact rank order by a device radix sort.
//   1. keys: one 64-bit key per logit, (row << 32) | ~orderable(logit), with NaN
//      ordered last and -0 == +0; values are the token ids. An ascending stable
//      sort then yields sampling.h's rank order (higher logit first, lower id on
//      ties, NaN last) for up to 16 rows at once (cub::DeviceRadixSort).
//   2. pick: one block per row. Greedy rows (T <= 0, or a non-finite max) take
//      rank 0, which is the argmax. With k <= 1024 candidates one thread runs
//      sampling::pick_rank on the weights (bit-for-bit the reference's sums); with
//      more, each thread owns a contiguous run of ranks, a block scan gives the
//      prefix sums, and the top-p cut and the draw are found by atomicMin over
//      the threads whose run crosses them.
//   Cost: a sort of b x vocab pairs per call (tens of microseconds at b = 1);
//   reproducible: the draw depends on (seed, step) only.
#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kSortRows = 16;          // rows sorted together: bounds the workspace
constexpr int kPickThreads = 1024;
constexpr int kSerialMax = 1024;       // candidates picked by one thread, exactly as the CPU
constexpr size_t kCubTempBytes = 32u << 20;  // reserved for cub's temporary storage

// Higher logit -> larger value; NaN -> 0 (below -inf's 0x007fffff); -0 == +0.
__device__ __forceinline__ uint32_t orderable(float l) {
  if (l != l) return 0u;
  const uint32_t bits = __float_as_uint(l == 0.0f ? 0.0f : l);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__global__ void sample_keys_kernel(const float* __restrict__ logits, uint64_t* __restrict__ keys,
                                   int32_t* __restrict__ ids, int rows, int vocab) {
  const size_t items = size_t(rows) * vocab;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < items;
       idx += size_t(gridDim.x) * blockDim.x) {
    const uint32_t r = static_cast<uint32_t>(idx / vocab);
    const int32_t i = static_cast<int32_t>(idx % vocab);
    keys[idx] = (uint64_t(r) << 32) | uint64_t(~orderable(logits[idx]));
    ids[idx] = i;
  }
}

// Exclusive scan over the block; *total gets the sum (every thread).
__device__ float block_exclusive_scan(float v, float* scratch, float* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  float inc = v;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const float n = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += n;
  }
  if (lane == kWarp - 1) scratch[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? scratch[lane] : 0.0f;
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
      const float n = __shfl_up_sync(kFullMask, w, o);
      if (lane >= o) w += n;
    }
    if (lane < warps) scratch[lane] = w;  // inclusive prefix of warp totals
  }
  __syncthreads();
  const float warp_prefix = warp > 0 ? scratch[warp - 1] : 0.0f;
  *total = scratch[warps - 1];
  return warp_prefix + inc - v;
}

__global__ void __launch_bounds__(kPickThreads)
    sample_pick_kernel(const float* __restrict__ logits,    // [b, vocab] (all rows)
                       const int32_t* __restrict__ order,   // [rows, vocab] ids in rank order
                       float* __restrict__ w_buf,           // [rows, vocab] scratch
                       const float* __restrict__ temperature, const int32_t* __restrict__ top_k,
                       const float* __restrict__ top_p, const uint64_t* __restrict__ seeds,
                       const int32_t* __restrict__ steps, int32_t* __restrict__ out, int vocab,
                       int row0) {
  __shared__ float w_small[kSerialMax];
  __shared__ float scratch[32];
  __shared__ int cut_n, drawn_rank;
  __shared__ float cut_mass;
  const int r = blockIdx.x, row = row0 + r;
  const float* x = logits + size_t(row) * vocab;
  const int32_t* ranked = order + size_t(r) * vocab;
  const int32_t best = ranked[0];
  const float max_logit = x[best];
  const float temp = temperature[row];
  if (sampling::is_greedy(temp) || !sampling::max_is_usable(max_logit)) {
    if (threadIdx.x == 0) out[row] = best;
    return;
  }
  const int k = sampling::candidate_count(top_k[row], vocab);
  const float p = top_p[row];
  const float u = sampling::uniform01(seeds[row], steps[row]);
  if (k <= kSerialMax) {
    for (int j = threadIdx.x; j < k; j += blockDim.x)
      w_small[j] = sampling::weight(x[ranked[j]], max_logit, temp);
    __syncthreads();
    if (threadIdx.x == 0) out[row] = ranked[sampling::pick_rank(w_small, k, p, u)];
    return;
  }
  float* w = w_buf + size_t(r) * vocab;
  const int run = (k + blockDim.x - 1) / blockDim.x;
  const int begin = min(int(threadIdx.x) * run, k), end = min(begin + run, k);
  float local = 0.0f;
#pragma unroll 4
  for (int j = begin; j < end; ++j) {  // no early exit: the gathers pipeline
    const float wj = sampling::weight(x[ranked[j]], max_logit, temp);
    w[j] = wj;
    local += wj;
  }
  if (threadIdx.x == 0) {
    cut_n = k;
    drawn_rank = INT_MAX;
    cut_mass = 0.0f;
  }
  float total;
  const float prefix = block_exclusive_scan(local, scratch, &total);  // has barriers
  // Only threads whose run ends at or past a threshold walk it (re-adding the run
  // in the order of `local`); those already past it stop at their first rank, so
  // one thread walks far, and atomicMin keeps the first crossing.
  auto crosses = [&](float threshold) { return begin < end && prefix + local >= threshold; };
  if (sampling::top_p_active(p)) {
    const float threshold = p * total;
    if (crosses(threshold)) {
      float cum = prefix;
      for (int j = begin; j < end; ++j) {
        cum += w[j];
        if (cum >= threshold) {
          atomicMin(&cut_n, j + 1);
          break;
        }
      }
    }
  }
  __syncthreads();
  const int n = cut_n;  // >= 1
  if (begin < n && n <= end) {  // this thread's run holds rank n-1: C_n
    float cum = prefix;
    for (int j = begin; j < n; ++j) cum += w[j];
    cut_mass = cum;
  }
  __syncthreads();
  const float target = u * cut_mass;
  const int stop = min(end, n);
  float run_sum = prefix;
  if (begin < stop && stop < end) {  // run cut short by n: its partial sum
    for (int j = begin; j < stop; ++j) run_sum += w[j];
  } else {
    run_sum = prefix + local;
  }
  if (begin < stop && run_sum > target) {
    float cum = prefix;
    for (int j = begin; j < stop; ++j) {
      cum += w[j];
      if (cum > target) {
        atomicMin(&drawn_rank, j);
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) out[row] = ranked[drawn_rank == INT_MAX ? n - 1 : drawn_rank];
}

struct SampleLayout {
  size_t keys_bytes, ids_bytes, total;
  size_t keys0, keys1, ids0, ids1, temp;
};

SampleLayout sample_layout(int vocab) {
  SampleLayout l{};
  const size_t items = size_t(kSortRows) * vocab;
  auto round_up = [](size_t x) { return (x + 255) / 256 * 256; };
  l.keys_bytes = round_up(items * sizeof(uint64_t));
  l.ids_bytes = round_up(items * sizeof(int32_t));
  l.keys0 = 0;
  l.keys1 = l.keys0 + l.keys_bytes;
  l.ids0 = l.keys1 + l.keys_bytes;
  l.ids1 = l.ids0 + l.ids_bytes;
  l.temp = l.ids1 + l.ids_bytes;
  l.total = l.temp + kCubTempBytes;
  return l;
}

size_t sample_radix_workspace(const WorkspaceShape& s) { return sample_layout(s.vocab).total; }

void sample_radix_sort(const SampleArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "sample.radix_sort: bad shape b=%d vocab=%d", a.b, a.vocab);
  if (a.b == 0) return;
  const SampleLayout l = sample_layout(a.vocab);
  LANTERN_CHECK(ctx.workspace && ctx.workspace_bytes >= l.total,
                "sample.radix_sort: workspace of %zu bytes is smaller than the %zu it needs for "
                "vocab %d", ctx.workspace_bytes, l.total, a.vocab);
  char* ws = static_cast<char*>(ctx.workspace);
  for (int row0 = 0; row0 < a.b; row0 += kSortRows) {
    const int rows = std::min(kSortRows, a.b - row0);
    const int items = rows * a.vocab;
    auto* keys0 = reinterpret_cast<uint64_t*>(ws + l.keys0);
    auto* ids0 = reinterpret_cast<int32_t*>(ws + l.ids0);
    const int threads = 256;
    const int blocks = std::min(ceil_div(items, threads), 132 * 8);
    sample_keys_kernel<<<blocks, threads, 0, ctx.stream>>>(a.logits + size_t(row0) * a.vocab,
                                                           keys0, ids0, rows, a.vocab);
    CUDA_CHECK_LAST("sample_keys_kernel");
    cub::DoubleBuffer<uint64_t> keys(keys0, reinterpret_cast<uint64_t*>(ws + l.keys1));
    cub::DoubleBuffer<int32_t> ids(ids0, reinterpret_cast<int32_t*>(ws + l.ids1));
    int row_bits = 0;
    while ((1 << row_bits) < rows) ++row_bits;
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, ids, items, 0,
                                               32 + row_bits, ctx.stream));
    LANTERN_CHECK(temp_bytes <= kCubTempBytes,
                  "sample.radix_sort: cub needs %zu bytes of temporary storage, %zu reserved",
                  temp_bytes, kCubTempBytes);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + l.temp, temp_bytes, keys, ids, items, 0,
                                               32 + row_bits, ctx.stream));
    sample_pick_kernel<<<rows, kPickThreads, 0, ctx.stream>>>(
        a.logits, ids.Current(), reinterpret_cast<float*>(keys.Alternate()), a.temperature,
        a.top_k, a.top_p, a.seeds, a.steps, a.out, a.vocab, row0);
    CUDA_CHECK_LAST("sample_pick_kernel");
  }
}

}  // namespace

void register_sample_cuda(Registry& r) {
  r.add(make_entry<SampleArgs, sample_radix_sort, sample_cost<2>>(
      1, "radix_sort", Backend::cuda,
      "exact rank order by a device radix sort, then one block per row: top-k, top-p, Philox "
      "draw (sampling.h)",
      kPreferred, sample_radix_workspace));
}

}  // namespace lantern::kernels
