// CPU reference: gemm against a naive double-precision product.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"
#include "kernels/cpu/cpu_kernels.h"
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

// level "" = through the registry (the level dispatch picks).
std::vector<float> run_gemm(const std::vector<float>& a, const std::vector<bf16_bits>& w, int m,
                            int n, int k, bool c_f32 = false, const std::string& level = "") {
  std::vector<float> c(size_t(m) * n, NAN);
  const GemmArgs args{a.data(), w.data(), c.data(), m, n, k, c_f32};
  if (level.empty())
    launch(gemm_ref(), args, LaunchCtx{});
  else
    gemm_cpu_at_level(args, level);
  return c;
}

struct GemmShape {
  int m, n, k;
};

// The naive product in double and, per element, the worst-case error of float
// summation in any order: (k + 1) u sum|a w| (plus the final rounding).
struct NaiveGemm {
  std::vector<double> c, tol;
  NaiveGemm(const std::vector<float>& a, const std::vector<bf16_bits>& w, int m, int n, int k) {
    const double u = std::ldexp(1.0, -24);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double dot = 0, abs_sum = 0;
        for (int t = 0; t < k; ++t) {
          const double p = double(a[size_t(i) * k + t]) * bf16_to_float(w[size_t(j) * k + t]);
          dot += p;
          abs_sum += std::fabs(p);
        }
        c.push_back(dot);
        tol.push_back((k + 2) * u * abs_sum);
      }
  }
  ::testing::AssertionResult check(const std::vector<float>& got) const {
    size_t bad = 0;
    std::ostringstream msg;
    std::vector<float> ref(c.begin(), c.end());
    for (size_t e = 0; e < c.size(); ++e)
      if (!(std::fabs(got[e] - c[e]) <= tol[e]) && bad++ < 5)
        msg << "\n  c[" << e << "] = " << got[e] << " expected " << c[e] << " tol " << tol[e];
    if (bad) return ::testing::AssertionFailure() << bad << " elements out of bounds" << msg.str();
    // Typical error is far below the worst case: the sum must be the right one.
    if (!(test::rel_l2(got, ref) < 1e-6))
      return ::testing::AssertionFailure() << "relative L2 error " << test::rel_l2(got, ref);
    return ::testing::AssertionSuccess();
  }
};

TEST(GemmCpu, MatchesNaiveDoubleProductAtEveryIsaLevel) {
  const std::vector<std::string> levels = gemm_cpu_isa_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.back(), "generic");
  // Odd sizes hit every edge: row tiles, column tiles, the k chunk (1024) and
  // the vector tail; 1x2048x2048 and 5x512x8192 are decode-like.
  for (GemmShape s : {GemmShape{1, 1, 1}, GemmShape{3, 5, 1}, GemmShape{1, 37, 19},
                      GemmShape{7, 33, 2061}, GemmShape{5, 17, 1025}, GemmShape{64, 48, 256},
                      GemmShape{13, 70, 100}, GemmShape{1, 2048, 2048}, GemmShape{5, 512, 8192}}) {
    const std::vector<float> a = test::random_floats(size_t(s.m) * s.k);
    const std::vector<bf16_bits> w = random_bf16(size_t(s.n) * s.k);
    const NaiveGemm naive(a, w, s.m, s.n, s.k);
    EXPECT_TRUE(naive.check(run_gemm(a, w, s.m, s.n, s.k))) << s.m << "x" << s.n << "x" << s.k;
    for (const std::string& level : levels)
      EXPECT_TRUE(naive.check(run_gemm(a, w, s.m, s.n, s.k, false, level)))
          << level << " " << s.m << "x" << s.n << "x" << s.k;
  }
  EXPECT_THROW(gemm_cpu_at_level(GemmArgs{}, "sse9"), Error);
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
