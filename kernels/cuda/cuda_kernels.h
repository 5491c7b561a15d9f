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
void register_attention_decode_cuda(Registry& r);
void register_attention_decode_pipe_cuda(Registry& r);  // variant 6: attention_decode_pipe.cu
void register_swiglu_cuda(Registry& r);
void register_residual_cuda(Registry& r);
void register_gemm_cuda(Registry& r);
void register_argmax_cuda(Registry& r);
void register_sample_cuda(Registry& r);
void register_sample_select_cuda(Registry& r);
void register_add_rmsnorm_cuda(Registry& r);
void register_rope_kv_write_cuda(Registry& r);
void register_sample_cluster_cuda(Registry& r);

// sample.2's launcher, which sample.3 hands batches of >= 128 rows to (one block
// per row fills the GPU there, and measured as fast as a cluster per row).
void sample_bin_select(const SampleArgs& a, const LaunchCtx& ctx);

}  // namespace lantern::kernels
