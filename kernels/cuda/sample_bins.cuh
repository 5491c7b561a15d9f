#pragma once
// Pieces shared by the sort-free samplers (sample.2 bin_select,
// sample.3 cluster_select): the 64-bit rank key and 1024-thread block
// reductions / scans over 64-bit integers (fixed-point masses, counts).
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"

namespace lantern::kernels::sample_bins {
using cuda_detail::kFullMask;
using cuda_detail::kWarp;

constexpr int kThreads = 1024;  // the block size every helper below assumes

// Rank order (higher logit first, NaN last, -0 == +0) as an unsigned order.
__device__ __forceinline__ uint32_t orderable(float l) {
  if (l != l) return 0u;
  const uint32_t bits = __float_as_uint(l == 0.0f ? 0.0f : l);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
__device__ __forceinline__ uint64_t sort_key(float l, int32_t id) {
  return (uint64_t(~orderable(l)) << 32) | uint32_t(id);
}

// ---- block reductions / scans over 64-bit values (kThreads threads)
__device__ inline uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ inline uint64_t block_sum_u64(uint64_t v, uint64_t* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum_u64(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = warp_sum_u64(scratch[lane]);  // kThreads / kWarp == kWarp partials
  return v;
}
__device__ inline uint64_t block_max_u64(uint64_t v, uint64_t* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const uint64_t n = __shfl_xor_sync(kFullMask, v, o);
    v = n > v ? n : v;
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[lane];
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const uint64_t n = __shfl_xor_sync(kFullMask, v, o);
    v = n > v ? n : v;
  }
  return v;
}
// Exclusive prefix over threads in thread order; *total = the block's sum.
__device__ inline uint64_t block_exclusive_scan_u64(uint64_t v, uint64_t* scratch, uint64_t* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  uint64_t inc = v;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const uint64_t n = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += n;
  }
  __syncthreads();
  if (lane == kWarp - 1) scratch[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    uint64_t w = scratch[lane];
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
      const uint64_t n = __shfl_up_sync(kFullMask, w, o);
      if (lane >= o) w += n;
    }
    scratch[lane] = w;  // inclusive prefix of the warp totals
  }
  __syncthreads();
  *total = scratch[kWarp - 1];
  return (warp > 0 ? scratch[warp - 1] : 0) + inc - v;
}

}  // namespace lantern::kernels::sample_bins
