#pragma once
// Pieces shared by the split-k (flash-decoding) attention_decode variants:
// 2-5 (attention_decode.cu) and 6 (attention_decode_pipe.cu). A block owns one
// (sequence, kv head, split of the context) and every q head of that GQA group;
// with more than one split, each block writes its partial (max, sum, output)
// and the splits are combined by a second kernel or by the last block.
#include <cstddef>

#include "kernels/cuda/cuda_common.cuh"

namespace lantern::kernels::cuda_detail {

constexpr int kMaxSplits = 64;
constexpr int kMinSplitKeys = 64;  // no split shorter than this
// Arrival counters of the fused combine: one per (sequence, kv head).
constexpr int kMaxSplitCounters = 1 << 16;

// Host helpers (attention_decode.cu).
void check_decode(const AttentionDecodeArgs& a, const char* who);
size_t split_partial_bytes(int b, int n_q_heads, int head_dim, int splits);
int max_splits_for(int max_context);
size_t decode_split_workspace(const WorkspaceShape& s);
int wave_splits(long work, long resident, long four_per_sm);
void decode_split_wave(const AttentionDecodeArgs& a, const LaunchCtx& ctx);  // variant 5
// Variant 5 with the loads that need no earlier kernel issued before the
// dependency wait (attention_decode.cu, kEarly); the short-batch half of variant 9.
void decode_split_early(const AttentionDecodeArgs& a, const LaunchCtx& ctx);

// Merge (m_b, l_b, o_b) into (m, l, o); log2-domain maxima, -inf = empty.
template <int N>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&o)[N], float m_b, float l_b,
                                            const float (&o_b)[N]) {
  const float mn = fmaxf(m, m_b);
  if (mn == -INFINITY) return;
  const float ca = exp2f(m - mn), cb = exp2f(m_b - mn);
  l = l * ca + l_b * cb;
#pragma unroll
  for (int e = 0; e < N; ++e) o[e] = o[e] * ca + o_b[e] * cb;
  m = mn;
}

// One warp turns n_eff splits' (max, sum) at ml into their combine weights
// exp2(max_s - max) in w (0 for an empty split) and returns the weighted sum
// of the sums (in every lane). L2 loads: the partials come from other blocks.
__device__ __forceinline__ float split_weights(const float2* ml, int n_eff, float* w) {
  const int lane = threadIdx.x % kWarp;
  float mx = -INFINITY;
  for (int s = lane; s < n_eff; s += kWarp) mx = fmaxf(mx, __ldcg(&ml[s]).x);
  mx = warp_max(mx);
  float l_sum = 0.0f;
  for (int s = lane; s < n_eff; s += kWarp) {
    const float2 v = __ldcg(&ml[s]);
    const float wgt = v.x == -INFINITY ? 0.0f : exp2f(v.x - mx);
    w[s] = wgt;
    l_sum += v.y * wgt;
  }
  return warp_sum(l_sum);
}

// Where a split block's result goes.
struct SplitDest {
  bf16* out;
  float* part_o;       // [b][n_q_heads][n_splits][HD]
  float2* part_ml;     // [b][n_q_heads][n_splits] (max, sum)
  unsigned* counters;  // fused combine: [b][n_kv_heads], zero between launches
  int i, kv_head, n_kv_heads, group, q_stride, split, n_splits, n_eff;
};

// The end of a split block of kThreads threads, after a barrier: sm_m / sm_l
// [kStates][kRows] and sm_o [kStates][kRows][HD] hold kStates partial states
// (one per warp, or per warp sharing the rows) for the group's heads (rows <
// group; an empty state is m = -inf, l = 0, o = 0). Merges them (one thread per
// head and 8 dims); a lone split (n_eff == 1) writes `out`, others their partial, and with
// kFused the last block of (sequence, kv head) to arrive combines the n_eff
// partials (threadfence-reduction pattern) and resets the counter.
template <int HD, int kRows, int kStates, int kThreads, bool kFused>
__device__ void finish_split(const float* sm_m, const float* sm_l, const float* sm_o, const SplitDest& d) {
  constexpr int kWarps = kThreads / kWarp, kChunks = HD / 8;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int n_q_heads = d.n_kv_heads * d.group, head0 = d.kv_head * d.group;
  for (int item = threadIdx.x; item < d.group * kChunks; item += kThreads) {
    const int g = item / kChunks, c = item % kChunks;
    float mm = -INFINITY, ll = 0.0f, oo[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int w = 0; w < kStates; ++w) {
      float ow[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) ow[e] = sm_o[(w * kRows + g) * HD + c * 8 + e];
      merge_state(mm, ll, oo, sm_m[w * kRows + g], sm_l[w * kRows + g], ow);
    }
    if (d.n_eff == 1) {
      const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) oo[e] *= inv;
      *reinterpret_cast<uint4*>(d.out + size_t(d.i) * d.q_stride + size_t(head0 + g) * HD + c * 8) = pack8(oo);
    } else {
      const size_t idx = (size_t(d.i) * n_q_heads + head0 + g) * d.n_splits + d.split;
      float4* dst = reinterpret_cast<float4*>(d.part_o + idx * HD + c * 8);
      dst[0] = make_float4(oo[0], oo[1], oo[2], oo[3]);
      dst[1] = make_float4(oo[4], oo[5], oo[6], oo[7]);
      if (c == 0) d.part_ml[idx] = make_float2(mm, ll);
    }
  }
  if constexpr (kFused) {
    __shared__ bool is_last;
    __shared__ float split_w[kRows][kMaxSplits];
    __shared__ float inv_sum[kRows];
    if (d.n_eff == 1) return;
    __threadfence();
    __syncthreads();
    unsigned* counter = &d.counters[size_t(d.i) * d.n_kv_heads + d.kv_head];
    if (threadIdx.x == 0) is_last = atomicAdd(counter, 1u) == unsigned(d.n_eff - 1);
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int g = warp; g < d.group; g += kWarps) {
      const size_t idx0 = (size_t(d.i) * n_q_heads + head0 + g) * d.n_splits;
      const float l_sum = split_weights(d.part_ml + idx0, d.n_eff, split_w[g]);
      if (lane == 0) inv_sum[g] = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
    }
    __syncthreads();
    for (int item = threadIdx.x; item < d.group * HD; item += kThreads) {
      const int g = item / HD, dim = item % HD;
      const size_t idx0 = (size_t(d.i) * n_q_heads + head0 + g) * d.n_splits;
      float acc = 0.0f;
#pragma unroll 8
      for (int s = 0; s < d.n_eff; ++s) acc += __ldcg(&d.part_o[(idx0 + s) * HD + dim]) * split_w[g][s];
      d.out[size_t(d.i) * d.q_stride + size_t(head0 + g) * HD + dim] = __float2bfloat16(acc * inv_sum[g]);
    }
    if (threadIdx.x == 0) *counter = 0u;
  }
}

}  // namespace lantern::kernels::cuda_detail
