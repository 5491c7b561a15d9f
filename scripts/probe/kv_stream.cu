// Probe (issue 14, session 13): how fast can an SM-resident ring read the paged
// KV cache's access patterns from HBM? No attention arithmetic -- only the loads
// decode attention issues -- so the numbers bound what a kernel of that shape can
// reach. Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/kv_stream scripts/probe/kv_stream.cu && /tmp/kv_stream
// Patterns (each reads every byte of a 1 GiB buffer once per launch, L2 cold):
//   contig   : blocks stream 16 B cp.async pieces of contiguous tiles
//   head     : a block reads one kv head's 128 B rows (1 KB apart: 8 heads x 64 dims x bf16),
//              as attention_decode.6/12/13 do; 8 blocks share a region
//   bulk     : one cp.async.bulk of a whole tile per stage (mbarrier), contiguous
//   items    : like variant 13 at batch 256: many short-lived blocks, each reading
//              `tiles` tiles of one head and exiting
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N> __device__ __forceinline__ void waitg() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Byte offset of piece p (16 B) of tile t for the pattern.
// contig: tile t is bytes [t*T, (t+1)*T). head: tile t of block-stream (region, head):
// keys k of the tile are rows (key * 1024 + head * 128), 8 pieces per key.
template <int St>
__global__ void __launch_bounds__(128) ring_kernel(const uint8_t* buf, size_t bytes, int tile_bytes, int pattern,
                                                   unsigned* sink) {
  extern __shared__ __align__(16) uint8_t sm[];
  const int pieces = tile_bytes / 16;
  const size_t n_tiles = bytes / tile_bytes;
  // stream s = blockIdx.x; tiles s, s + G, s + 2G ...
  const size_t G = gridDim.x;
  unsigned acc = 0;
  auto src = [&](size_t tile, int p) -> const uint8_t* {
    if (pattern == 0) return buf + tile * tile_bytes + size_t(p) * 16;
    // head: tile index -> (group of 8 tiles sharing a region, head)
    const size_t region = tile / 8, head = tile % 8;
    const int keys_per_tile = tile_bytes / 128;
    const int key = p / 8, piece = p % 8;
    return buf + region * size_t(keys_per_tile) * 1024 + size_t(key) * 1024 + head * 128 + piece * 16;
  };
  size_t t0 = blockIdx.x;
  int issued = 0;
  for (int s = 0; s < St; ++s) {
    const size_t t = t0 + size_t(s) * G;
    if (t < n_tiles)
      for (int p = threadIdx.x; p < pieces; p += blockDim.x) cp16(sm + s * tile_bytes + p * 16, src(t, p));
    commit();
    ++issued;
  }
  for (size_t i = 0;; ++i) {
    const size_t t = t0 + i * G;
    if (t >= n_tiles) break;
    waitg<St - 1>();
    __syncthreads();
    acc ^= *reinterpret_cast<const unsigned*>(sm + (i % St) * tile_bytes + threadIdx.x * 16 % tile_bytes);
    __syncthreads();
    const size_t tn = t0 + (i + St) * G;
    if (tn < n_tiles)
      for (int p = threadIdx.x; p < pieces; p += blockDim.x) cp16(sm + (i % St) * tile_bytes + p * 16, src(tn, p));
    commit();
  }
  waitg<0>();
  if (acc == 0x12345678u) sink[0] = acc;
}

// Short-lived blocks: block b reads `tiles` tiles of one head (pattern head), all issued at once.
__global__ void __launch_bounds__(128) items_kernel(const uint8_t* buf, int tile_bytes, int tiles, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t sm[];
  const int pieces = tile_bytes / 16, keys_per_tile = tile_bytes / 128;
  const size_t seq = blockIdx.x / 8, head = blockIdx.x % 8;
  const size_t seq_bytes = size_t(tiles) * keys_per_tile * 1024;
  for (int t = 0; t < tiles; ++t) {
    for (int p = threadIdx.x; p < pieces; p += blockDim.x) {
      const int key = t * keys_per_tile + p / 8, piece = p % 8;
      cp16(sm + t * tile_bytes + p * 16, buf + seq * seq_bytes + size_t(key) * 1024 + head * 128 + piece * 16);
    }
    commit();
  }
  waitg<0>();
  __syncthreads();
  unsigned acc = *reinterpret_cast<const unsigned*>(sm + threadIdx.x * 16);
  if (acc == 0x12345678u) sink[0] = acc;
}

__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* b, unsigned tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(b)),
               "r"(tx));
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned phase) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(b);
  asm volatile(
      "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(a), "r"(phase));
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(bytes), "r"((unsigned)__cvta_generic_to_shared(bar))
               : "memory");
}

template <int St>
__global__ void __launch_bounds__(128) bulk_kernel(const uint8_t* buf, size_t bytes, int tile_bytes, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t sm[];
  __shared__ __align__(8) uint64_t bars[St];
  const size_t n_tiles = bytes / tile_bytes, G = gridDim.x, t0 = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < St; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n");
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int s = 0; s < St; ++s) {
      const size_t t = t0 + size_t(s) * G;
      if (t < n_tiles) {
        mbar_expect(&bars[s], tile_bytes);
        bulk_g2s(sm + s * tile_bytes, buf + t * tile_bytes, tile_bytes, &bars[s]);
      }
    }
  unsigned acc = 0;
  for (size_t i = 0;; ++i) {
    const size_t t = t0 + i * G;
    if (t >= n_tiles) break;
    const int s = i % St;
    mbar_wait(&bars[s], (i / St) & 1);
    acc ^= *reinterpret_cast<const unsigned*>(sm + s * tile_bytes + threadIdx.x * 16 % tile_bytes);
    __syncthreads();
    const size_t tn = t0 + (i + St) * G;
    if (threadIdx.x == 0 && tn < n_tiles) {
      mbar_expect(&bars[s], tile_bytes);
      bulk_g2s(sm + s * tile_bytes, buf + tn * tile_bytes, tile_bytes, &bars[s]);
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
  const size_t bytes = size_t(1) << 30;
  uint8_t *buf, *flush;
  unsigned* sink;
  CK(cudaMalloc(&buf, bytes));
  CK(cudaMalloc(&flush, size_t(256) << 20));
  CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(buf, 1, bytes));
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  // L2 flush by reading (not writing) a 256 MB buffer, so no dirty lines remain.
  auto flush_l2 = [&]() { ring_kernel<2><<<sms * 4, 128, 2 * 16384>>>(flush, size_t(256) << 20, 16384, 0, sink); };
  auto timeit = [&](auto launch, size_t nbytes) {
    float best = 1e9;
    for (int r = 0; r < 5; ++r) {
      flush_l2();
      cudaEventRecord(a);
      launch();
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      if (ms < best) best = ms;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
    return nbytes / (best * 1e-3) / 1e9;
  };
  cudaFuncSetAttribute(ring_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaFuncSetAttribute(ring_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaFuncSetAttribute(ring_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaFuncSetAttribute(bulk_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaFuncSetAttribute(bulk_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaFuncSetAttribute(bulk_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaFuncSetAttribute(items_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  printf("SMs %d, 1 GiB read, L2 flushed by a read; GB/s (best of 5)\n", sms);
  const char* names[2] = {"contig", "head"};
  for (int pattern = 0; pattern < 2; ++pattern)
    for (int tile : {8192, 16384, 32768})
      for (int bps : {1, 2, 4, 6})
        for (int st : {2, 3, 4}) {
          const size_t smem = size_t(st) * tile;
          if (smem * bps > (220u << 10)) continue;
          const int G = sms * bps;
          double gbs = timeit(
              [&] {
                if (st == 2) ring_kernel<2><<<G, 128, smem>>>(buf, bytes, tile, pattern, sink);
                if (st == 3) ring_kernel<3><<<G, 128, smem>>>(buf, bytes, tile, pattern, sink);
                if (st == 4) ring_kernel<4><<<G, 128, smem>>>(buf, bytes, tile, pattern, sink);
              },
              bytes);
          printf("%-6s tile %5d B  blocks/SM %d  stages %d  in flight/SM %4zu KB : %7.0f GB/s\n", names[pattern], tile,
                 bps, st, smem * bps >> 10, gbs);
        }
  for (int tile : {16384, 32768})
    for (int bps : {1, 2, 4})
      for (int st : {2, 3, 4}) {
        const size_t smem = size_t(st) * tile;
        if (smem * bps > (220u << 10)) continue;
        const int G = sms * bps;
        double gbs = timeit(
            [&] {
              if (st == 2) bulk_kernel<2><<<G, 128, smem>>>(buf, bytes, tile, sink);
              if (st == 3) bulk_kernel<3><<<G, 128, smem>>>(buf, bytes, tile, sink);
              if (st == 4) bulk_kernel<4><<<G, 128, smem>>>(buf, bytes, tile, sink);
            },
            bytes);
        printf("bulk   tile %5d B  blocks/SM %d  stages %d  in flight/SM %4zu KB : %7.0f GB/s\n", tile, bps, st,
               smem * bps >> 10, gbs);
      }
  // Variant 13's life at batch 256 / ctx 192: 2048 blocks, 3 tiles of 16 KB (64 keys) each = 96 MB.
  for (int seqs : {256, 512, 1024}) {
    const int tiles = 3, tile = 16384;
    const size_t nbytes = size_t(seqs) * 8 * tiles * tile;
    double gbs = timeit([&] { items_kernel<<<seqs * 8, 128, tiles * tile>>>(buf, tile, tiles, sink); }, nbytes);
    printf("items  %d seqs x 8 heads, 3 x 16 KB tiles per block (%zu MB): %7.0f GB/s\n", seqs, nbytes >> 20, gbs);
  }
  return 0;
}
