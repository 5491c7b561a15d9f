#pragma once
// Launchers shared between the gemm variant files (gemm.cu registers them all).
#include "kernels/registry.h"

namespace lantern::kernels {

// registry.h's with_norm_applied on the CUDA backend.
template <class Args>
Args with_norm_applied(const Args& a, const LaunchCtx& ctx) {
  return with_norm_applied(a, Backend::cuda, ctx);
}

// Variant 1: cublasGemmEx (any shape); the fallback of the GEMV variants.
void gemm_cublas_launch(const GemmArgs& a, const LaunchCtx& ctx);

// Variants 4 and 5 (gemm_skinny.cu): m <= 16 on the split-k tensor-core GEMV,
// larger m on cuBLAS. `pdl`: launch with programmatic dependent launch.
void gemm_skinny_launch(const GemmArgs& a, const LaunchCtx& ctx, bool pdl);
// A prologue norm (a.norm) runs inside the GEMV; on the cuBLAS path ahead of it.
// Whether the GEMV serves `a` (m <= 16, k % 32 == 0, 16-byte aligned a, w and
// norm weight).
bool gemm_skinny_fits(const GemmArgs& a);

// Variant 6 above the GEMV (gemm_lt.cpp): cublasLtMatmul with the algorithm
// measured fastest for the shape, planned at first use outside a graph capture
// or by gemm_lt_prepare (the engine's start-up pass). Its workspace: the
// algorithms' scratch, then an L2 flush region for timing.
void gemm_lt_launch(const GemmArgs& a, const LaunchCtx& ctx);
void gemm_lt_prepare(const GemmArgs& a, const LaunchCtx& ctx);
size_t gemm_lt_workspace_bytes(const WorkspaceShape& shape);

// Variant 6 itself (gemm.cu): the GEMV where it fits, planned cuBLASLt
// elsewhere, and its prepare hook -- what the fused families' unfused paths
// run for their GEMM.
void gemm_lt_planned(const GemmArgs& a, const LaunchCtx& ctx);
void gemm_lt_planned_prepare(const GemmArgs& a, const LaunchCtx& ctx);

// Variant 7's batch kernel (gemm_mid.cu; tested only): 17 <= m <= 128,
// k % 64 == 0, 16-byte aligned a and w; weights and activations through a
// cp.async ring into mma.sync fragments, split-k over a cluster.
bool gemm_mid_fits(const GemmArgs& a);
void gemm_mid_launch(const GemmArgs& a, const LaunchCtx& ctx);
// Variant 7 itself (gemm.cu): the GEMV for m <= 16, the batch kernel where it
// fits, planned cuBLASLt elsewhere; and its prepare hook (plans only the
// cuBLASLt shapes).
void gemm_mid_planned(const GemmArgs& a, const LaunchCtx& ctx);
void gemm_mid_planned_prepare(const GemmArgs& a, const LaunchCtx& ctx);
// gate_up_swiglu.3's batch path (gemm_mid.cu): the batch kernel over the fused
// gate/up weight with the SwiGLU store. Returns false (launches nothing) when
// the shape does not fit; a.m must be > 0.
bool gate_up_swiglu_mid_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx);

// Variant 8's batch kernel (sm90a/gemm_wgmma.cu; built for sm_90a): 17 <= m
// <= 128, k % 64 == 0, n <= 32768, bf16 out, 16-byte aligned a and w, 8-byte
// aligned c, on a compute-capability 9.0 GPU; weights and activations through
// a TMA-filled ring into wgmma, split-k over a cluster.
bool gemm_wg_fits(const GemmArgs& a);
void gemm_wg_launch(const GemmArgs& a, const LaunchCtx& ctx);
// Variant 8 itself (gemm.cu): the GEMV for m <= 16, the wgmma kernel where it
// fits, planned cuBLASLt elsewhere; and its prepare hook.
void gemm_wg_planned(const GemmArgs& a, const LaunchCtx& ctx);
void gemm_wg_planned_prepare(const GemmArgs& a, const LaunchCtx& ctx);
// gate_up_swiglu.4's and .5's batch path (sm90a/gemm_wgmma.cu): the wgmma
// kernel over the fused gate/up weight with the SwiGLU store, for
// 17 <= m <= 128, and with `wide` (variant 5) also for 129 <= m <= 256
// (LANTERN_WG_WIDE_MAX_M: up to 4096) on its 256-column form. Returns false (launches
// nothing) when the shape does not fit; a.m must be > 0.
bool gate_up_swiglu_wg_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx, bool wide);
// qkv_rope.5's batch path (sm90a/gemm_wgmma.cu, sm90a/wg_rope.cuh): the
// wgmma kernel over the fused q/k/v weight with the RoPE + KV-write epilogue,
// for 17 <= m <= 128, head_dim a multiple of 8 dividing 128, k % 64 == 0, on
// an sm_90 GPU (a prologue norm runs ahead). Returns false (launches nothing)
// when the call does not fit; a.m must be > 0.
bool qkv_rope_wg_launch(const QkvRopeArgs& a, const LaunchCtx& ctx);
// proj_residual_norm.6's projection (sm90a/gemm_wgmma.cu): the same kernel's
// wide form with a bf16 store, for 129 <= m <= 256 (LANTERN_WG_WIDE_MAX_M),
// k % 64 == 0, bf16 out, no prologue norm. Returns false (launches nothing)
// when the shape does not fit.
bool gemm_wg_wide_launch(const GemmArgs& a, const LaunchCtx& ctx);

// gate_up_swiglu.2 (gemm_skinny.cu): variant 5's GEMV over the fused gate/up
// weight with the SwiGLU epilogue, PDL-launched. Returns false (launches
// nothing) when the shape does not fit (m > 16, k % 32 != 0, unaligned a / w);
// the caller then runs the unfused path. a.m must be > 0.
bool gate_up_swiglu_skinny_launch(const GateUpSwigluArgs& a, const LaunchCtx& ctx);

// qkv_rope.2 (gemm_skinny.cu): variant 5's GEMV over the fused q/k/v weight
// with the rope epilogue (rotated q into q_out, rotated k and v into qkv and
// the paged cache), PDL-launched. Returns false (launches nothing) when the
// shape does not fit (m > 16, k % 32 != 0, head_dim % 16 != 0, unaligned a /
// w); the caller then runs the unfused path. a.m must be > 0.
bool qkv_rope_skinny_launch(const QkvRopeArgs& a, const LaunchCtx& ctx);

// qkv_rope.4 (gemm_skinny.cu, qkv_attn_tail.cuh): qkv_rope.2's launch with
// the folded decode attention (a.attention) in the last stored block of each
// kv head's group of tiles. Returns false (launches nothing) where qkv_rope.2
// would, and when the attention does not fit the tail (attention.out unset,
// head_dim != 64, more than 4 q heads per kv head or 32 kv heads, m > 8);
// the caller then runs a composed path. a.m must be > 0.
bool qkv_rope_attention_skinny_launch(const QkvRopeArgs& a, const LaunchCtx& ctx);

// proj_residual_norm.2 (gemm_skinny.cu): variant 5's GEMV into y with the
// residual + RMSNorm tail in its last block, PDL-launched. Returns false
// (launches nothing) when the GEMV or the tail does not fit (m > 16,
// k % 32 != 0, hidden > 2048 or % 8 != 0, unaligned pointers); the caller
// then runs the unfused path. a.m must be > 0.
bool proj_residual_norm_skinny_launch(const ProjResidualNormArgs& a, const LaunchCtx& ctx);

// proj_residual_norm.4 (gemm_skinny.cu): variant 5's GEMV whose epilogue adds
// its bf16 outputs into x in place (residual.*'s rounding; y is not written),
// PDL-launched, for a.out == nullptr (the deferred norm). Returns false
// (launches nothing) when out is set or the GEMV does not fit. a.m must be > 0.
bool proj_residual_add_skinny_launch(const ProjResidualNormArgs& a, const LaunchCtx& ctx);

}  // namespace lantern::kernels
