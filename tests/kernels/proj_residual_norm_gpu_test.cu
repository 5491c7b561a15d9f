// proj_residual_norm: every CUDA variant against the CPU reference (gemm.0
// into y, then add_rmsnorm.0: x += y, out = rmsnorm(x) * weight) on fresh
// random inputs, and against the unfused CUDA path (variant 1: gemm.5's GEMV,
// or planned cuBLASLt above m = 16, then add_rmsnorm.1) on the same inputs.
//  - y (the projection, written by every variant) vs the fp32 GEMM: gemm's
//    bounds (atol 1e-3, rtol 8e-3, rel-L2 4e-3 at these magnitudes, |y| ~ 1.5);
//  - x and out vs the fp32 definition: the GPU rounds y, x + y and out to
//    bf16 (the CPU keeps fp32), so an element may be off by one bf16 ulp of y
//    plus one of x (2^-8 of |y| + |x| <= ~2e-2 here) -- atol 2e-2, rtol 8e-3
//    -- and the rows as a whole by rel-L2 4e-3;
//  - vs variant 1: bit-exact for y, x and out. The fused kernel's y is the
//    GEMV's (same k split, same order), and its tail runs add_rmsnorm.1's
//    arithmetic in add_rmsnorm.1's lane order.
// Every variant runs twice on the same inputs (x restored): the second launch
// must equal the first -- the fused tail's arrival counter resets itself.
// Shapes: Llama-3.2-1B's o_proj (hidden 2048, k 2048) and down_proj (k 8192,
// the double-buffered register path) at m = 1, 3, 8, 16 and 17 (beyond the
// GEMV: cuBLASLt + add_rmsnorm.1 in both variants); k 2080 (k % 512 != 0: no
// split-k cluster, every block stores and counts); hidden 520 (a row tail,
// 33 tiles); hidden 4096 (beyond the fused tail: variant 2 runs variant 1).
// Variant 3 (gemm.7's GEMM + add_rmsnorm.1) is variant 1 at m <= 16 (bit-exact
// there); at m = 17..128 its own GEMM runs and the definition's bounds apply.
#include <cstdio>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

struct Outputs {
  std::vector<float> y, x, out;
};

void check_proj_residual_norm(int m, int hidden, int k) {
  const float eps = 1e-5f;
  const Bf16Data a = random_bf16(size_t(m) * k, -1.f, 1.f);
  const Bf16Data w = random_bf16(size_t(hidden) * k, -0.1f, 0.1f);
  const Bf16Data x = random_bf16(size_t(m) * hidden, -1.f, 1.f);
  const Bf16Data nw = random_bf16(hidden, 0.5f, 1.5f);
  Outputs ref{std::vector<float>(size_t(m) * hidden), x.values, std::vector<float>(size_t(m) * hidden)};
  launch(cpu_reference(Family::proj_residual_norm),
         ProjResidualNormArgs{a.values.data(), w.bits.data(), ref.y.data(), ref.x.data(), nw.bits.data(),
                              ref.out.data(), m, hidden, k, eps},
         cpu_ctx());
  DeviceBuffer<bf16_bits> d_a(a.bits), d_w(w.bits), d_nw(nw.bits), d_y(size_t(m) * hidden),
      d_out(size_t(m) * hidden);
  GpuEnv env;
  Outputs unfused;  // variant 1's: the first variant in the loop
  for (const KernelEntry* e : cuda_variants(Family::proj_residual_norm)) {
    const std::string label = variant_label(*e) + " m=" + std::to_string(m) + " hidden=" + std::to_string(hidden) +
                              " k=" + std::to_string(k);
    SCOPED_TRACE(label);
    Outputs first;
    for (int rep = 0; rep < 2; ++rep) {
      DeviceBuffer<bf16_bits> d_x(x.bits);
      d_y.poison();
      d_out.poison();
      launch(*e,
             ProjResidualNormArgs{d_a.get(), d_w.get(), d_y.get(), d_x.get(), d_nw.get(), d_out.get(), m, hidden,
                                  k, eps},
             env.ctx(*e, WorkspaceShape{}));
      env.sync();
      Outputs got{bf16_to_floats(d_y.download()), bf16_to_floats(d_x.download()),
                  bf16_to_floats(d_out.download())};
      if (rep == 1) {
        EXPECT_TRUE(matches(got.x, first.x, 0, 0, 0) && matches(got.out, first.out, 0, 0, 0))
            << "a second launch on the same inputs must give the same rows";
        break;
      }
      EXPECT_TRUE(matches(got.y, ref.y, 1e-3, 8e-3, 4e-3)) << "y: the projection";
      EXPECT_TRUE(matches(got.x, ref.x, 2e-2, 8e-3, 4e-3)) << "x: the residual stream";
      EXPECT_TRUE(matches(got.out, ref.out, 2e-2, 8e-3, 4e-3)) << "out: the normed rows";
      std::printf("[proj_residual_norm] %s: rel-L2 y %.2e x %.2e out %.2e vs the definition\n", label.c_str(),
                  rel_l2(got.y, ref.y), rel_l2(got.x, ref.x), rel_l2(got.out, ref.out));
      if (e->variant == 1) {
        unfused = got;
      } else if (((e->variant == 3 || e->variant == 5) && m > 16) || (e->variant == 6 && m > 128 && k >= 4096)) {
        // Variant 3's / 5's batch GEMM and variant 6's wide form sum k in another order than cuBLASLt:
        // only the definition binds them.
      } else {
        EXPECT_TRUE(matches(got.y, unfused.y, 0, 0, 0)) << "y bit-identical to the unfused GEMV";
        EXPECT_TRUE(matches(got.x, unfused.x, 0, 0, 0)) << "x bit-identical to gemm + add_rmsnorm.1";
        EXPECT_TRUE(matches(got.out, unfused.out, 0, 0, 0)) << "out bit-identical to gemm + add_rmsnorm.1";
      }
      first = std::move(got);
    }
  }
}

TEST(ProjResidualNormGpu, MatchesReferenceAndTheUnfusedKernelsAtLlamaShapes) {
  LANTERN_REQUIRE_GPU();
  for (int m : {1, 3, 8, 16, 17}) check_proj_residual_norm(m, 2048, 2048);  // o_proj
  for (int m : {1, 16}) check_proj_residual_norm(m, 2048, 8192);           // down_proj
}

// Variant 3's batch GEMM (gemm.7, 17 <= m <= 128): every n-tile count (m <= 32,
// 64, 128), split-k clusters of 8 (o_proj) and the long k of down_proj.
TEST(ProjResidualNormGpu, BatchGemmShapes) {
  LANTERN_REQUIRE_GPU();
  for (int m : {24, 64, 128}) check_proj_residual_norm(m, 2048, 2048);
  for (int m : {40, 100}) check_proj_residual_norm(m, 2048, 8192);
}

// Variant 6's wide form (gemm.8's kernel on 256 batch columns, a bf16 store)
// at down_proj's shape: one batch tile partly filled (129, 200) and full
// (256), k split over a cluster; o_proj's k (2048) stays on cuBLASLt
// (bit-identical to variant 1 there); 257 rows: above the wide form's cap.
TEST(ProjResidualNormGpu, WideDownProjShapes) {
  LANTERN_REQUIRE_GPU();
  for (int m : {129, 200, 256, 257}) check_proj_residual_norm(m, 2048, 8192);
  check_proj_residual_norm(256, 2048, 2048);
  check_proj_residual_norm(160, 520, 4096);  // a row tail: 5 weight tiles, the last partial
}

TEST(ProjResidualNormGpu, NoClusterRowTailAndTheWideFallback) {
  LANTERN_REQUIRE_GPU();
  check_proj_residual_norm(2, 2048, 2080);  // splits = 1: every block counts
  check_proj_residual_norm(5, 520, 2048);   // 33 tiles, the last one partial
  check_proj_residual_norm(1, 4096, 1024);  // hidden > 2048: variant 2 runs variant 1
}

}  // namespace
}  // namespace lantern::test
