// kv_write, variant 0: scatter each token's k and v rows into its paged block.
#include <cstring>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

void kv_write_cpu(const KvWriteArgs& a, const LaunchCtx&) {
  const auto* k = static_cast<const float*>(a.k);  // [n, kv_stride]
  const auto* v = static_cast<const float*>(a.v);  // [n, kv_stride]
  auto* pool = static_cast<float*>(a.cache.pool);  // [blocks][2][block_size][n_kv][hd]
  const KvCacheRef& c = a.cache;
  const size_t row_elems = size_t(c.n_kv_heads) * c.head_dim;
  const size_t block_elems = 2 * size_t(c.block_size) * row_elems;
  LANTERN_CHECK(a.kv_stride >= int(row_elems), "kv_write: kv_stride %d < n_kv_heads*head_dim %zu",
                a.kv_stride, row_elems);
  // Validate every token before writing any, so a bad call leaves the pool as it was.
  for (int i = 0; i < a.n; ++i) {
    const int pos = a.positions[i];
    LANTERN_CHECK(pos >= 0 && pos / c.block_size < c.max_blocks_per_seq && a.seq_slots[i] >= 0,
                  "kv_write: token %d (slot %d, position %d) is outside the block table (%d blocks "
                  "of %d)",
                  i, a.seq_slots[i], pos, c.max_blocks_per_seq, c.block_size);
    const int block =
        c.block_tables[size_t(a.seq_slots[i]) * c.max_blocks_per_seq + pos / c.block_size];
    LANTERN_CHECK(block >= 0, "kv_write: slot %d has no block for position %d (table entry %d)",
                  a.seq_slots[i], pos, block);
  }
  for (int i = 0; i < a.n; ++i) {
    const int pos = a.positions[i];
    const int block =
        c.block_tables[size_t(a.seq_slots[i]) * c.max_blocks_per_seq + pos / c.block_size];
    float* k_dst = pool + size_t(block) * block_elems + size_t(pos % c.block_size) * row_elems;
    float* v_dst = k_dst + size_t(c.block_size) * row_elems;
    std::memcpy(k_dst, k + size_t(i) * a.kv_stride, row_elems * sizeof(float));
    std::memcpy(v_dst, v + size_t(i) * a.kv_stride, row_elems * sizeof(float));
  }
}

}  // namespace

void register_kv_write_cpu(Registry& r) {
  r.add(make_entry<KvWriteArgs, kv_write_cpu, kv_write_cost<4>>(
      0, "cpu_ref", Backend::cpu, "CPU fp32 reference: one row copy per token into its block"));
}

}  // namespace lantern::kernels
