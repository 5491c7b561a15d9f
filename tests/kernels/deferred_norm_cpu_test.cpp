// The deferred norm's kernel contracts on the CPU (registry.h, PrologueNorm and
// ProjResidualNormArgs::out == nullptr):
//  - a GEMM (gemm.0) or gate_up_swiglu.0 given a prologue norm computes on
//    rmsnorm(x) * weight: kernels::launch runs rmsnorm.0 into the scratch
//    first, so the result is bit-identical to rmsnorm.0 then the plain
//    variant, and the scratch holds the normalised rows;
//  - an independent check of the same: rmsnorm computed here in double, then
//    the product in double, within float summation bounds;
//  - proj_residual_norm.0 with out == nullptr is gemm.0 into y, then x += y
//    (residual.0) and nothing else;
//  - a prologue norm without its scratch is a clear error.
// Fresh random inputs each run (test::random_floats).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& ref(Family f) { return Registry::global().find(f, "0"); }

std::vector<bf16_bits> random_bf16(size_t n, float lo, float hi) {
  std::vector<bf16_bits> out(n);
  const std::vector<float> v = test::random_floats(n, lo, hi);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

struct Inputs {
  int m, n, k;
  std::vector<float> x = test::random_floats(size_t(m) * k, -2.f, 2.f);
  std::vector<bf16_bits> w = random_bf16(size_t(n) * k, -0.2f, 0.2f);
  std::vector<bf16_bits> norm_w = random_bf16(k, 0.5f, 1.5f);
};

TEST(DeferredNormCpu, GemmWithAPrologueNormIsRmsnormThenTheGemm) {
  for (auto [m, n, k] : {std::tuple{1, 24, 64}, {5, 40, 96}, {17, 8, 256}}) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " n=" << n << " k=" << k);
    const Inputs in{m, n, k};
    const float eps = 1e-5f;
    std::vector<float> xn(size_t(m) * k), c(size_t(m) * n), scratch(size_t(m) * k, NAN), fused(size_t(m) * n);
    launch(ref(Family::rmsnorm), RmsnormArgs{in.x.data(), in.norm_w.data(), xn.data(), nullptr, m, k, eps},
           LaunchCtx{});
    launch(ref(Family::gemm), GemmArgs{xn.data(), in.w.data(), c.data(), m, n, k}, LaunchCtx{});
    GemmArgs g{in.x.data(), in.w.data(), fused.data(), m, n, k};
    g.norm = PrologueNorm{in.norm_w.data(), scratch.data(), eps};
    launch(ref(Family::gemm), g, LaunchCtx{});
    EXPECT_EQ(fused, c) << "bit-identical to rmsnorm.0 then gemm.0";
    EXPECT_EQ(scratch, xn) << "the scratch holds the normalised rows";
    // Independent: the norm and the product in double.
    const double u = std::ldexp(1.0, -24);
    for (int i = 0; i < m; ++i) {
      double ss = 0;
      for (int t = 0; t < k; ++t) ss += double(in.x[size_t(i) * k + t]) * in.x[size_t(i) * k + t];
      const double inv = 1.0 / std::sqrt(ss / k + eps);
      for (int j = 0; j < n; ++j) {
        double dot = 0, abs_sum = 0;
        for (int t = 0; t < k; ++t) {
          const double p =
              in.x[size_t(i) * k + t] * inv * bf16_to_float(in.norm_w[t]) * bf16_to_float(in.w[size_t(j) * k + t]);
          dot += p;
          abs_sum += std::fabs(p);
        }
        EXPECT_NEAR(fused[size_t(i) * n + j], dot, (k + 8) * u * abs_sum + 1e-6) << "row " << i << " col " << j;
      }
    }
  }
}

TEST(DeferredNormCpu, GateUpSwigluWithAPrologueNormIsRmsnormThenTheOp) {
  const int m = 3, inter = 20, k = 64;
  const Inputs in{m, 2 * inter, k};
  const float eps = 1e-6f;
  std::vector<float> xn(size_t(m) * k), out(size_t(m) * inter), gu(size_t(m) * 2 * inter);
  launch(ref(Family::rmsnorm), RmsnormArgs{in.x.data(), in.norm_w.data(), xn.data(), nullptr, m, k, eps},
         LaunchCtx{});
  launch(ref(Family::gate_up_swiglu), GateUpSwigluArgs{xn.data(), in.w.data(), out.data(), gu.data(), m, inter, k},
         LaunchCtx{});
  std::vector<float> fused(out.size()), scratch(xn.size()), gu2(gu.size());
  GateUpSwigluArgs g{in.x.data(), in.w.data(), fused.data(), gu2.data(), m, inter, k};
  g.norm = PrologueNorm{in.norm_w.data(), scratch.data(), eps};
  launch(ref(Family::gate_up_swiglu), g, LaunchCtx{});
  EXPECT_EQ(fused, out);
  EXPECT_EQ(scratch, xn);
  double moved = 0;  // the norm matters: the op on the raw x gives other rows
  std::vector<float> raw(out.size());
  launch(ref(Family::gate_up_swiglu),
         GateUpSwigluArgs{in.x.data(), in.w.data(), raw.data(), gu.data(), m, inter, k}, LaunchCtx{});
  for (size_t i = 0; i < raw.size(); ++i) moved = std::max(moved, double(std::fabs(raw[i] - out[i])));
  EXPECT_GT(moved, 1e-3);
}

TEST(DeferredNormCpu, ProjResidualNormWithoutOutIsTheGemmAndTheResidualAdd) {
  const int m = 4, hidden = 48, k = 80;
  const Inputs in{m, hidden, k};
  const std::vector<float> x0 = test::random_floats(size_t(m) * hidden);
  std::vector<float> y(size_t(m) * hidden), x = x0, y_ref(y.size()), x_ref = x0;
  launch(ref(Family::proj_residual_norm),
         ProjResidualNormArgs{in.x.data(), in.w.data(), y.data(), x.data(), in.norm_w.data(), nullptr, m, hidden, k,
                              1e-5f},
         LaunchCtx{});
  launch(ref(Family::gemm), GemmArgs{in.x.data(), in.w.data(), y_ref.data(), m, hidden, k}, LaunchCtx{});
  launch(ref(Family::residual), ResidualArgs{x_ref.data(), y_ref.data(), x_ref.size()}, LaunchCtx{});
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(x, x_ref);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_FLOAT_EQ(x[i], x0[i] + y_ref[i]);
}

TEST(DeferredNormCpu, APrologueNormWithoutItsScratchIsAClearError) {
  const Inputs in{2, 8, 32};
  std::vector<float> c(16);
  GemmArgs g{in.x.data(), in.w.data(), c.data(), 2, 8, 32};
  g.norm = PrologueNorm{in.norm_w.data(), nullptr, 1e-5f};
  try {
    launch(ref(Family::gemm), g, LaunchCtx{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PrologueNorm::out"), std::string::npos) << e.what();
  }
}

TEST(DeferredNormCpu, OnlyTheGpuVariantsThatFoldTheNormSayTheyDo) {
  for (const KernelEntry& e : Registry::global().entries()) {
    SCOPED_TRACE(std::string(family_name(e.family)) + "." + e.name);
    if (e.norm_prologue) {
      EXPECT_TRUE(e.family == Family::gemm || e.family == Family::gate_up_swiglu || e.family == Family::qkv_rope);
      EXPECT_EQ(e.backend, Backend::cuda);
    }
    if (e.defers_norm) {
      EXPECT_EQ(e.family, Family::proj_residual_norm);
    }
  }
}

}  // namespace
}  // namespace lantern::kernels
