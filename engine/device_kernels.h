#pragma once
// Small engine-side device helpers that are not kernel families (they move
// bookkeeping, not model math).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace lantern {

// dst[pairs[2i]] = pairs[2i+1] for i < n (incremental block-table update).
void launch_scatter_i32(int32_t* dst, const int32_t* pairs, int n, cudaStream_t stream);
// dst[i] = src[index[i]] for i < n where index[i] >= 0 (the overlapped decode's token gather).
void launch_gather_i32(int32_t* dst, const int32_t* src, const int32_t* index, int n, cudaStream_t stream);

// Rows of two matrices gathered by one index (the pruned last layer's
// head_gather): a_dst[i] = a_src[index[i]] (a_row bytes each) and the same for
// b, i < n; an index outside [0, src_rows) gives a zero row, never a read
// outside the sources.
void launch_gather_rows(void* a_dst, const void* a_src, size_t a_row, void* b_dst, const void* b_src, size_t b_row,
                        const int32_t* index, int n, int src_rows, cudaStream_t stream);

}  // namespace lantern
