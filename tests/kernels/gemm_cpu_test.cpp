// CPU reference: gemm against a naive double-precision product.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/bf16.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& gemm_ref() {
  return Registry::global().find(Family::gemm, "cpu_ref");
}

std::vector<bf16_bits> random_bf16(size_t n) {
  std::vector<bf16_bits> out(n);
  const std::vector<float> v = test::random_floats(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

std::vector<float> run_gemm(const std::vector<float>& a, const std::vector<bf16_bits>& w, int m,
                            int n, int k, bool c_f32 = false) {
  std::vector<float> c(size_t(m) * n, NAN);
  launch(gemm_ref(), GemmArgs{a.data(), w.data(), c.data(), m, n, k, c_f32}, LaunchCtx{});
  return c;
}

struct GemmShape {
  int m, n, k;
};

TEST(GemmCpu, MatchesNaiveDoubleProduct) {
  // Odd sizes hit every edge: row tiles, column tiles, the k chunk (1024) and
  // the vector tail; 1x2048x2048 and 5x512x8192 are decode-like.
  for (GemmShape s : {GemmShape{1, 1, 1}, GemmShape{3, 5, 1}, GemmShape{1, 37, 19},
                      GemmShape{7, 33, 2061}, GemmShape{5, 17, 1025}, GemmShape{64, 48, 256},
                      GemmShape{13, 70, 100}, GemmShape{1, 2048, 2048}, GemmShape{5, 512, 8192}}) {
    const std::vector<float> a = test::random_floats(size_t(s.m) * s.k);
    const std::vector<bf16_bits> w = random_bf16(size_t(s.n) * s.k);
    const std::vector<float> c = run_gemm(a, w, s.m, s.n, s.k);
    std::vector<float> ref(c.size());
    size_t bad = 0;
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double dot = 0, abs_sum = 0;
        for (int t = 0; t < s.k; ++t) {
          const double p = double(a[size_t(i) * s.k + t]) * bf16_to_float(w[size_t(j) * s.k + t]);
          dot += p;
          abs_sum += std::fabs(p);
        }
        ref[size_t(i) * s.n + j] = float(dot);
        // Float summation in any order is within (k + 1) u sum|a w| (plus the final rounding).
        const double u = std::ldexp(1.0, -24);
        const double tol = (s.k + 2) * u * abs_sum;
        const double got = c[size_t(i) * s.n + j];
        if (!(std::fabs(got - dot) <= tol) && bad++ < 5)
          ADD_FAILURE() << s.m << "x" << s.n << "x" << s.k << " c[" << i << "," << j
                        << "] = " << got << " expected " << dot << " tol " << tol;
      }
    EXPECT_EQ(bad, 0u);
    // Typical error is far below the worst case: the sum must be the right one.
    EXPECT_LT(test::rel_l2(c, ref), 1e-6) << s.m << "x" << s.n << "x" << s.k;
  }
}

TEST(GemmCpu, FloatOutputFlagAndThreadCountDoNotChangeResults) {
  const int m = 6, n = 100, k = 300;
  const std::vector<float> a = test::random_floats(size_t(m) * k);
  const std::vector<bf16_bits> w = random_bf16(size_t(n) * k);
  const std::vector<float> c = run_gemm(a, w, m, n, k);
  EXPECT_TRUE(test::all_close(run_gemm(a, w, m, n, k, true), c, 0, 0));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one_thread = run_gemm(a, w, m, n, k);
  omp_set_num_threads(3);
  const std::vector<float> three_threads = run_gemm(a, w, m, n, k);
  omp_set_num_threads(threads);
  EXPECT_TRUE(test::all_close(one_thread, c, 0, 0));
  EXPECT_TRUE(test::all_close(three_threads, c, 0, 0));
}

TEST(GemmCpu, NanStaysInItsRow) {
  const int m = 5, n = 40, k = 64;
  std::vector<float> a = test::random_floats(size_t(m) * k);
  a[size_t(2) * k + 17] = NAN;
  const std::vector<bf16_bits> w = random_bf16(size_t(n) * k);
  const std::vector<float> c = run_gemm(a, w, m, n, k);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      EXPECT_EQ(std::isnan(c[size_t(i) * n + j]), i == 2) << i << "," << j;
}

TEST(GemmCpu, EmptyDimensions) {
  // k = 0: every output is the empty sum, 0. m = 0 or n = 0: nothing to write.
  const std::vector<float> c = run_gemm({}, {}, 2, 3, 0);
  EXPECT_TRUE(test::all_close(c, std::vector<float>(6, 0.0f), 0, 0));
  EXPECT_TRUE(run_gemm({}, random_bf16(12), 0, 3, 4).empty());
}

}  // namespace
}  // namespace lantern::kernels
