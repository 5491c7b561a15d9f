#pragma once
// Launchers shared between the gemm variant files (gemm.cu registers them all).
#include "kernels/registry.h"

namespace lantern::kernels {

// Variant 1: cublasGemmEx (any shape); the fallback of the GEMV variants.
void gemm_cublas_launch(const GemmArgs& a, const LaunchCtx& ctx);

// Variants 4 and 5 (gemm_skinny.cu): m <= 16 on the split-k tensor-core GEMV,
// larger m on cuBLAS. `pdl`: launch with programmatic dependent launch.
void gemm_skinny_launch(const GemmArgs& a, const LaunchCtx& ctx, bool pdl);

}  // namespace lantern::kernels
