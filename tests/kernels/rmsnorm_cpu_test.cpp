// CPU reference: RMSNorm against its formula in double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/base/bf16.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& rmsnorm_ref() {
  return Registry::global().find(Family::rmsnorm, "cpu_ref");
}

std::vector<bf16_bits> random_bf16(size_t n, float lo, float hi) {
  std::vector<bf16_bits> out(n);
  const std::vector<float> v = test::random_floats(n, lo, hi);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// out[i] = x[row] / sqrt(mean(x[row]^2) + eps) * w, all in double.
std::vector<float> rmsnorm_formula(const std::vector<float>& x, const std::vector<bf16_bits>& w,
                                   const std::vector<int32_t>& rows, int hidden, float eps) {
  std::vector<float> out;
  for (int32_t r : rows) {
    double ms = 0;
    for (int j = 0; j < hidden; ++j)
      ms += double(x[size_t(r) * hidden + j]) * x[size_t(r) * hidden + j];
    ms /= hidden;
    for (int j = 0; j < hidden; ++j)
      out.push_back(
          float(x[size_t(r) * hidden + j] / std::sqrt(ms + double(eps)) * bf16_to_float(w[j])));
  }
  return out;
}

std::vector<int32_t> identity_rows(int n) {
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

TEST(RmsnormCpu, MatchesFormula) {
  for (int hidden : {1, 5, 64, 2048}) {
    const int n = 7;
    const float eps = 1e-5f;
    const std::vector<float> x = test::random_floats(size_t(n) * hidden, -3.f, 3.f);
    const std::vector<bf16_bits> w = random_bf16(hidden, -2.f, 2.f);
    std::vector<float> out(x.size(), NAN);
    launch(rmsnorm_ref(), RmsnormArgs{x.data(), w.data(), out.data(), nullptr, n, hidden, eps},
           LaunchCtx{});
    // Three float roundings (1/rms, two products) on top of an exact-ish double sum.
    EXPECT_TRUE(test::all_close(out, rmsnorm_formula(x, w, identity_rows(n), hidden, eps), 0, 1e-6))
        << "hidden " << hidden;
  }
}

TEST(RmsnormCpu, EpsMattersForSmallRows) {
  const int hidden = 16;
  const std::vector<float> x = test::random_floats(hidden, -1e-3f, 1e-3f);
  const std::vector<bf16_bits> w = random_bf16(hidden, 0.5f, 1.5f);
  for (float eps : {1e-6f, 1e-2f}) {
    std::vector<float> out(hidden);
    launch(rmsnorm_ref(), RmsnormArgs{x.data(), w.data(), out.data(), nullptr, 1, hidden, eps},
           LaunchCtx{});
    EXPECT_TRUE(test::all_close(out, rmsnorm_formula(x, w, {0}, hidden, eps), 0, 1e-6)) << eps;
  }
}

TEST(RmsnormCpu, GathersRows) {
  const int hidden = 96, total = 6;
  const std::vector<float> x = test::random_floats(size_t(total) * hidden, -2.f, 2.f);
  const std::vector<bf16_bits> w = random_bf16(hidden, -1.f, 1.f);
  const std::vector<int32_t> rows = {5, 0, 5, 2};
  std::vector<float> out(rows.size() * hidden, NAN);
  launch(rmsnorm_ref(),
         RmsnormArgs{x.data(), w.data(), out.data(), rows.data(), int(rows.size()), hidden, 1e-5f},
         LaunchCtx{});
  EXPECT_TRUE(test::all_close(out, rmsnorm_formula(x, w, rows, hidden, 1e-5f), 0, 1e-6));
}

TEST(RmsnormCpu, InPlaceAndHugeValues) {
  // Squares of 1e20 overflow float; the result is scale-invariant and must not be NaN.
  const int n = 3, hidden = 128;
  std::vector<float> x = test::random_floats(size_t(n) * hidden, -1e20f, 1e20f);
  const std::vector<bf16_bits> w = random_bf16(hidden, -1.f, 1.f);
  const std::vector<float> ref = rmsnorm_formula(x, w, identity_rows(n), hidden, 1e-5f);
  launch(rmsnorm_ref(), RmsnormArgs{x.data(), w.data(), x.data(), nullptr, n, hidden, 1e-5f},
         LaunchCtx{});
  EXPECT_TRUE(test::all_close(x, ref, 0, 1e-6));
}

}  // namespace
}  // namespace lantern::kernels
