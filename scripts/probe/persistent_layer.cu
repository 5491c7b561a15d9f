// Probe (issue 14, session 35): can a persistent decode kernel run a Llama-3.2-1B
// layer's weight streams back to back, with grid-wide barriers in place of kernel
// boundaries, near the bandwidth floor? The batch-1 step's remaining gap is the
// boundaries between the weight streams (docs/performance.md, session 34), so this
// is the measurement a per-layer persistent kernel has to pass first.
//
// One row (batch 1), 16 layers of random bf16 weights (1.95 GB: every layer comes
// from HBM), hidden 2048, q 2048, k/v 512 each, intermediate 8192. A layer is five
// phases, each spread over every block (rows of the phase's weight matrix split
// evenly by block, then by warp; one warp per output row, 16-byte loads):
//   1 qkv   = W_qkv . rmsnorm(x)           (every block normalises x itself)
//   2 attention over CTX keys of a static cache per layer (no RoPE, no KV write):
//                                           8 kv heads x SPLITS units, one block
//                                           each, writing flash-decoding partials;
//                                           CTX=0: a stand-in (32 blocks copy q)
//   3 x    += W_o . attn                   (every block combines the partials
//                                            itself; the warp owning a row adds it)
//   4 act   = silu(W_g . h) * (W_u . h),   h = rmsnorm(x)
//   5 x    += W_d . act
// Modes (each timed as the median of 20 launches of all 16 layers, CUDA events):
//   persistent      one cooperative kernel, a counter barrier after each phase
//   persistent+pf   the same; before each barrier every warp asks the L2 for the
//                   first PF bytes of its next phase's rows (cp.async.bulk.prefetch)
//   chain           one kernel per phase (the same device code), programmatic
//                   dependent launch, 80 launches captured in one CUDA graph
//   chain+pf        the same with the L2 prefetch before griddepcontrol.wait
//   ring            the ring kernel (below), 2-5 stages; "no dot products": its consumers
//                   only wait for and release the stages (the copy stream alone)
//   stream          the persistent kernel without barriers (the results are
//                   wrong; the time is the weight stream's floor in this code)
//   barriers        the persistent kernel without work (80 barriers alone)
// Correctness: persistent and chain must give bit-identical x; a CPU reference
// (fp32, the same bf16 weights) of 2 layers must agree to rel-L2 < 1e-4.
//
//   bash scripts/probe/build-probe.sh persistent_layer && CTX=512 SPLITS=16 build/probe/persistent_layer [PF_BYTES...]
// (CTX default 512, SPLITS default 16; PF_BYTES default 2048 4096)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/tma_common.cuh"
#include "probe_common.cuh"

namespace {

constexpr int H = 2048, QD = 2048, KVD = 512, QKV = QD + 2 * KVD, I = 8192, HD = 64;
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kPhases = 5;
constexpr float kEps = 1e-5f;

struct LayerW {
  const __nv_bfloat16 *qkv, *o, *gu, *d;  // [QKV,H], [H,QD], [2I,H] (gate rows, then up rows), [H,I]
  const float *n1, *n2;                   // [H]
};

enum Flags : int { kBarrier = 1, kWork = 2, kPersistent = 4, kNoMath = 8, kDynamic = 16 };

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
};

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
template <class F>
__device__ __forceinline__ void for_rows(const Params& p, int layer, int phase, int n, int chunk, F&& f) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (!(p.flags & kDynamic)) {
    int lo, hi;
    block_rows(n, lo, hi);
    for (int r = lo + warp; r < hi; r += kWarps) f(r);
    return;
  }
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

__device__ void run_phase(const Params& p, Smem& s, int layer, int phase) {
  const LayerW& L = p.layers[layer];
  const int lane = threadIdx.x & 31;
  switch (phase) {
    case 0:
      load_norm<kThreads>(s, p.x, L.n1);
      __syncthreads();
      for_rows(p, layer, phase, QKV, 4, [&](int r) {
        const float v = row_dot<H>(L.qkv + size_t(r) * H, s.in, lane);
        if (lane == 0) p.qkv[r] = v;
      });
      break;
    case 1:
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
      for_rows(p, layer, phase, H, 2, [&](int r) {
        const float v = row_dot<QD>(L.o + size_t(r) * QD, s.in, lane);
        if (lane == 0) p.x[r] = __ldcg(p.x + r) + v;
      });
      break;
    case 3:
      load_norm<kThreads>(s, p.x, L.n2);
      __syncthreads();
      for_rows(p, layer, phase, I, 4, [&](int r) {
        const float2 gu = row_dot2(L.gu + size_t(r) * H, L.gu + size_t(I + r) * H, s.in, lane);
        if (lane == 0) p.act[r] = gu.x / (1.f + __expf(-gu.x)) * gu.y;
      });
      break;
    default:
      load_vec<kThreads>(s.in, p.act, I);
      __syncthreads();
      for_rows(p, layer, phase, H, 2, [&](int r) {
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

__global__ void __launch_bounds__(kThreads, 1) persistent_kernel(Params p) {
  __shared__ __align__(16) Smem s;
  const int warp = threadIdx.x >> 5;
  unsigned gen = 0;
  for (int layer = 0; layer < p.n_layers; ++layer) {
    for (int phase = 0; phase < kPhases; ++phase) {
      if (p.flags & kWork) run_phase(p, s, layer, phase);
      const int nl = phase + 1 < kPhases ? layer : layer + 1, np = (phase + 1) % kPhases;
      prefetch_phase(p, nl, np, warp);
      if (p.flags & kBarrier) grid_barrier(p.counter, p.epoch + ++gen * gridDim.x);
      else __syncthreads();
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) phase_kernel(Params p, int layer, int phase) {
  __shared__ __align__(16) Smem s;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  prefetch_phase(p, layer, phase, threadIdx.x >> 5);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  run_phase(p, s, layer, phase);
}


// ---- three syncs a layer instead of five (fused3_kernel; the stand-in attention
// only): o_proj reads q directly (the attention's barrier gone), and gate/up and
// down are one phase -- each block turns its slice of gate/up rows into act
// values kept in shared memory and multiplies them at once by the same rows of
// the transposed down weights (split-k: a 2048-wide partial per block), added
// into the next layer's residual with fp32 atomics. The residual is double
// buffered (o_proj's row owners write x + o to both `mid` and the out buffer, the
// partials land on the out buffer), so no block reads what another adds to.
__global__ void __launch_bounds__(kThreads, 1) fused3_kernel(Params p) {
  __shared__ __align__(16) Smem s;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned gen = 0;
  auto sync = [&] {
    if (p.flags & kBarrier) grid_barrier(p.counter, p.epoch + ++gen * gridDim.x);
    else __syncthreads();
  };
  for (int layer = 0; layer < p.n_layers; ++layer) {
    const LayerW& L = p.layers[layer];
    float* xin = (layer & 1) ? p.xb[1] : p.xb[0];  // no run-time index into the parameters (a stack copy)
    float* xout = (layer & 1) ? p.xb[0] : p.xb[1];
    int lo, hi;
    load_norm<kThreads>(s, xin, L.n1);  // q/k/v
    __syncthreads();
    block_rows(QKV, lo, hi);
    for (int r = lo + warp; r < hi; r += kWarps) {
      const float v = row_dot<H>(L.qkv + size_t(r) * H, s.in, lane);
      if (lane == 0) p.qkv[r] = v;
    }
    sync();
    load_vec<kThreads>(s.in, p.qkv, QD);  // o_proj on q (the stand-in attention)
    __syncthreads();
    block_rows(H, lo, hi);
    for (int r = lo + warp; r < hi; r += kWarps) {
      const float v = row_dot<QD>(L.o + size_t(r) * QD, s.in, lane);
      if (lane == 0) {
        const float m = __ldcg(xin + r) + v;
        p.mid[r] = m;
        xout[r] = m;
      }
    }
    sync();
    load_norm<kThreads>(s, p.mid, L.n2);  // gate/up, then down's split-k partial
    __syncthreads();
    block_rows(I, lo, hi);
    float* act = s.sc;
    for (int r = lo + warp; r < hi; r += kWarps) {
      const float2 gu = row_dot2(L.gu + size_t(r) * H, L.gu + size_t(I + r) * H, s.in, lane);
      if (lane == 0) act[r - lo] = gu.x / (1.f + __expf(-gu.x)) * gu.y;
    }
    __syncthreads();
    const int cg = threadIdx.x & 255, half = threadIdx.x >> 8;
    const __nv_bfloat16* dT = p.dT[layer];
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j0 = lo + half; j0 < hi; j0 += 16) {
      uint4 w[8];  // rows past hi re-read the last row and count 0
#pragma unroll
      for (int u = 0; u < 8; ++u) w[u] = ld_stream(dT + size_t(min(j0 + 2 * u, hi - 1)) * H + cg * 8);
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float a = j0 + 2 * u < hi ? act[min(j0 + 2 * u, hi - 1) - lo] : 0.f;
        const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&w[u]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(h2[e]);
          acc[2 * e] = fmaf(a, f.x, acc[2 * e]);
          acc[2 * e + 1] = fmaf(a, f.y, acc[2 * e + 1]);
        }
      }
    }
    if (half == 1)
#pragma unroll
      for (int e = 0; e < 8; ++e) s.in[cg * 8 + e] = acc[e];
    __syncthreads();
    if (half == 0)
#pragma unroll
      for (int e = 0; e < 8; ++e) atomicAdd(xout + cg * 8 + e, acc[e] + s.in[cg * 8 + e]);
    sync();
  }
}

__global__ void transpose_bf16(const __nv_bfloat16* in, __nv_bfloat16* out, int rows, int cols) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < size_t(rows) * cols; i += size_t(gridDim.x) * blockDim.x)
    out[(i % cols) * rows + i / cols] = in[i];
}

// ---- the ring kernel: a producer warp streams every phase's weights through a
// shared-memory ring (bulk copies completing on mbarriers) without ever waiting
// for a grid barrier -- weights do not depend on activations -- while 8 consumer
// warps wait on the barriers, stage the phase's input and eat the ring. A stage
// is 16 rows x 1024 columns (gate/up: 16 gate and 16 up rows x 512 columns), one
// 2 KB piece of it per consumer warp (16 of them).
namespace cd = lantern::kernels::cuda_detail;
constexpr int kStageBytes = 32768, kMaxStages = 5;
constexpr int kRingWarps = 16, kCons = kRingWarps * 32, kRingThreads = kCons + 32;

struct Geom {
  const __nv_bfloat16 *w = nullptr, *w2 = nullptr;  // w2: the up rows (gate/up)
  int k = 0, kc = 0, lo = 0, hi = 0;
  __device__ int chunks() const { return k / kc; }
  __device__ int stages() const { return hi > lo ? (hi - lo + kRingWarps - 1) / kRingWarps * chunks() : 0; }
};

__device__ Geom ring_geom(const Params& p, int layer, int phase) {
  const LayerW& L = p.layers[layer];
  Geom g;
  switch (phase) {
    case 0: g.w = L.qkv, g.k = H, g.kc = 1024, block_rows(QKV, g.lo, g.hi); break;
    case 2: g.w = L.o, g.k = QD, g.kc = 1024, block_rows(H, g.lo, g.hi); break;
    case 3: g.w = L.gu, g.w2 = L.gu + size_t(I) * H, g.k = H, g.kc = 512, block_rows(I, g.lo, g.hi); break;
    case 4: g.w = L.d, g.k = I, g.kc = 1024, block_rows(H, g.lo, g.hi); break;
    default: break;
  }
  return g;
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   cd::smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(cd::smem_u32(bar))
               : "memory");
}

__device__ void ring_producer(const Params& p, uint8_t* ring, uint64_t* full, uint64_t* empty) {
  const int lane = threadIdx.x & 31;
  unsigned n = 0;
  for (int layer = 0; layer < p.n_layers; ++layer)
    for (int phase = 0; phase < kPhases; ++phase) {
      const Geom g = ring_geom(p, layer, phase);
      for (int st = 0; st < g.stages(); ++st, ++n) {
        const int slot = int(n % unsigned(p.stages));
        const unsigned par = (n / unsigned(p.stages)) & 1u;
        const int r0 = g.lo + kRingWarps * (st / g.chunks()), c = st % g.chunks();
        const int nr = min(kRingWarps, g.hi - r0);
        const unsigned row_bytes = unsigned(g.kc) * 2;
        if (lane == 0) {
          cd::mbar_wait(&empty[slot], par ^ 1u);
          cd::mbar_expect_tx(&full[slot], unsigned(nr) * row_bytes * (g.w2 ? 2u : 1u));
        }
        __syncwarp();
        uint8_t* dst = ring + size_t(slot) * kStageBytes;
        if (lane < nr)
          bulk_copy(dst + lane * row_bytes, g.w + size_t(r0 + lane) * g.k + size_t(c) * g.kc, row_bytes, &full[slot]);
        else if (g.w2 && lane >= kRingWarps && lane - kRingWarps < nr)
          bulk_copy(dst + kStageBytes / 2 + (lane - kRingWarps) * row_bytes,
                    g.w2 + size_t(r0 + lane - kRingWarps) * g.k + size_t(c) * g.kc, row_bytes, &full[slot]);
      }
    }
}

// Row segment (KC columns, bf16 in shared memory) . the input's columns from
// 256 * cu on (permuted: sidx<true>), this lane's part.
template <int KC>
__device__ __forceinline__ float seg_dot(const uint8_t* row, const float* in, int cu, int lane, float acc) {
  const uint4* w4 = reinterpret_cast<const uint4*>(row);
  const float4* in4 = reinterpret_cast<const float4*>(in);
#pragma unroll
  for (int j = 0; j < KC / 256; ++j)
    acc += dot8ab(w4[lane + 32 * j], in4[(cu + j) * 64 + lane], in4[(cu + j) * 64 + 32 + lane]);
  return acc;
}

__device__ void ring_consumer_phase(const Params& p, Smem& s, uint8_t* ring, uint64_t* full, uint64_t* empty,
                                    int layer, int phase, unsigned& n) {
  const Geom g = ring_geom(p, layer, phase);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float acc = 0.f, acc2 = 0.f;
  for (int st = 0; st < g.stages(); ++st, ++n) {
    const int slot = int(n % unsigned(p.stages));
    cd::mbar_wait(&full[slot], (n / unsigned(p.stages)) & 1u);
    const int r0 = g.lo + kRingWarps * (st / g.chunks()), c = st % g.chunks();
    const int nr = min(kRingWarps, g.hi - r0);
    const uint8_t* stage = ring + size_t(slot) * kStageBytes;
    if (warp < nr && !(p.flags & kNoMath)) {
      if (g.w2) {
        acc = seg_dot<512>(stage + warp * 1024, s.in, c * 2, lane, acc);
        acc2 = seg_dot<512>(stage + kStageBytes / 2 + warp * 1024, s.in, c * 2, lane, acc2);
      } else {
        acc = seg_dot<1024>(stage + warp * 2048, s.in, c * 4, lane, acc);
      }
    }
    __syncwarp();
    if (lane == 0) cd::mbar_arrive(&empty[slot]);
    if (c + 1 == g.chunks()) {  // the row is done
      if (warp < nr) {
        const float v = warp_sum(acc), v2 = warp_sum(acc2);
        const int r = r0 + warp;
        if (lane == 0) {
          if (phase == 0) p.qkv[r] = v;
          else if (phase == 3) p.act[r] = v / (1.f + __expf(-v)) * v2;
          else p.x[r] = __ldcg(p.x + r) + v;
        }
      }
      acc = acc2 = 0.f;
    }
  }
}

__device__ void ring_consumer(const Params& p, Smem& s, uint8_t* ring, uint64_t* full, uint64_t* empty) {
  unsigned n = 0, gen = 0;
  for (int layer = 0; layer < p.n_layers; ++layer) {
    const LayerW& L = p.layers[layer];
    for (int phase = 0; phase < kPhases; ++phase) {
      if (p.flags & kWork) {
        switch (phase) {
          case 0: load_norm<kCons, true>(s, p.x, L.n1); break;
          case 1:
            if (p.ctx > 0) {
              for (int u = blockIdx.x; u < 8 * p.splits; u += gridDim.x) {
                attention_unit<kCons>(p, s, layer, u);
                csync<kCons>();
              }
            } else if (blockIdx.x < QD / HD && threadIdx.x < HD) {
              p.attn[blockIdx.x * HD + threadIdx.x] = __ldcg(p.qkv + blockIdx.x * HD + threadIdx.x);
            }
            break;
          case 2:
            if (p.ctx > 0) combine_attention<kCons, true>(p, s);
            else load_vec<kCons, true>(s.in, p.attn, QD);
            break;
          case 3: load_norm<kCons, true>(s, p.x, L.n2); break;
          default: load_vec<kCons, true>(s.in, p.act, I); break;
        }
        csync<kCons>();
      }
      ring_consumer_phase(p, s, ring, full, empty, layer, phase, n);
      csync<kCons>();
      if (p.flags & kBarrier) {
        ++gen;
        if (threadIdx.x == 0) {
          const unsigned target = p.epoch + gen * gridDim.x;
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.counter) : "memory");
          unsigned seen = 0;
          do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(p.counter) : "memory");
          } while (int(seen - target) < 0);
        }
        csync<kCons>();
      }
    }
  }
}

constexpr size_t ring_smem_bytes(int stages) {
  return (sizeof(Smem) + 2 * kMaxStages * sizeof(uint64_t) + 127) / 128 * 128 + size_t(stages) * kStageBytes;
}

__global__ void __launch_bounds__(kRingThreads, 1) ring_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t dyn[];
  Smem& s = *reinterpret_cast<Smem*>(dyn);
  uint64_t* full = reinterpret_cast<uint64_t*>(dyn + sizeof(Smem));
  uint64_t* empty = full + kMaxStages;
  uint8_t* ring = dyn + (sizeof(Smem) + 2 * kMaxStages * sizeof(uint64_t) + 127) / 128 * 128;
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.stages; ++i) cd::mbar_init(&full[i], 1), cd::mbar_init(&empty[i], kRingWarps);
    cd::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= kCons) ring_producer(p, ring, full, empty);
  else ring_consumer(p, s, ring, full, empty);
}

// ---- host ----

struct Model {
  std::vector<LayerW> host;
  LayerW* dev = nullptr;
  std::vector<void*> allocs;
};

Model make_model(int n_layers) {
  Model m;
  for (int l = 0; l < n_layers; ++l) {
    LayerW L{};
    auto bf = [&](size_t n, float scale, unsigned seed) {
      __nv_bfloat16* d;
      CK(cudaMalloc(&d, n * 2));
      probe::fill_bf16<<<1024, 256>>>(d, n, seed, scale);
      m.allocs.push_back(d);
      return d;
    };
    L.qkv = bf(size_t(QKV) * H, 0.04f, 11 + 7 * l);
    L.o = bf(size_t(H) * QD, 0.04f, 12 + 7 * l);
    L.gu = bf(size_t(2 * I) * H, 0.04f, 13 + 7 * l);
    L.d = bf(size_t(H) * I, 0.02f, 14 + 7 * l);
    std::vector<float> n(H);
    for (int i = 0; i < H; ++i) n[i] = 1.f + 0.1f * std::sin(0.01f * i + l);
    float *n1, *n2;
    CK(cudaMalloc(&n1, H * 4));
    CK(cudaMalloc(&n2, H * 4));
    CK(cudaMemcpy(n1, n.data(), H * 4, cudaMemcpyHostToDevice));
    for (auto& v : n) v = 2.f - v;
    CK(cudaMemcpy(n2, n.data(), H * 4, cudaMemcpyHostToDevice));
    m.allocs.push_back(n1);
    m.allocs.push_back(n2);
    L.n1 = n1;
    L.n2 = n2;
    m.host.push_back(L);
  }
  CK(cudaMalloc(&m.dev, sizeof(LayerW) * n_layers));
  CK(cudaMemcpy(m.dev, m.host.data(), sizeof(LayerW) * n_layers, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  return m;
}

std::vector<float> to_host_f(const __nv_bfloat16* d, size_t n) {
  std::vector<__nv_bfloat16> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

// The CPU reference of n layers (fp32 weights from the same bf16, double sums).
std::vector<float> cpu_layers(const Model& m, int n, std::vector<float> x, const __nv_bfloat16* kv, int ctx) {
  auto gemv = [](const std::vector<float>& w, const std::vector<float>& v, int rows, int k) {
    std::vector<float> y(rows);
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (int i = 0; i < k; ++i) s += double(w[size_t(r) * k + i]) * v[i];
      y[r] = float(s);
    }
    return y;
  };
  auto norm = [](const std::vector<float>& v, const float* wd) {
    std::vector<float> w(H);
    CK(cudaMemcpy(w.data(), wd, H * 4, cudaMemcpyDeviceToHost));
    double ss = 0;
    for (float f : v) ss += double(f) * f;
    const float r = float(1.0 / std::sqrt(ss / H + kEps));
    std::vector<float> o(H);
    for (int i = 0; i < H; ++i) o[i] = v[i] * r * w[i];
    return o;
  };
  for (int l = 0; l < n; ++l) {
    const LayerW& L = m.host[l];
    const auto qkv = gemv(to_host_f(L.qkv, size_t(QKV) * H), norm(x, L.n1), QKV, H);
    std::vector<float> attn(qkv.begin(), qkv.begin() + QD);
    if (ctx > 0) {
      const size_t head_rows = size_t(ctx) * HD;
      const auto kvl = to_host_f(kv + size_t(l) * 16 * head_rows, 16 * head_rows);
      for (int h = 0; h < QD / HD; ++h) {
        const float* K = kvl.data() + (h / 4) * head_rows;
        const float* V = K + 8 * head_rows;
        std::vector<double> sc(ctx);
        double mx = -1e300, sum = 0;
        for (int k = 0; k < ctx; ++k) {
          double d = 0;
          for (int j = 0; j < HD; ++j) d += double(qkv[h * HD + j]) * K[size_t(k) * HD + j];
          sc[k] = d * 0.125, mx = std::max(mx, sc[k]);
        }
        for (auto& v : sc) v = std::exp(v - mx), sum += v;
        for (int j = 0; j < HD; ++j) {
          double o = 0;
          for (int k = 0; k < ctx; ++k) o += sc[k] * V[size_t(k) * HD + j];
          attn[h * HD + j] = float(o / sum);
        }
      }
    }
    const auto o = gemv(to_host_f(L.o, size_t(H) * QD), attn, H, QD);
    for (int i = 0; i < H; ++i) x[i] += o[i];
    const auto gu = gemv(to_host_f(L.gu, size_t(2 * I) * H), norm(x, L.n2), 2 * I, H);
    std::vector<float> act(I);
    for (int i = 0; i < I; ++i) act[i] = gu[i] / (1.f + std::exp(-gu[i])) * gu[I + i];
    const auto d = gemv(to_host_f(L.d, size_t(H) * I), act, H, I);
    for (int i = 0; i < H; ++i) x[i] += d[i];
  }
  return x;
}

unsigned g_epoch = 0;  // arrivals on the counter so far (every persistent launch with barriers adds its own)

struct Runner {
  Params p{};
  int blocks = 0;
  cudaStream_t st{};
  std::vector<float> x0;
  cudaGraphExec_t chain_exec[2] = {nullptr, nullptr};  // without / with prefetch

  void reset_x() { CK(cudaMemcpyAsync(p.x, x0.data(), H * 4, cudaMemcpyHostToDevice, st)); }

  void launch_persistent(int flags, int pf) {
    Params q = p;
    q.flags = flags | kPersistent;
    q.pf_bytes = pf;
    q.epoch = g_epoch;
    if (flags & kBarrier) g_epoch += unsigned(p.n_layers * kPhases * blocks);
    if (flags & kDynamic) CK(cudaMemsetAsync(q.dyn, 0, sizeof(unsigned) * p.n_layers * kPhases, st));
    void* args[] = {&q};
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel), dim3(blocks), dim3(kThreads), args, 0,
                                   st));
  }

  void launch_fused3(int flags) {
    Params q = p;
    q.flags = flags | kPersistent;
    q.epoch = g_epoch;
    if (flags & kBarrier) g_epoch += unsigned(p.n_layers * 3 * blocks);
    CK(cudaMemcpyAsync(q.xb[0], x0.data(), H * 4, cudaMemcpyHostToDevice, st));
    void* args[] = {&q};
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(fused3_kernel), dim3(blocks), dim3(kThreads), args, 0, st));
  }

  void launch_ring(int flags, int stages) {
    Params q = p;
    q.flags = flags | kPersistent;
    q.stages = stages;
    q.pf_bytes = 0;
    q.epoch = g_epoch;
    if (flags & kBarrier) g_epoch += unsigned(p.n_layers * kPhases * blocks);
    void* args[] = {&q};
    CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ring_kernel), dim3(blocks), dim3(kRingThreads), args,
                                   ring_smem_bytes(stages), st));
  }

  cudaGraphExec_t build_chain(int pf) {
    Params q = p;
    q.flags = kWork;
    q.pf_bytes = pf;
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < p.n_layers; ++l)
      for (int ph = 0; ph < kPhases; ++ph) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr = {};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(kThreads);
        cfg.stream = st;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, phase_kernel, q, l, ph));
      }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
  }

  template <class Fn>
  double time_us(Fn&& fn) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int r = 0; r < 23; ++r) {
      CK(cudaEventRecord(a, st));
      fn();
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 3) t.push_back(ms * 1e3);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return probe::quantile(t, 0.5);
  }

  std::vector<float> read_x() {
    std::vector<float> h(H);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(h.data(), p.x, H * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) n += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), d += double(b[i]) * b[i];
  return std::sqrt(n / (d + 1e-30));
}

}  // namespace

int main(int argc, char** argv) {
  int dev = 0, sms = 0, per_sm = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  sms = prop.multiProcessorCount;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, 0));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, persistent_kernel));
  std::printf("device %s, %d SMs; persistent kernel: %d threads, %d registers, %zu B shared, %d block(s)/SM\n",
              prop.name, sms, kThreads, fa.numRegs, fa.sharedSizeBytes, per_sm);
  if (per_sm < 1) return std::printf("the persistent kernel does not fit one block per SM\n"), 1;
  CK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem_bytes(kMaxStages))));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_kernel, kRingThreads, ring_smem_bytes(kMaxStages)));
  std::printf("ring kernel: %d threads (16 consumer warps, 1 producer), %zu B shared at %d stages, %d block(s)/SM\n",
              kRingThreads, ring_smem_bytes(kMaxStages), kMaxStages, per_sm);
  if (per_sm < 1) return std::printf("the ring kernel does not fit one block per SM\n"), 1;

  const int n_layers = 16;
  Model m = make_model(n_layers);
  Runner R;
  R.blocks = sms;
  CK(cudaStreamCreateWithFlags(&R.st, cudaStreamNonBlocking));
  R.p.layers = m.dev;
  R.p.n_layers = n_layers;
  CK(cudaMalloc(&R.p.x, H * 4));
  CK(cudaMalloc(&R.p.qkv, QKV * 4));
  CK(cudaMalloc(&R.p.attn, QD * 4));
  CK(cudaMalloc(&R.p.act, I * 4));
  CK(cudaMalloc(&R.p.counter, 4));
  CK(cudaMemset(R.p.counter, 0, 4));
  CK(cudaMalloc(&R.p.xb[0], H * 4));
  CK(cudaMalloc(&R.p.xb[1], H * 4));
  CK(cudaMalloc(&R.p.mid, H * 4));
  CK(cudaMalloc(&R.p.dyn, sizeof(unsigned) * n_layers * kPhases));
  {
    std::vector<const __nv_bfloat16*> dts;
    for (int l = 0; l < n_layers; ++l) {
      __nv_bfloat16* t;
      CK(cudaMalloc(&t, size_t(I) * H * 2));
      transpose_bf16<<<1024, 256>>>(m.host[l].d, t, H, I);
      dts.push_back(t);
    }
    const __nv_bfloat16** d;
    CK(cudaMalloc(&d, sizeof(void*) * n_layers));
    CK(cudaMemcpy(d, dts.data(), sizeof(void*) * n_layers, cudaMemcpyHostToDevice));
    R.p.dT = d;
  }
  R.p.ctx = std::getenv("CTX") ? std::atoi(std::getenv("CTX")) : 512;
  R.p.splits = std::getenv("SPLITS") ? std::atoi(std::getenv("SPLITS")) : 16;
  if (R.p.ctx > 0) {
    if (R.p.splits < 1 || 8 * R.p.splits > R.blocks || (R.p.ctx + R.p.splits - 1) / R.p.splits > 128)
      return std::printf("CTX %d / SPLITS %d: need 8 x splits <= %d blocks and <= 128 keys a split\n", R.p.ctx,
                         R.p.splits, R.blocks), 2;
    const size_t n = size_t(n_layers) * 16 * R.p.ctx * HD;
    __nv_bfloat16* kv;
    CK(cudaMalloc(&kv, n * 2));
    probe::fill_bf16<<<1024, 256>>>(kv, n, 99, 1.5f);
    R.p.kv = kv;
    CK(cudaMalloc(&R.p.part, sizeof(float) * 8 * R.p.splits * 4 * (2 + HD)));
  }
  std::printf("attention phase: %s\n", R.p.ctx > 0 ? "real (see ctx / splits below)" : "stand-in (a copy of q)");
  if (R.p.ctx > 0) std::printf("ctx %d keys, %d splits per kv head (%d keys a split)\n", R.p.ctx, R.p.splits,
                               R.p.ctx / R.p.splits);
  R.x0.resize(H);
  for (int i = 0; i < H; ++i) R.x0[i] = std::sin(0.37f * i) + 0.25f * std::cos(1.3f * i);

  // Correctness: 2 layers on the CPU vs the persistent kernel; 16 layers persistent vs chain.
  {
    Runner r2 = R;
    r2.p.n_layers = 2;
    r2.reset_x();
    r2.launch_persistent(kWork | kBarrier, 0);
    const auto gpu = r2.read_x();
    const auto cpu = cpu_layers(m, 2, R.x0, R.p.kv, R.p.ctx);
    const double e = rel_l2(gpu, cpu);
    std::printf("check: 2 layers, persistent vs CPU reference rel-L2 %.3g (%s, bound 1e-4)\n", e,
                e < 1e-4 ? "ok" : "FAIL");
    if (!(e < 1e-4)) return 1;
  }
  R.chain_exec[0] = R.build_chain(0);
  std::vector<int> pfs;
  for (int i = 1; i < argc; ++i) pfs.push_back(std::atoi(argv[i]));
  if (pfs.empty()) pfs = {2048, 4096};
  R.chain_exec[1] = R.build_chain(pfs[0]);
  {
    R.reset_x();
    R.launch_persistent(kWork | kBarrier, 0);
    const auto a = R.read_x();
    R.reset_x();
    CK(cudaGraphLaunch(R.chain_exec[0], R.st));
    const auto b = R.read_x();
    R.reset_x();
    R.launch_persistent(kWork | kBarrier, pfs[0]);
    const auto c = R.read_x();
    double diff = 0;
    for (int i = 0; i < H; ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])) + std::fabs(a[i] - c[i]));
    std::printf("check: 16 layers, persistent vs chain vs persistent+pf: max |diff| %.3g (%s: bit-identical)\n", diff,
                diff == 0 ? "ok" : "FAIL");
    R.reset_x();
    R.launch_ring(kWork | kBarrier, kMaxStages);
    const auto d = R.read_x();
    const double e = rel_l2(d, a);
    std::printf("check: 16 layers, ring vs persistent rel-L2 %.3g (%s, bound 1e-5: the norm's sum of squares is split "
                "over 256 threads, not 512)\n", e, e < 1e-5 ? "ok" : "FAIL");
    if (!(e < 1e-5)) return 1;
    R.reset_x();
    R.launch_persistent(kWork | kBarrier | kDynamic, 0);
    const auto dy = R.read_x();
    const double ed = rel_l2(dy, a);
    std::printf("check: 16 layers, persistent with dynamic rows vs persistent rel-L2 %.3g (%s: bit-identical, every row "
                "computed alike)\n", ed, ed == 0 ? "ok" : "FAIL");
    if (ed != 0) return 1;
    if (R.p.ctx == 0) {
      R.launch_fused3(kWork | kBarrier);
      CK(cudaStreamSynchronize(R.st));
      std::vector<float> f(H);
      CK(cudaMemcpy(f.data(), R.p.xb[n_layers & 1], H * 4, cudaMemcpyDeviceToHost));
      const double ef = rel_l2(f, a);
      std::printf("check: 16 layers, fused3 vs persistent rel-L2 %.3g (%s, bound 1e-4: split-k partials and fp32 "
                  "atomics reorder the down sums)\n", ef, ef < 1e-4 ? "ok" : "FAIL");
      if (!(ef < 1e-4)) return 1;
    }
    if (diff != 0) return 1;
  }

  const double bytes = double(n_layers) * 2.0 * (double(QKV) * H + double(H) * QD + 2.0 * I * H + double(H) * I) +
                       double(n_layers) * 16.0 * R.p.ctx * HD * 2.0;
  auto report = [&](const char* name, double us) {
    std::printf("%-22s %8.1f us per 16 layers  %6.2f us per layer  %6.2f TB/s of weights\n", name, us, us / n_layers,
                bytes / us * 1e-6);
  };
 std::printf("weights (and K/V): %.1f MB per layer, %.2f GB in all\n", bytes / n_layers * 1e-6, bytes * 1e-9);
  report("stream (no barriers)", R.time_us([&] { R.launch_persistent(kWork, 0); }));
  report("barriers (no work)", R.time_us([&] { R.launch_persistent(kBarrier, 0); }));
  report("chain (PDL, graph)", R.time_us([&] { CK(cudaGraphLaunch(R.chain_exec[0], R.st)); }));
  char name[64];
  std::snprintf(name, sizeof name, "chain+pf %d", pfs[0]);
  report(name, R.time_us([&] { CK(cudaGraphLaunch(R.chain_exec[1], R.st)); }));
  report("persistent", R.time_us([&] { R.launch_persistent(kWork | kBarrier, 0); }));
  for (int pf : pfs) {
    std::snprintf(name, sizeof name, "persistent+pf %d", pf);
    report(name, R.time_us([&] { R.launch_persistent(kWork | kBarrier, pf); }));
  }
  report("persistent, dynamic rows", R.time_us([&] { R.launch_persistent(kWork | kBarrier | kDynamic, 0); }));
  report("stream, dynamic rows", R.time_us([&] { R.launch_persistent(kWork | kDynamic, 0); }));
  if (R.p.ctx == 0) {
    report("fused3 stream (no barriers)", R.time_us([&] { R.launch_fused3(kWork); }));
    report("fused3 (3 syncs a layer)", R.time_us([&] { R.launch_fused3(kWork | kBarrier); }));
  }
  report("ring stream (no barriers)", R.time_us([&] { R.launch_ring(kWork, kMaxStages); }));
  report("ring, no dot products, no barriers", R.time_us([&] { R.launch_ring(kWork | kNoMath, kMaxStages); }));
  report("ring, no dot products, barriers", R.time_us([&] { R.launch_ring(kWork | kNoMath | kBarrier, kMaxStages); }));
  for (int stg = 2; stg <= kMaxStages; ++stg) {
    std::snprintf(name, sizeof name, "ring %d x 32 KB", stg);
    report(name, R.time_us([&] { R.launch_ring(kWork | kBarrier, stg); }));
  }
  std::printf("(times: median of 20 launches after 3 warm-ups, CUDA events; every launch reads all %d layers from HBM)\n",
              n_layers);
  return 0;
}
