// gemm, variant 0: c[m, n] = a[m, k] @ w[n, k]^T, float accumulate, bf16 weights
// widened on the fly.
//
// This is the one CPU kernel that has to be fast (it is ~all the FLOPs of a forward
// pass), so it is cache-blocked and register-tiled (gemm_cpu_tile.inc) and
// compiled for three x86 levels, picked at run time: the build targets baseline
// x86-64, but the machines it runs on have AVX2/FMA or AVX-512. Threads split the
// rows of w (output columns), so every c element is summed by one thread in a
// fixed order: results do not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/costs.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lantern::kernels {
namespace {

// Output columns per thread task and k per widened chunk: NB x KC floats of
// widened weights (64 KiB) stay in L2 while every row of a streams past them.
constexpr int kColumnBlock = 16;
constexpr int kChunk = 1024;

namespace gemm_generic {
#define LANTERN_GEMM_LANES 4
#define LANTERN_GEMM_MR 2
#define LANTERN_GEMM_NR 4
#include "kernels/cpu/gemm_cpu_tile.inc"
#undef LANTERN_GEMM_LANES
#undef LANTERN_GEMM_MR
#undef LANTERN_GEMM_NR
}  // namespace gemm_generic

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LANTERN_GEMM_X86 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace gemm_avx2 {
#define LANTERN_GEMM_LANES 8
#define LANTERN_GEMM_MR 2
#define LANTERN_GEMM_NR 4
#include "kernels/cpu/gemm_cpu_tile.inc"
#undef LANTERN_GEMM_LANES
#undef LANTERN_GEMM_MR
#undef LANTERN_GEMM_NR
}  // namespace gemm_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
namespace gemm_avx512 {
#define LANTERN_GEMM_LANES 16
#define LANTERN_GEMM_MR 4
#define LANTERN_GEMM_NR 4
#include "kernels/cpu/gemm_cpu_tile.inc"
#undef LANTERN_GEMM_LANES
#undef LANTERN_GEMM_MR
#undef LANTERN_GEMM_NR
}  // namespace gemm_avx512
#pragma GCC pop_options
#endif

using ColumnBlockFn = void (*)(const float*, const uint16_t*, float*, int, int, int, int, int, int,
                               float*);

struct IsaLevel {
  const char* name;
  ColumnBlockFn fn;
  bool supported;
};

// Best first. Every level the host can run is kept so tests can cover them all.
std::vector<IsaLevel> isa_levels() {
  std::vector<IsaLevel> levels;
#ifdef LANTERN_GEMM_X86
  __builtin_cpu_init();
  levels.push_back({"avx512", gemm_avx512::gemm_column_block,
                    __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")});
  levels.push_back({"avx2", gemm_avx2::gemm_column_block,
                    __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")});
#endif
  levels.push_back({"generic", gemm_generic::gemm_column_block, true});
  return levels;
}

void gemm_with(ColumnBlockFn column_block, const GemmArgs& g) {
  const auto* a = static_cast<const float*>(g.a);     // [m, k]
  const auto* w = static_cast<const uint16_t*>(g.w);  // bf16 [n, k]
  auto* c = static_cast<float*>(g.c);                 // [m, n] (float whether or not c_f32)
  LANTERN_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative shape m=%d n=%d k=%d", g.m, g.n,
                g.k);
  const int blocks = (g.n + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel if (blocks > 1 && double(g.m) * g.n * g.k > 1e5)
  {
    std::vector<float> wbuf(size_t(kColumnBlock) * kChunk);
    // Dynamic: a thread that the OS delays (shared machines) does not hold up the
    // others; results stay deterministic since a column block is summed by one thread.
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < blocks; ++b) {
      const int n0 = b * kColumnBlock;
      column_block(a, w, c, g.m, g.n, g.k, n0, std::min(kColumnBlock, g.n - n0), kChunk,
                   wbuf.data());
    }
  }
}

void gemm_cpu(const GemmArgs& g, const LaunchCtx&) {
  static const ColumnBlockFn best = [] {
    for (const IsaLevel& level : isa_levels())
      if (level.supported) return level.fn;
    return gemm_generic::gemm_column_block;
  }();
  gemm_with(best, g);
}

}  // namespace

std::vector<std::string> gemm_cpu_isa_levels() {
  std::vector<std::string> names;
  for (const IsaLevel& level : isa_levels())
    if (level.supported) names.push_back(level.name);
  return names;
}

void gemm_cpu_at_level(const GemmArgs& args, std::string_view level) {
  for (const IsaLevel& l : isa_levels())
    if (l.supported && level == l.name) return gemm_with(l.fn, args);
  LANTERN_FAIL("gemm_cpu: instruction-set level '%.*s' is not available on this CPU",
               int(level.size()), level.data());
}

void register_gemm_cpu(Registry& r) {
  r.add(make_entry<GemmArgs, gemm_cpu, gemm_cost<4>>(
      0, "cpu_ref", Backend::cpu,
      "CPU fp32 reference: OpenMP over w rows, bf16 block widened once, AVX2/AVX-512 register "
      "tiles"));
}

}  // namespace lantern::kernels
