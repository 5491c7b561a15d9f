#pragma once
// Variant 0 of every kernel family: the CPU fp32 reference.
//
// Activations are float*, weights bf16 bits (kernels/base/bf16.h), logits float, and
// every pointer is a host pointer; LaunchCtx is ignored. These are the oracle the
// CUDA variants are tested against, and they run the whole engine without a GPU,
// so they are written to be obviously right first and fast enough second (gemm
// is the one that has to be fast: it is almost all of a forward pass).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/registry.h"

namespace lantern::kernels {

void register_embedding_cpu(Registry& r);
void register_rmsnorm_cpu(Registry& r);
void register_rope_cpu(Registry& r);
void register_kv_write_cpu(Registry& r);
void register_attention_prefill_cpu(Registry& r);
void register_attention_decode_cpu(Registry& r);
void register_swiglu_cpu(Registry& r);
void register_residual_cpu(Registry& r);
void register_gemm_cpu(Registry& r);
void register_argmax_cpu(Registry& r);
void register_sample_cpu(Registry& r);
void register_fused_cpu(Registry& r);  // add_rmsnorm, rope_kv_write, gate_up_swiglu, proj_residual_norm, qkv_rope

// One row's argmax (ties: lowest index; NaN below every number). argmax_cpu.cpp;
// sample_cpu.cpp uses it for greedy rows.
int32_t argmax_row_cpu(const float* logits, int vocab);

// gemm_cpu.cpp is compiled for several x86 levels and dispatches to the best the
// CPU has; these name the levels this CPU can run (best first) and run one of
// them, so tests cover every level and not only the one dispatch picks.
std::vector<std::string> gemm_cpu_isa_levels();
void gemm_cpu_at_level(const GemmArgs& args, std::string_view level);

}  // namespace lantern::kernels
