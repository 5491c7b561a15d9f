// The phases of scripts/probe/persistent_layer.cu's persistent kernel and chain:
// which rows a warp takes (a fixed slice, or kDynamic's counter), the kBalanced and
// kGroup forms, and run_phase, the five phases of a layer.
#pragma once
#include "persistent_layer_device.cuh"

namespace pl {
// The phase's rows for this warp: a fixed slice per block (rows split evenly by
// block, then by warp), or (kDynamic) chunks of `chunk` rows taken from a counter
// per (layer, phase) until none are left -- so faster SMs take more rows and the
// phase ends when its last chunk does. The next chunk's atomic is in flight while
// the warp works on the current one.
template <int CF, class F>
__device__ __forceinline__ void for_rows(const Params& p, int layer, int phase, int n, int chunk, F&& f) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if constexpr ((CF & kDynamic) == 0) {
    int lo, hi;
    block_rows(n, lo, hi);
    for (int r = lo + warp; r < hi; r += kWarps) f(r);
    return;
  }
  (void)p;
  unsigned* ctr = p.dyn + layer * kPhases + phase;
  int next = 0;
  if (lane == 0) next = int(atomicAdd(ctr, unsigned(chunk)));
  next = __shfl_sync(0xffffffffu, next, 0);
  while (next < n) {
    const int r0 = next;
    if (lane == 0) next = int(atomicAdd(ctr, unsigned(chunk)));
    for (int r = r0; r < min(r0 + chunk, n); ++r) f(r);
    next = __shfl_sync(0xffffffffu, next, 0);
  }
}

// kBalanced: o_proj and down as 4 x 2048 units (a row's k-quarter) split evenly over
// the blocks (62 or 63 each, where whole rows give 15 or 16: 6.7 % more bytes on the
// heavier SMs), each unit's dot product added into x by an fp32 atomic. A warp takes
// U units at once so that 8 16-byte loads a lane are in flight (o_proj: 4 units of
// 512 columns; down: 1 of 2048).
template <int K>
__device__ void proj_quarters(const Params& p, const __nv_bfloat16* W, const float* xs) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int Q = K / 4, N = Q / 256, U = N >= 8 ? 1 : 8 / N;
  int lo, hi;
  block_rows(4 * H, lo, hi);
  for (int u0 = lo + warp * U; u0 < hi; u0 += kWarps * U) {
    uint4 w[U][N];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = min(u0 + j, hi - 1);
      const uint4* row = reinterpret_cast<const uint4*>(W + size_t(u >> 2) * K + (u & 3) * Q);
#pragma unroll
      for (int t = 0; t < N; ++t) w[j][t] = ld_stream(row + lane + 32 * t);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = min(u0 + j, hi - 1);
      float acc = 0.f;
#pragma unroll
      for (int t = 0; t < N; ++t) acc += dot8(w[j][t], xs + (u & 3) * Q + (lane + 32 * t) * 8);
      acc = warp_sum(acc);
      if (lane == 0 && u0 + j < hi) atomicAdd(p.x + (u >> 2), acc);
    }
  }
}

// kGroup: row i (of 384) of kv group g's q/k/v rows: its 4 q heads, its k head, its v head.
__device__ __forceinline__ int group_row(int g, int i) {
  return i < 4 * HD ? 4 * HD * g + i : i < 5 * HD ? QD + HD * g + (i - 4 * HD) : QD + KVD + HD * g + (i - 5 * HD);
}

// kGroup's q/k/v phase: blocks 16 g .. 16 g + 15 make group g's 384 rows (24 each;
// blocks from 128 on none), then count themselves on the group's counter.
__device__ void qkv_by_group(const Params& p, const Smem& s, int layer) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = blockIdx.x / 16, j = blockIdx.x % 16;
  if (blockIdx.x < 128)
    for (int i = 24 * j + warp; i < 24 * j + 24; i += kWarps) {
      const int r = group_row(g, i);
      const float v = row_dot<H>(p.layers[layer].qkv + size_t(r) * H, s.in, lane);
      if (lane == 0) p.qkv[r] = v;
    }
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x < 128)
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.group_ctr + layer * 8 + g) : "memory");
}

// kGroup's attention phase: block u < 128 runs unit u (kv group u / 16) once its
// group's 16 q/k/v blocks have counted themselves.
__device__ void attention_by_group(const Params& p, Smem& s, int layer) {
  if (blockIdx.x >= 128) return;
  if (threadIdx.x == 0) {
    const unsigned* c = p.group_ctr + layer * 8 + blockIdx.x / 16;
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(c) : "memory");
    } while (seen < 16u);
  }
  __syncthreads();
  attention_unit<kThreads>(p, s, layer, blockIdx.x);
}

// kCarry: the phase that the weights after `phase` belong to (the attention has none:
// after the q/k/v phase the o_proj rows are carried through it).
__device__ __forceinline__ int carry_phase(int phase) { return phase == 1 ? 2 : phase; }

// kCarry: this warp's first row of (layer, phase)'s weights, its first 8 16-byte loads
// a lane, into `pre` (a gate row for gate/up); false when the warp has no row there.
__device__ __forceinline__ bool carry_load(const Params& p, int layer, int phase, uint4 (&pre)[8]) {
  if (layer >= p.n_layers) return false;
  const LayerW& L = p.layers[layer];
  const __nv_bfloat16* w = phase == 0 ? L.qkv : phase == 2 ? L.o : phase == 3 ? L.gu : L.d;
  const int n = phase == 0 ? QKV : phase == 3 ? I : H, k = phase == 4 ? I : H;
  int lo, hi;
  block_rows(n, lo, hi);
  const int r = lo + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (r >= hi) return false;
  const uint4* w4 = reinterpret_cast<const uint4*>(w + size_t(r) * k);
#pragma unroll
  for (int i = 0; i < 8; ++i) pre[i] = ld_stream(w4 + lane + 32 * i);
  return true;
}

// CF: the modes that change the phases' code (kDynamic, kGroup, kBalanced), fixed at
// compile time so that each kernel instance holds only its own (the registers of the
// baseline stay the baseline's).
// o_proj and down stay two loops: folded into one helper, the baseline kernel
// (at its 128-register cap) spilled 4-16 bytes, and its code is what was measured.
// kCarry: `pre` holds the warp's first row's first loads when `have` (carry_load).
// The first row takes its own call (first ? row_dot<K, kC>(.., pre) : row_dot<K>(..)):
// one call with a per-load select spilled the measured carry kernel twice as much.
template <int CF>
__device__ void run_phase(const Params& p, Smem& s, int layer, int phase, const uint4 (&pre)[8], bool have) {
  const LayerW& L = p.layers[layer];
  const int lane = threadIdx.x & 31;
  constexpr bool kC = (CF & kCarry) != 0;
  bool first = kC && have;  // the warp's first row (for_rows' fixed slice starts with it)
  switch (phase) {
    case 0:
      load_norm<kThreads>(s, p.x, L.n1);
      __syncthreads();
      if constexpr ((CF & kGroup) != 0) return qkv_by_group(p, s, layer);
      for_rows<CF>(p, layer, phase, QKV, 4, [&](int r) {
        const float v = first ? row_dot<H, kC>(L.qkv + size_t(r) * H, s.in, lane, pre)
                              : row_dot<H>(L.qkv + size_t(r) * H, s.in, lane);
        first = false;
        if (lane == 0) p.qkv[r] = v;
      });
      break;
    case 1:
      if constexpr ((CF & kGroup) != 0) return attention_by_group(p, s, layer);
      if (p.ctx > 0) {
        for (int u = blockIdx.x; u < 8 * p.splits; u += gridDim.x) {
          attention_unit<kThreads>(p, s, layer, u);
          __syncthreads();
        }
      } else if (blockIdx.x < QD / HD && threadIdx.x < HD)
        p.attn[blockIdx.x * HD + threadIdx.x] = __ldcg(p.qkv + blockIdx.x * HD + threadIdx.x);
      break;
    case 2:
      if (p.ctx > 0) combine_attention<kThreads>(p, s);
      else load_vec<kThreads>(s.in, p.attn, QD);
      __syncthreads();
      if constexpr ((CF & kBalanced) != 0) return proj_quarters<QD>(p, L.o, s.in);
      for_rows<CF>(p, layer, phase, H, 2, [&](int r) {
        const float v = first ? row_dot<QD, kC>(L.o + size_t(r) * QD, s.in, lane, pre)
                              : row_dot<QD>(L.o + size_t(r) * QD, s.in, lane);
        first = false;
        if (lane == 0) p.x[r] = __ldcg(p.x + r) + v;
      });
      break;
    case 3:
      load_norm<kThreads>(s, p.x, L.n2);
      __syncthreads();
      for_rows<CF>(p, layer, phase, I, 4, [&](int r) {
        const float2 gu = first ? row_dot2<kC>(L.gu + size_t(r) * H, L.gu + size_t(I + r) * H, s.in, lane, pre)
                                : row_dot2(L.gu + size_t(r) * H, L.gu + size_t(I + r) * H, s.in, lane);
        first = false;
        if (lane == 0) p.act[r] = gu.x / (1.f + __expf(-gu.x)) * gu.y;
      });
      break;
    default:
      load_vec<kThreads>(s.in, p.act, I);
      __syncthreads();
      if constexpr ((CF & kBalanced) != 0) return proj_quarters<I>(p, L.d, s.in);
      for_rows<CF>(p, layer, phase, H, 2, [&](int r) {
        const float v = first ? row_dot<I, kC>(L.d + size_t(r) * I, s.in, lane, pre)
                              : row_dot<I>(L.d + size_t(r) * I, s.in, lane);
        first = false;
        if (lane == 0) p.x[r] = __ldcg(p.x + r) + v;
      });
      break;
  }
}

}  // namespace pl
