#pragma once
// Pieces shared by the sort-free samplers (sample.2 bin_select,
// sample.3 cluster_select, sample.4 cluster_gather): the 64-bit rank key,
// 1024-thread block reductions / scans over 64-bit integers (fixed-point masses,
// counts), the cluster samplers' binning and weights, and their launch.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/base/env_knob.h"
#include "kernels/cuda/cuda_kernels.h"

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
// Inverse of orderable(): -0 comes back as +0 and NaN as a NaN (both weigh and
// bin the same as the original).
__device__ __forceinline__ float logit_of_orderable(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}
__device__ __forceinline__ float logit_of_key(uint64_t key) {
  return logit_of_orderable(~uint32_t(key >> 32));
}
__device__ __forceinline__ int32_t id_of_key(uint64_t key) { return int32_t(uint32_t(key)); }

// ---- the cluster samplers' bins and weights (sample.3 and sample.4 must agree
// bit for bit: sample.4's tokens are checked against sample.3's)
// z = (max - logit) * (1 / T): a multiply, monotone like the divide, so each bin
// holds a contiguous run of ranks.
struct ZBins {
  static constexpr int kBins = 1024;           // == kThreads: one bin per thread in scans
  static constexpr float kBinsPerNat = 16.0f;  // 64 nats covered; beyond, NaN, -inf: last
  static constexpr float kFixedScale = 1099511627776.0f;  // 2^40
  static constexpr float kLog2e = 1.4426950408889634f;
  float max_logit, inv_temp;
  __device__ __forceinline__ float z(float l) const {
    const float d = max_logit - l;
    return d > 0.0f ? d * inv_temp : 0.0f;  // 0 * inf (T denormal) must stay 0
  }
  __device__ __forceinline__ int bin(float l) const {
    if (!(l > -INFINITY)) return kBins - 1;
    const float zl = z(l);
    return zl < float(kBins) / kBinsPerNat ? min(int(zl * kBinsPerNat), kBins - 1) : kBins - 1;
  }
  // exp2(-z log2 e) (MUFU ex2) in 2^-40 fixed point; NaN and -inf weigh 0.
  __device__ __forceinline__ uint64_t fixed_weight(float l) const {
    if (!(l > -INFINITY)) return 0;
    return __float2ull_rn(exp2f(z(l) * -kLog2e) * kFixedScale);
  }
};

// Adds a 64-bit fixed-point mass as two 32-bit shared atomics with an explicit
// carry: exact and order-independent (deterministic), cheaper than a 64-bit CAS.
__device__ __forceinline__ void add_fixed_mass(uint32_t* lo, uint32_t* hi, uint64_t w) {
  if (!w) return;
  const uint32_t wlo = uint32_t(w), whi = uint32_t(w >> 32);
  const uint32_t old = atomicAdd(lo, wlo);
  const uint32_t carry_hi = whi + (old + wlo < old ? 1u : 0u);  // the low word wrapped
  if (carry_hi) atomicAdd(hi, carry_hi);
}

// Copies x[0, n) into shared `slice` (kUnroll loads in flight per thread) and
// returns this thread's argmax key, max of (orderable << 32 | ~id): NaN lowest,
// lower id first. `begin` is x's first id.
__device__ inline uint64_t load_slice_argmax(const float* __restrict__ x, float* slice, int n,
                                             int begin) {
  constexpr int kUnroll = 8;
  uint64_t best = 0;
  for (int base = 0; base < n; base += kThreads * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int i = base + q * kThreads + int(threadIdx.x);
      v[q] = i < n ? __ldg(x + i) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int i = base + q * kThreads + int(threadIdx.x);
      if (i < n) {
        slice[i] = v[q];
        const uint64_t key = (uint64_t(orderable(v[q])) << 32) | uint32_t(~uint32_t(begin + i));
        best = key > best ? key : best;
      }
    }
  }
  return best;
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

// ---- host: one thread-block cluster of kC blocks per row, grid (kC, b).
constexpr size_t kMaxDynamicSmem = 227 * 1024;  // the H100/H200 per-block opt-in limit

// `smem_allowed` is the caller's per-kernel record of the attribute already set.
template <int kC, class Kernel>
void launch_row_clusters(Kernel kernel, size_t smem, size_t* smem_allowed, const SampleArgs& a,
                         int slice_len, cudaStream_t stream, const char* name) {
  LANTERN_CHECK(smem <= kMaxDynamicSmem,
                "%s: vocab %d needs %zu bytes of shared memory per block at %d blocks per row "
                "(limit %zu); use sample=bin_select for this vocabulary",
                name, a.vocab, smem, kC, kMaxDynamicSmem);
  if (smem > *smem_allowed) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    if (kC > 8)  // 16 is a non-portable cluster size (Hopper allows it)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    *smem_allowed = smem;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(kC), unsigned(a.b));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(kC);
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, a.logits, a.temperature, a.top_k, a.top_p,
                                             a.seeds, a.steps, a.out, a.vocab, slice_len);
  if (err != cudaSuccess) ::lantern::throw_cuda_error(err, name, __FILE__, __LINE__);
  const cudaError_t launch_err = cudaGetLastError();
  if (launch_err != cudaSuccess) ::lantern::throw_cuda_error(launch_err, name, __FILE__, __LINE__);
}

// Blocks per row forced by an environment variable (4, 8 or 16; read once per
// name): an experiment knob for docs/performance.md. 0 when unset.
inline int forced_cluster_blocks(const char* env_name) {
  const int v = env_int(env_name);
  return v == 4 || v == 8 || v == 16 ? v : 0;
}

}  // namespace lantern::kernels::sample_bins
