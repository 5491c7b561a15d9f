// gemm: every CUDA variant against the CPU reference, c = a @ w^T.
// Tolerances: bf16 output: one bf16 rounding (2^-9 relative) dominates, fp32
//   accumulation in another order adds ~1e-4 absolute: atol 2e-3, rtol 8e-3,
//   rel-L2 <= 4e-3. fp32 output (logits): atol 1e-3, rtol 1e-4, rel-L2 <= 2e-5.
// Shapes: the 1B model's projections (2048x2048, 512x2048, 8192x2048,
// 2048x8192, the 128256x2048 LM head in fp32) at decode m = 1, 3, 8 (gemv path)
// and 9, 64, 512 (cuBLAS), n tails (1000 rows, k 96 and 2048), k % 32 != 0 and
// m > 8 (fallbacks).
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

struct GemmCase {
  int m, n, k;
  bool c_f32;
};

void check_gemm(const GemmCase& c, const std::vector<bf16_bits>& w_bits) {
  const Bf16Data a = random_bf16(size_t(c.m) * c.k);
  std::vector<float> ref(size_t(c.m) * c.n);
  GemmArgs cpu{a.values.data(), w_bits.data(), ref.data(), c.m, c.n, c.k, c.c_f32};
  launch(cpu_reference(Family::gemm), cpu, cpu_ctx());
  DeviceBuffer<bf16_bits> d_a(a.bits), d_w(w_bits);
  DeviceBuffer<bf16_bits> d_c16(c.c_f32 ? 0 : size_t(c.m) * c.n);
  DeviceBuffer<float> d_c32(c.c_f32 ? size_t(c.m) * c.n : 0);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::gemm)) {
    SCOPED_TRACE(variant_label(*e) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + (c.c_f32 ? " f32" : " bf16"));
    d_c16.poison();
    d_c32.poison();
    void* out = c.c_f32 ? static_cast<void*>(d_c32.get()) : static_cast<void*>(d_c16.get());
    launch(*e, GemmArgs{d_a.get(), d_w.get(), out, c.m, c.n, c.k, c.c_f32}, env.ctx(*e, WorkspaceShape{}));
    env.sync();
    if (c.c_f32)
      EXPECT_TRUE(matches(d_c32.download(), ref, 1e-3, 1e-4, 2e-5));
    else
      EXPECT_TRUE(matches(bf16_to_floats(d_c16.download()), ref, 2e-3, 8e-3, 4e-3));
  }
}

TEST(GemmGpu, DecodeShapes) {
  LANTERN_REQUIRE_GPU();
  for (auto [n, k] : {std::pair{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}}) {
    const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(n) * k);
    for (int m : {1, 3, 8}) check_gemm({m, n, k, false}, w);
  }
}

TEST(GemmGpu, LmHeadFp32Logits) {
  LANTERN_REQUIRE_GPU();
  const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(128256) * 2048);
  for (int m : {1, 8}) check_gemm({m, 128256, 2048, true}, w);
}

TEST(GemmGpu, PrefillShapes) {
  LANTERN_REQUIRE_GPU();
  const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(2048) * 2048);
  for (int m : {9, 64, 512}) check_gemm({m, 2048, 2048, false}, w);
}

TEST(GemmGpu, EdgeTailsAndFallbacks) {
  LANTERN_REQUIRE_GPU();
  check_gemm({5, 1000, 96, false}, random_bf16_bits_fast(1000 * 96));  // n tail, gemv path
  check_gemm({7, 1000, 2048, true}, random_bf16_bits_fast(1000 * 2048)); // n tail, stream path
  check_gemm({2, 100, 40, true}, random_bf16_bits_fast(100 * 40));     // k % 32 != 0: cuBLAS
  check_gemm({12, 48, 64, false}, random_bf16_bits_fast(48 * 64));     // m > 8: cuBLAS
}

}  // namespace
}  // namespace lantern::test
