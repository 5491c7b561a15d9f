#pragma once
// Tensor Memory Accelerator and mbarrier pieces shared by the kernels whose
// shared-memory rings the copy engine fills (the decode attention's TMA
// variants, attention_decode_tma.cuh; the wgmma GEMM, sm90a/gemm_wgmma.cu):
// shared-memory addresses, stage barriers (init, expected bytes, arrive,
// parity wait), a 2-D box copy, and the driver's tensor-map encoder.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace lantern::kernels::cuda_detail {

__device__ __forceinline__ unsigned smem_u32(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
// The mbarrier inits visible to the copy engine (before the first copy that completes on them).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Box (x, y) of a 2-D tensor map into shared memory at dst, completing its bytes on bar.
__device__ __forceinline__ void tma_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
      : "memory");
}

// The driver's cuTensorMapEncodeTiled through the runtime (no libcuda link);
// a one-line error if the driver has none (attention_decode_tma.cu).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

// A 2-D bf16 tensor map over `rows` rows of `cols` elements, `row_bytes`
// apart, with boxes of 64 columns (128 bytes: one swizzle row) x box_rows
// rows and 128-byte swizzle; reads past the last row are zero-filled. Encoded
// once per argument set and thread (an engine launches the same weights and
// activation buffers every step, and a graph capture bakes the map into the
// node) and returned by value (a later call may clear the bounded cache);
// `who` names the caller in the error (attention_decode_tma.cu).
CUtensorMap bf16_rows_map_sw128(const void* base, int rows, int cols, size_t row_bytes, int box_rows,
                                const char* who);

}  // namespace lantern::kernels::cuda_detail
