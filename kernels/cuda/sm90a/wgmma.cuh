#pragma once
// The Hopper warpgroup MMA pieces of the wgmma kernels (sm90a/; built for
// sm_90a only): 128-byte-swizzle shared-memory descriptors, the wgmma fence /
// commit / wait, an operand fence for the accumulators, and
// wgmma.mma_async.m64nNk16 (bf16 in, fp32 accumulators) for N = 32, 64, 128, 256,
// and the m64n64k16 form with A in registers and B N-major (the flash
// attention's P V).
#include <cstdint>

namespace lantern::kernels::cuda_detail {

// A wgmma shared-memory descriptor of a K-major operand in 128-byte swizzle:
// rows of 128 B, 8-row atoms 1024 B apart (the stride byte offset); the
// leading offset is unused in this mode. The k16 step s of a stage starts
// 32 s bytes into the row (the swizzle is applied to the full address).
__device__ __forceinline__ uint64_t sw128_desc(unsigned addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
__device__ __forceinline__ void wg_wait_prev() {
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}
// Keeps the compiler from moving accumulator registers across the asynchronous MMAs.
template <int R>
__device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments in registers (R k16 steps of four bf16x2): an
// in-flight wgmma reads them, so they must stay live until its wait.
template <int R>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// The accumulator operands of the inline assembly below: the "{%0, ...}"
// register list of an m64nNk16 (N / 2 fp32 per thread) and the matching "+f"
// constraints (written out: inline assembly takes no array operands).
#define LANTERN_WG_D16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define LANTERN_WG_D32                                                                           \
  LANTERN_WG_D16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
                 "%31"
#define LANTERN_WG_D64                                                                     \
  LANTERN_WG_D32                                                                           \
      ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LANTERN_WG_D128                                                                          \
  LANTERN_WG_D64                                                                                 \
      ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "  \
      "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, " \
      "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "  \
      "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define LANTERN_WG_ACC8(d, o)                                                                 \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), \
      "+f"(d[o + 6]), "+f"(d[o + 7])
#define LANTERN_WG_ACC16(d, o) LANTERN_WG_ACC8(d, o), LANTERN_WG_ACC8(d, o + 8)
#define LANTERN_WG_ACC32(d, o) LANTERN_WG_ACC16(d, o), LANTERN_WG_ACC16(d, o + 16)
#define LANTERN_WG_ACC64(d, o) LANTERN_WG_ACC32(d, o), LANTERN_WG_ACC32(d, o + 32)

// d[64 x N] += a[64 x 16] (weights, K-major) * b[16 x N] (activations, K-major), fp32 accumulators.
template <int N>
__device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b);
template <>
__device__ __forceinline__ void wgmma_bf16<32>(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" LANTERN_WG_D16
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : LANTERN_WG_ACC16(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_bf16<64>(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" LANTERN_WG_D32
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : LANTERN_WG_ACC32(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_bf16<128>(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" LANTERN_WG_D64
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : LANTERN_WG_ACC64(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_bf16<256>(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" LANTERN_WG_D128
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : LANTERN_WG_ACC64(d, 0), LANTERN_WG_ACC64(d, 64)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

// d[64 x 64] += a[64 x 16] (registers: this thread's four bf16x2 of the
// mma.m16n8k16 A fragment of its warp's 16 rows) * b[16 x 64] read N-major
// (imm-trans-b 1): b's 16 k rows are 128-byte rows of 64 n elements in
// 128-byte swizzle, 8-row atoms 1024 B apart (sw128_desc's stride).
__device__ __forceinline__ void wgmma_bf16_rs_nmajor64(float (&d)[32], const uint32_t (&a)[4],
                                                       uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" LANTERN_WG_D32
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : LANTERN_WG_ACC32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

#undef LANTERN_WG_D16
#undef LANTERN_WG_D32
#undef LANTERN_WG_D64
#undef LANTERN_WG_D128
#undef LANTERN_WG_ACC8
#undef LANTERN_WG_ACC16
#undef LANTERN_WG_ACC32
#undef LANTERN_WG_ACC64

}  // namespace lantern::kernels::cuda_detail
