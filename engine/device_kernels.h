#pragma once
// Small engine-side device helpers that are not kernel families (they move
// bookkeeping, not model math).
#include <cstdint>

#include <cuda_runtime_api.h>

namespace lantern {

// dst[pairs[2i]] = pairs[2i+1] for i < n (incremental block-table update).
void launch_scatter_i32(int32_t* dst, const int32_t* pairs, int n, cudaStream_t stream);
// dst[i] = src[index[i]] for i < n where index[i] >= 0 (the overlapped decode's token gather).
void launch_gather_i32(int32_t* dst, const int32_t* src, const int32_t* index, int n, cudaStream_t stream);

}  // namespace lantern
