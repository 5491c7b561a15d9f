// residual, variant 0: x += y.
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void residual_cpu(const ResidualArgs& a, const LaunchCtx&) {
  auto* x = static_cast<float*>(a.x);              // [count]
  const auto* y = static_cast<const float*>(a.y);  // [count]
  const long count = long(a.count);
#pragma omp parallel for schedule(static) if (count > (1 << 16))
  for (long i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace

void register_residual_cpu(Registry& r) {
  r.add(make_entry<ResidualArgs, residual_cpu, residual_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: elementwise x += y"));
}

}  // namespace lantern::kernels
