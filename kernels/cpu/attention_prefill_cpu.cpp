// attention_prefill, variant 0: causal GQA attention over whole prompts, one
// (sequence, query head) per task; query i of a sequence sees its keys 0..i.
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/attention_common_cpu.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void attention_prefill_cpu(const AttentionPrefillArgs& a, const LaunchCtx&) {
  const auto* q = static_cast<const float*>(a.q);  // [n, q_stride]
  const auto* k = static_cast<const float*>(a.k);  // [n, kv_stride]
  const auto* v = static_cast<const float*>(a.v);  // [n, kv_stride]
  auto* out = static_cast<float*>(a.out);          // [n, q_stride], may be q
  const int32_t* starts = a.seq_starts;            // [num_seqs + 1], host on CPU
  LANTERN_CHECK(a.n_kv_heads > 0 && a.n_q_heads % a.n_kv_heads == 0,
                "attention_prefill: %d query heads do not group onto %d kv heads", a.n_q_heads,
                a.n_kv_heads);
  for (int s = 0; s < a.num_seqs; ++s)
    LANTERN_CHECK(starts[s] <= starts[s + 1],
                  "attention_prefill: seq_starts decrease at %d (%d > %d)", s, starts[s],
                  starts[s + 1]);
  const int group = a.n_q_heads / a.n_kv_heads;
  const int tasks = a.num_seqs * a.n_q_heads;
#pragma omp parallel
  {
    std::vector<float> scores, q_copy;
    std::vector<double> acc;
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int s = task / a.n_q_heads, h = task % a.n_q_heads;
      const size_t kv_off = size_t(h / group) * a.head_dim;
      const int first = starts[s];
      for (int i = first; i < starts[s + 1]; ++i) {
        // Row i of out only overwrites head h of q row i, which only this task
        // reads, and attend_one copies it first: safe when out == q.
        cpu_detail::attend_one(
            q + size_t(i) * a.q_stride + size_t(h) * a.head_dim, a.head_dim, i - first + 1, a.scale,
            [&](int t) { return k + size_t(first + t) * a.kv_stride + kv_off; },
            [&](int t) { return v + size_t(first + t) * a.kv_stride + kv_off; }, scores, q_copy,
            acc, out + size_t(i) * a.q_stride + size_t(h) * a.head_dim);
      }
    }
  }
}

}  // namespace

void register_attention_prefill_cpu(Registry& r) {
  r.add(make_entry<AttentionPrefillArgs, attention_prefill_cpu, attention_prefill_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: per (sequence, head) two-pass softmax, masked keys never scored"));
}

}  // namespace lantern::kernels
