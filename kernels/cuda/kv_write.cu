// kv_write: scatter each token's k and v rows into its paged block (one kernel,
// not a copy per chunk).
//
// Variant 1 (seed, as a kernel): one block per token; 16-byte vectors when the
// row (n_kv_heads * head_dim) and pointers allow it. A token whose position or
// block-table entry is out of range is skipped (never written outside the pool);
// the CPU reference throws on it instead.
// Variant 2 (seed_pdl): variant 1's kernel launched with programmatic
//   dependent launch (kernels/cuda/cuda_common.cuh): its blocks start while the
//   previous kernel drains and wait at griddepcontrol.wait before reading; every
//   variant's kernel triggers its dependents early (no effect on results).
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

template <class T>  // uint4 (8 bf16) or bf16
__global__ void kv_write_kernel(const T* __restrict__ k, const T* __restrict__ v, T* pool,
                                const int32_t* __restrict__ positions,
                                const int32_t* __restrict__ seq_slots,
                                const int32_t* __restrict__ block_tables, int block_size,
                                int max_blocks_per_seq, int row_units, int stride_units) {
  trigger_dependents();
  grid_dependency_wait();  // PDL variants: the previous kernel's writes are visible after this
  const int i = blockIdx.x;
  const int pos = positions[i], slot = seq_slots[i];
  const long long row = kv_cache_row(pos, slot, block_tables, block_size, max_blocks_per_seq, row_units);
  if (row < 0) return;
  T* k_dst = pool + row;
  T* v_dst = k_dst + size_t(block_size) * row_units;
  const T* k_src = k + size_t(i) * stride_units;
  const T* v_src = v + size_t(i) * stride_units;
  for (int e = threadIdx.x; e < row_units; e += blockDim.x) {
    k_dst[e] = k_src[e];
    v_dst[e] = v_src[e];
  }
}

void kv_write_impl(const KvWriteArgs& a, const LaunchCtx& ctx, bool pdl) {
  const KvCacheRef& c = a.cache;
  const int row = c.n_kv_heads * c.head_dim;
  LANTERN_CHECK(c.n_kv_heads > 0 && c.head_dim > 0 && c.block_size > 0 && c.max_blocks_per_seq > 0,
                "kv_write.seed: bad cache shape (kv heads %d, head_dim %d, block %d, blocks/seq %d)",
                c.n_kv_heads, c.head_dim, c.block_size, c.max_blocks_per_seq);
  LANTERN_CHECK(a.kv_stride >= row, "kv_write.seed: kv_stride %d < n_kv_heads*head_dim %d",
                a.kv_stride, row);
  if (a.n == 0) return;
  const bool vec = row % 8 == 0 && a.kv_stride % 8 == 0 && aligned(a.k, 16) && aligned(a.v, 16) &&
                   aligned(c.pool, 16);
  if (vec)
    launch_kernel(pdl, kv_write_kernel<uint4>, dim3(a.n), dim3(128), 0, ctx.stream,
                  static_cast<const uint4*>(a.k), static_cast<const uint4*>(a.v),
                  static_cast<uint4*>(c.pool), a.positions, a.seq_slots, c.block_tables,
                  c.block_size, c.max_blocks_per_seq, row / 8, a.kv_stride / 8);
  else
    launch_kernel(pdl, kv_write_kernel<bf16>, dim3(a.n), dim3(128), 0, ctx.stream,
                  static_cast<const bf16*>(a.k), static_cast<const bf16*>(a.v),
                  static_cast<bf16*>(c.pool), a.positions, a.seq_slots, c.block_tables,
                  c.block_size, c.max_blocks_per_seq, row, a.kv_stride);
  CUDA_CHECK_LAST("kv_write_kernel");
}

void kv_write_seed(const KvWriteArgs& a, const LaunchCtx& ctx) {
  kv_write_impl(a, ctx, false);
}
void kv_write_pdl(const KvWriteArgs& a, const LaunchCtx& ctx) {
  kv_write_impl(a, ctx, true);
}

}  // namespace

void register_kv_write_cuda(Registry& r) {
  r.add(make_entry<KvWriteArgs, kv_write_seed, kv_write_cost<2>>(
      1, "seed", Backend::cuda,
      "one block per token copies its k and v rows into the paged block (16-byte vectors)",
      kTestedOnly));
  r.add(make_entry<KvWriteArgs, kv_write_pdl, kv_write_cost<2>>(
      2, "seed_pdl", Backend::cuda,
      "seed launched with programmatic dependent launch: its blocks are scheduled while the "
      "previous kernel finishes and wait (griddepcontrol.wait) before reading",
      kPreferred));
}

}  // namespace lantern::kernels
