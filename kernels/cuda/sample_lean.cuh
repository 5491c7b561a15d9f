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

// The crossing search on the gathered tokens, shared by sample.5 (rank 0 of
// its cluster) and sample.6 (the row's last block): S is Lean<kC> or Wide,
// which name the same fields.
// Rank 0 (sample.5) / the last block (sample.6): each gathered token's bin, sub-bin (1024 per bin, by z) and weight,
// into s.count_incl (bin << 10 | sub) and s.keys (weight). Keys stay in s.runs.
constexpr int kSubBits = 10;
constexpr int kSubBins = 1 << kSubBits;  // == kThreads
template <class S>
__device__ void lean_tag(S& s, const ZBins& bins, int n) {
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const float l = logit_of_key(s.runs[j]);
    const int b = bins.bin(l);
    int sub = kSubBins - 1;
    if (b < kBins - 1) {
      const float frac = bins.z(l) * ZBins::kBinsPerNat - float(b);  // [0, 1): the bin's own
      sub = min(max(int(frac * float(kSubBins)), 0), kSubBins - 1);
    }
    s.count_incl[j] = (uint32_t(b) << kSubBits) | uint32_t(sub);
    s.keys[j] = bins.fixed_weight(l);
  }
  __syncthreads();
}

// Rank 0, one thread's sub-bin (threadIdx.x) of the bin whose sub-histogram was
// built last: its count and mass, and the exclusive prefixes within the bin.
// Consecutive crossings in one bin (often: the top-p cut and the draw) reuse it.
struct SubBin {
  int bin = -1;
  uint64_t count = 0, mass = 0, before_count = 0, before_mass = 0;
};

// Rank 0, every thread: bin b's 1024-bin sub-histogram (by z) of the gathered
// tokens and its (count, mass) scan, this thread's sub-bin into sb (begins with
// a barrier, so thread 0's search-state resets before it are visible after it).
template <class S>
__device__ __forceinline__ void build_sub_bin(S& s, int n, int b, SubBin& sb) {
  s.hist[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);  // free since the reduce-scatter
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const uint32_t tag = s.count_incl[j];
    if (int(tag >> kSubBits) != b) continue;
    uint4& h = s.hist[tag & (kSubBins - 1)];
    atomicAdd(&h.x, 1u);
    add_fixed_mass(&h.y, &h.z, s.keys[j]);
  }
  __syncthreads();
  const uint4 h = s.hist[threadIdx.x];
  sb.bin = b;
  sb.count = h.x;
  sb.mass = (uint64_t(h.z) << 32) + h.y;
  CountMass total;
  const CountMass pre = block_exclusive_scan_cm(h.x, sb.mass, s.cm_scratch, &total);
  sb.before_count = pre.count;
  sb.before_mass = pre.mass;
}

// Rank 0, every thread: the first token in rank order whose inclusive global
// count (by_count) or mass exceeds t -- resolve()'s locate() on the gathered
// tokens without sorting them. The bin comes from the global prefixes; within it
// a 1024-bin sub-histogram by z and its scan give the sub-bin (built once per
// bin: sb keeps it for the next crossing), whose few tokens are ranked exactly.
// False (every thread) when the bin was not gathered, no token crosses, or the
// sub-bin holds more than kCand tokens: the slow path.
template <class S>
__device__ bool locate_sub(S& s, const Plan& pl, int n, uint64_t t, bool by_count, SubBin& sb,
                           uint64_t* key, uint64_t* mass_incl) {
  const int b = by_count ? find_bin(s.count_before, t) : find_bin(s.mass_before, t);
  if (!pl.gathers(b)) return false;
  const uint64_t t_in = t - (by_count ? uint64_t(s.count_before[b]) : s.mass_before[b]);
  __syncthreads();  // every thread has read the previous search's s.found / s.found_*
  if (threadIdx.x == 0) {
    s.hit_sub = -1;
    s.n_cand = 0;
    s.found = 0;
  }
  if (sb.bin != b)
    build_sub_bin(s, n, b, sb);
  else
    __syncthreads();  // thread 0's resets above are visible
  const uint64_t before = by_count ? sb.before_count : sb.before_mass;
  const uint64_t here = by_count ? sb.count : sb.mass;
  if (before <= t_in && t_in < before + here) {  // one sub-bin at most
    s.hit_sub = int(threadIdx.x);
    s.hit_before_count = sb.before_count;
    s.hit_before_mass = sb.before_mass;
  }
  __syncthreads();
  const int hit = s.hit_sub;
  if (hit < 0) return false;
  const uint32_t want = (uint32_t(b) << kSubBits) | uint32_t(hit);
  for (int j = threadIdx.x; j < n; j += kThreads) {
    if (s.count_incl[j] != want) continue;
    const int slot = atomicAdd(&s.n_cand, 1);
    if (slot < kCand) s.cand[slot] = uint64_t(j);
  }
  __syncthreads();
  const int m = s.n_cand;
  if (m > kCand) return false;
  if (threadIdx.x == 0) {
    // Rank the sub-bin's tokens by key (insertion sort of indices), then walk.
    for (int i = 1; i < m; ++i) {
      const uint64_t j = s.cand[i];
      int q = i - 1;
      while (q >= 0 && s.runs[s.cand[q]] > s.runs[j]) {
        s.cand[q + 1] = s.cand[q];
        --q;
      }
      s.cand[q + 1] = j;
    }
    uint64_t c = s.hit_before_count, w = s.hit_before_mass;
    for (int i = 0; i < m; ++i) {
      const uint64_t j = s.cand[i];
      c += 1;
      w += s.keys[j];
      if ((by_count ? c : w) > t_in) {
        s.found = 1;
        s.found_key = s.runs[j];
        s.found_mass = s.mass_before[b] + w;
        break;
      }
    }
  }
  __syncthreads();
  if (!s.found) return false;
  *key = s.found_key;
  *mass_incl = s.found_mass;
  return true;
}

// Rank 0, every thread: resolve()'s three steps (sample_gather.cuh) through
// locate_sub. False: the slow path.
template <class S>
__device__ bool lean_resolve(S& s, const Plan& pl, int n, int vocab, float p, float u,
                             uint64_t fw_max, int32_t* token) {
  uint64_t key = 0, mass_k = s.mass_before[kBins];
  SubBin sb;  // the last bin's sub-histogram, shared by consecutive crossings in it
  if (pl.k < vocab) {
    if (!pl.k_resolve) mass_k = s.mass_before[pl.kbin];
    else if (!locate_sub(s, pl, n, uint64_t(pl.k - 1), true, sb, &key, &mass_k)) return false;
  }
  uint64_t mass_n, t = 0;
  if (top_p_cut(p, mass_k, fw_max, &t, &mass_n) && !locate_sub(s, pl, n, t, false, sb, &key, &mass_n))
    return false;
  uint64_t mass_d;
  if (!locate_sub(s, pl, n, target_of(u, mass_n), false, sb, &key, &mass_d)) return false;
  *token = id_of_key(key);
  return true;
}

}  // namespace lantern::kernels::lean_detail
