// swiglu, variant 0: out = silu(gate) * up.
#include <cmath>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void swiglu_cpu(const SwigluArgs& a, const LaunchCtx&) {
  const auto* gate = static_cast<const float*>(a.gate);  // [n, stride]
  const auto* up = static_cast<const float*>(a.up);      // [n, stride]
  auto* out = static_cast<float*>(a.out);                // [n, inter]
  const long count = long(a.n) * a.inter, stride = a.row_stride();
  LANTERN_CHECK(stride >= a.inter, "swiglu: row stride %ld < inter %d", stride, a.inter);
#pragma omp parallel for schedule(static) if (count > (1 << 16))
  for (long i = 0; i < count; ++i) {
    const long in = i / a.inter * stride + i % a.inter;
    // g / (1 + exp(-g)) stays finite at both ends: exp(-g) -> inf gives -0, not NaN.
    const float g = gate[in];
    out[i] = g / (1.0f + std::exp(-g)) * up[in];
  }
}

}  // namespace

void register_swiglu_cpu(Registry& r) {
  r.add(make_entry<SwigluArgs, swiglu_cpu, swiglu_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: elementwise g / (1 + exp(-g)) * u"));
}

}  // namespace lantern::kernels
