// residual: every CUDA variant against the CPU reference: x += y in fp32, one
// bf16 rounding: atol 1e-3, rtol 8e-3, rel-L2 <= 4e-3. Shapes: 2048 x {1, 512},
// an odd count (scalar path).
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

void check_residual(size_t count) {
  const Bf16Data x = random_bf16(count, -4.f, 4.f), y = random_bf16(count, -4.f, 4.f);
  std::vector<float> ref = x.values;
  launch(cpu_reference(Family::residual), ResidualArgs{ref.data(), y.values.data(), count}, cpu_ctx());
  DeviceBuffer<bf16_bits> d_y(y.bits);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::residual)) {
    SCOPED_TRACE(variant_label(*e) + " count=" + std::to_string(count));
    DeviceBuffer<bf16_bits> d_x(x.bits);
    launch(*e, ResidualArgs{d_x.get(), d_y.get(), count}, env.ctx(*e, WorkspaceShape{}));
    env.sync();
    EXPECT_TRUE(matches(bf16_to_floats(d_x.download()), ref, 1e-3, 8e-3, 4e-3));
  }
}

TEST(ResidualGpu, MatchesReference) {
  LANTERN_REQUIRE_GPU();
  check_residual(2048);
  check_residual(2048 * 512);
  check_residual(1001);
}

}  // namespace
}  // namespace lantern::test
