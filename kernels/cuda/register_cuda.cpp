// Registers every CUDA variant (variants 1.. of each family).
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {

void register_cuda_kernels(Registry& r) {
  register_embedding_cuda(r);
  register_rmsnorm_cuda(r);
  register_rope_cuda(r);
  register_kv_write_cuda(r);
  register_attention_prefill_cuda(r);
  register_attention_prefill_pair_cuda(r);
  register_attention_prefill_wg_cuda(r);
  register_attention_decode_cuda(r);
  register_attention_decode_pipe_cuda(r);
  register_attention_decode_batched_cuda(r);
  register_attention_decode_tma_cuda(r);
  register_attention_decode_persist_cuda(r);
  register_attention_decode_rows_cuda(r);
  register_swiglu_cuda(r);
  register_residual_cuda(r);
  register_gemm_cuda(r);
  register_argmax_cuda(r);
  register_sample_cuda(r);
  register_sample_select_cuda(r);
  register_add_rmsnorm_cuda(r);
  register_rope_kv_write_cuda(r);
  register_sample_cluster_cuda(r);
  register_gate_up_swiglu_cuda(r);
  register_proj_residual_norm_cuda(r);
  register_qkv_rope_cuda(r);
  register_sample_gather_cuda(r);
  register_sample_lean_cuda(r);
  register_sample_wide_cuda(r);
  register_sample_race_cuda(r);
}

}  // namespace lantern::kernels
