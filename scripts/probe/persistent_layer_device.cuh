// The device pieces of scripts/probe/persistent_layer.cu shared by its kernels:
// the layer shape, the parameters, the 16-byte weight stream, the dot products,
// the phase inputs (norm, attention, partials) and the grid barrier (the phases:
// persistent_layer_phases.cuh).
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

enum Flags : int {
  kBarrier = 1, kWork = 2, kPersistent = 4, kNoMath = 8, kDynamic = 16, kStamp = 32, kGroup = 64, kBalanced = 128,
  kSplit = 256,  // the persistent kernel's barrier split: arrive, then the L2 prefetch (pf_bytes), then wait
  kCarry = 512   // kSplit, and between arrival and wait every warp loads its first row of the next
                 // weight phase into registers (the phase's first row_dot starts from them)
};

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
// loads per lane, 8 in flight ahead of the arithmetic. kPre: the first 8 were loaded
// already (kCarry: before the barrier's wait) and come in `pre`.
template <int K, bool kPre = false>
__device__ __forceinline__ float row_dot(const __nv_bfloat16* w, const float* xs, int lane, const uint4 (&pre)[8]) {
  constexpr int N = K / 256, B = 8, C = N / B;
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  uint4 buf[2][B];
#pragma unroll
  for (int i = 0; i < B; ++i) buf[0][i] = kPre ? pre[i] : ld_stream(w4 + lane + 32 * i);
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
template <int K>
__device__ __forceinline__ float row_dot(const __nv_bfloat16* w, const float* xs, int lane) {
  const uint4 none[8] = {};
  return row_dot<K, false>(w, xs, lane, none);
}

// Two rows of 2048 at once (gate and up): 16 loads in flight (kPre: the gate row's 8
// come in `pre`).
template <bool kPre = false>
__device__ __forceinline__ float2 row_dot2(const __nv_bfloat16* wa, const __nv_bfloat16* wb, const float* xs,
                                          int lane, const uint4 (&pre)[8]) {
  const uint4* a4 = reinterpret_cast<const uint4*>(wa);
  const uint4* b4 = reinterpret_cast<const uint4*>(wb);
  uint4 ra[8], rb[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) ra[i] = kPre ? pre[i] : ld_stream(a4 + lane + 32 * i);
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
__device__ __forceinline__ float2 row_dot2(const __nv_bfloat16* wa, const __nv_bfloat16* wb, const float* xs,
                                          int lane) {
  const uint4 none[8] = {};
  return row_dot2<false>(wa, wb, xs, lane, none);
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

// The grid barrier in two halves (kSplit puts work between them: loads issued after
// this block's arrival cannot hold the arrival's release back).
__device__ __forceinline__ void grid_arrive(unsigned* counter) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}
__device__ __forceinline__ void grid_wait(const unsigned* counter, unsigned target) {
  if (threadIdx.x == 0) {
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (int(seen - target) < 0);
  }
  __syncthreads();
}
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  grid_arrive(counter);
  grid_wait(counter, target);
}

}  // namespace pl
