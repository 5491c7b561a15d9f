// gate_up_swiglu: the MLP's gate/up projection and SwiGLU as one op.
//
// Variant 1 (unfused): the definition on the GPU -- gemm.6's path (the
//   split-k tensor-core GEMV for m <= 16, planned cuBLASLt above) into the
//   [m, 2 inter] scratch, then swiglu.2 (stride 2 inter); both PDL. The fused
//   op table's gate_up_proj + swiglu before this family existed, kept so
//   `--kernels gate_up_swiglu=1` swaps the old path back. (The GEMM is the
//   default gemm variant's whatever `--kernels gemm=` says: the family runs
//   its own launcher; gemm.6's plans for the [2 inter, k] shape are made by
//   this family's prepare hook at start-up.)
// Variant 2 (gemv_fused): for m <= 16 one launch of the skinny GEMV with the
//   SwiGLU epilogue (gemm_skinny.cu, SkOut::swiglu): the [m, 2 inter]
//   intermediate is never written or read back, one launch and one
//   kernel-boundary round trip fewer per layer. Larger m (and k % 32 != 0,
//   unaligned pointers): variant 1.
// Variant 3 (mid_fused): variant 2 for m <= 16; for 17 <= m <= 128 one launch
//   of gemm.7's batch kernel with the SwiGLU store (gemm_mid.cu: 64 gate rows
//   and their 64 up rows per block); above, variant 1.
// Variant 4 (wg_fused, the default in sessions 21-23): variant 3 with gemm.8's
//   wgmma kernel for 17 <= m <= 128 (sm90a/gemm_wgmma.cu: the same 64 gate +
//   64 up rows per block, the same SwiGLU store); slower than cuBLASLt alone,
//   faster in a step, where its weights stream before the PDL wait.
// Variant 5 (wg_wide, the default since session 24): variant 4, and for
//   129 <= m <= 256 (LANTERN_WG_WIDE_MAX_M: up to 4096, the batch tiled over
//   blocks) gemm.8's kernel on 256 batch columns per block (wgmma
//   m64n256k16), the same SwiGLU store: at batch 256, where variant 4 runs
//   cuBLASLt + swiglu, the [m, 2 inter] intermediate and swiglu's pass
//   disappear and the weights stream before the PDL wait. Alone it is ~2 us
//   slower than cuBLASLt + swiglu; in a batch-256 step it is faster.
// Variants 2, 3, 4 and 5 fold a prologue norm (GateUpSwigluArgs::norm, the
// deferred-norm op table) into the GEMV (gemm_skinny.cu, kNorm) and run it
// ahead of their other paths; variant 1 gets it run ahead by kernels::launch.
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_cuda.h"

namespace lantern::kernels {
namespace {

void check_shape(const GateUpSwigluArgs& a, const char* who) {
  LANTERN_CHECK(a.m >= 0 && a.inter > 0 && a.k > 0, "%s: bad shape m=%d inter=%d k=%d", who, a.m, a.inter,
                a.k);
}
void check_no_norm(const GateUpSwigluArgs& a, const char* who) {
  // kernels::launch runs a prologue norm ahead of variant 1.
  LANTERN_ASSERT(a.norm.weight == nullptr, "%s: a prologue norm reached a kernel that ignores it", who);
}

void gate_up_swiglu_unfused(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "gate_up_swiglu.unfused");
  check_no_norm(a, "gate_up_swiglu.unfused");
  if (a.m == 0) return;
  LANTERN_CHECK(a.gate_up != nullptr, "gate_up_swiglu.unfused: needs the [m, 2 inter] scratch");
  gemm_lt_planned(GemmArgs{a.a, a.w, a.gate_up, a.m, 2 * a.inter, a.k}, ctx);
  const auto* gate = static_cast<const cuda_detail::bf16*>(a.gate_up);
  swiglu_launch(SwigluArgs{gate, gate + a.inter, a.out, a.m, a.inter, 2 * a.inter}, ctx, /*pdl=*/true);
}

// Variants 2, 3 and 4 take a prologue norm (a.norm): inside the GEMV, run
// ahead of the other paths.
void gate_up_swiglu_fused(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  check_shape(a, "gate_up_swiglu.gemv_fused");
  if (a.m == 0) return;
  if (!gate_up_swiglu_skinny_launch(a, ctx)) gate_up_swiglu_unfused(with_norm_applied(a, ctx), ctx);
}

// Variants 3 and 4: the GEMV for m <= 16, their batch kernel (`batch`: false
// when the shape does not fit) above, else variant 1.
using BatchLaunch = bool (*)(const GateUpSwigluArgs&, const LaunchCtx&);
void gemv_batch_or_unfused(const GateUpSwigluArgs& a, const LaunchCtx& ctx, const char* name, BatchLaunch batch) {
  check_shape(a, name);
  if (a.m == 0) return;
  if (gate_up_swiglu_skinny_launch(a, ctx)) return;
  const GateUpSwigluArgs p = with_norm_applied(a, ctx);
  if (!batch(p, ctx)) gate_up_swiglu_unfused(p, ctx);
}
void gate_up_swiglu_mid(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  gemv_batch_or_unfused(a, ctx, "gate_up_swiglu.mid_fused", gate_up_swiglu_mid_launch);
}
bool wg_batch(const GateUpSwigluArgs& a, const LaunchCtx& ctx) { return gate_up_swiglu_wg_launch(a, ctx, false); }
bool wg_wide_batch(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  return gate_up_swiglu_wg_launch(a, ctx, true);
}
void gate_up_swiglu_wg(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  gemv_batch_or_unfused(a, ctx, "gate_up_swiglu.wg_fused", wg_batch);
}
void gate_up_swiglu_wg_wide(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  gemv_batch_or_unfused(a, ctx, "gate_up_swiglu.wg_wide", wg_wide_batch);
}
// Plans the cuBLASLt GEMM of the fallback (m > 16) outside any capture.
void gate_up_swiglu_prepare(const GateUpSwigluArgs& a, const LaunchCtx& ctx) {
  gemm_lt_planned_prepare(GemmArgs{a.a, a.w, a.gate_up, a.m, 2 * a.inter, a.k}, ctx);
}

}  // namespace

void register_gate_up_swiglu_cuda(Registry& r) {
  r.add(make_entry<GateUpSwigluArgs, gate_up_swiglu_unfused, gate_up_swiglu_cost<2>>(
      1, "unfused", Backend::cuda,
      "the definition on the GPU: gemm.6's path (GEMV for m <= 16, planned cuBLASLt above) into the "
      "[m, 2 inter] scratch, then swiglu.2; both PDL",
      kPreferred, gemm_lt_workspace_bytes));
  r.add(with_traits(make_entry<GateUpSwigluArgs, gate_up_swiglu_fused, gate_up_swiglu_cost<2>>(
      2, "gemv_fused", Backend::cuda,
      "m <= 16: gemm.5's GEMV with a SwiGLU epilogue (8 gate + the matching 8 up rows per 16-row "
      "tile), writes silu(g)*u directly; else variant 1",
      kPreferred, gemm_lt_workspace_bytes), /*norm_prologue=*/true));
  r.add(with_traits(make_entry<GateUpSwigluArgs, gate_up_swiglu_mid, gate_up_swiglu_cost<2>>(
      3, "mid_fused", Backend::cuda,
      "m <= 16: variant 2; 17 <= m <= 128: gemm.7's batch kernel with the SwiGLU store (64 gate + the "
      "matching 64 up rows per block); else variant 1",
      kTestedOnly, gemm_lt_workspace_bytes), /*norm_prologue=*/true));  // slower than variant 2 at m = 32-128 (gemm.7's note)
  r.add(with_traits(make_entry<GateUpSwigluArgs, gate_up_swiglu_wg, gate_up_swiglu_cost<2>>(
      4, "wg_fused", Backend::cuda,
      "m <= 16: variant 2; 17 <= m <= 128: gemm.8's wgmma kernel with the SwiGLU store (64 gate + the "
      "matching 64 up rows per block); else variant 1",
      kPreferred, gemm_lt_workspace_bytes), /*norm_prologue=*/true));  // the default in sessions 21-23
  r.add(with_traits(make_entry<GateUpSwigluArgs, gate_up_swiglu_wg_wide, gate_up_swiglu_cost<2>>(
      5, "wg_wide", Backend::cuda,
      "variant 4, and for 129 <= m <= 256 its wide form: 256 batch columns per block (m64n256k16), the "
      "SwiGLU store; else variant 1",
      kPreferred, gemm_lt_workspace_bytes), /*norm_prologue=*/true));  // the default since session 24
  for (int v : {1, 2, 3, 4, 5})
    r.add_prepare(Family::gate_up_swiglu, v, make_prepare<GateUpSwigluArgs, gate_up_swiglu_prepare>());
}

}  // namespace lantern::kernels
