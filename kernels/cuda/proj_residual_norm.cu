// proj_residual_norm: a projection and the residual add + RMSNorm it feeds as
// one op (o_proj + attn_residual_norm, down_proj + mlp_residual_norm).
//
// Variant 1 (unfused): the definition on the GPU -- gemm.6's path (the
//   split-k tensor-core GEMV for m <= 16, planned cuBLASLt above) into y,
//   then add_rmsnorm.1; both PDL. Exactly the fused op table's two ops before
//   this family existed, kept so `--kernels proj_residual_norm=1` swaps the
//   old path back. (Like gate_up_swiglu, the family runs its own launcher,
//   whatever `--kernels gemm=` says; its prepare hook plans gemm.6's shapes.)
// Variant 2 (gemv_fused): for m <= 16 and hidden <= 2048 one launch of the
//   skinny GEMV whose last block to finish runs the residual add + RMSNorm
//   (gemm_skinny.cu, SkOut::residual_norm): one launch and one kernel
//   boundary fewer per projection, bit-identical to variant 1. Other shapes:
//   variant 1.
// Variant 3 (mid_unfused): variant 1 with gemm.7's GEMM (the batch kernel of
//   gemm_mid.cu for 17 <= m <= 128), then add_rmsnorm.1. The same kernels as
//   variant 1 at m <= 16.
// Variant 4 (gemv_add, the deferred norm): made for out == nullptr, where the
//   engine builds the deferred-norm op table (op_table.h) -- the GEMMs that
//   read x next (gate_up_swiglu, the next layer's qkv_proj) normalise it in
//   their prologue (PrologueNorm). For m <= 16 one launch of the skinny GEMV
//   whose epilogue adds its bf16 outputs into x in place (each element has one
//   storing block; residual.*'s rounding, y not written): the add_rmsnorm
//   kernel, its kernel boundary and the round trip of xn through L2 leave the
//   path. Other shapes: gemm.6's path into y, then residual.2. With out set,
//   variant 1.
// Variant 5 (wg_unfused): variant 1 with gemm.8's GEMM (the wgmma kernel of
//   sm90a/gemm_wgmma.cu for 17 <= m <= 128), then add_rmsnorm.1; tested only.
// Variant 6 (wg_wide_down, session 25): variant 1 with gemm.8's wide form (256
//   batch columns per block, m64n256k16; gate_up_swiglu.5's kernel with a bf16
//   store) as the projection for 129 <= m <= 256 and k >= 4096 -- down_proj
//   in a batch-256 step, where cuBLASLt's plan ran at ~half the tensor peak
//   (32 output tiles on 132 SMs); o_proj (k 2048: 4 ring stages per split)
//   stays on cuBLASLt.
// Every variant honours out == nullptr (no norm: x += y only).
#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_cuda.h"

namespace lantern::kernels {
namespace {

void check_shape(const ProjResidualNormArgs& a, const char* who) {
  LANTERN_CHECK(a.m >= 0 && a.hidden > 0 && a.k > 0, "%s: bad shape m=%d hidden=%d k=%d", who, a.m, a.hidden,
                a.k);
  LANTERN_CHECK(a.y != nullptr && a.out != a.x && (a.out == nullptr || a.out != a.y) && a.y != a.x,
                "%s: y, x and out must be three distinct buffers", who);
}

// The projection into y by `gemm` (a GEMM variant's launcher), then
// add_rmsnorm.1; `plan` is that GEMM's prepare hook.
using GemmLaunch = void (*)(const GemmArgs&, const LaunchCtx&);
GemmArgs projection(const ProjResidualNormArgs& a) { return GemmArgs{a.a, a.w, a.y, a.m, a.hidden, a.k}; }
void gemm_then_add_rmsnorm(const ProjResidualNormArgs& a, const LaunchCtx& ctx, const char* who, GemmLaunch gemm) {
  check_shape(a, who);
  if (a.m == 0) return;
  gemm(projection(a), ctx);
  if (a.out == nullptr)  // the deferred norm: the residual add only
    residual_launch(ResidualArgs{a.x, a.y, size_t(a.m) * a.hidden}, ctx, /*pdl=*/true);
  else
    add_rmsnorm_launch(AddRmsnormArgs{a.x, a.y, a.norm_weight, a.out, a.m, a.hidden, a.eps}, ctx);
}

void proj_residual_norm_unfused(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_then_add_rmsnorm(a, ctx, "proj_residual_norm.unfused", gemm_lt_planned);
}

void proj_residual_norm_fused(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "proj_residual_norm.gemv_fused");
  if (a.m == 0) return;
  if (!proj_residual_norm_skinny_launch(a, ctx)) proj_residual_norm_unfused(a, ctx);
}

void proj_residual_add(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "proj_residual_norm.gemv_add");
  if (a.m == 0) return;
  if (!proj_residual_add_skinny_launch(a, ctx)) proj_residual_norm_unfused(a, ctx);
}

constexpr int kWideDownMinK = 4096;  // variant 6: below, cuBLASLt (the split ring too short)
void gemm_wide_down_or_planned(const GemmArgs& g, const LaunchCtx& ctx) {
  if (g.k >= kWideDownMinK && gemm_wg_wide_launch(g, ctx)) return;
  gemm_lt_planned(g, ctx);
}
void proj_residual_norm_wide_down(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_then_add_rmsnorm(a, ctx, "proj_residual_norm.wg_wide_down", gemm_wide_down_or_planned);
}

void proj_residual_norm_mid(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_then_add_rmsnorm(a, ctx, "proj_residual_norm.mid_unfused", gemm_mid_planned);
}
void proj_residual_norm_wg(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_then_add_rmsnorm(a, ctx, "proj_residual_norm.wg_unfused", gemm_wg_planned);
}
// Plan the GEMM of the path (cuBLASLt above the GEMV / batch kernel) outside any capture.
void proj_residual_norm_prepare(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_lt_planned_prepare(projection(a), ctx);
}
void proj_residual_norm_mid_prepare(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_mid_planned_prepare(projection(a), ctx);
}
void proj_residual_norm_wg_prepare(const ProjResidualNormArgs& a, const LaunchCtx& ctx) {
  gemm_wg_planned_prepare(projection(a), ctx);
}

}  // namespace

void register_proj_residual_norm_cuda(Registry& r) {
  r.add(make_entry<ProjResidualNormArgs, proj_residual_norm_unfused, proj_residual_norm_cost<2>>(
      1, "unfused", Backend::cuda,
      "the definition on the GPU: gemm.6's path (GEMV for m <= 16, planned cuBLASLt above) into y, then "
      "add_rmsnorm.1; both PDL",
      kPreferred, gemm_lt_workspace_bytes));
  r.add(make_entry<ProjResidualNormArgs, proj_residual_norm_fused, proj_residual_norm_cost<2>>(
      2, "gemv_fused", Backend::cuda,
      "m <= 16, hidden <= 2048: gemm.5's GEMV whose last block to finish adds y into x and normalises "
      "(add_rmsnorm.1's arithmetic; one launch); else variant 1",
      kTestedOnly, gemm_lt_workspace_bytes));
  r.add(make_entry<ProjResidualNormArgs, proj_residual_norm_mid, proj_residual_norm_cost<2>>(
      3, "mid_unfused", Backend::cuda,
      "variant 1 with gemm.7's GEMM (its batch kernel for 17 <= m <= 128) into y, then add_rmsnorm.1",
      kTestedOnly, gemm_lt_workspace_bytes));  // slower than variant 1 at m = 32-128 (gemm.7's note)
  r.add(with_traits(
      make_entry<ProjResidualNormArgs, proj_residual_add, proj_residual_norm_cost<2>>(
          4, "gemv_add", Backend::cuda,
          "the deferred norm (out == nullptr: the next GEMMs normalise x in their prologue): m <= 16 "
          "gemm.5's GEMV adding its outputs into x in place; else gemm.6's path into y, then residual.2",
          kTestedOnly, gemm_lt_workspace_bytes),
      /*norm_prologue=*/false, /*defers_norm=*/true));
  for (int v : {1, 2, 4})
    r.add_prepare(Family::proj_residual_norm, v, make_prepare<ProjResidualNormArgs, proj_residual_norm_prepare>());
  r.add_prepare(Family::proj_residual_norm, 3,
                make_prepare<ProjResidualNormArgs, proj_residual_norm_mid_prepare>());
  r.add(make_entry<ProjResidualNormArgs, proj_residual_norm_wg, proj_residual_norm_cost<2>>(
      5, "wg_unfused", Backend::cuda,
      "variant 1 with gemm.8's GEMM (its wgmma kernel for 17 <= m <= 128) into y, then add_rmsnorm.1",
      kTestedOnly, gemm_lt_workspace_bytes));
  r.add_prepare(Family::proj_residual_norm, 5,
                make_prepare<ProjResidualNormArgs, proj_residual_norm_wg_prepare>());
  r.add(make_entry<ProjResidualNormArgs, proj_residual_norm_wide_down, proj_residual_norm_cost<2>>(
      6, "wg_wide_down", Backend::cuda,
      "variant 1 with gemm.8's wide form (256 batch columns per block) as the projection for 129 <= m <= 256 "
      "and k >= 4096 (down_proj at batch 256), then add_rmsnorm.1",
      kTestedOnly, gemm_lt_workspace_bytes));
  r.add_prepare(Family::proj_residual_norm, 6, make_prepare<ProjResidualNormArgs, proj_residual_norm_prepare>());
}

}  // namespace lantern::kernels
