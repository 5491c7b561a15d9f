// The two alternative kernels of scripts/probe/persistent_layer.cu: fused3 (three
// syncs a layer) and the ring kernel (a producer warp and a shared-memory ring).
#pragma once
#include "kernels/cuda/tma_common.cuh"
#include "persistent_layer_device.cuh"

namespace pl {

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

}  // namespace pl
