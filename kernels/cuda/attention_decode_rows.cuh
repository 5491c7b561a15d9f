#pragma once
// The pieces of attention_decode variants 21 and 22 (attention_decode_rows.cu)
// after their split kernel's main loop: the shapes, variant 21's per-warp
// partial store and its combine kernel, and variant 22's cluster merge and
// last-cluster combine. Included by attention_decode_rows.cu only.
#include <cooperative_groups.h>

#include "kernels/cuda/attention_decode_split.cuh"
#include "kernels/cuda/attention_decode_tma.cuh"

namespace lantern::kernels::cuda_detail {
namespace {

constexpr int kRowsHeads = 8;                              // kv heads of a block (one consumer warp each)
template <int kSets>  // kSets sets of 8 consumer warps (LANTERN_ROWS_SETS) + the producer warp
constexpr int kRowsThreadsOf = (kRowsHeads * kSets + 1) * kWarp;
constexpr int kRowsThreads = kRowsThreadsOf<1>;
constexpr int kRowsMaxSplits = 256;                        // the combine's weights in shared memory
constexpr int kRowsMaxGroup = 8;                           // q heads per kv head (the transposed tile's n side)
constexpr int kRowsOneSplitKeys = 256;                     // variant 20 below this (one split, no combine)
constexpr int kBoxElems = kBoxKeys * kHd;                  // one head's 16 rows: 2 KB
constexpr unsigned kRowsStageBytes = 2 * kRowsHeads * kBoxElems * sizeof(bf16);  // K then V: 32 KB
template <int St>
constexpr size_t kRowsSmem = 1024 + St * kRowsStageBytes + kTableCap * sizeof(int);  // + alignment slack

__device__ __forceinline__ int seq_context(const int32_t* context_lens, int i, int max_context, int cap) {
  return min(min(context_lens[i], max_context), cap);
}

// The warp's partial state for its kv head's group: the output itself when
// the sequence has one split, else its partial (max, sum, output).
__device__ __forceinline__ void rows_store(float (&o)[kHd / 16][4], const float (&m)[2], float (&l)[2], int i,
                                           int kv, int group, int n_q_heads, int q_stride, int split,
                                           int n_splits, int n_eff, bf16* out, float* part_o, float2* part_ml) {
  const int g = threadIdx.x % kWarp / 4;
  for_lane_heads_t(l, group, [&](int h, int head) {
    const int qh = kv * group + head;
    if (n_eff == 1) {
      const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
      bf16* dst = out + size_t(i) * q_stride + size_t(qh) * kHd;
      store_head_t<kHd>(o, h, [&](int dim, float v) { dst[dim] = __float2bfloat16(v * inv); });
    } else {
      const size_t idx = (size_t(i) * n_q_heads + qh) * n_splits + split;
      float* dst = part_o + idx * kHd;
      store_head_t<kHd>(o, h, [&](int dim, float v) { dst[dim] = v; });
      if (g == 0) part_ml[idx] = make_float2(m[h], l[h]);
    }
  });
}

// All threads of the cluster (not warp-aligned: the release / acquire forms).
__device__ __forceinline__ void rows_cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

__device__ unsigned g_rows_counters[kMaxSplitCounters];  // variant 22: [sequence][kv head], zero between launches

// Variant 22: the sequence's clusters count themselves in per rank (kv heads
// rank, rank + kC, ...); the last to arrive combines those heads' cluster
// partials into the output and resets the counter.
template <int kC>
__device__ void rows_last_cluster(int rank, int i, int group, int q_stride, int n_cl, int n_cl_eff, bf16* out,
                                  const float* part_o, const float2* part_ml) {
  constexpr int kHeads = kRowsHeads / kC * kRowsMaxGroup;  // most q heads of a rank
  __shared__ bool is_last;
  __shared__ float w_s[kHeads][kRowsMaxSplits / kC];
  __shared__ float inv_s[kHeads];
  __threadfence();
  __syncthreads();
  unsigned* counter = &g_rows_counters[size_t(i) * kRowsHeads + rank];
  if (threadIdx.x == 0) is_last = atomicAdd(counter, 1u) == unsigned(n_cl_eff - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int n_q_heads = kRowsHeads * group, n_heads = kRowsHeads / kC * group;
  auto q_head = [&](int j) { return (rank + kC * (j / group)) * group + j % group; };
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int j = warp; j < n_heads; j += kRowsThreads / kWarp) {
    const float l_sum = split_weights(part_ml + (size_t(i) * n_q_heads + q_head(j)) * n_cl, n_cl_eff, w_s[j]);
    if (lane == 0) inv_s[j] = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
  }
  __syncthreads();
  for (int item = threadIdx.x; item < n_heads * kHd; item += kRowsThreads) {
    const int j = item / kHd, d = item % kHd, qh = q_head(j);
    const float* src = part_o + (size_t(i) * n_q_heads + qh) * n_cl * kHd + d;
    float acc = 0.0f;
    for (int c = 0; c < n_cl_eff; ++c) acc += __ldcg(src + size_t(c) * kHd) * w_s[j][c];
    out[size_t(i) * q_stride + size_t(qh) * kHd + d] = __float2bfloat16(acc * inv_s[j]);
  }
  if (threadIdx.x == 0) *counter = 0u;
}

// Variant 22's end of a split block (every thread of the block, cluster of kC
// splits). The 8 consumer warps put their states (kv head w's group: o, m, l)
// into the drained stages; after a cluster barrier, rank r merges kv head r
// (or heads r, r + kC, ... for kC < 8) over the cluster's kC blocks from
// distributed shared memory -- the sequence's output if one cluster holds all
// its keys, else the cluster's partial -- and the last of the sequence's
// clusters to count itself in (per kv head: threadfence-reduction pattern)
// combines the clusters' partials and resets its counter.
template <int kC>
__device__ void rows_cluster_finish(unsigned char* smem, float (&o)[kHd / 16][4], const float (&m)[2],
                                    float (&l)[2], int i, int group, int q_stride, int split, int n_splits,
                                    int n_eff, bf16* out, float* part_o, float2* part_ml) {
  namespace cg = cooperative_groups;
  float* st_o = reinterpret_cast<float*>(smem);                               // [kv][group][kHd]
  float2* st_ml = reinterpret_cast<float2*>(st_o + kRowsHeads * kRowsMaxGroup * kHd);  // [kv][group]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncwarp();  // the producer warp waits for its issuing lane
  if (warp < kRowsHeads) {
    asm volatile("barrier.sync 1, %0;" ::"n"(kRowsHeads * kWarp) : "memory");  // every consumer left the stages
    for_lane_heads_t(l, group, [&](int h, int head) {
      float* dst = st_o + (warp * group + head) * kHd;
      store_head_t<kHd>(o, h, [&](int dim, float v) { dst[dim] = v; });
      if (lane < 4) st_ml[warp * group + head] = make_float2(m[h], l[h]);  // g == 0
    });
  }
  cg::cluster_group cluster = cg::this_cluster();
  rows_cluster_barrier();  // every block's states are written
  const int rank = int(cluster.block_rank()), n_cl = n_splits / kC, cl = split / kC;
  const int n_cl_eff = (n_eff + kC - 1) / kC;  // clusters holding keys (the others exited)
  const int n_q_heads = kRowsHeads * group;
  for (int item = threadIdx.x; item < kRowsHeads / kC * group * kHd; item += kRowsThreads) {
    const int kv = rank + kC * (item / (group * kHd)), d = item % kHd;
    const int qh = kv * group + item / kHd % group;  // also the state's index: warp kv holds kv head kv
    float mx = -INFINITY;
    float2 ml[kC];
#pragma unroll
    for (int r = 0; r < kC; ++r) {
      ml[r] = cluster.map_shared_rank(st_ml, r)[qh];
      mx = fmaxf(mx, ml[r].x);
    }
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kC; ++r) {
      const float w = ml[r].x == -INFINITY ? 0.0f : exp2f(ml[r].x - mx);
      sum += ml[r].y * w;
      acc += cluster.map_shared_rank(st_o, r)[qh * kHd + d] * w;
    }
    if (n_cl_eff == 1) {
      out[size_t(i) * q_stride + size_t(qh) * kHd + d] = __float2bfloat16(sum > 0.0f ? acc / sum : 0.0f);
    } else {
      const size_t idx = (size_t(i) * n_q_heads + qh) * n_cl + cl;
      part_o[idx * kHd + d] = acc;
      if (d == 0) part_ml[idx] = make_float2(mx, sum);
    }
  }
  rows_cluster_barrier();  // no block leaves while a peer may still read its states
  if (n_cl_eff == 1) return;
  rows_last_cluster<kC>(rank, i, group, q_stride, n_cl, n_cl_eff, out, part_o, part_ml);
}

// One block per (q head, sequence), 256 threads: warp 0 turns the splits'
// (max, sum) into weights; thread t sums splits t / 16, t / 16 + 16, ... of
// the 4 dims 4 (t % 16) (independent 16-byte loads), and the 16 partial sums
// of each 4 dims meet in shared memory. Sequences with one split were
// written by the split kernel.
constexpr int kCombineThreads = 256, kCombineGroups = kCombineThreads / (kHd / 4);
__global__ void __launch_bounds__(kCombineThreads)
    rows_combine_kernel(const float* part_o, const float2* part_ml, bf16* out,
                        const int32_t* __restrict__ context_lens, int max_context, int cap, int n_q_heads,
                        int n_splits, int q_stride) {
  __shared__ float w_s[kRowsMaxSplits];
  __shared__ float inv_sum;
  __shared__ float4 red[kCombineGroups][kHd / 4];
  trigger_dependents();  // o_proj may start streaming its weights
  const int head = blockIdx.x, i = blockIdx.y;
  const int ctx = seq_context(context_lens, i, max_context, cap);
  const int n_eff = splits_holding(ctx, split_keys<kBoxKeys>(ctx, n_splits));  // as the split kernel's setup
  grid_dependency_wait();  // the split kernel's partials
  if (n_eff == 1) return;
  const size_t idx0 = (size_t(i) * n_q_heads + head) * n_splits;
  if (threadIdx.x < kWarp) {
    const float l_sum = split_weights(part_ml + idx0, n_eff, w_s);
    if (threadIdx.x == 0) inv_sum = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
  }
  __syncthreads();
  const int c = threadIdx.x % (kHd / 4), sg = threadIdx.x / (kHd / 4);
  const float4* src = reinterpret_cast<const float4*>(part_o) + idx0 * (kHd / 4) + c;
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll 4
  for (int s = sg; s < n_eff; s += kCombineGroups) {
    const float4 v = __ldcg(src + size_t(s) * (kHd / 4));
    const float w = w_s[s];
    acc.x += v.x * w, acc.y += v.y * w, acc.z += v.z * w, acc.w += v.w * w;
  }
  red[sg][c] = acc;
  __syncthreads();
  if (threadIdx.x < kHd / 4) {
    float4 sum = red[0][c];
    for (int k = 1; k < kCombineGroups; ++k)
      sum.x += red[k][c].x, sum.y += red[k][c].y, sum.z += red[k][c].z, sum.w += red[k][c].w;
    const float inv = inv_sum;
    bf16* dst = out + size_t(i) * q_stride + size_t(head) * kHd + c * 4;
    dst[0] = __float2bfloat16(sum.x * inv);
    dst[1] = __float2bfloat16(sum.y * inv);
    dst[2] = __float2bfloat16(sum.z * inv);
    dst[3] = __float2bfloat16(sum.w * inv);
  }
}

}  // namespace
}  // namespace lantern::kernels::cuda_detail
