// add_rmsnorm: every CUDA variant against the CPU reference, which IS the
// unfused definition (residual reference, then rmsnorm reference). Both
// outputs are checked: the updated residual stream x (one bf16 rounding of
// x + y, as residual.*) and the normed rows (rmsnorm's tolerance: atol 1e-3,
// rtol 8e-3, rel-L2 4e-3). Also against the unfused CUDA defaults
// (residual.2 then rmsnorm.3) on the same inputs: the fused kernel rounds x
// before the norm exactly as they do, so the two agree to the order of the
// fp32 sum of squares. Shapes: hidden 2048 at n = 1, 64, 256 (registers),
// 6000 (over 4096: the loop path), 1001 (odd: the loop path).
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

void check_add_rmsnorm(int n, int hidden) {
  const size_t count = size_t(n) * hidden;
  const float eps = 1e-5f;
  const Bf16Data x = random_bf16(count, -4.f, 4.f), y = random_bf16(count, -4.f, 4.f);
  const Bf16Data w = random_bf16(hidden, 0.5f, 1.5f);
  std::vector<float> ref_x = x.values, ref_out(count);
  launch(cpu_reference(Family::add_rmsnorm),
         AddRmsnormArgs{ref_x.data(), y.values.data(), w.bits.data(), ref_out.data(), n, hidden, eps},
         cpu_ctx());
  DeviceBuffer<bf16_bits> d_y(y.bits), d_w(w.bits), d_out(count);
  GpuEnv env;
  // The unfused CUDA defaults on the same inputs.
  DeviceBuffer<bf16_bits> u_x(x.bits), u_out(count);
  const Registry& reg = Registry::global();
  const KernelEntry& res = reg.best(Family::residual, Backend::cuda);
  const KernelEntry& norm = reg.best(Family::rmsnorm, Backend::cuda);
  launch(res, ResidualArgs{u_x.get(), d_y.get(), count}, env.ctx(res, WorkspaceShape{}));
  launch(norm, RmsnormArgs{u_x.get(), d_w.get(), u_out.get(), nullptr, n, hidden, eps},
         env.ctx(norm, WorkspaceShape{}));
  env.sync();
  const std::vector<float> unfused_x = bf16_to_floats(u_x.download()), unfused_out = bf16_to_floats(u_out.download());
  for (const KernelEntry* e : cuda_variants(Family::add_rmsnorm)) {
    SCOPED_TRACE(variant_label(*e) + " n=" + std::to_string(n) + " hidden=" + std::to_string(hidden));
    DeviceBuffer<bf16_bits> d_x(x.bits);
    d_out.poison();
    launch(*e, AddRmsnormArgs{d_x.get(), d_y.get(), d_w.get(), d_out.get(), n, hidden, eps},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    const std::vector<float> got_x = bf16_to_floats(d_x.download()), got_out = bf16_to_floats(d_out.download());
    EXPECT_TRUE(matches(got_x, ref_x, 1e-3, 8e-3, 4e-3)) << "residual stream";
    EXPECT_TRUE(matches(got_out, ref_out, 1e-3, 8e-3, 4e-3)) << "normed rows";
    EXPECT_TRUE(matches(got_x, unfused_x, 0, 0, 0)) << "x: the same fp32 add and rounding as residual.*";
    EXPECT_TRUE(matches(got_out, unfused_out, 1e-3, 8e-3, 4e-3)) << "against residual + rmsnorm on the GPU";
  }
}

TEST(AddRmsnormGpu, MatchesReferenceAndTheUnfusedKernels) {
  LANTERN_REQUIRE_GPU();
  check_add_rmsnorm(1, 2048);
  check_add_rmsnorm(64, 2048);
  check_add_rmsnorm(256, 2048);
  check_add_rmsnorm(3, 6000);
  check_add_rmsnorm(5, 1001);
}

}  // namespace
}  // namespace lantern::test
