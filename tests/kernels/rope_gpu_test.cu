// rope: every CUDA variant against the CPU reference (both take sin/cos of a
// double angle, rotate in fp32). Tolerance: the bf16 rounding of the output:
// atol 1e-3, rtol 8e-3, rel-L2 <= 4e-3. Positions reach 131071 (llama3-scaled
// frequencies, theta 500000), so a float-angle shortcut would fail. Row padding
// beyond the heads (q_stride, k_stride larger than the heads) must be untouched.
#include <cmath>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

// HF's llama3 rope scaling (factor 32, low 1, high 4, original 8192).
std::vector<float> llama3_inv_freq(int head_dim) {
  std::vector<float> out(head_dim / 2);
  const double pi = 3.14159265358979323846;
  for (int j = 0; j < head_dim / 2; ++j) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * j / head_dim);
    const double wavelen = 2 * pi / inv, low = 8192.0 / 1.0, high = 8192.0 / 4.0;
    double f = inv;
    if (wavelen > low) {
      f = inv / 32.0;
    } else if (wavelen >= high) {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      f = (1 - smooth) * inv / 32.0 + smooth * inv;
    }
    out[j] = float(f);
  }
  return out;
}

void check_rope(int n, int n_q, int n_kv, int hd, int pad) {
  const int q_stride = n_q * hd + pad, k_stride = n_kv * hd + pad;
  const Bf16Data q = random_bf16(size_t(n) * q_stride, -2.f, 2.f);
  const Bf16Data k = random_bf16(size_t(n) * k_stride, -2.f, 2.f);
  std::vector<int32_t> pos(n);
  std::uniform_int_distribution<int32_t> pick(0, 131071);
  for (auto& p : pos) p = pick(rng());
  pos[0] = 0;
  if (n > 2) pos[1] = 4095, pos[2] = 131071;
  const std::vector<float> inv_freq = llama3_inv_freq(hd);
  std::vector<float> q_ref = q.values, k_ref = k.values;
  launch(cpu_reference(Family::rope),
         RopeArgs{q_ref.data(), k_ref.data(), pos.data(), inv_freq.data(), n, n_q, n_kv, hd, q_stride,
                  k_stride},
         cpu_ctx());
  DeviceBuffer<int32_t> d_pos(pos);
  DeviceBuffer<float> d_freq(inv_freq);
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::rope)) {
    SCOPED_TRACE(variant_label(*e) + " n=" + std::to_string(n) + " hd=" + std::to_string(hd) +
                 " heads=" + std::to_string(n_q) + "/" + std::to_string(n_kv));
    DeviceBuffer<bf16_bits> d_q(q.bits), d_k(k.bits);
    launch(*e,
           RopeArgs{d_q.get(), d_k.get(), d_pos.get(), d_freq.get(), n, n_q, n_kv, hd, q_stride,
                    k_stride},
           env.ctx(*e, WorkspaceShape{}));
    env.sync();
    EXPECT_TRUE(matches(bf16_to_floats(d_q.download()), q_ref, 1e-3, 8e-3, 4e-3)) << "q";
    EXPECT_TRUE(matches(bf16_to_floats(d_k.download()), k_ref, 1e-3, 8e-3, 4e-3)) << "k";
  }
}

TEST(RopeGpu, MatchesReferenceAtModelShapes) {
  LANTERN_REQUIRE_GPU();
  check_rope(1, 32, 8, 64, 0);
  check_rope(300, 32, 8, 64, 0);
}

TEST(RopeGpu, SmallOtherHeadDimsAndPaddedRows) {
  LANTERN_REQUIRE_GPU();
  check_rope(17, 24, 8, 128, 8);
  check_rope(9, 8, 1, 32, 3);
}

}  // namespace
}  // namespace lantern::test
