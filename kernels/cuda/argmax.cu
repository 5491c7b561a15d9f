// argmax: index of the largest logit per row; ties to the lowest index, NaN
// below every number (kernels/sampling.h argmax_better, shared with the CPU).
//
// Variant 1 (seed): the seed's approach, kept for comparison: copy all logits to
//   the host, scan there, copy the ids back to `out` (device). Synchronises the
//   stream twice; cannot be captured in a CUDA graph.
// Variant 2 (gpu_2pass): on the GPU in two launches: blocks of 256 threads
//   reduce 4096-logit chunks of each row (float4 loads) to one (value, index)
//   pair in the workspace, then one warp per row reduces the chunks.
// Variant 3 (gpu_1pass, session 33; tested only until the H200 has run it):
//   variant 2's chunk pass in one PDL-launched kernel whose blocks are
//   scheduled while the LM head drains (griddepcontrol.wait before reading the
//   logits); the last chunk block of each row (a fence and one counter per
//   row) reduces the row's chunk pairs -- no second launch and no gap before
//   it on the step's critical path (predicted −2…−3 µs per decode step).
//   Rows beyond its counters (more than 1024): variant 2.
#include <algorithm>
#include <climits>
#include <vector>

#include "kernels/costs.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/stream_slot.h"
#include "kernels/sampling.h"

namespace lantern::kernels {
namespace {
using namespace cuda_detail;

void check_argmax(const ArgmaxArgs& a, const char* who) {
  LANTERN_CHECK(a.b >= 0 && a.vocab > 0, "%s: bad shape b=%d vocab=%d", who, a.b, a.vocab);
}

// ------------------------------------------------------------------ variant 1
void argmax_seed(const ArgmaxArgs& a, const LaunchCtx& ctx) {
  check_argmax(a, "argmax.seed");
  if (a.b == 0) return;
  std::vector<float> host(size_t(a.b) * a.vocab);
  std::vector<int32_t> ids(a.b);
  CUDA_CHECK(cudaMemcpyAsync(host.data(), a.logits, host.size() * sizeof(float),
                             cudaMemcpyDeviceToHost, ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  for (int r = 0; r < a.b; ++r) {
    const float* row = host.data() + size_t(r) * a.vocab;
    int32_t best = 0;
    for (int32_t i = 1; i < a.vocab; ++i)
      if (sampling::argmax_better(row[i], i, row[best], best)) best = i;
    ids[r] = best;
  }
  CUDA_CHECK(cudaMemcpyAsync(a.out, ids.data(), ids.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // ids is freed on return
}

// ------------------------------------------------------------------ variant 2
constexpr int kChunk = 4096;       // logits per block of the first pass
constexpr int kChunkThreads = 256;

struct ArgBest {
  float value;
  int32_t index;
};

__device__ __forceinline__ void take_better(ArgBest& best, float v, int32_t i) {
  if (sampling::argmax_better(v, i, best.value, best.index)) best = {v, i};
}

__device__ __forceinline__ ArgBest warp_argmax(ArgBest b) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, b.value, o);
    const int32_t i = __shfl_xor_sync(kFullMask, b.index, o);
    take_better(b, v, i);
  }
  return b;
}

// (NaN, INT_MAX) ranks after everything: the identity of the reduction.
__device__ __forceinline__ ArgBest argmax_identity() { return {__int_as_float(0x7fc00000), INT_MAX}; }

// The best (value, index) of a row's 4096-logit chunk, in thread 0 (every
// thread of the block calls it).
template <bool kVec>
__device__ __forceinline__ ArgBest chunk_best(const float* __restrict__ x, int chunk, int vocab) {
  __shared__ ArgBest warp_best[kChunkThreads / kWarp];
  const int begin = chunk * kChunk, end = min(begin + kChunk, vocab);
  ArgBest best = argmax_identity();
  if constexpr (kVec) {
    for (int i = begin + 4 * threadIdx.x; i < end; i += 4 * kChunkThreads) {
      const float4 v = *reinterpret_cast<const float4*>(x + i);
      take_better(best, v.x, i);
      take_better(best, v.y, i + 1);
      take_better(best, v.z, i + 2);
      take_better(best, v.w, i + 3);
    }
  } else {
    for (int i = begin + threadIdx.x; i < end; i += kChunkThreads) take_better(best, x[i], i);
  }
  best = warp_argmax(best);
  if (threadIdx.x % kWarp == 0) warp_best[threadIdx.x / kWarp] = best;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    best = threadIdx.x < kChunkThreads / kWarp ? warp_best[threadIdx.x] : argmax_identity();
    best = warp_argmax(best);
  }
  return best;
}

template <bool kVec>
__global__ void __launch_bounds__(kChunkThreads)
    argmax_chunk_kernel(const float* __restrict__ logits, ArgBest* __restrict__ partial, int vocab,
                        int chunks) {
  const int row = blockIdx.y, chunk = blockIdx.x;
  const ArgBest best = chunk_best<kVec>(logits + size_t(row) * vocab, chunk, vocab);
  if (threadIdx.x == 0) partial[size_t(row) * chunks + chunk] = best;
}

__global__ void argmax_final_kernel(const ArgBest* __restrict__ partial, int32_t* __restrict__ out,
                                    int b, int chunks) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= b) return;
  ArgBest best = argmax_identity();
  for (int c = threadIdx.x % kWarp; c < chunks; c += kWarp) {
    const ArgBest p = partial[size_t(row) * chunks + c];
    take_better(best, p.value, p.index);
  }
  best = warp_argmax(best);
  // A row of all NaN: the identity's index never wins against a real one, so
  // the lowest NaN index (0) is the answer, as on the CPU.
  if (threadIdx.x % kWarp == 0) out[row] = best.index;
}

// ------------------------------------------------------------------ variant 3
constexpr int kOnePassRows = 1024;  // rows with a counter
constexpr int kOnePassStreams = 4;  // streams of a device with their own counters (stream_slot.h)
// A row's chunk blocks done (its last resets it), one set per stream slot.
__device__ unsigned int g_argmax_done[kOnePassStreams * kOnePassRows];

template <bool kVec>
__global__ void __launch_bounds__(kChunkThreads)
    argmax_1pass_kernel(const float* __restrict__ logits, ArgBest* __restrict__ partial, int32_t* __restrict__ out,
                        unsigned int* __restrict__ done, int vocab, int chunks) {
  __shared__ bool last;
  grid_dependency_wait();  // the logits are the previous kernel's
  trigger_dependents();
  const int row = blockIdx.y, chunk = blockIdx.x;
  ArgBest best = chunk_best<kVec>(logits + size_t(row) * vocab, chunk, vocab);
  if (threadIdx.x == 0) {
    partial[size_t(row) * chunks + chunk] = best;
    __threadfence();  // the pair is visible device-wide before the block counts
    last = atomicAdd(&done[row], 1u) == unsigned(chunks - 1);
  }
  __syncthreads();
  if (!last || threadIdx.x >= kWarp) return;
  __threadfence();  // order the reads after the other blocks' counted pairs
  best = argmax_identity();
  for (int c = threadIdx.x; c < chunks; c += kWarp) {  // through L2: other blocks wrote them
    const int2 p = __ldcg(reinterpret_cast<const int2*>(partial + size_t(row) * chunks + c));
    take_better(best, __int_as_float(p.x), p.y);
  }
  best = warp_argmax(best);
  if (threadIdx.x == 0) {
    out[row] = best.index;  // all NaN: index 0, as in variant 2
    done[row] = 0;  // every chunk block of the row has counted
  }
}

size_t argmax_2pass_workspace(const WorkspaceShape& s) {
  const size_t rows = std::max(s.max_seqs, s.max_batch_tokens);
  return rows * size_t(ceil_div(s.vocab, kChunk)) * sizeof(ArgBest);
}

void argmax_2pass(const ArgmaxArgs& a, const LaunchCtx& ctx) {
  check_argmax(a, "argmax.gpu_2pass");
  if (a.b == 0) return;
  const int chunks = ceil_div(a.vocab, kChunk);
  const size_t need = size_t(a.b) * chunks * sizeof(ArgBest);
  LANTERN_CHECK(ctx.workspace && ctx.workspace_bytes >= need,
                "argmax.gpu_2pass: workspace of %zu bytes is smaller than the %zu it needs for "
                "b=%d rows of %d", ctx.workspace_bytes, need, a.b, a.vocab);
  LANTERN_CHECK(a.b <= 65535, "argmax.gpu_2pass: b=%d rows exceeds 65535", a.b);
  auto* partial = static_cast<ArgBest*>(ctx.workspace);
  const dim3 grid(chunks, a.b);
  if (a.vocab % 4 == 0 && aligned(a.logits, 16))
    argmax_chunk_kernel<true><<<grid, kChunkThreads, 0, ctx.stream>>>(a.logits, partial, a.vocab, chunks);
  else
    argmax_chunk_kernel<false><<<grid, kChunkThreads, 0, ctx.stream>>>(a.logits, partial, a.vocab, chunks);
  CUDA_CHECK_LAST("argmax_chunk_kernel");
  const int rows_per_block = 4;
  argmax_final_kernel<<<ceil_div(a.b, rows_per_block), rows_per_block * kWarp, 0, ctx.stream>>>(
      partial, a.out, a.b, chunks);
  CUDA_CHECK_LAST("argmax_final_kernel");
}

void argmax_1pass(const ArgmaxArgs& a, const LaunchCtx& ctx) {
  check_argmax(a, "argmax.gpu_1pass");
  if (a.b == 0) return;
  if (a.b > kOnePassRows) return argmax_2pass(a, ctx);
  const int chunks = ceil_div(a.vocab, kChunk);
  const size_t need = size_t(a.b) * chunks * sizeof(ArgBest);
  LANTERN_CHECK(ctx.workspace && ctx.workspace_bytes >= need,
                "argmax.gpu_1pass: workspace of %zu bytes is smaller than the %zu it needs for "
                "b=%d rows of %d", ctx.workspace_bytes, need, a.b, a.vocab);
  auto* partial = static_cast<ArgBest*>(ctx.workspace);
  unsigned int* done = stream_slot<kOnePassStreams, kOnePassRows>(ctx.stream, g_argmax_done);
  const dim3 grid(chunks, a.b);
  if (a.vocab % 4 == 0 && aligned(a.logits, 16))
    launch_kernel(true, argmax_1pass_kernel<true>, grid, dim3(kChunkThreads), 0, ctx.stream, a.logits, partial, a.out,
                  done, a.vocab, chunks);
  else
    launch_kernel(true, argmax_1pass_kernel<false>, grid, dim3(kChunkThreads), 0, ctx.stream, a.logits, partial,
                  a.out, done, a.vocab, chunks);
  CUDA_CHECK_LAST("argmax_1pass_kernel");
}

}  // namespace

void register_argmax_cuda(Registry& r) {
  r.add(make_entry<ArgmaxArgs, argmax_seed, argmax_cost<2>>(
      1, "seed", Backend::cuda,
      "the seed's: copy logits to the host, scan there, copy ids back (two syncs)",
      kTestedOnly));
  r.add(make_entry<ArgmaxArgs, argmax_2pass, argmax_cost<2>>(
      2, "gpu_2pass", Backend::cuda,
      "GPU: 4096-logit chunks reduced per block (float4 loads), one warp per row finishes",
      kPreferred, argmax_2pass_workspace));
  r.add(make_entry<ArgmaxArgs, argmax_1pass, argmax_cost<2>>(
      3, "gpu_1pass", Backend::cuda,
      "variant 2's chunk pass PDL-launched, the last chunk block of each row reducing the row: one "
      "launch, no gap before a second (more than 1024 rows: variant 2)",
      kTestedOnly, argmax_2pass_workspace));
}

}  // namespace lantern::kernels
