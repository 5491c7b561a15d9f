// gemm: every CUDA variant against the CPU reference, c = a @ w^T.
// Tolerances: bf16 output: one bf16 rounding (2^-9 relative) dominates, fp32
//   accumulation in another order adds ~1e-4 absolute: atol 2e-3, rtol 8e-3,
//   rel-L2 <= 4e-3. fp32 output (logits): atol 1e-3, rtol 1e-4, rel-L2 <= 2e-5.
// Shapes: the 1B model's projections (2048x2048, 512x2048, 8192x2048,
// 2048x8192, the 128256x2048 LM head in fp32) at decode m = 1, 3, 8 (gemv path),
// 11, 13, 16 (gemm.4/5's two n-tiles; cuBLAS for 2/3) and 9, 64, 512 (cuBLAS), n
// tails (1000 and 40 rows, k 96, 2048, 8192 split), k % 32 != 0 and m > 8 / > 16
// (fallbacks), and a chain of two GEMMs (eager and graph-replayed) for the
// programmatic-dependent-launch variant. gemm.6 (lt_planned) also on the fused
// op table's shapes at m = 1..512 beside gemm.1, with its recorded plans, and
// planned inside / outside a graph capture.
#include <optional>

#include "kernels/gemm_plan.h"
#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;

struct GemmCase {
  int m, n, k;
  bool c_f32;
};

// Every CUDA variant (default) or the given ones against the CPU reference.
void check_gemm(const GemmCase& c, const std::vector<bf16_bits>& w_bits,
                const std::vector<const KernelEntry*>& variants = cuda_variants(Family::gemm)) {
  const Bf16Data a = random_bf16(size_t(c.m) * c.k);
  std::vector<float> ref(size_t(c.m) * c.n);
  GemmArgs cpu{a.values.data(), w_bits.data(), ref.data(), c.m, c.n, c.k, c.c_f32};
  launch(cpu_reference(Family::gemm), cpu, cpu_ctx());
  DeviceBuffer<bf16_bits> d_a(a.bits), d_w(w_bits);
  DeviceBuffer<bf16_bits> d_c16(c.c_f32 ? 0 : size_t(c.m) * c.n);
  DeviceBuffer<float> d_c32(c.c_f32 ? size_t(c.m) * c.n : 0);
  GpuEnv env;
  for (const KernelEntry* e : variants) {
    SCOPED_TRACE(variant_label(*e) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + (c.c_f32 ? " f32" : " bf16"));
    d_c16.poison();
    d_c32.poison();
    void* out = c.c_f32 ? static_cast<void*>(d_c32.get()) : static_cast<void*>(d_c16.get());
    launch(*e, GemmArgs{d_a.get(), d_w.get(), out, c.m, c.n, c.k, c.c_f32}, env.ctx(*e, WorkspaceShape{}));
    env.sync();
    if (c.c_f32)
      EXPECT_TRUE(matches(d_c32.download(), ref, 1e-3, 1e-4, 2e-5));
    else
      EXPECT_TRUE(matches(bf16_to_floats(d_c16.download()), ref, 2e-3, 8e-3, 4e-3));
  }
}

TEST(GemmGpu, DecodeShapes) {
  LANTERN_REQUIRE_GPU();
  for (auto [n, k] : {std::pair{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}}) {
    const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(n) * k);
    for (int m : {1, 3, 8, 13, 16}) check_gemm({m, n, k, false}, w);
  }
}

TEST(GemmGpu, LmHeadFp32Logits) {
  LANTERN_REQUIRE_GPU();
  const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(128256) * 2048);
  for (int m : {1, 8, 11}) check_gemm({m, 128256, 2048, true}, w);
}

TEST(GemmGpu, PrefillShapes) {
  LANTERN_REQUIRE_GPU();
  const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(2048) * 2048);
  for (int m : {9, 64, 512}) check_gemm({m, 2048, 2048, false}, w);
}

TEST(GemmGpu, EdgeTailsAndFallbacks) {
  LANTERN_REQUIRE_GPU();
  check_gemm({5, 1000, 96, false}, random_bf16_bits_fast(1000 * 96));  // n tail, gemv path
  check_gemm({7, 1000, 2048, true}, random_bf16_bits_fast(1000 * 2048)); // n tail, stream path
  check_gemm({2, 100, 40, true}, random_bf16_bits_fast(100 * 40));     // k % 32 != 0: cuBLAS
  check_gemm({12, 48, 64, false}, random_bf16_bits_fast(48 * 64));     // m > 8: cuBLAS (2, 3)
  check_gemm({17, 48, 64, false}, random_bf16_bits_fast(48 * 64));     // m > 16: cuBLAS (all)
  check_gemm({4, 40, 8192, false}, random_bf16_bits_fast(40 * 8192));  // split-k, n tail
}

// gemm.7's batch kernel (17 <= m <= 128) beside cuBLAS: the fused op table's
// shapes at the three n-tile counts (m <= 32, 64, 128; rows past m zero-filled),
// split-k clusters of 2..8 blocks (qkv / o / down), one block per row tile
// (gate_up, 128 tiles), fp32 logits (a 1000-row tail of 128-row tiles), and
// k % 64 != 0 (the cuBLASLt fallback).
TEST(GemmGpu, MidBatchShapes) {
  LANTERN_REQUIRE_GPU();
  const std::vector<const KernelEntry*> both{&Registry::global().find(Family::gemm, "seed"),
                                             &Registry::global().find(Family::gemm, "mid_stream")};
  for (auto [n, k] : {std::pair{3072, 2048}, {2048, 2048}, {2048, 8192}, {16384, 2048}}) {
    const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(n) * k);
    for (int m : {17, 33, 64, 65, 128}) check_gemm({m, n, k, false}, w, both);
  }
  const std::vector<bf16_bits> head = random_bf16_bits_fast(size_t(1000) * 2048);
  for (int m : {20, 64, 100}) check_gemm({m, 1000, 2048, true}, head, both);
  check_gemm({48, 520, 96, false}, random_bf16_bits_fast(520 * 96), both);  // k % 64 != 0
}

// gemm.8's wgmma kernel (17 <= m <= 128, bf16 out) beside cuBLAS: the fused op
// table's shapes at the three batch widths (m <= 32, 64, 128; rows past m
// zero-filled by the copy engine), split-k clusters as large as fit in one
// wave (on the H200: 4 for qkv, 6 for o and down, uneven stage counts) and
// none (gate_up: 128 row tiles), an n tail of a
// 128-row tile (1000), one k stage (k = 64) with a 48-row tile, and the
// fallbacks: fp32 logits, k % 64 != 0 and m = 129 (cuBLASLt).
TEST(GemmGpu, WgmmaBatchShapes) {
  LANTERN_REQUIRE_GPU();
  const std::vector<const KernelEntry*> both{&Registry::global().find(Family::gemm, "seed"),
                                             &Registry::global().find(Family::gemm, "wgmma_split")};
  for (auto [n, k] : {std::pair{3072, 2048}, {2048, 2048}, {2048, 8192}, {16384, 2048}}) {
    const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(n) * k);
    for (int m : {17, 32, 33, 64, 65, 100, 128}) check_gemm({m, n, k, false}, w, both);
  }
  const std::vector<bf16_bits> tail = random_bf16_bits_fast(size_t(1000) * 2048);
  for (int m : {20, 64, 100}) check_gemm({m, 1000, 2048, false}, tail, both);
  check_gemm({40, 1000, 2048, true}, tail, both);                            // fp32 out: cuBLASLt
  check_gemm({24, 48, 64, false}, random_bf16_bits_fast(48 * 64), both);     // one stage, 48 rows
  check_gemm({48, 520, 96, false}, random_bf16_bits_fast(520 * 96), both);   // k % 64 != 0
  check_gemm({129, 512, 2048, false}, random_bf16_bits_fast(512 * 2048), both);  // m > 128
}

const KernelEntry& gemm_variant(const char* name) { return Registry::global().find(Family::gemm, name); }

// gemm.6's recorded plan for (m's bucket, n, k, out type) on the current GPU, if any.
std::optional<GemmPlan> plan_of(int m, int n, int k, bool c_f32) {
  int bucket = 32;
  while (bucket < m) bucket *= 2;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::optional<GemmPlan> found;
  for (const GemmPlan& p : gemm_plans())
    if (p.device == dev && p.m_bucket == bucket && p.n == n && p.k == k && p.c_f32 == c_f32) found = p;
  return found;
}

// The fused op table's GEMMs (qkv, o, gate_up, down; the LM head in fp32) at
// decode and prefill m: gemm.6 and gemm.1 against the CPU reference, and every
// m > 16 leaves a timed plan (measured with the L2 flushed, as the workspace
// holds the flush region) that beats or equals the heuristic's pick.
TEST(GemmGpu, PlannedLtOnFusedShapes) {
  LANTERN_REQUIRE_GPU();
  const std::vector<const KernelEntry*> both{&gemm_variant("seed"), &gemm_variant("lt_planned")};
  auto check_plans = [](int m, int n, int k, bool f32) {
    if (m <= 16) return;
    const std::optional<GemmPlan> p = plan_of(m, n, k, f32);
    ASSERT_TRUE(p) << "no plan for m=" << m << " n=" << n << " k=" << k;
    EXPECT_TRUE(p->timed && p->cold_l2);
    EXPECT_GE(p->candidates, 1);
    EXPECT_GT(p->us, 0);
    EXPECT_LE(p->us, p->heuristic_us);
    std::printf("[gemm.6] %s\n", p->describe().c_str());
  };
  for (auto [n, k] : {std::pair{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}}) {
    const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(n) * k);
    for (int m : {1, 17, 64, 100, 256, 512}) {
      check_gemm({m, n, k, false}, w, both);
      check_plans(m, n, k, false);
    }
  }
  const std::vector<bf16_bits> head = random_bf16_bits_fast(size_t(128256) * 2048);
  for (int m : {17, 64, 100}) {
    check_gemm({m, 128256, 2048, true}, head, both);
    check_plans(m, 128256, 2048, true);
  }
}

// A pinned plan (what `lantern rerun` passes from the recorded manifest) is
// taken without timing: the shape runs the pinned configuration and still
// matches the CPU reference. The pin is made from a timed plan of a sibling
// shape (n + 128, same m and k), whose heuristic offers the same configurations.
TEST(GemmGpu, PlannedLtTakesAPinnedPlan) {
  LANTERN_REQUIRE_GPU();
  const KernelEntry& e = gemm_variant("lt_planned");
  const int m = 48, k = 768, n_timed = 1280, n_pinned = 1408;  // shapes no other test plans
  check_gemm({m, n_timed, k, false}, random_bf16_bits_fast(size_t(n_timed) * k), {&e});
  const std::optional<GemmPlan> timed = plan_of(m, n_timed, k, false);
  ASSERT_TRUE(timed && timed->timed && !timed->pinned);
  GemmPlan pin = *timed;
  pin.n = n_pinned;
  pin_gemm_plans({pin});
  check_gemm({m, n_pinned, k, false}, random_bf16_bits_fast(size_t(n_pinned) * k), {&e});
  pin_gemm_plans({});
  const std::optional<GemmPlan> got = plan_of(m, n_pinned, k, false);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->pinned) << "the pinned configuration was not among the candidates: " << got->describe();
  EXPECT_TRUE(got->config() == timed->config()) << got->describe() << " vs " << timed->describe();
  EXPECT_EQ(got->us, timed->us) << "a pinned plan keeps the recorded time";
  // A pinned plan is final for its whole bucket, as a timed one is: another m
  // of the bucket (40, bucket 64 as 48) launches it again instead of re-timing
  // the candidates (session 8: `lantern rerun` launched other kernels than the
  // run it repeated, flipping near-tie tokens).
  check_gemm({40, n_pinned, k, false}, random_bf16_bits_fast(size_t(n_pinned) * k), {&e});
  const std::optional<GemmPlan> again = plan_of(40, n_pinned, k, false);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->pinned && again->config() == timed->config()) << again->describe();
  EXPECT_EQ(again->m_timed, got->m_timed) << "the bucket's plan was re-made at m = 40";
}

// A shape first launched inside a graph capture takes the heuristic's pick,
// untimed (nothing is timed in a capture), and the graph replays it correctly;
// its next eager launch plans it by timing. The prepare hook plans a shape
// without launching it for real.
TEST(GemmGpu, PlannedLtInsideCaptureThenEager) {
  LANTERN_REQUIRE_GPU();
  const KernelEntry& e = gemm_variant("lt_planned");
  const PrepareHook prepare = Registry::global().prepare(e);
  ASSERT_NE(prepare, nullptr);
  const int m = 40, n = 1536, k = 1024;  // a shape no other test plans
  const Bf16Data a = random_bf16(size_t(m) * k);
  const std::vector<bf16_bits> w = random_bf16_bits_fast(size_t(n) * k);
  std::vector<float> ref(size_t(m) * n);
  launch(cpu_reference(Family::gemm), GemmArgs{a.values.data(), w.data(), ref.data(), m, n, k}, cpu_ctx());
  DeviceBuffer<bf16_bits> d_a(a.bits), d_w(w), d_c(size_t(m) * n);
  GpuEnv env;
  const LaunchCtx ctx = env.ctx(e, WorkspaceShape{});
  const GemmArgs args{d_a.get(), d_w.get(), d_c.get(), m, n, k};
  ASSERT_FALSE(plan_of(m, n, k, false));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
  launch(e, args, ctx);
  prepare(&args, ctx);  // inside a capture: must not time (nor break the capture)
  CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const std::optional<GemmPlan> untimed = plan_of(m, n, k, false);
  ASSERT_TRUE(untimed);
  EXPECT_FALSE(untimed->timed);
  d_c.poison();
  CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
  env.sync();
  EXPECT_TRUE(matches(bf16_to_floats(d_c.download()), ref, 2e-3, 8e-3, 4e-3));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  d_c.poison();
  launch(e, args, ctx);
  env.sync();
  EXPECT_TRUE(matches(bf16_to_floats(d_c.download()), ref, 2e-3, 8e-3, 4e-3));
  const std::optional<GemmPlan> timed = plan_of(m, n, k, false);
  ASSERT_TRUE(timed);
  EXPECT_TRUE(timed->timed);
  EXPECT_EQ(timed->m_timed, m);
  // prepare: m = 200 (bucket 256) gets a timed plan from the hook alone.
  DeviceBuffer<bf16_bits> d_a2(random_bf16_bits_fast(size_t(200) * k)), d_c2(size_t(200) * n);
  const GemmArgs big{d_a2.get(), d_w.get(), d_c2.get(), 200, n, k};
  prepare(&big, ctx);
  env.sync();
  const std::optional<GemmPlan> prepared = plan_of(200, n, k, false);
  ASSERT_TRUE(prepared);
  EXPECT_TRUE(prepared->timed);
  EXPECT_EQ(prepared->m_timed, 200);
}

// Two GEMMs back to back on one stream, the second reading the first's output,
// eagerly and replayed from a captured CUDA graph: a variant launched with
// programmatic dependent launch (gemm.5) must still wait for its input. The
// intermediate is poisoned (NaN) before each run, so reading it early fails.
// m = 4 (the GEMVs) and m = 64 (gemm.7's batch kernel, cuBLAS(Lt) for the others);
// with a bf16 z, the second GEMM is gemm.8's wgmma kernel too (its fp32 form
// is cuBLASLt), so its PDL wait is tested on its own output's producer.
void check_chain(int m, bool z_f32 = true) {
  const int k1 = 2048, n1 = 8192, n2 = 2048;
  const Bf16Data x = random_bf16(size_t(m) * k1);
  const std::vector<bf16_bits> w1 = random_bf16_bits_fast(size_t(n1) * k1);
  const std::vector<bf16_bits> w2 = random_bf16_bits_fast(size_t(n2) * n1);
  // Reference: y = x w1^T rounded to bf16 (as the GPU stores it), z = y w2^T.
  std::vector<float> y(size_t(m) * n1), z(size_t(m) * n2);
  launch(cpu_reference(Family::gemm), GemmArgs{x.values.data(), w1.data(), y.data(), m, n1, k1},
         cpu_ctx());
  for (float& v : y) v = bf16_to_float(float_to_bf16(v));
  launch(cpu_reference(Family::gemm), GemmArgs{y.data(), w2.data(), z.data(), m, n2, n1},
         cpu_ctx());
  double rms = 0;
  for (float v : z) rms += double(v) * v;
  rms = std::sqrt(rms / double(z.size()));
  DeviceBuffer<bf16_bits> d_x(x.bits), d_w1(w1), d_w2(w2), d_y(size_t(m) * n1);
  DeviceBuffer<float> d_z(z_f32 ? size_t(m) * n2 : 0);
  DeviceBuffer<bf16_bits> d_z16(z_f32 ? 0 : size_t(m) * n2);
  void* z_out = z_f32 ? static_cast<void*>(d_z.get()) : static_cast<void*>(d_z16.get());
  GpuEnv env;
  for (const KernelEntry* e : cuda_variants(Family::gemm)) {
    SCOPED_TRACE(variant_label(*e));
    const LaunchCtx ctx = env.ctx(*e, WorkspaceShape{});
    auto chain = [&] {
      launch(*e, GemmArgs{d_x.get(), d_w1.get(), d_y.get(), m, n1, k1}, ctx);
      launch(*e, GemmArgs{d_y.get(), d_w2.get(), z_out, m, n2, n1, z_f32}, ctx);
    };
    // A 1-ulp bf16 difference in y moves z by ~|y| 2^-8 |w|: tolerances scale with z.
    auto check = [&] {
      const std::vector<float> got = z_f32 ? d_z.download() : bf16_to_floats(d_z16.download());
      EXPECT_TRUE(matches(got, z, 0.02 * rms, 1e-2, 1e-2));
    };
    d_y.poison();
    d_z.poison();
    d_z16.poison();
    chain();
    env.sync();
    check();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
    chain();
    CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      d_y.poison();
      d_z.poison();
      d_z16.poison();
      CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
      env.sync();
      check();
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
}

TEST(GemmGpu, ChainedLaunchesSeeTheirInputs) {
  LANTERN_REQUIRE_GPU();
  for (int m : {4, 64}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    check_chain(m);
  }
  SCOPED_TRACE("m=64, bf16 z");
  check_chain(64, false);
}

}  // namespace
}  // namespace lantern::test
