// swiglu: every CUDA variant against the CPU reference. Same formula in fp32;
// differences are the output's bf16 rounding and expf ulps: atol 1e-3,
// rtol 8e-3, rel-L2 <= 4e-3. Inputs span [-12, 12] to reach both tails.
// Shapes: inter 8192 at n = 1 and 512; odd 3 x 1001 (scalar path); rows
// strided as the fused gate/up output (64 x 8192 of 16384, 5 x 1001 of 2002).
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

// stride 0: dense gate and up; else gate and up rows `stride` apart (the
// fused gate/up projection's [n, 2 inter] rows: up = gate + inter).
void check_swiglu(int n, int inter, int stride = 0) {
  const size_t count = size_t(n) * inter, in_count = size_t(n) * (stride ? stride : inter);
  const Bf16Data gate = random_bf16(in_count, -12.f, 12.f), up = random_bf16(in_count, -2.f, 2.f);
  std::vector<float> ref(count);
  launch(cpu_reference(Family::swiglu),
         SwigluArgs{gate.values.data(), up.values.data(), ref.data(), n, inter, stride}, cpu_ctx());
  DeviceBuffer<bf16_bits> d_gate(gate.bits), d_up(up.bits), d_out(count);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::swiglu)) {
    SCOPED_TRACE(variant_label(*e) + " n=" + std::to_string(n) + " inter=" + std::to_string(inter));
    d_out.poison();
    launch(*e, SwigluArgs{d_gate.get(), d_up.get(), d_out.get(), n, inter, stride},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    EXPECT_TRUE(matches(bf16_to_floats(d_out.download()), ref, 1e-3, 8e-3, 4e-3));
  }
}

TEST(SwigluGpu, MatchesReference) {
  LANTERN_REQUIRE_GPU();
  check_swiglu(1, 8192);
  check_swiglu(512, 8192);
  check_swiglu(3, 1001);
  check_swiglu(64, 8192, 2 * 8192);  // strided rows (fused gate/up), vector path
  check_swiglu(5, 1001, 2 * 1001);   // strided rows, scalar path
}

}  // namespace
}  // namespace lantern::test
