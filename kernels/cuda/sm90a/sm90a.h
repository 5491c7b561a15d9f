#pragma once
// Entry points of the kernels built for sm_90a alone (kernels/cuda/sm90a/,
// their own object library): the host-side fit tests and launchers the
// registry's variants call. The GEMM's are in gemm_cuda.h.
#include "kernels/registry.h"

namespace lantern::kernels {

// The current device runs this library's sm_90a cubins (compute capability
// 9.0 exactly; asked once per device).
bool sm90a_device();

// attention_prefill.4's kernel (sm90a/attention_prefill_wgmma.cu), or with
// `pipelined` variant 5's (S of the next key tile and P V of the last issued
// together, the softmax under the P V): head_dim 64, q/kv strides multiples of
// 8 elements, 16-byte aligned q, k, v and out, host_seq_starts given (the
// tensor maps' row count), on an sm_90 GPU. Returns false (launches nothing)
// when the call does not fit.
bool attention_prefill_wg_launch(const AttentionPrefillArgs& a, const LaunchCtx& ctx, bool pipelined = false);

}  // namespace lantern::kernels
