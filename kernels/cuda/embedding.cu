// embedding: out[i] = table[ids[i]] (bf16 rows gathered into bf16 activations).
//
// Variant 1 (seed): one block per token copies its row, 16 bytes per thread
// when the row allows it. An id outside [0, vocab) cannot be reported from the
// device, so its row is filled with NaN (never a read outside the table); the
// CPU reference throws instead.
#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

template <bool kVec>
__global__ void embedding_gather_kernel(const int32_t* __restrict__ ids,
                                        const bf16* __restrict__ table,  // [vocab, hidden]
                                        bf16* __restrict__ out,          // [n, hidden]
                                        int hidden, int vocab) {
  const int row = blockIdx.x;
  const int id = ids[row];
  const bool valid = id >= 0 && id < vocab;
  bf16* dst = out + size_t(row) * hidden;
  const bf16* src = table + size_t(valid ? id : 0) * hidden;
  if constexpr (kVec) {
    const int vecs = hidden / 8;
    uint4 nan8;
    nan8.x = nan8.y = nan8.z = nan8.w = 0x7fc07fc0u;  // bf16 quiet NaN pairs
    for (int v = threadIdx.x; v < vecs; v += blockDim.x)
      reinterpret_cast<uint4*>(dst)[v] = valid ? reinterpret_cast<const uint4*>(src)[v] : nan8;
  } else {
    for (int j = threadIdx.x; j < hidden; j += blockDim.x)
      dst[j] = valid ? src[j] : __float2bfloat16(NAN);
  }
}

void embedding_seed(const EmbeddingArgs& a, const LaunchCtx& ctx) {
  LANTERN_CHECK(a.n >= 0 && a.hidden > 0 && a.vocab > 0,
                "embedding.seed: bad shape n=%d hidden=%d vocab=%d", a.n, a.hidden, a.vocab);
  if (a.n == 0) return;
  const bool vec = a.hidden % 8 == 0 && aligned(a.table, 16) && aligned(a.out, 16);
  const int threads = 256;
  if (vec)
    embedding_gather_kernel<true><<<a.n, threads, 0, ctx.stream>>>(
        a.ids, static_cast<const bf16*>(a.table), static_cast<bf16*>(a.out), a.hidden, a.vocab);
  else
    embedding_gather_kernel<false><<<a.n, threads, 0, ctx.stream>>>(
        a.ids, static_cast<const bf16*>(a.table), static_cast<bf16*>(a.out), a.hidden, a.vocab);
  CUDA_CHECK_LAST("embedding_gather_kernel");
}

}  // namespace

void register_embedding_cuda(Registry& r) {
  r.add(make_entry<EmbeddingArgs, embedding_seed, embedding_cost<2>>(
      1, "seed", Backend::cuda,
      "one block per token copies its bf16 row (16-byte vectors); bad ids give NaN rows",
      kPreferred));
}

}  // namespace lantern::kernels
