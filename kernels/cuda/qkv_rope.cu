// qkv_rope: the fused table's q/k/v projection, RoPE and the KV write as one
// op (decode steps; engine/op_table.h). The definition is gemm into qkv, then
// rope_kv_write over it (registry.h, QkvRopeArgs).
//
// Variant 1 (unfused): the definition on the GPU -- the engine's gemm
//   variant into qkv, then its rope_kv_write variant (QkvRopeArgs::
//   gemm_variant / rope_variant; the CUDA defaults, gemm.6 and
//   rope_kv_write.1, when unset). These are the kernels the separate
//   qkv_proj and rope_kv_write ops launched before the decode table had this
//   op, so `--kernels qkv_rope=1` is the old decode path and `--kernels gemm=`
//   / `rope_kv_write=` still reach decode steps through it. A prologue norm
//   (the deferred-norm table) goes to the gemm variant as qkv_proj's did
//   (kernels::launch runs it ahead of a variant without norm_prologue); the
//   gemm variant's prepare hook plans its shapes.
// Variant 2 (gemv_rope): for m <= 16 one launch of the skinny GEMV with the
//   rope epilogue (gemm_skinny.cu, SkOut::rope): a 16-row tile is 8 dims of a
//   q or k head and the 8 dims half a head later that RoPE pairs with them,
//   so one fragment lane holds both halves of a rotation pair after the
//   cross-warp sum; the epilogue rounds them to bf16 (what rope_kv_write reads
//   from qkv), rotates them with rope_kv_write's formulas and sin/cos (made in
//   double after the dependency wait, while the weights stream) and stores q
//   into q_out, k into qkv and the cache row; v tiles store into qkv and the
//   cache row. Each row's fp32 sum is gemm.5's (same split, same order), so
//   q_out, qkv's k and v columns and the cache are bit-identical to variant 1
//   when the split count is; qkv's q columns are not written (registry.h).
//   One launch and one kernel boundary fewer per layer: rope_kv_write's
//   ~1.9 us on a batch-1 step's critical path (docs/performance.md). Larger
//   m, head_dim % 16 != 0 and unaligned pointers: variant 1. It folds a
//   prologue norm into the GEMV as gemm.5 does (bit-identical to variant 1
//   there too: the same kernel prologue).
// Variant 3 (gemv_rope_small, the default since session 31): variant 2 up to
//   8 rows, variant 1 above -- where the H200 measured variant 2 faster.
// Variant 4 (gemv_rope_attn, tested only until the H200 has measured it):
//   variant 2's launch with the decode attention folded in
//   (QkvRopeArgs::attention; the engine's qkv_attention op): the last stored
//   block of each kv head's group of tiles runs that head's attention
//   (gemm_skinny.cu SkOut::rope_attn, qkv_attn_tail.cuh), so decode steps
//   launch no attention kernel. Its entry carries the folds_attention trait:
//   the engine then builds the folded op table for decode steps whose
//   contexts are short (op_table.h). Without attention, or where the tail
//   does not fit: variant 3.
// Variant 5 (wg_rope, tested only until the H200 has measured it; written in
//   session 37): variant 3 up to 16 rows; for 17 <= m <= 128 gemm.8's wgmma
//   kernel with a RoPE + KV-write epilogue (sm90a/wg_rope.cuh): a block's 128
//   weight rows are whole heads, its cluster rank sums both halves of its
//   rotation pairs over the split-k ranks, rounds, rotates and stores as
//   rope_kv_write.1 -- bit-identical to gemm.8 + rope_kv_write.1, one launch
//   and one kernel boundary fewer per layer where decode steps ran cuBLASLt +
//   rope_kv_write. Above 128 rows, or where the kernel does not fit: variant 1.
// Every variant runs the folded attention when QkvRopeArgs::attention is set:
//   1-3 launch the attention_decode variant after their path (the composed
//   definition; attention.variant, else the CUDA default).
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_cuda.h"

namespace lantern::kernels {
namespace {

void check_shape(const QkvRopeArgs& a, const char* who) {
  LANTERN_CHECK(a.m >= 0 && a.k > 0 && a.n_q_heads > 0 && a.cache.n_kv_heads > 0 && a.cache.head_dim > 0,
                "%s: bad shape m=%d k=%d q heads %d kv heads %d head_dim %d", who, a.m, a.k, a.n_q_heads,
                a.cache.n_kv_heads, a.cache.head_dim);
}

const KernelEntry& gemm_of(const QkvRopeArgs& a) {
  return a.gemm_variant ? *a.gemm_variant : Registry::global().best(Family::gemm, Backend::cuda);
}

// The folded attention of the composed paths (after q_out and the cache are written).
void folded_attention(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  if (!a.attention.out) return;
  launch(a.attention.variant ? *a.attention.variant : Registry::global().best(Family::attention_decode, Backend::cuda),
         a.attention_args(), ctx);
}

void rope_unfused(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  launch(gemm_of(a), a.gemm(), ctx);  // a prologue norm: the gemm variant's, or run ahead of it
  launch(a.rope_variant ? *a.rope_variant : Registry::global().best(Family::rope_kv_write, Backend::cuda), a.rope(),
         ctx);
}

void qkv_rope_unfused(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "qkv_rope.unfused");
  if (a.m == 0) return;
  rope_unfused(a, ctx);
  folded_attention(a, ctx);
}

void qkv_rope_gemv(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "qkv_rope.gemv_rope");
  if (a.m == 0) return;
  if (!qkv_rope_skinny_launch(a, ctx)) rope_unfused(a, ctx);
  folded_attention(a, ctx);
}

// Variant 3's crossover: variant 2 up to this many rows (H200, session 31, three interleaved
// rounds in each of two calls: batch 1 -8...-16 us, batch 4 -6...-8 us, batch 8 -4 us per decode
// step against variant 1; variant 2 at batch 16 +14...+17 us).
constexpr int kRopeEpilogueMaxRows = 8;

void rope_small(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  if (a.m > kRopeEpilogueMaxRows || !qkv_rope_skinny_launch(a, ctx)) rope_unfused(a, ctx);
}

void qkv_rope_gemv_small(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "qkv_rope.gemv_rope_small");
  if (a.m == 0) return;
  rope_small(a, ctx);
  folded_attention(a, ctx);
}

void qkv_rope_gemv_attn(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "qkv_rope.gemv_rope_attn");
  if (a.m == 0) return;
  if (a.attention.out && qkv_rope_attention_skinny_launch(a, ctx)) return;
  rope_small(a, ctx);
  folded_attention(a, ctx);
}

void qkv_rope_wg(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "qkv_rope.wg_rope");
  if (a.m == 0) return;
  if (a.m <= 16)
    rope_small(a, ctx);
  else if (!qkv_rope_wg_launch(a, ctx))
    rope_unfused(a, ctx);
  folded_attention(a, ctx);
}

// The unfused path's GEMM: its variant's prepare hook (gemm.6 plans cuBLASLt
// for m > 16), outside any capture.
void qkv_rope_prepare(const QkvRopeArgs& a, const LaunchCtx& ctx) {
  const KernelEntry& g = gemm_of(a);
  const GemmArgs args = a.gemm();
  if (const PrepareHook hook = Registry::global().prepare(g)) hook(&args, ctx);
}

}  // namespace

void register_qkv_rope_cuda(Registry& r) {
  r.add(with_traits(make_entry<QkvRopeArgs, qkv_rope_unfused, qkv_rope_cost<2>>(
      1, "unfused", Backend::cuda,
      "the definition on the GPU: the engine's gemm variant into qkv, then its rope_kv_write variant "
      "(default gemm.6, rope_kv_write.1): the kernels of the separate qkv_proj and rope_kv_write ops",
      kPreferred, gemm_lt_workspace_bytes), /*norm_prologue=*/true));  // the gemm variant takes the norm
  r.add(with_traits(make_entry<QkvRopeArgs, qkv_rope_gemv, qkv_rope_cost<2>>(
      2, "gemv_rope", Backend::cuda,
      "m <= 16: gemm.5's GEMV with a RoPE + KV-write epilogue (8 dims + the 8 they rotate with per "
      "16-row tile), no rope_kv_write launch; else variant 1",
      kTestedOnly, gemm_lt_workspace_bytes), /*norm_prologue=*/true));  // H200 tests pass (session 31)
  r.add(with_traits(make_entry<QkvRopeArgs, qkv_rope_gemv_small, qkv_rope_cost<2>>(
      3, "gemv_rope_small", Backend::cuda,
      "the default since session 31: variant 2 up to 8 rows, variant 1 above (H200: batch 1 -8...-16 "
      "us, batch 4 -6...-8 us per decode step; variant 2 lost 14-17 us at batch 16)",
      kPreferred, gemm_lt_workspace_bytes), /*norm_prologue=*/true));
  r.add(with_traits(make_entry<QkvRopeArgs, qkv_rope_gemv_attn, qkv_rope_cost<2>>(
      4, "gemv_rope_attn", Backend::cuda,
      "variant 2 with the decode attention folded in: each kv head's last stored block of tiles runs "
      "that head's attention (the engine's qkv_attention op in short-context decode steps: no attention "
      "launch); else variant 3",
      kTestedOnly, gemm_lt_workspace_bytes), /*norm_prologue=*/true, /*defers_norm=*/false,
      /*folds_attention=*/true));
  r.add(with_traits(make_entry<QkvRopeArgs, qkv_rope_wg, qkv_rope_cost<2>>(
      5, "wg_rope", Backend::cuda,
      "variant 3 up to 16 rows; 17-128 rows: gemm.8's wgmma kernel with a RoPE + KV-write epilogue "
      "(bit-identical to gemm.8 + rope_kv_write.1, no rope_kv_write launch); else variant 1",
      kTestedOnly, gemm_lt_workspace_bytes), /*norm_prologue=*/true));
  for (int v : {1, 2, 3, 4, 5}) r.add_prepare(Family::qkv_rope, v, make_prepare<QkvRopeArgs, qkv_rope_prepare>());
}

}  // namespace lantern::kernels
