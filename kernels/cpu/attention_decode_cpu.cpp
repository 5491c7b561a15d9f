// attention_decode, variant 0: one query per sequence against its paged K/V.
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/attention_common_cpu.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void attention_decode_cpu(const AttentionDecodeArgs& a, const LaunchCtx&) {
  const auto* q = static_cast<const float*>(a.q);  // [b, q_stride]
  auto* out = static_cast<float*>(a.out);          // [b, q_stride], may be q
  const KvCacheRef& c = a.cache;
  const auto* pool = static_cast<const float*>(c.pool);  // [blocks][2][block_size][n_kv][hd]
  LANTERN_CHECK(c.n_kv_heads > 0 && a.n_q_heads % c.n_kv_heads == 0,
                "attention_decode: %d query heads do not group onto %d kv heads", a.n_q_heads,
                c.n_kv_heads);
  for (int i = 0; i < a.b; ++i) {
    const int len = a.context_lens[i];
    LANTERN_CHECK(len >= 1 && (len - 1) / c.block_size < c.max_blocks_per_seq,
                  "attention_decode: sequence %d has context %d (must be 1..%d)", i, len,
                  c.max_blocks_per_seq * c.block_size);
    const int32_t* table = c.block_tables + size_t(a.seq_slots[i]) * c.max_blocks_per_seq;
    for (int blk = 0; blk <= (len - 1) / c.block_size; ++blk)
      LANTERN_CHECK(table[blk] >= 0, "attention_decode: slot %d has no block %d for context %d",
                    a.seq_slots[i], blk, len);
  }
  const size_t row_elems = size_t(c.n_kv_heads) * c.head_dim;
  const size_t half_block = size_t(c.block_size) * row_elems;  // k (or v) part of a block
  const int group = a.n_q_heads / c.n_kv_heads;
  const int tasks = a.b * a.n_q_heads;
#pragma omp parallel if (tasks > 1)
  {
    std::vector<float> scores, q_copy;
    std::vector<double> acc;
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int i = task / a.n_q_heads, h = task % a.n_q_heads;
      const int32_t* table = c.block_tables + size_t(a.seq_slots[i]) * c.max_blocks_per_seq;
      const size_t head_off = size_t(h / group) * c.head_dim;
      auto row = [&](int t, int kv) {
        return pool + size_t(table[t / c.block_size]) * 2 * half_block + kv * half_block +
               size_t(t % c.block_size) * row_elems + head_off;
      };
      cpu_detail::attend_one(
          q + size_t(i) * a.q_stride + size_t(h) * c.head_dim, c.head_dim, a.context_lens[i],
          a.scale, [&](int t) { return row(t, 0); }, [&](int t) { return row(t, 1); }, scores,
          q_copy, acc, out + size_t(i) * a.q_stride + size_t(h) * c.head_dim);
    }
  }
}

}  // namespace

void register_attention_decode_cpu(Registry& r) {
  r.add(make_entry<AttentionDecodeArgs, attention_decode_cpu, attention_decode_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: per (sequence, head) two-pass softmax over the block table"));
}

}  // namespace lantern::kernels
