// rmsnorm, variant 0: out = x * rsqrt(mean(x^2) + eps) * weight, one row at a time.
#include <cmath>

#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void rmsnorm_cpu(const RmsnormArgs& a, const LaunchCtx&) {
  const auto* x = static_cast<const float*>(a.x);                // [*, hidden]
  const auto* weight = static_cast<const bf16_bits*>(a.weight);  // [hidden]
  auto* out = static_cast<float*>(a.out);                        // [n, hidden]
  LANTERN_CHECK(a.hidden > 0, "rmsnorm: hidden must be positive, got %d", a.hidden);
  for (int i = 0; a.rows && i < a.n; ++i)
    LANTERN_CHECK(a.rows[i] >= 0, "rmsnorm: gathered row %d is negative (%d)", i, a.rows[i]);
#pragma omp parallel for schedule(static) if (a.n > 1)
  for (int i = 0; i < a.n; ++i) {
    const float* xr = x + size_t(a.rows ? a.rows[i] : i) * a.hidden;
    float* o = out + size_t(i) * a.hidden;
    // The mean of squares in double: the reference should not be the noisy side
    // of a comparison, and one row is cheap next to the GEMMs around it.
    double sum_sq = 0;
    for (int j = 0; j < a.hidden; ++j) sum_sq += double(xr[j]) * xr[j];
    const float inv_rms = float(1.0 / std::sqrt(sum_sq / a.hidden + double(a.eps)));
    // Written after the reduction, so out may alias x when rows == nullptr.
    for (int j = 0; j < a.hidden; ++j) o[j] = xr[j] * inv_rms * bf16_to_float(weight[j]);
  }
}

}  // namespace

void register_rmsnorm_cpu(Registry& r) {
  r.add(make_entry<RmsnormArgs, rmsnorm_cpu, rmsnorm_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: sum of squares in double, row gather"));
}

}  // namespace lantern::kernels
