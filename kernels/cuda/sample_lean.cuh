#pragma once
// sample.5 (cluster_lean, sample_lean.cu): its block's shared state and the
// paired (count, mass) block scan it runs in several phases.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/sample_bins.cuh"
#include "kernels/cuda/sample_gather.cuh"

namespace lantern::kernels::lean_detail {
using namespace cuda_detail;
using namespace sample_bins;
using namespace gather_detail;

// Exclusive prefix of (count, mass) pairs over the block's threads in one pass
// (one set of barriers for both); *total = the block's sums.
struct CountMass {
  uint64_t mass;
  uint32_t count;
};
__device__ inline CountMass block_exclusive_scan_cm(uint32_t count, uint64_t mass, CountMass* scratch,
                                                    CountMass* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  uint32_t ic = count;
  uint64_t im = mass;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const uint32_t nc = __shfl_up_sync(kFullMask, ic, o);
    const uint64_t nm = __shfl_up_sync(kFullMask, im, o);
    if (lane >= o) ic += nc, im += nm;
  }
  __syncthreads();
  if (lane == kWarp - 1) scratch[warp] = CountMass{im, ic};
  __syncthreads();
  if (warp == 0) {
    uint32_t wc = scratch[lane].count;
    uint64_t wm = scratch[lane].mass;
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
      const uint32_t nc = __shfl_up_sync(kFullMask, wc, o);
      const uint64_t nm = __shfl_up_sync(kFullMask, wm, o);
      if (lane >= o) wc += nc, wm += nm;
    }
    scratch[lane] = CountMass{wm, wc};  // inclusive prefix of the warp totals
  }
  __syncthreads();
  *total = scratch[kWarp - 1];
  const CountMass before = warp > 0 ? scratch[warp - 1] : CountMass{0, 0};
  return CountMass{before.mass + im - mass, before.count + ic - count};
}

struct alignas(16) BinTotal {  // one 16-byte remote load
  uint64_t mass;
  uint32_t count, pad;
};

constexpr int kCand = 64;  // tokens of one crossing sub-bin ranked exactly (more: slow path)

template <int kC>
struct alignas(16) Lean {
  static constexpr int kCap = kC >= 8 ? 4096 : 3072;  // 4 blocks: a 125 KB slice beside
  static constexpr int kOwned = kBins / kC;  // bins this block sums over the cluster
  uint4 hist[kBins];  // this block's bins (x count, y/z mass lo/hi); rank 0: then sub-bins
  BinTotal owned[kOwned];                    // cluster totals of bins rank * kOwned + i
  uint32_t count_before[kBins + 1];          // global exclusive prefix of counts
  uint64_t mass_before[kBins + 1];           // global exclusive prefix of masses
  uint64_t runs[kCap];        // rank 0: every block's gathered keys (unsorted)
  uint64_t keys[kCap];        // this block's gathered keys; rank 0: then their weights
  uint32_t count_incl[kCap];  // rank 0: each gathered key's bin << 10 | sub-bin
  uint64_t scratch[kWarp];
  CountMass cm_scratch[kWarp];
  Plan plan;  // made by thread 0, read by all
  float u;
  uint64_t fw_max;
  // rank 0's crossing search (locate_sub): the crossing sub-bin and its exclusive
  // prefixes within the bin, the gathered tokens of that sub-bin
  int hit_sub, n_cand;
  uint64_t hit_before_count, hit_before_mass;
  uint64_t cand[kCand];
  uint64_t found_key, found_mass;
  int found;
  uint64_t pub_max;  // this block's argmax key (read by the peers)
  uint64_t bis[2];   // bisection partial (parity double buffer)
  uint64_t bcast;
  int n_local;
  int n_gathered;  // rank 0: slots handed out so far (a remote atomic per block)
  int run_base;
  int fail;
};

}  // namespace lantern::kernels::lean_detail
