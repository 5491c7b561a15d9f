#pragma once
// Variants 1.. of every kernel family on CUDA (bf16 activations, fp32
// accumulation). One file per family: kernels/cuda/<family>.cu. Each launcher
// checks its shape preconditions (lantern::Error naming the limit), launches on
// ctx.stream and checks the launch. docs/kernels.md lists every variant.
#include "kernels/registry.h"

namespace lantern::kernels {

void register_embedding_cuda(Registry& r);
void register_rmsnorm_cuda(Registry& r);
void register_rope_cuda(Registry& r);
void register_kv_write_cuda(Registry& r);
void register_attention_prefill_cuda(Registry& r);
void register_attention_prefill_pair_cuda(Registry& r);  // variant 3: attention_prefill_pair.cu
void register_attention_prefill_wg_cuda(Registry& r);    // variant 4: attention_prefill.cu (kernel in sm90a/)
void register_attention_decode_cuda(Registry& r);
void register_attention_decode_pipe_cuda(Registry& r);  // variant 6: attention_decode_pipe.cu
void register_attention_decode_batched_cuda(Registry& r);  // variant 12: attention_decode_batched.cu
void register_attention_decode_tma_cuda(Registry& r);  // variants 16-17: attention_decode_tma.cu
void register_attention_decode_persist_cuda(Registry& r);  // variants 18-19: attention_decode_persist.cu
void register_attention_decode_rows_cuda(Registry& r);  // variant 21: attention_decode_rows.cu
void register_swiglu_cuda(Registry& r);
void register_residual_cuda(Registry& r);
void register_gemm_cuda(Registry& r);
void register_argmax_cuda(Registry& r);
void register_sample_cuda(Registry& r);
void register_sample_select_cuda(Registry& r);
void register_add_rmsnorm_cuda(Registry& r);
void register_rope_kv_write_cuda(Registry& r);
void register_sample_cluster_cuda(Registry& r);
void register_sample_gather_cuda(Registry& r);  // variant 4: sample_gather.cu
void register_sample_lean_cuda(Registry& r);    // variant 5: sample_lean.cu
void register_sample_wide_cuda(Registry& r);    // variant 6: sample_wide.cu
void register_sample_race_cuda(Registry& r);    // variant 7: sample_race.cu
void register_gate_up_swiglu_cuda(Registry& r);
void register_proj_residual_norm_cuda(Registry& r);
void register_qkv_rope_cuda(Registry& r);

// add_rmsnorm.1's launcher (PDL), which proj_residual_norm's unfused path runs.
void add_rmsnorm_launch(const AddRmsnormArgs& a, const LaunchCtx& ctx);

// residual.1/2's launcher (`pdl`: variant 2), which proj_residual_norm runs
// when the norm is deferred (out == nullptr) and its GEMM is not the GEMV.
void residual_launch(const ResidualArgs& a, const LaunchCtx& ctx, bool pdl);

// swiglu.1/2's launcher (`pdl`: variant 2), which gate_up_swiglu's unfused path runs.
void swiglu_launch(const SwigluArgs& a, const LaunchCtx& ctx, bool pdl);

// attention_prefill's shape checks (a lantern::Error naming `who`), and variant
// 2's launcher and workspace, which variant 3 falls back to.
void attention_prefill_check(const AttentionPrefillArgs& a, const char* who);
void attention_prefill_flash(const AttentionPrefillArgs& a, const LaunchCtx& ctx);
size_t attention_prefill_flash_workspace(const WorkspaceShape& s);

// sample.2's launcher, which sample.3 and sample.4 hand batches of >= 128 rows to (one block
// per row fills the GPU there, and measured as fast as a cluster per row).
void sample_bin_select(const SampleArgs& a, const LaunchCtx& ctx);
// sample.5's launcher (sample_lean.cu), which sample.6 runs above its 16 rows.
void sample_cluster_lean(const SampleArgs& a, const LaunchCtx& ctx);

}  // namespace lantern::kernels
