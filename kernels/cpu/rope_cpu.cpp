// rope, variant 0: HF rotate-half rotary embedding, in place.
#include <cmath>
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

// Rotates pairs (x[j], x[j + half]) of each head of one token.
void rotate_heads(float* x, int n_heads, int head_dim, const float* cos_t, const float* sin_t) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + size_t(h) * head_dim;
    for (int j = 0; j < half; ++j) {
      const float x0 = xh[j], x1 = xh[j + half];
      xh[j] = x0 * cos_t[j] - x1 * sin_t[j];
      xh[j + half] = x1 * cos_t[j] + x0 * sin_t[j];
    }
  }
}

void rope_cpu(const RopeArgs& a, const LaunchCtx&) {
  auto* q = static_cast<float*>(a.q);  // [n, q_stride]
  auto* k = static_cast<float*>(a.k);  // [n, k_stride]
  LANTERN_CHECK(a.head_dim > 0 && a.head_dim % 2 == 0, "rope: head_dim must be even, got %d",
                a.head_dim);
  LANTERN_CHECK(a.q_stride >= a.n_q_heads * a.head_dim && a.k_stride >= a.n_kv_heads * a.head_dim,
                "rope: strides (%d, %d) are smaller than the heads they hold (%d, %d)", a.q_stride,
                a.k_stride, a.n_q_heads * a.head_dim, a.n_kv_heads * a.head_dim);
  const int half = a.head_dim / 2;
#pragma omp parallel if (a.n > 1)
  {
    std::vector<float> cos_t(half), sin_t(half);
#pragma omp for schedule(static)
    for (int t = 0; t < a.n; ++t) {
      // The angle in double: pos * inv_freq is exact there (24-bit mantissa times
      // a position below 2^29), and float sin/cos of angles ~1e5 rad would lose
      // about 3 digits -- the reference must not.
      for (int j = 0; j < half; ++j) {
        const double angle = double(a.positions[t]) * double(a.inv_freq[j]);
        cos_t[j] = float(std::cos(angle));
        sin_t[j] = float(std::sin(angle));
      }
      rotate_heads(q + size_t(t) * a.q_stride, a.n_q_heads, a.head_dim, cos_t.data(), sin_t.data());
      rotate_heads(k + size_t(t) * a.k_stride, a.n_kv_heads, a.head_dim, cos_t.data(),
                   sin_t.data());
    }
  }
}

}  // namespace

void register_rope_cpu(Registry& r) {
  r.add(make_entry<RopeArgs, rope_cpu, rope_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: rotate-half, angles and sin/cos in double"));
}

}  // namespace lantern::kernels
