// gemm variants 4 (gemv_split) and 5 (gemv_pdl): the decode GEMV, c[m, n] =
// a[m, k] @ w[n, k]^T for m <= 16, bandwidth-bound on w.
//
// Variant 2 (gemv_mma) reached 92 % of copy bandwidth on the LM head but only
// 50-54 % on the per-layer matrices and 9 % on k/v_proj: with 16 rows per block,
// n = 512 is 32 blocks on 132 SMs, and n = 2048 is 128 blocks whose loads ramp up
// and drain once. Changes here:
//  - split-k across a thread-block cluster: the `splits` blocks of a cluster share
//    one 16-row tile and take k / splits each; their partial tiles are summed
//    through distributed shared memory by the cluster's rank 0 (no workspace, no
//    atomics, deterministic). splits doubles while the grid is smaller than the
//    SM count, up to 2 by default (q/o/down 128 tiles x 2, k/v 32 x 2): clusters
//    of 8 measured slower in a graph-replayed decode chain (the cluster barrier
//    and co-scheduling cost more than the extra blocks bring);
//  - when a warp has at most 8 chunks of 32 k (4 above m = 8) every load it will
//    make goes out at once as one group; otherwise two register groups are
//    double-buffered (partial groups predicated, not a serial tail);
//  - m up to 16: two mma n-tiles (batch rows 0-7 and 8-15);
//  - variant 5 only: programmatic dependent launch. The weight loads (constant
//    data) are issued BEFORE griddepcontrol.wait, so they overlap the previous
//    kernel's tail and this kernel's launch; the activation loads come after it.
//    The kernel then triggers its own dependents, so a following GEMV (k after q,
//    v after k, up after gate) starts streaming its weights while this one
//    finishes. Kernels that precede GEMVs (rmsnorm.2, swiglu.1, attention_decode
//    2/3) trigger early too; a PDL-launched kernel still waits for the full
//    completion of its predecessor before reading activations.
// Both fall back to cuBLAS (variant 1) for m > 16, k % 32 != 0 or unaligned
// pointers, so one variant serves every batch. Variant 6 (gemm.cu) runs variant
// 5 where it fits and planned cuBLASLt (gemm_lt.cpp) elsewhere.
//
// gate_up_swiglu.2 (gemv_fused) runs the same kernel with a SwiGLU epilogue
// (SkOut::swiglu): a 16-row tile is 8 gate rows j..j+7 (the mma's rows 0-7)
// and the matching 8 up rows inter + j.. (rows 8-15), so a fragment lane's
// accumulators c0/c1 hold gate and c2/c3 the up value of the same (row, batch)
// -- in the cross-warp reduction they are items r and r + 2, two lanes apart
// in one warp: a shuffle pairs them and the epilogue writes silu(g) * u for
// rows j..j+7 directly. g and u are rounded to bf16 first (what swiglu reads in
// the unfused path), and each row's fp32 sum is the unfused GEMV's (same k
// split, same order), so the output is bit-identical when the split count is.
//
// proj_residual_norm.2 (gemv_fused) runs it with a residual + RMSNorm tail
// (SkOut::residual_norm): the blocks that store output rows (every block, or
// a cluster's rank 0) store y as the plain GEMV does, fence, and count
// themselves on a device counter; the last of them adds y into the residual
// stream x and normalises it (add_rmsnorm.1's arithmetic and element order:
// one warp per row, the lane's 16-byte vectors idx = c * 32 + lane, so the
// result is bit-identical to gemm.5 + add_rmsnorm.1) and resets the counter.
// That saves the separate add_rmsnorm launch and its kernel boundary. The
// counter is one per device: launches of the fused kernel are ordered (each
// counts only after griddepcontrol.wait, i.e. after its predecessor grid --
// and so every earlier kernel of the PDL chain -- completed).
#include <algorithm>
#include <cstdlib>

#include "kernels/base/env_knob.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/cuda/gemm_skinny_kernel.cuh"
#include "kernels/cuda/stream_slot.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;
using namespace skinny_detail;

// One skinny-GEMV launch: c = a @ w^T, or the swiglu epilogue (w: 2n rows).
struct SkinnyCall {
  const bf16* a;
  const bf16* w;
  void* c;
  int m, n, k;  // n: output columns
  SkOut out;
  SkTail tail = {};  // residual_norm, residual_add (x) only
  SkNorm norm = {};  // norm.weight set: the prologue norm (a is x)
  SkRope rope = {};  // rope only
};

template <int NT, int U, bool kSingle, SkOut kOut>
void launch_skinny_out(const SkinnyCall& s, const LaunchCtx& ctx, int tiles, int splits, bool pdl) {
  // kNorm: x's m rows in dynamic shared memory; rope_attn: then the tail's (16-byte aligned).
  size_t dyn = s.norm.weight ? size_t(s.m) * s.k * sizeof(bf16) : 0;
  if (kOut == SkOut::rope_attn) dyn = (dyn + 15) / 16 * 16 + sizeof(AttnSmem);
  auto go = [&](auto kernel) {
    static size_t allowed = 0;  // per kernel instance (this generic lambda's instantiation)
    allow_smem(kernel, dyn, &allowed);  // static + dynamic may pass 48 KB below a 48 KB dynamic part
    launch_kernel_cluster(pdl, unsigned(splits), kernel, dim3(unsigned(tiles) * unsigned(splits)),
                          dim3(kSkWarps * kWarp), dyn, ctx.stream, s.a, s.w, s.c, s.m, s.n, s.k, splits, s.tail,
                          s.norm, s.rope);
  };
  if (s.norm.weight)
    go(gemv_skinny_kernel<NT, U, kSingle, kOut, true>);
  else
    go(gemv_skinny_kernel<NT, U, kSingle, kOut, false>);
}

template <int NT, int U, bool kSingle>
void launch_skinny(const SkinnyCall& s, const LaunchCtx& ctx, int tiles, int splits, bool pdl) {
  switch (s.out) {
    case SkOut::bf16: launch_skinny_out<NT, U, kSingle, SkOut::bf16>(s, ctx, tiles, splits, pdl); break;
    case SkOut::f32: launch_skinny_out<NT, U, kSingle, SkOut::f32>(s, ctx, tiles, splits, pdl); break;
    case SkOut::swiglu: launch_skinny_out<NT, U, kSingle, SkOut::swiglu>(s, ctx, tiles, splits, pdl); break;
    case SkOut::residual_norm:
      launch_skinny_out<NT, U, kSingle, SkOut::residual_norm>(s, ctx, tiles, splits, pdl);
      break;
    case SkOut::residual_add:
      launch_skinny_out<NT, U, kSingle, SkOut::residual_add>(s, ctx, tiles, splits, pdl);
      break;
    case SkOut::rope: launch_skinny_out<NT, U, kSingle, SkOut::rope>(s, ctx, tiles, splits, pdl); break;
    case SkOut::rope_attn: launch_skinny_out<NT, U, kSingle, SkOut::rope_attn>(s, ctx, tiles, splits, pdl); break;
  }
  CUDA_CHECK_LAST("gemv_skinny_kernel");
}

// Split count: double while the grid is smaller than the SM count and each
// block keeps at least 256 k (one 32-wide chunk per warp).
// LANTERN_GEMV_MAX_SPLITS (1, 2, 4 or 8; read once) caps the cluster size: an
// experiment knob for docs/performance.md's measurements, not a setting.
int max_splits() {
  static const int cap = [] {
    const int v = env_int("LANTERN_GEMV_MAX_SPLITS", kSkDefaultSplits);
    return (v == 1 || v == 2 || v == 4 || v == 8) && v <= kSkMaxSplits ? v : kSkDefaultSplits;
  }();
  return cap;
}

// LANTERN_GEMV_SINGLE=0 (read once) turns off the one-group path (experiment knob).
bool single_group_allowed() {
  static const bool on = [] {
    const char* env = std::getenv("LANTERN_GEMV_SINGLE");
    return !(env && env[0] == '0');
  }();
  return on;
}

int gemm_skinny_splits(int n, int k, int sms) {
  const int tiles = ceil_div(n, kSkRows);
  int splits = 1;
  while (splits < max_splits() && long(tiles) * splits < sms &&
         k % (2 * splits * 32 * kSkWarps) == 0)
    splits *= 2;
  return splits;
}

// Launches s (m <= 16, k % 32 == 0, 16-byte aligned a and w) over `rows`
// weight rows: the split count and the register-group shape by k and m.
void skinny_dispatch(const SkinnyCall& s, int rows, const LaunchCtx& ctx, bool pdl) {
  const int tiles = ceil_div(rows, kSkRows);
  const int splits = gemm_skinny_splits(rows, s.k, sm_count());
  // Chunks of 32 k per warp: up to 8 (m <= 8) or 4 (m <= 16) go out as one group.
  const int per_warp = ceil_div(ceil_div(s.k / splits, 32), kSkWarps);
  const bool single = single_group_allowed();
  if (s.m <= 8) {
    if (single && per_warp <= 8)
      launch_skinny<1, 8, true>(s, ctx, tiles, splits, pdl);
    else
      launch_skinny<1, 3, false>(s, ctx, tiles, splits, pdl);
  } else {
    if (single && per_warp <= 4)
      launch_skinny<2, 4, true>(s, ctx, tiles, splits, pdl);
    else
      launch_skinny<2, 2, false>(s, ctx, tiles, splits, pdl);
  }
}

bool skinny_fits(const void* a, const void* w, int m, int k) {
  return m <= kSkMaxM && k % 32 == 0 && aligned(a, 16) && aligned(w, 16);
}

// The prologue norm as the kernel takes it (nullptr weight: none); false when
// the norm is set but its weight is not 16-byte aligned or a block's k range
// (k / splits over `rows` weight rows) exceeds the shared copy of the weight.
bool skinny_norm(const PrologueNorm& p, int rows, int m, int k, SkNorm& out) {
  out = SkNorm{static_cast<const bf16*>(p.weight), p.eps};
  return p.weight == nullptr || (aligned(p.weight, 16) && size_t(m) * k * sizeof(bf16) <= kSkNormMaxRowBytes &&
                                 k / gemm_skinny_splits(rows, k, sm_count()) <= kSkNormMaxK);
}

}  // namespace

bool gemm_skinny_fits(const GemmArgs& a) {
  SkNorm n;
  return skinny_fits(a.a, a.w, a.m, a.k) && skinny_norm(a.norm, a.n, a.m, a.k, n);
}

void gemm_skinny_launch(const GemmArgs& a, const LaunchCtx& ctx, bool pdl) {
  const char* who = pdl ? "gemm.gemv_pdl" : "gemm.gemv_split";
  LANTERN_CHECK(a.m >= 0 && a.n > 0 && a.k > 0, "%s: bad shape m=%d n=%d k=%d", who, a.m, a.n, a.k);
  if (a.m == 0) return;
  if (!gemm_skinny_fits(a)) return gemm_cublas_launch(with_norm_applied(a, ctx), ctx);
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.c, a.m, a.n, a.k,
               a.c_f32 ? SkOut::f32 : SkOut::bf16};
  skinny_norm(a.norm, a.n, a.m, a.k, s.norm);
  skinny_dispatch(s, a.n, ctx, pdl);
}

bool gate_up_swiglu_skinny_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.out, a.m, a.inter, a.k,
               SkOut::swiglu};
  if (!skinny_fits(a.a, a.w, a.m, a.k) || !skinny_norm(a.norm, 2 * a.inter, a.m, a.k, s.norm)) return false;
  skinny_dispatch(s, 2 * a.inter, ctx, /*pdl=*/true);
  return true;
}

bool proj_residual_norm_skinny_launch(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  const int vecs = a.hidden / 8;
  const bool tail_fits = a.hidden % 8 == 0 && vecs <= kTailVecs * kWarp && aligned(a.x, 16) &&
                         aligned(a.y, 16) && aligned(a.norm_weight, 16) && aligned(a.out, 16);
  if (a.out == nullptr || !tail_fits || !skinny_fits(a.a, a.w, a.m, a.k)) return false;
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.y, a.m, a.hidden, a.k,
               SkOut::residual_norm};
  s.tail = SkTail{static_cast<bf16*>(a.x), static_cast<const bf16*>(a.norm_weight), static_cast<bf16*>(a.out),
                  a.eps};
  skinny_dispatch(s, a.hidden, ctx, /*pdl=*/true);
  return true;
}

namespace {

// The rope epilogue's call for a (false: the shape or pointers do not fit).
bool qkv_rope_call(const QkvRopeArgs& a, SkOut out, SkinnyCall& s) {
  const KvCacheRef& kv = a.cache;
  const int hd = kv.head_dim, rows = a.cols();
  const bool shape_fits = hd > 0 && hd % 16 == 0 && a.n_q_heads > 0 && kv.n_kv_heads > 0 && kv.block_size > 0 &&
                          kv.max_blocks_per_seq > 0 && (kv.n_kv_heads * hd) % kSkRows == 0;
  s = SkinnyCall{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), a.qkv, a.m, rows, a.k, out};
  if (!shape_fits || !skinny_fits(a.a, a.w, a.m, a.k) || !skinny_norm(a.norm, rows, a.m, a.k, s.norm)) return false;
  s.rope = SkRope{rope_operands(a)};
  return true;
}

// rope_attn's flags: LANTERN_QKV_ATTN_PREFETCH=0 drops the L2 prefetch of the
// context's K/V, LANTERN_QKV_ATTN_EARLY_TRIGGER=1 lets the next kernel launch
// right after the dependency wait (as the other epilogues do) -- experiment
// knobs for docs/performance.md's A/Bs, read once.
int attn_flags() {
  static const int flags = (env_int("LANTERN_QKV_ATTN_PREFETCH", 1) ? kAttnPrefetch : 0) |
                           (env_int("LANTERN_QKV_ATTN_EARLY_TRIGGER", 0) ? kAttnEarlyTrigger : 0);
  return flags;
}
// The most rows the tail takes (it runs them one after another in one block
// per kv head): LANTERN_QKV_ATTN_MAX_ROWS=1..8 (default 8), read once; more
// rows run the composed form.
int attn_max_rows() {
  static const int rows = std::clamp(env_int("LANTERN_QKV_ATTN_MAX_ROWS", kAttnMaxRows), 1, kAttnMaxRows);
  return rows;
}

}  // namespace

bool qkv_rope_skinny_launch(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  SkinnyCall s;
  if (!qkv_rope_call(a, SkOut::rope, s)) return false;
  skinny_dispatch(s, a.cols(), ctx, /*pdl=*/true);
  return true;
}

bool qkv_rope_attention_skinny_launch(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  const QkvAttention& at = a.attention;
  const KvCacheRef& kv = a.cache;
  const bool attn_fits = at.out != nullptr && at.context_lens != nullptr && kv.head_dim == kAttnHd &&
                         kv.n_kv_heads > 0 && kv.n_kv_heads <= kAttnMaxKvHeads && a.n_q_heads % kv.n_kv_heads == 0 &&
                         a.n_q_heads / kv.n_kv_heads <= kAttnMaxPerKv && a.m <= attn_max_rows() &&
                         aligned(kv.pool, 16);
  SkinnyCall s;
  if (!attn_fits || !qkv_rope_call(a, SkOut::rope_attn, s)) return false;
  s.rope.attn_out = static_cast<bf16*>(at.out);
  s.rope.context_lens = at.context_lens;
  s.rope.attn_scale = at.scale;
  s.rope.attn_flags = attn_flags();
  s.rope.attn_arrivals = stream_slot<kSkStreamSlots, kAttnMaxKvHeads>(ctx.stream, g_attn_arrivals);
  skinny_dispatch(s, a.cols(), ctx, /*pdl=*/true);
  return true;
}


bool proj_residual_add_skinny_launch(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  if (a.out != nullptr || !skinny_fits(a.a, a.w, a.m, a.k)) return false;
  SkinnyCall s{static_cast<const bf16*>(a.a), static_cast<const bf16*>(a.w), nullptr, a.m, a.hidden, a.k,
               SkOut::residual_add};
  s.tail.x = static_cast<bf16*>(a.x);
  skinny_dispatch(s, a.hidden, ctx, /*pdl=*/true);
  return true;
}

}  // namespace lantern::kernels
