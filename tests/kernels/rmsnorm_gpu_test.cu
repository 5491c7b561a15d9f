// rmsnorm: every CUDA variant against the CPU reference (sum of squares in
// double there, fp32 here). Tolerance: one bf16 rounding of the output
// (rtol 2^-8) plus fp32 reduction noise: atol 1e-3, rtol 8e-3, rel-L2 <= 4e-3.
// Shapes: hidden 2048 at n = 1 and 512, row gather (final norm on logit rows),
// in place (out == x), hidden 4096 / 8192 (register and loop paths), odd 100.
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

void check_rmsnorm(int n, int hidden, bool gather, bool in_place) {
  const int x_rows = gather ? n * 3 + 1 : n;
  const Bf16Data x = random_bf16(size_t(x_rows) * hidden, -2.f, 2.f);
  const Bf16Data w = random_bf16(hidden, 0.5f, 1.5f);
  std::vector<int32_t> rows;
  if (gather) {
    std::uniform_int_distribution<int32_t> pick(0, x_rows - 1);
    for (int i = 0; i < n; ++i) rows.push_back(pick(rng()));
  }
  const float eps = 1e-5f;
  std::vector<float> ref(size_t(n) * hidden);
  launch(cpu_reference(Family::rmsnorm),
         RmsnormArgs{x.values.data(), w.bits.data(), ref.data(), gather ? rows.data() : nullptr, n,
                     hidden, eps},
         cpu_ctx());
  DeviceBuffer<bf16_bits> d_w(w.bits);
  DeviceBuffer<int32_t> d_rows(rows);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::rmsnorm)) {
    SCOPED_TRACE(variant_label(*e) + " n=" + std::to_string(n) + " hidden=" + std::to_string(hidden) +
                 (gather ? " gather" : "") + (in_place ? " in-place" : ""));
    DeviceBuffer<bf16_bits> d_x(x.bits);
    DeviceBuffer<bf16_bits> d_out(in_place ? 0 : size_t(n) * hidden);
    if (!in_place) d_out.poison();
    bf16_bits* out = in_place ? d_x.get() : d_out.get();
    launch(*e,
           RmsnormArgs{d_x.get(), d_w.get(), out, gather ? d_rows.get() : nullptr, n, hidden, eps},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    std::vector<float> got = bf16_to_floats(in_place ? d_x.download() : d_out.download());
    got.resize(size_t(n) * hidden);
    EXPECT_TRUE(matches(got, ref, 1e-3, 8e-3, 4e-3));
  }
}

TEST(RmsnormGpu, MatchesReferenceAtModelShapes) {
  LANTERN_REQUIRE_GPU();
  check_rmsnorm(1, 2048, false, false);
  check_rmsnorm(512, 2048, false, false);
  check_rmsnorm(4, 2048, true, false);
}

TEST(RmsnormGpu, InPlaceAndEdgeShapes) {
  LANTERN_REQUIRE_GPU();
  check_rmsnorm(33, 2048, false, true);
  check_rmsnorm(3, 4096, false, false);
  check_rmsnorm(2, 8192, false, false);
  check_rmsnorm(5, 100, false, false);
  check_rmsnorm(1, 8, false, false);
}

}  // namespace
}  // namespace lantern::test
