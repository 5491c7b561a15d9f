// rope_kv_write: RoPE fused with the KV-cache write, over the fused q/k/v
// projection's output (one launch instead of two, and no separate q/k/v
// buffers: the fused projection writes [n, q_dim + 2 * kv_dim] rows).
//
// Variant 1 (vec_pdl): rope.3's kernel shape — one 256-thread block per token,
//   one thread per (head, 8 dims of the first half) of q and k plus one per 8
//   dims of v; each thread's 16-byte vectors are loaded before the block
//   computes sin/cos in double, so a token costs one memory round trip. The
//   rotated q goes to q_out, the rotated k back into qkv (fresh-prompt
//   attention reads it there) and, with v, into the token's paged block. Same
//   fp32 formulas as rope.1/3 and a bit copy into the cache, so the cache holds
//   exactly what rope + kv_write would store. A token whose position, slot or
//   table entry is out of range gets no cache write (as kv_write.*). PDL.
//   Shapes rope.3 cannot serve (head_dim % 16 != 0, unaligned rows) run the
//   definition instead: a 2-D copy of q, rope.2 and kv_write.2.
// Variant 2 (vec_early): variant 1 with everything that needs no earlier
//   kernel done BEFORE griddepcontrol.wait -- the token's position and slot
//   (step metadata, uploaded before the step's first kernel), its block-table
//   entry and the sin/cos table (double sincos) -- so after the wait a block
//   only loads its qkv row, rotates and stores. Same arithmetic as variant 1.
#include <cuda_runtime_api.h>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

constexpr int kMaxHalf = 512;
constexpr int kThreads = 256;

struct Item {  // one thread's work: a rotation pair of 8-dim vectors, or 8 dims of v
  bool rotate;
  int head, dim;  // rotate: head (q heads, then k heads) and first dim; v: dim in the v row
};

template <bool kEarly>
__global__ void __launch_bounds__(kThreads)
    rope_kv_write_kernel(bf16* qkv, bf16* q_out, const int32_t* __restrict__ positions,
                         const int32_t* __restrict__ seq_slots, const float* __restrict__ inv_freq,
                         bf16* pool, const int32_t* __restrict__ block_tables, int block_size,
                         int max_blocks_per_seq, int n_q_heads, int n_kv_heads, int head_dim,
                         int qkv_stride) {
  __shared__ float cos_t[kMaxHalf], sin_t[kMaxHalf];
  trigger_dependents();
  const int half = head_dim / 2, vecs = half / 8;
  const int q_dim = n_q_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  const int rot_items = (n_q_heads + n_kv_heads) * vecs, items = rot_items + kv_dim / 8;
  auto item_of = [&](int it) {
    return it < rot_items ? Item{true, it / vecs, (it % vecs) * 8} : Item{false, 0, (it - rot_items) * 8};
  };
  if constexpr (!kEarly) grid_dependency_wait();  // qkv and the step metadata come from earlier kernels
  const int t = blockIdx.x;
  bf16* row = qkv + size_t(t) * qkv_stride;  // q heads and k heads are contiguous: head h at h * head_dim
  const bf16* v_row = row + q_dim + kv_dim;
  auto load = [&](const Item& w, uint4& lo, uint4& hi) {
    if (w.rotate) {
      lo = *reinterpret_cast<const uint4*>(row + w.head * head_dim + w.dim);
      hi = *reinterpret_cast<const uint4*>(row + w.head * head_dim + w.dim + half);
    } else {
      lo = *reinterpret_cast<const uint4*>(v_row + w.dim);
    }
  };
  const int first = threadIdx.x;
  uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
  if (!kEarly && first < items) load(item_of(first), lo, hi);
  const int pos = positions[t], slot = seq_slots[t];
  const long long cache_row = kv_cache_row(pos, slot, block_tables, block_size, max_blocks_per_seq, kv_dim);
  bf16* k_dst = cache_row >= 0 ? pool + cache_row : nullptr;
  bf16* v_dst = k_dst ? k_dst + size_t(block_size) * kv_dim : nullptr;
  const double dpos = pos;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    double sn, cs;
    sincos(dpos * double(inv_freq[j]), &sn, &cs);
    cos_t[j] = float(cs);
    sin_t[j] = float(sn);
  }
  if constexpr (kEarly) {
    grid_dependency_wait();  // qkv comes from the projection before
    if (first < items) load(item_of(first), lo, hi);
  }
  __syncthreads();
  for (int it = first; it < items; it += blockDim.x) {
    const Item w = item_of(it);
    if (it != first) load(w, lo, hi);
    if (!w.rotate) {
      if (v_dst) *reinterpret_cast<uint4*>(v_dst + w.dim) = lo;
      continue;
    }
    float x0[8], x1[8], y0[8], y1[8];
    unpack8(lo, x0);
    unpack8(hi, x1);
#pragma unroll
    for (int e = 0; e < 8; ++e) rope_rotate(x0[e], x1[e], cos_t[w.dim + e], sin_t[w.dim + e], y0[e], y1[e]);
    const uint4 r0 = pack8(y0), r1 = pack8(y1);
    bf16* dst;
    if (w.head < n_q_heads) {
      dst = q_out + size_t(t) * q_dim + w.head * head_dim + w.dim;
    } else {
      dst = row + w.head * head_dim + w.dim;
      if (k_dst) {
        bf16* c = k_dst + (w.head - n_q_heads) * head_dim + w.dim;
        *reinterpret_cast<uint4*>(c) = r0;
        *reinterpret_cast<uint4*>(c + half) = r1;
      }
    }
    *reinterpret_cast<uint4*>(dst) = r0;
    *reinterpret_cast<uint4*>(dst + half) = r1;
  }
}

// The definition, for shapes the fused kernel does not serve.
void rope_kv_write_composed(const RopeKvWriteArgs& a, const LaunchCtx& ctx) {
  const int hd = a.cache.head_dim, q_dim = a.n_q_heads * hd, kv_dim = a.cache.n_kv_heads * hd;
  CUDA_CHECK(cudaMemcpy2DAsync(a.q_out, size_t(q_dim) * sizeof(bf16), a.qkv, size_t(a.qkv_stride) * sizeof(bf16),
                               size_t(q_dim) * sizeof(bf16), a.n, cudaMemcpyDeviceToDevice, ctx.stream));
  bf16* k = static_cast<bf16*>(a.qkv) + q_dim;
  const Registry& reg = Registry::global();
  launch(reg.find(Family::rope, "seed_pdl"),
         RopeArgs{a.q_out, k, a.positions, a.inv_freq, a.n, a.n_q_heads, a.cache.n_kv_heads, hd, q_dim,
                  a.qkv_stride},
         ctx);
  launch(reg.find(Family::kv_write, "seed_pdl"),
         KvWriteArgs{k, k + kv_dim, a.positions, a.seq_slots, a.cache, a.n, a.qkv_stride}, ctx);
}

template <bool kEarly>
void rope_kv_write_vec(const RopeKvWriteArgs& a, const LaunchCtx& ctx) {
  const KvCacheRef& c = a.cache;
  const int hd = c.head_dim, q_dim = a.n_q_heads * hd, kv_dim = c.n_kv_heads * hd;
  LANTERN_CHECK(c.n_kv_heads > 0 && hd > 0 && hd % 2 == 0 && hd / 2 <= kMaxHalf && a.n_q_heads > 0 &&
                    c.block_size > 0 && c.max_blocks_per_seq > 0,
                "rope_kv_write.vec_pdl: bad shape (q heads %d, kv heads %d, head_dim %d, block %d)",
                a.n_q_heads, c.n_kv_heads, hd, c.block_size);
  LANTERN_CHECK(a.qkv_stride >= q_dim + 2 * kv_dim,
                "rope_kv_write.vec_pdl: qkv_stride %d < q_dim + 2 * kv_dim = %d", a.qkv_stride,
                q_dim + 2 * kv_dim);
  if (a.n == 0) return;
  const bool fits = hd % 16 == 0 && a.qkv_stride % 8 == 0 && aligned(a.qkv, 16) && aligned(a.q_out, 16) &&
                    aligned(c.pool, 16);
  if (!fits) return rope_kv_write_composed(a, ctx);
  launch_kernel(true, rope_kv_write_kernel<kEarly>, dim3(a.n), dim3(kThreads), 0, ctx.stream,
                static_cast<bf16*>(a.qkv), static_cast<bf16*>(a.q_out), a.positions, a.seq_slots,
                a.inv_freq, static_cast<bf16*>(c.pool), c.block_tables, c.block_size,
                c.max_blocks_per_seq, a.n_q_heads, c.n_kv_heads, hd, a.qkv_stride);
  CUDA_CHECK_LAST("rope_kv_write_kernel");
}

}  // namespace

void register_rope_kv_write_cuda(Registry& r) {
  r.add(make_entry<RopeKvWriteArgs, rope_kv_write_vec<false>, rope_kv_write_cost<2>>(
      1, "vec_pdl", Backend::cuda,
      "rope.3's one-round-trip block per token over the fused qkv row: q rotated into q_out, k "
      "rotated in place and with v stored in the paged block; PDL; composed rope.2 + kv_write.2 "
      "for shapes rope.3 cannot serve",
      kPreferred));
  r.add(make_entry<RopeKvWriteArgs, rope_kv_write_vec<true>, rope_kv_write_cost<2>>(
      2, "vec_early", Backend::cuda,
      "vec_pdl with the position, slot, block-table entry and sin/cos table made before the PDL "
      "dependency wait (they depend on no earlier kernel): after it, one qkv-row round trip",
      kTestedOnly));
}

}  // namespace lantern::kernels
