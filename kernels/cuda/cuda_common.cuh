#pragma once
// Device helpers shared by the CUDA kernel families: bf16 vectors of 8 (one
// 16-byte access), warp reductions, alignment tests for the launchers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <unordered_set>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/base/cuda_check.h"
#include "kernels/registry.h"

namespace lantern::kernels::cuda_detail {

using bf16 = __nv_bfloat16;

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// True when p is aligned to `bytes` (a launcher picks the 16-byte path only then).
inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over a block (blockDim.x a multiple of 32, at most 1024). `scratch` holds
// 32 floats in shared memory; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// The paged KV cache's row of a token: the element offset of its K row in
// units of one row's `row_units` (its V row follows block_size rows later), or
// -1 when its position, slot or block-table entry is out of range (no cache
// write: kv_write.*, rope_kv_write.*, qkv_rope.2's epilogue).
__device__ __forceinline__ long long kv_cache_row(int pos, int slot, const int32_t* block_tables, int block_size,
                                                  int max_blocks_per_seq, int row_units) {
  if (pos < 0 || slot < 0 || pos / block_size >= max_blocks_per_seq) return -1;
  const int block = block_tables[size_t(slot) * max_blocks_per_seq + pos / block_size];
  if (block < 0) return -1;
  return (static_cast<long long>(block) * 2 * block_size + pos % block_size) * row_units;
}

// SwiGLU's fp32 formula, silu(g) * u = g / (1 + e^-g) * u (the CPU reference's;
// finite at both ends). Shared by swiglu.* and gate_up_swiglu's fused epilogue,
// so the two round the same values the same way.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// The operands of a RoPE + KV-write epilogue (rope_kv_write's, RopeKvWriteArgs,
// with the GEMM's output as the qkv rows): the GEMV's (SkRope) and the wgmma
// kernel's (qkv_rope.2 / .5).
struct RopeOperands {
  bf16* q_out;  // [m, n_q_heads * head_dim]
  const int32_t* positions;
  const int32_t* seq_slots;
  const float* inv_freq;  // [head_dim / 2]
  bf16* pool;
  const int32_t* block_tables;
  int block_size, max_blocks_per_seq, n_q_heads, n_kv_heads, head_dim;
};

// A qkv_rope call's epilogue operands.
inline RopeOperands rope_operands(const QkvRopeArgs& a) {
  const KvCacheRef& kv = a.cache;
  return RopeOperands{static_cast<bf16*>(a.q_out), a.positions, a.seq_slots, a.inv_freq, static_cast<bf16*>(kv.pool),
                      kv.block_tables, kv.block_size, kv.max_blocks_per_seq, a.n_q_heads, kv.n_kv_heads, kv.head_dim};
}

// RoPE's rotation of one pair (x0, x1) by (c, s): y0 = x0 c - x1 s, y1 = x1 c
// + x0 s, the contraction spelled out (the second product rounded, the first
// fused) so every kernel that rotates -- rope.*, rope_kv_write.*, the GEMV's
// and the wgmma kernel's RoPE epilogues -- rounds alike, whatever the
// compiler would contract in its context (their bit-identity is tested; left
// to the compiler, qkv_rope.5's epilogue differed from rope_kv_write.1 in 1-3
// of 10^5 elements, session 37).
__device__ __forceinline__ void rope_rotate(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  y1 = __fmaf_rn(x1, c, __fmul_rn(x0, s));
}

// Eight bf16 in one 16-byte word.
__device__ __forceinline__ void unpack8(const uint4& w, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 w;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return w;
}

// Streaming 16-byte load that does not allocate in L1 (weights read once).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// D = A(16x16, row) * B(16x8, col) + D: bf16 operands, fp32 accumulators.
// Fragment layout (g = lane / 4, t = lane % 4): a0 (row g, k 2t..2t+1),
// a1 (row g+8, same k), a2 (row g, k 2t+8..2t+9), a3 (row g+8, k 2t+8..);
// b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g); d0,d1 (row g, cols 2t, 2t+1),
// d2,d3 (row g+8, cols 2t, 2t+1). Low 16 bits hold the lower k.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1,
                                               uint32_t a2, uint32_t a3, uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

inline int ceil_div(long a, long b) { return static_cast<int>((a + b - 1) / b); }


// The tail of a one-warp-per-row RMSNorm whose row sits in registers: lane
// `lane` holds vectors c * kWarp + lane (c < kVecs) as fp32 values `v` with
// their weight vectors `wv` and its part `ss` of the sum of squares. Reduces
// ss over the warp and stores bf16(v / rms * w) to `out_row`. Shared by
// rmsnorm.3 (warp_vec_pdl) and add_rmsnorm.1, so both round identically.
template <int kVecs>
__device__ __forceinline__ void warp_rmsnorm_store(float (&v)[kVecs][8], const uint4 (&wv)[kVecs], float ss,
                                                   int hidden, float eps, bf16* out_row, int lane) {
  ss = warp_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / hidden + eps);
  const int vecs = hidden / 8;
  uint4* o = reinterpret_cast<uint4*>(out_row);
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int idx = c * kWarp + lane;
    if (idx < vecs) {
      float wf[8];
      unpack8(wv[c], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] = v[c][e] * inv_rms * wf[e];
      o[idx] = pack8(v[c]);
    }
  }
}

}  // namespace lantern::kernels::cuda_detail

namespace lantern::kernels::cuda_detail {

// Async 16-byte global -> shared copy; `valid == false` zero-fills the 16 bytes
// (no global read), so padding rows never hold stale data (0 * NaN = NaN).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// cp_async16 with a shared-memory address (cvta'd once by the caller) and a
// source size (16, or 0: zero-fill without reading).
__device__ __forceinline__ void cp_async16_s(unsigned smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// 16-byte shared-memory load from a shared-space address.
__device__ __forceinline__ uint4 lds128(unsigned smem) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(smem));
  return r;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}

// Programmatic dependent launch (sm_90). A kernel launched with the
// programmaticStreamSerialization attribute may start before the previous
// kernel in the stream has finished; grid_dependency_wait() blocks until that
// kernel has completed and its writes are visible, so only reads of constant
// data (weights) may come before it. trigger_dependents() lets the next
// PDL-launched kernel start launching its blocks now; it waits for this
// kernel's completion all the same, so an early trigger never changes results.
// Both are no-ops when the launch had no such attribute / no dependent.
__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void trigger_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// LANTERN_PDL=0 (read once): launch every kernel without programmatic
// dependent launch (griddepcontrol.wait / launch_dependents are then no-ops):
// a diagnosis knob for races between overlapping kernels, not a setting.
inline bool pdl_allowed() {
  static const bool on = [] {
    const char* env = std::getenv("LANTERN_PDL");
    return !(env && env[0] == '0');
  }();
  return on;
}

// LANTERN_SMEM_CARVEOUT=P (0-100; read once): every kernel launched through
// launch_kernel or the GEMV launcher (every decode kernel of ours but argmax
// and the sampler; cuBLASLt's are not ours to set) prefers P % of
// the unified L1 / shared memory as shared memory
// (cudaFuncAttributePreferredSharedMemoryCarveout, set once per kernel).
// Unset: the driver picks a carveout per kernel, and an SM that switches
// carveouts between consecutive kernels cannot hold blocks of both at once,
// which may cost the PDL overlap (session 8's unverified hypothesis for the
// pipe kernel slowing the GEMVs around it). An experiment knob, not a setting.
inline int smem_carveout() {
  static const int v = [] {
    const char* env = std::getenv("LANTERN_SMEM_CARVEOUT");
    if (!env || !*env) return -1;
    char* end = nullptr;
    const long p = std::strtol(env, &end, 10);
    return *end == 0 && p >= 0 && p <= 100 ? static_cast<int>(p) : -1;
  }();
  return v;
}
inline void apply_smem_carveout(const void* kernel) {
  const int carveout = smem_carveout();
  if (carveout < 0) return;
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.insert(kernel).second)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
}

// Raises `kernel`'s dynamic shared-memory limit to `smem` the first time a
// launch needs it (*allowed: the caller's record of what is set, one per
// kernel instance). Without it a launch fails once the kernel's static plus
// dynamic shared memory passes 48 KB, whatever the dynamic part alone is.
template <class Kernel>
void allow_smem(Kernel kernel, size_t smem, size_t* allowed) {
  if (smem <= *allowed) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  *allowed = smem;
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic dependent
// launch when `pdl` is set (the kernel must call grid_dependency_wait() before
// it reads anything an earlier kernel writes, or writes anything one reads)
// and, when `cluster` > 1, in 1-D thread-block clusters of that many blocks.
template <class... KArgs, class... Args>
void launch_kernel_cluster(bool pdl, unsigned cluster, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                           size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[3];
  unsigned n_attrs = 0;
  if (smem_carveout() < 0 && launch_carveout() >= 0) {  // the engine's per-step choice (registry.h)
    attrs[n_attrs].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attrs[n_attrs].val.sharedMemCarveout = static_cast<unsigned>(launch_carveout());
    ++n_attrs;
  }
  if (pdl && pdl_allowed()) {
    attrs[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n_attrs].val.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  if (cluster > 1) {
    attrs[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[n_attrs].val.clusterDim.x = cluster;
    attrs[n_attrs].val.clusterDim.y = attrs[n_attrs].val.clusterDim.z = 1;
    ++n_attrs;
  }
  cfg.attrs = n_attrs ? attrs : nullptr;
  cfg.numAttrs = n_attrs;
  apply_smem_carveout(reinterpret_cast<const void*>(kernel));
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}
template <class... KArgs, class... Args>
void launch_kernel(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  launch_kernel_cluster(pdl, 1, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// Multiprocessors of the current device (read once).
inline int sm_count() {
  static const int count = [] {
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  return count;
}

}  // namespace lantern::kernels::cuda_detail
