#pragma once
// Launchers shared between the gemm variant files (gemm.cu registers them all).
#include "kernels/registry.h"

namespace lantern::kernels {

// Variant 1: cublasGemmEx (any shape); the fallback of the GEMV variants.
void gemm_cublas_launch(const GemmArgs& a, const LaunchCtx& ctx);

// Variants 4 and 5 (gemm_skinny.cu): m <= 16 on the split-k tensor-core GEMV,
// larger m on cuBLAS. `pdl`: launch with programmatic dependent launch.
void gemm_skinny_launch(const GemmArgs& a, const LaunchCtx& ctx, bool pdl);
// Whether the GEMV serves `a` (m <= 16, k % 32 == 0, 16-byte aligned a and w).
bool gemm_skinny_fits(const GemmArgs& a);

// Variant 6 above the GEMV (gemm_lt.cpp): cublasLtMatmul with the algorithm
// measured fastest for the shape, planned at first use outside a graph capture
// or by gemm_lt_prepare (the engine's start-up pass). Its workspace: the
// algorithms' scratch, then an L2 flush region for timing.
void gemm_lt_launch(const GemmArgs& a, const LaunchCtx& ctx);
void gemm_lt_prepare(const GemmArgs& a, const LaunchCtx& ctx);
size_t gemm_lt_workspace_bytes(const WorkspaceShape& shape);

}  // namespace lantern::kernels
