#pragma once
// The one-query attention both CPU attention variants use, so prefill and decode
// share their arithmetic (decode == prefill's last row is then a test of the
// paging, not of two softmax implementations).
#include <cmath>
#include <vector>

namespace lantern::kernels::cpu_detail {

// out[hd] = softmax(scale * q . k_t, t < len) @ v_t, exact two-pass softmax.
// key(t) / value(t) return pointers to head_dim floats. `scores` is scratch.
// out may alias q: q is copied before anything is written.
template <class KeyFn, class ValueFn>
void attend_one(const float* q, int head_dim, int len, float scale, KeyFn key, ValueFn value,
                std::vector<float>& scores, std::vector<float>& q_copy, std::vector<double>& acc,
                float* out) {
  q_copy.assign(q, q + head_dim);
  scores.resize(len);
  float max_score = -INFINITY;
  for (int t = 0; t < len; ++t) {
    const float* k = key(t);
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int d = 0; d < head_dim; ++d) dot += q_copy[d] * k[d];
    scores[t] = dot * scale;
    if (scores[t] > max_score) max_score = scores[t];
  }
  // len == 0 cannot happen causally (a token sees itself); guard so a caller bug
  // shows up as zeros, never as NaN from 0/0.
  acc.assign(head_dim, 0.0);
  double denom = 0;
  for (int t = 0; t < len; ++t) {
    const double p = std::exp(double(scores[t] - max_score));
    denom += p;
    const float* v = value(t);
    for (int d = 0; d < head_dim; ++d) acc[d] += p * v[d];
  }
  const double inv = denom > 0 ? 1.0 / denom : 0.0;
  for (int d = 0; d < head_dim; ++d) out[d] = float(acc[d] * inv);
}

}  // namespace lantern::kernels::cpu_detail
