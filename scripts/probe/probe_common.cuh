// Helpers shared by the phase probes (wg_phases.cu, af_phases.cu): a CUDA
// call check that exits, a hash fill of bf16 buffers, a nearest-rank quantile and an
// event-timed median.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace probe {

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    p[i] = __float2bfloat16(scale * (float(x & 0xffff) / 32768.f - 1.f));
  }
}

inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[size_t(q * (v.size() - 1) + 0.5)];
}

// The median over `reps` runs of fn (after `warm` more), each timed by CUDA events on st, in µs.
template <class Fn>
double event_median_us(cudaStream_t st, int warm, int reps, Fn&& fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < warm + reps; ++r) {
    CK(cudaEventRecord(a, st));
    fn();
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= warm) t.push_back(ms * 1e3);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return quantile(t, 0.5);
}

}  // namespace probe
