// CPU reference: RoPE against the closed form with Llama-3 frequency scaling,
// computed here independently of the engine's rope_inv_freq.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& rope_ref() {
  return Registry::global().find(Family::rope, "cpu_ref");
}

// Llama 3 "llama3" rope scaling (theta 500000, factor 32, low 1, high 4, original
// 8192): wavelengths longer than original/low are slowed by `factor`, shorter
// than original/high are kept, and the band between is interpolated smoothly.
std::vector<double> llama3_inv_freq(int head_dim) {
  const double theta = 500000, factor = 32, low = 1, high = 4, original = 8192;
  std::vector<double> out(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) {
    const double base = 1.0 / std::pow(theta, 2.0 * j / head_dim);
    const double wavelen = 2 * std::numbers::pi / base;
    if (wavelen < original / high) {
      out[j] = base;
    } else if (wavelen > original / low) {
      out[j] = base / factor;
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      out[j] = (1 - smooth) * base / factor + smooth * base;
    }
  }
  return out;
}

TEST(RopeCpu, Llama3FrequenciesHaveTheirThreeBands) {
  // Checks on the test's own oracle: j = 0 is theta^0 = 1 and unscaled; the
  // lowest frequency is exactly base / 32; the curve never increases.
  const std::vector<double> f = llama3_inv_freq(64);
  EXPECT_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[31], 1.0 / std::pow(500000.0, 62.0 / 64) / 32);
  for (size_t j = 1; j < f.size(); ++j) EXPECT_LT(f[j], f[j - 1]) << j;
}

struct RopeCase {
  int n_q_heads, n_kv_heads, head_dim;
};

TEST(RopeCpu, MatchesClosedFormWithLlama3Scaling) {
  const std::vector<int32_t> positions = {0, 1, 7, 8191, 8192, 40000, 131071};
  const int n = int(positions.size());
  for (RopeCase rc : {RopeCase{4, 2, 64}, RopeCase{3, 1, 128}, RopeCase{2, 2, 8}}) {
    const int hd = rc.head_dim, half = hd / 2;
    const int q_stride = rc.n_q_heads * hd + 5, k_stride = rc.n_kv_heads * hd + 3;  // padded rows
    const std::vector<double> inv_d = llama3_inv_freq(hd);
    std::vector<float> inv_f(half);
    for (int j = 0; j < half; ++j) inv_f[j] = float(inv_d[j]);

    std::vector<float> q = test::random_floats(size_t(n) * q_stride, -2.f, 2.f);
    std::vector<float> k = test::random_floats(size_t(n) * k_stride, -2.f, 2.f);
    const std::vector<float> q0 = q, k0 = k;
    launch(rope_ref(),
           RopeArgs{q.data(), k.data(), positions.data(), inv_f.data(), n, rc.n_q_heads,
                    rc.n_kv_heads, hd, q_stride, k_stride},
           LaunchCtx{});

    auto check = [&](const std::vector<float>& before, const std::vector<float>& after, int stride,
                     int heads, const char* which) {
      for (int t = 0; t < n; ++t) {
        const double pos = positions[t];
        for (int h = 0; h < heads; ++h) {
          const size_t base = size_t(t) * stride + size_t(h) * hd;
          for (int j = 0; j < half; ++j) {
            const double x0 = before[base + j], x1 = before[base + j + half];
            // The kernel gets inv_freq rounded to float: its angle differs from the
            // exact one by pos * |inv_d - inv_f|, which moves the output by at most
            // that many radians times |x0| + |x1|; plus a few float roundings.
            const double dtheta = pos * std::fabs(inv_d[j] - double(inv_f[j]));
            const double tol = (dtheta + 1e-6) * (std::fabs(x0) + std::fabs(x1));
            const double angle = pos * inv_d[j];
            const double e0 = x0 * std::cos(angle) - x1 * std::sin(angle);
            const double e1 = x1 * std::cos(angle) + x0 * std::sin(angle);
            ASSERT_LE(std::fabs(after[base + j] - e0), tol)
                << which << " pos " << pos << " head " << h << " j " << j;
            ASSERT_LE(std::fabs(after[base + j + half] - e1), tol)
                << which << " pos " << pos << " head " << h << " j " << j + half;
            // Same closed form with the float inv_freq the kernel was given: tight.
            const double angle_f = pos * double(inv_f[j]);
            const double tol_f = 1e-6 * (std::fabs(x0) + std::fabs(x1));
            ASSERT_LE(
                std::fabs(after[base + j] - (x0 * std::cos(angle_f) - x1 * std::sin(angle_f))),
                tol_f)
                << which << " pos " << pos << " j " << j;
            ASSERT_LE(std::fabs(after[base + j + half] -
                                (x1 * std::cos(angle_f) + x0 * std::sin(angle_f))),
                      tol_f)
                << which << " pos " << pos << " j " << j + half;
          }
        }
        // Padding after the heads is not touched.
        for (int p = heads * hd; p < stride; ++p)
          ASSERT_EQ(after[size_t(t) * stride + p], before[size_t(t) * stride + p]) << which;
      }
    };
    check(q0, q, q_stride, rc.n_q_heads, "q");
    check(k0, k, k_stride, rc.n_kv_heads, "k");
    // Position 0 is the identity, exactly.
    EXPECT_EQ(std::memcmp(q.data(), q0.data(), rc.n_q_heads * hd * sizeof(float)), 0);
  }
}

// The property RoPE exists for: q(p) . k(p') depends only on p - p'.
TEST(RopeCpu, DotProductDependsOnlyOnRelativePosition) {
  const int hd = 64, half = hd / 2;
  const std::vector<double> inv_d = llama3_inv_freq(hd);
  std::vector<float> inv_f(half);
  for (int j = 0; j < half; ++j) inv_f[j] = float(inv_d[j]);
  const std::vector<float> q_src = test::random_floats(hd), k_src = test::random_floats(hd);
  const int offset = 37;
  const std::vector<int32_t> starts = {0, 1, 500, 8000, 70000, 131000};
  std::vector<double> dots;
  for (int32_t p : starts) {
    std::vector<float> q = q_src, k = k_src;
    const int32_t qpos = p + offset;
    // q and k of the same "token" share a position in the kernel: rotate separately.
    launch(rope_ref(), RopeArgs{q.data(), k.data(), &qpos, inv_f.data(), 1, 1, 1, hd, hd, hd},
           LaunchCtx{});
    std::vector<float> q_unused = q_src, k2 = k_src;
    launch(rope_ref(), RopeArgs{q_unused.data(), k2.data(), &p, inv_f.data(), 1, 1, 1, hd, hd, hd},
           LaunchCtx{});
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += double(q[d]) * k2[d];
    dots.push_back(dot);
  }
  double norm = 0;
  for (int d = 0; d < hd; ++d) norm += std::fabs(q_src[d] * k_src[d]);
  for (size_t i = 1; i < dots.size(); ++i) EXPECT_NEAR(dots[i], dots[0], 1e-5 * norm) << starts[i];
}

}  // namespace
}  // namespace lantern::kernels
