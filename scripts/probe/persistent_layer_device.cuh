// The device pieces of scripts/probe/persistent_layer.cu shared by its kernels:
// the layer shape, the parameters, the 16-byte weight stream, the dot products,
// the phase inputs (norm, attention, partials), the phases and the grid barrier.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pl {


constexpr int H = 2048, QD = 2048, KVD = 512, QKV = QD + 2 * KVD, I = 8192, HD = 64;
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kPhases = 5;
constexpr float kEps = 1e-5f;

struct LayerW {
  const __nv_bfloat16 *qkv, *o, *gu, *d;  // [QKV,H], [H,QD], [2I,H] (gate rows, then up rows), [H,I]
  const float *n1, *n2;                   // [H]
};

enum Flags : int { kBarrier = 1, kWork = 2, kPersistent = 4, kNoMath = 8, kDynamic = 16, kStamp = 32, kGroup = 64, kBalanced = 128 };

struct Params {
  const LayerW* layers;
  int n_layers;
  float* x;    // [H] residual stream
  float* qkv;  // [QKV]
  float* attn; // [QD]
  float* act;  // [I]
  const __nv_bfloat16* kv;  // [layers][2][8][ctx][64] (ctx > 0: phase 2 is a real attention over it)
  float* part;              // [8 * splits * 4][2 + 64]: each split's max, sum and unnormalised output
  int ctx, splits;
  unsigned* counter;  // barrier arrivals; never reset: a launch's targets start at `epoch`
  unsigned epoch;
  int stages;    // the ring kernel's shared-memory stages (32 KB each)
  int pf_bytes;  // per warp row: L2 prefetch of the first pf_bytes of each next-phase row (0: off)
  int flags;
  // fused3_kernel only: the residual in and out of a layer (alternating), the
  // residual after o_proj, and each layer's down weights transposed ([I, H]).
  float* xb[2];
  float* mid;
  const __nv_bfloat16* const* dT;
  unsigned* dyn;  // kDynamic: a row counter per (layer, phase), zeroed before the launch
  // kStamp: %globaltimer per (layer, phase, block): [0] the block starts the phase's work
  // (after its barrier or griddepcontrol.wait), [1] the block has finished it.
  unsigned long long* stamps;
  // kGroup (CTX > 0, SPLITS 16): the q/k/v rows of kv group g come from blocks
  // 16 g .. 16 g + 15, which count themselves here ([layers][8], zeroed before the
  // launch); the group's 16 attention units wait for that count, not a grid barrier.
  unsigned* group_ctr;
};

__device__ __forceinline__ void stamp(const Params& p, int layer, int phase, int which) {
  if (!(p.flags & kStamp) || threadIdx.x != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  p.stamps[((size_t(layer) * kPhases + phase) * gridDim.x + blockIdx.x) * 2 + which] = t;
}

__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ float dot8ab(uint4 w, float4 a, float4 b) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
  float2 f0 = __bfloat1622float2(h[0]), f1 = __bfloat1622float2(h[1]);
  float2 f2 = __bfloat1622float2(h[2]), f3 = __bfloat1622float2(h[3]);
  float s = f0.x * a.x;
  s = fmaf(f0.y, a.y, s);
  s = fmaf(f1.x, a.z, s);
  s = fmaf(f1.y, a.w, s);
  s = fmaf(f2.x, b.x, s);
  s = fmaf(f2.y, b.y, s);
  s = fmaf(f3.x, b.z, s);
  s = fmaf(f3.y, b.w, s);
  return s;
}

__device__ __forceinline__ float dot8(uint4 w, const float* xs) {
  return dot8ab(w, *reinterpret_cast<const float4*>(xs), *reinterpret_cast<const float4*>(xs + 4));
}

// Where element i of a phase input sits in shared memory: in order (P = false), or
// permuted for the ring kernel so that a warp's 8-element groups (lane + 32 j) read
// as two conflict-free float4 rows: group u = i / 8 of 32, half t / 4, lane u % 32.
template <bool P>
__device__ __forceinline__ int sidx(int i) {
  if constexpr (!P) return i;
  const int u = i >> 3, t = i & 7;
  return (u >> 5) * 256 + (t >> 2) * 128 + (u & 31) * 4 + (t & 3);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One row of K bf16 weights against xs (shared, fp32), by one warp: K / 256 16-byte
// loads per lane, 8 in flight ahead of the arithmetic.
template <int K>
__device__ __forceinline__ float row_dot(const __nv_bfloat16* w, const float* xs, int lane) {
  constexpr int N = K / 256, B = 8, C = N / B;
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  uint4 buf[2][B];
#pragma unroll
  for (int i = 0; i < B; ++i) buf[0][i] = ld_stream(w4 + lane + 32 * i);
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (c + 1 < C) {
#pragma unroll
      for (int i = 0; i < B; ++i) buf[(c + 1) & 1][i] = ld_stream(w4 + lane + 32 * ((c + 1) * B + i));
    }
#pragma unroll
    for (int i = 0; i < B; ++i) acc += dot8(buf[c & 1][i], xs + (lane + 32 * (c * B + i)) * 8);
  }
  return warp_sum(acc);
}

// Two rows of 2048 at once (gate and up): 16 loads in flight.
__device__ __forceinline__ float2 row_dot2(const __nv_bfloat16* wa, const __nv_bfloat16* wb, const float* xs,
                                          int lane) {
  const uint4* a4 = reinterpret_cast<const uint4*>(wa);
  const uint4* b4 = reinterpret_cast<const uint4*>(wb);
  uint4 ra[8], rb[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) ra[i] = ld_stream(a4 + lane + 32 * i);
#pragma unroll
  for (int i = 0; i < 8; ++i) rb[i] = ld_stream(b4 + lane + 32 * i);
  float sa = 0.f, sb = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    sa += dot8(ra[i], xs + (lane + 32 * i) * 8);
    sb += dot8(rb[i], xs + (lane + 32 * i) * 8);
  }
  return make_float2(warp_sum(sa), warp_sum(sb));
}

__device__ __forceinline__ void block_rows(int n, int& lo, int& hi) {
  lo = int((long long)n * blockIdx.x / gridDim.x);
  hi = int((long long)n * (blockIdx.x + 1) / gridDim.x);
}

// A block's shared state: the phase's input vector (fp32) and a reduction scratch.
struct Smem {
  float in[I];
  float red[32];
  float q[4 * HD];
  float sc[4 * 256];
};

// A barrier over the NT threads that do the phase's work: the whole block, or
// the ring kernel's consumer warps (named barrier 1; the producer warp is not in it).
template <int NT>
__device__ __forceinline__ void csync() {
  if (blockDim.x == NT) __syncthreads();
  else asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
}

template <int NT, bool P = false>
__device__ void load_vec(float* dst, const float* src, int n) {
  for (int i = threadIdx.x * 4; i < n; i += NT * 4)
    *reinterpret_cast<float4*>(dst + sidx<P>(i)) = __ldcg(reinterpret_cast<const float4*>(src + i));
}

// dst = rmsnorm(x) * w, every block for itself.
template <int NT, bool P = false>
__device__ void load_norm(Smem& s, const float* x, const float* w) {
  float ss = 0.f;
  for (int i = threadIdx.x * 4; i < H; i += NT * 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(x + i));
    *reinterpret_cast<float4*>(s.in + sidx<P>(i)) = v;
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) s.red[threadIdx.x >> 5] = ss;
  csync<NT>();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < NT / 32; ++i) tot += s.red[i];
  const float r = rsqrtf(tot / H + kEps);
  for (int i = threadIdx.x; i < H; i += NT) s.in[sidx<P>(i)] = s.in[sidx<P>(i)] * r * w[i];
}

// The phase's weight rows this warp reads first (for the L2 prefetch before the
// barrier that precedes the phase).
__device__ void prefetch_phase(const Params& p, int layer, int phase, int warp) {
  if (p.pf_bytes <= 0 || layer >= p.n_layers) return;
  const LayerW& L = p.layers[layer];
  int lo, hi;
  const __nv_bfloat16* w = nullptr;
  const __nv_bfloat16* w2 = nullptr;
  int k = H;
  switch (phase) {
    case 0: block_rows(QKV, lo, hi); w = L.qkv; break;
    case 1: {  // the block's attention unit: its K and V rows
      if (p.ctx <= 0 || warp > 1 || int(blockIdx.x) >= 8 * p.splits) return;
      const int kvh = blockIdx.x / p.splits, sp = blockIdx.x % p.splits;
      const int k0 = int((long long)p.ctx * sp / p.splits), k1 = int((long long)p.ctx * (sp + 1) / p.splits);
      const size_t head_rows = size_t(p.ctx) * HD;
      const __nv_bfloat16* K = p.kv + (size_t(layer) * 2 * 8 + kvh) * head_rows + size_t(k0) * HD;
      if ((threadIdx.x & 31) == 0) prefetch_l2(K + warp * 8 * head_rows, unsigned((k1 - k0) * HD * 2));
      return;
    }
    case 2: block_rows(H, lo, hi); w = L.o; break;
    case 3: block_rows(I, lo, hi); w = L.gu; w2 = L.gu + size_t(I) * H; break;
    default: block_rows(H, lo, hi); w = L.d; k = I; break;
  }
  const int row = lo + warp;
  if (row >= hi) return;
  const unsigned bytes = unsigned(min(p.pf_bytes, k * 2));
  prefetch_l2(w + size_t(row) * k, bytes);
  if (w2) prefetch_l2(w2 + size_t(row) * k, bytes);
}

// The attention of one (kv head, split) unit for the group's 4 q heads over keys
// [k0, k1) of the layer's cache (contiguous rows of 64 bf16): scores, the split's
// max and sum, P.V; written unnormalised to part (flash-decoding's partials).
template <int NT>
__device__ void attention_unit(const Params& p, Smem& s, int layer, int unit) {
  const int kvh = unit / p.splits, sp = unit % p.splits;
  const int k0 = int((long long)p.ctx * sp / p.splits), k1 = int((long long)p.ctx * (sp + 1) / p.splits);
  const int nk = k1 - k0;  // <= 256
  const size_t head_rows = size_t(p.ctx) * HD;
  const __nv_bfloat16* K = p.kv + (size_t(layer) * 2 * 8 + kvh) * head_rows + size_t(k0) * HD;
  const __nv_bfloat16* V = K + 8 * head_rows;
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(s.in);
  __nv_bfloat16* vs = ks + 128 * HD;  // <= 128 keys a split (checked on the host)
  for (int i = threadIdx.x; i < nk * HD / 8; i += NT) {
    reinterpret_cast<uint4*>(ks)[i] = ld_stream(reinterpret_cast<const uint4*>(K) + i);
    reinterpret_cast<uint4*>(vs)[i] = ld_stream(reinterpret_cast<const uint4*>(V) + i);
  }
  if (threadIdx.x < 4 * HD) s.q[threadIdx.x] = __ldcg(p.qkv + kvh * 4 * HD + threadIdx.x);
  csync<NT>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int k = warp; k < nk; k += NT / 32) {
    const float2 kk = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(ks + k * HD)[lane]);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const float v = warp_sum(s.q[h * HD + 2 * lane] * kk.x + s.q[h * HD + 2 * lane + 1] * kk.y);
      if (lane == 0) s.sc[h * 256 + k] = v * 0.125f;
    }
  }
  csync<NT>();
  if (warp < 4) {  // warp h: the max and the sum of head h's scores; p in place
    float m = -INFINITY;
    for (int k = lane; k < nk; k += 32) m = fmaxf(m, s.sc[warp * 256 + k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.f;
    for (int k = lane; k < nk; k += 32) {
      const float e = __expf(s.sc[warp * 256 + k] - m);
      s.sc[warp * 256 + k] = e;
      l += e;
    }
    l = warp_sum(l);
    float* out = p.part + size_t((kvh * p.splits + sp) * 4 + warp) * (2 + HD);
    if (lane == 0) out[0] = m, out[1] = l;
  }
  csync<NT>();
  if (threadIdx.x < 4 * HD) {
    const int h = threadIdx.x / HD, d = threadIdx.x % HD;
    float acc = 0.f;
    for (int k = 0; k < nk; ++k) acc += s.sc[h * 256 + k] * __bfloat162float(vs[k * HD + d]);
    p.part[size_t((kvh * p.splits + sp) * 4 + h) * (2 + HD) + 2 + d] = acc;
  }
}

// attn (every block, into its shared input): the splits' partials combined.
template <int NT, bool P = false>
__device__ void combine_attention(const Params& p, Smem& s) {
  for (int i = threadIdx.x; i < QD; i += NT) {
    const int h = i / HD, d = i % HD, kvh = h / 4, hh = h % 4;
    float m = -INFINITY;
    for (int sp = 0; sp < p.splits; ++sp) m = fmaxf(m, __ldcg(p.part + size_t((kvh * p.splits + sp) * 4 + hh) * (2 + HD)));
    float l = 0.f, o = 0.f;
    for (int sp = 0; sp < p.splits; ++sp) {
      const float* pt = p.part + size_t((kvh * p.splits + sp) * 4 + hh) * (2 + HD);
      const float w = __expf(__ldcg(pt) - m);
      l += w * __ldcg(pt + 1);
      o += w * __ldcg(pt + 2 + d);
    }
    s.in[sidx<P>(i)] = o / l;
  }
}

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

// CF: the modes that change the phases' code (kDynamic, kGroup, kBalanced), fixed at
// compile time so that each kernel instance holds only its own (the registers of the
// baseline stay the baseline's).
template <int CF>
__device__ void run_phase(const Params& p, Smem& s, int layer, int phase) {
  const LayerW& L = p.layers[layer];
  const int lane = threadIdx.x & 31;
  switch (phase) {
    case 0:
      load_norm<kThreads>(s, p.x, L.n1);
      __syncthreads();
      if constexpr ((CF & kGroup) != 0) return qkv_by_group(p, s, layer);
      for_rows<CF>(p, layer, phase, QKV, 4, [&](int r) {
        const float v = row_dot<H>(L.qkv + size_t(r) * H, s.in, lane);
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
        const float v = row_dot<QD>(L.o + size_t(r) * QD, s.in, lane);
        if (lane == 0) p.x[r] = __ldcg(p.x + r) + v;
      });
      break;
    case 3:
      load_norm<kThreads>(s, p.x, L.n2);
      __syncthreads();
      for_rows<CF>(p, layer, phase, I, 4, [&](int r) {
        const float2 gu = row_dot2(L.gu + size_t(r) * H, L.gu + size_t(I + r) * H, s.in, lane);
        if (lane == 0) p.act[r] = gu.x / (1.f + __expf(-gu.x)) * gu.y;
      });
      break;
    default:
      load_vec<kThreads>(s.in, p.act, I);
      __syncthreads();
      if constexpr ((CF & kBalanced) != 0) return proj_quarters<I>(p, L.d, s.in);
      for_rows<CF>(p, layer, phase, H, 2, [&](int r) {
        const float v = row_dot<I>(L.d + size_t(r) * I, s.in, lane);
        if (lane == 0) p.x[r] = __ldcg(p.x + r) + v;
      });
      break;
  }
}

__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (int(seen - target) < 0);
  }
  __syncthreads();
}

}  // namespace pl
