// Registers every CPU reference variant (variant 0 of each family).
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {

void register_cpu_kernels(Registry& r) {
  register_embedding_cpu(r);
  register_rmsnorm_cpu(r);
  register_rope_cpu(r);
  register_kv_write_cpu(r);
  register_attention_prefill_cpu(r);
  register_attention_decode_cpu(r);
  register_swiglu_cpu(r);
  register_residual_cpu(r);
  register_gemm_cpu(r);
  register_argmax_cpu(r);
  register_sample_cpu(r);
  register_fused_cpu(r);
}

}  // namespace lantern::kernels
