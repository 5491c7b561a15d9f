#pragma once
// LANTERN_HD marks the small functions that CPU code (references, tests) and
// CUDA kernels share from one header -- sampling.h's Philox and keys,
// cuda/rope_tile.h's tile map, cuda/prefill_order.h's block order -- so a CPU
// test checks the very code a kernel runs.
#ifdef __CUDACC__
#define LANTERN_HD __host__ __device__ __forceinline__
#else
#define LANTERN_HD inline
#endif
