// qkv_rope: every CUDA variant on fresh random decode rows, checked three ways.
//  - vs variant 1 (gemm.6's path, then rope_kv_write.1: the kernels the
//    separate qkv_proj and rope_kv_write ops launch): bit-exact on q_out,
//    qkv's k and v columns and the whole KV pool. Variant 2's epilogue sees
//    each row's fp32 sum in the GEMV's order (same k split, same split count),
//    rounds it to bf16 as the GEMV's store does and rotates it with
//    rope_kv_write's formulas and sin/cos. qkv's q columns are the
//    definition's intermediate (registry.h): not compared. Variant 5's
//    wgmma path (17..128 rows) sums in gemm.8's order, so its reference is
//    variant 1 with gemm.8 as the gemm variant, bit-exact the same way.
//  - vs the definition with qkv rounded to bf16 before the rotation, as the
//    GPU reads it (no prologue norm): per element, one ulp of the output plus
//    one ulp of each rotated input (|cos|, |sin| <= 1: the GEMM's fp32 order
//    may flip an input's rounding) plus the fp32 summation error carried
//    through (8 unit roundoffs of sum |w a|, as the gate_up_swiglu test);
//    unwritten cache rows exactly as they were; rel-L2 4e-3.
//  - vs the fp32 definition (CPU qkv_rope.0: gemm reference, rope_kv_write
//    reference; with the prologue norm run ahead unrounded): rel-L2 5e-3 over
//    every compared element (bf16 roundings of 2^-9 of qkv, the norm's A
//    operand and the output).
// Rows: one per sequence (a decode step), positions 15 and 16 (a block edge),
// the table's last, and random ones; the last row's block-table entry is -1
// (no cache write, still rotated). Shapes: Llama-3.2-1B's attention (32 q /
// 8 kv heads x 64, k 2048: 192 tiles, no split) at m = 1, 2, 8, 16 (one and
// two mma n-tiles) and 17 (beyond the GEMV: cuBLASLt + rope_kv_write), with
// the prologue norm at m = 1 and 5; head_dim 128 (4 / 2 heads, k 8192: 64
// tiles in 2-block clusters, the double-buffered register path) at m = 3
// and 11; head_dim 48 (2 / 1 heads: rotation tiles of 3 per head) at m = 4;
// head_dim 36 (not a multiple of 16: variant 1's composed path) at m = 2.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "tests/kernels/gpu_test_helpers.cuh"

namespace lantern::test {
namespace {
using namespace kernels;


struct Case {
  int n_q, n_kv, hd, k, m;
  bool norm = false;
};

// What a variant leaves that the checks compare: q_out, qkv's k and v
// columns (row-major [m, 2 kv_dim]) and the pool.
struct Outputs {
  std::vector<float> q, kv, pool;
};

// Elements of got farther from ref than bound (printing the first few).
int beyond(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<double>& bound,
           const char* what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - ref[i]) <= bound[i]) && bad++ < 3)
      std::printf("  %s element %zu: got %.6g, rounded definition %.6g, bound %.3g\n", what, i, got[i], ref[i],
                  bound[i]);
  return bad;
}

// One case's inputs: decode rows (one per sequence), their block tables
// (the last row's entry is -1 when m > 1: no cache write), activations,
// weights, a norm weight and a random pool.
struct Setup {
  Case c;
  int q_dim, kv_dim, cols, block_size = 16, max_blocks = 8, num_blocks;
  std::vector<int32_t> tables, ref_tables, positions, slots;
  Bf16Data a, w, nw, pool;
  std::vector<float> inv_freq;
  size_t spare;  // the pool offset of the spare last block (the CPU reference's stand-in for the hole)
  static constexpr float kEps = 1e-5f;

  explicit Setup(const Case& cc) : c(cc) {
    const int m = c.m, max_seqs = m + 1;
    q_dim = c.n_q * c.hd, kv_dim = c.n_kv * c.hd, cols = q_dim + 2 * kv_dim;
    num_blocks = max_seqs * max_blocks + 1;
    random_paging(m, max_blocks, tables, slots);
    const std::vector<int> picks = {15, 16, max_blocks * block_size - 1};
    std::uniform_int_distribution<int> any_pos(0, max_blocks * block_size - 1);
    for (int t = 0; t < m; ++t) positions.push_back(t < int(picks.size()) ? picks[t] : any_pos(rng()));
    // The CPU reference's kv_write would throw on -1: its table points the
    // hole at the spare last block, which restore_spare undoes.
    ref_tables = tables;
    if (m > 1) {
      const size_t hole = size_t(slots[m - 1]) * max_blocks + positions[m - 1] / block_size;
      tables[hole] = -1;
      ref_tables[hole] = num_blocks - 1;
    }
    a = random_bf16(size_t(m) * c.k, -1.f, 1.f);
    w = random_bf16(size_t(cols) * c.k, -0.1f, 0.1f);
    nw = random_bf16(c.k, 0.5f, 1.5f);
    pool = random_bf16(size_t(num_blocks) * 2 * block_size * kv_dim);
    inv_freq = plain_inv_freq(c.hd);
    spare = size_t(num_blocks - 1) * 2 * block_size * kv_dim;
  }
  void restore_spare(std::vector<float>& p) const {
    std::copy(pool.values.begin() + spare, pool.values.end(), p.begin() + spare);
  }
  KvCacheRef ref_cache(std::vector<float>& p) const {
    return KvCacheRef{p.data(), ref_tables.data(), block_size, max_blocks, c.n_kv, c.hd};
  }
  // The K row of row t's cache slot in the GPU's tables (-1: none).
  long long k_row(int t) const {
    const int32_t blk = tables[size_t(slots[t]) * max_blocks + positions[t] / block_size];
    return blk >= 0 ? (static_cast<long long>(blk) * 2 * block_size + positions[t] % block_size) * kv_dim : -1;
  }
};

// The fp32 definition (CPU qkv_rope.0; a prologue norm run ahead by kernels::launch, unrounded).
Outputs fp32_definition(const Setup& s) {
  const int m = s.c.m;
  std::vector<float> qkv(size_t(m) * s.cols), q(size_t(m) * s.q_dim), p = s.pool.values, xn(size_t(m) * s.c.k);
  QkvRopeArgs args{s.a.values.data(), s.w.bits.data(), qkv.data(), q.data(), s.positions.data(), s.slots.data(),
                   s.inv_freq.data(), s.ref_cache(p), m, s.c.k, s.c.n_q};
  if (s.c.norm) args.norm = PrologueNorm{s.nw.bits.data(), xn.data(), Setup::kEps};
  launch(cpu_reference(Family::qkv_rope), args, cpu_ctx());
  s.restore_spare(p);
  return {q, kv_columns(qkv, m, s.q_dim, s.kv_dim), p};
}

// The definition with qkv rounded to bf16 before rope_kv_write (no prologue
// norm), and per element how far the GPU may honestly be from it (the file
// comment); cache rows nobody writes get 0.
struct Rounded {
  Outputs out;
  std::vector<double> bq, bkv, bpool;
};
Rounded rounded_definition(const Setup& s) {
  const int m = s.c.m, k = s.c.k, hd = s.c.hd, half = hd / 2, cols = s.cols, q_dim = s.q_dim, kv_dim = s.kv_dim;
  std::vector<float> qkv(size_t(m) * cols), abs_sum(size_t(m) * cols), q(size_t(m) * q_dim), p = s.pool.values;
  launch(cpu_reference(Family::gemm), GemmArgs{s.a.values.data(), s.w.bits.data(), qkv.data(), m, cols, k}, cpu_ctx());
  std::vector<float> abs_a(s.a.values.size());
  std::vector<bf16_bits> abs_w(s.w.bits.size());
  for (size_t i = 0; i < abs_a.size(); ++i) abs_a[i] = std::abs(s.a.values[i]);
  for (size_t i = 0; i < abs_w.size(); ++i) abs_w[i] = bf16_bits(s.w.bits[i] & 0x7fff);
  launch(cpu_reference(Family::gemm), GemmArgs{abs_a.data(), abs_w.data(), abs_sum.data(), m, cols, k}, cpu_ctx());
  for (float& v : qkv) v = bf16_to_float(float_to_bf16(v));
  const std::vector<float> rounded = qkv;  // the rotation's inputs
  launch(cpu_reference(Family::rope_kv_write),
         RopeKvWriteArgs{qkv.data(), q.data(), s.positions.data(), s.slots.data(), s.inv_freq.data(), s.ref_cache(p),
                         m, s.c.n_q, cols},
         cpu_ctx());
  s.restore_spare(p);
  Rounded r{{q, kv_columns(qkv, m, q_dim, kv_dim), p}, {}, {}, {}};
  r.bq.assign(r.out.q.size(), 0);
  r.bkv.assign(r.out.kv.size(), 0);
  r.bpool.assign(r.out.pool.size(), 0);
  const double sum_err = 8.0 * std::ldexp(1.0, -24);
  auto in_err = [&](int t, int col) {
    const size_t i = size_t(t) * cols + col;
    return bf16_ulp(rounded[i]) + sum_err * abs_sum[i];
  };
  for (int t = 0; t < m; ++t) {
    const long long k_row = s.k_row(t);
    for (int h = 0; h < s.c.n_q + s.c.n_kv; ++h)
      for (int d = 0; d < hd; ++d) {
        const int col = h * hd + d, pair = h * hd + (d < half ? d + half : d - half);
        const size_t kv_i = size_t(t) * 2 * kv_dim + col - q_dim;
        const float y = h < s.c.n_q ? r.out.q[size_t(t) * q_dim + col] : r.out.kv[kv_i];
        const double b = bf16_ulp(y) + in_err(t, col) + in_err(t, pair) + 1e-6;
        if (h < s.c.n_q) {
          r.bq[size_t(t) * q_dim + col] = b;
        } else {
          r.bkv[kv_i] = b;
          if (k_row >= 0) r.bpool[k_row + col - q_dim] = b;
        }
      }
    for (int d = 0; d < kv_dim; ++d) {
      const size_t kv_i = size_t(t) * 2 * kv_dim + kv_dim + d;
      const double b = bf16_ulp(r.out.kv[kv_i]) + in_err(t, q_dim + kv_dim + d) + 1e-6;
      r.bkv[kv_i] = b;
      if (k_row >= 0) r.bpool[k_row + size_t(s.block_size) * kv_dim + d] = b;
    }
  }
  return r;
}

void check_qkv_rope(const Case& c) {
  const Setup s(c);
  const int m = c.m, k = c.k, hd = c.hd;
  const Outputs def = fp32_definition(s);
  const Rounded rnd = c.norm ? Rounded{} : rounded_definition(s);
  DeviceBuffer<bf16_bits> d_a(s.a.bits), d_w(s.w.bits), d_nw(s.nw.bits), d_xn(size_t(m) * k);
  DeviceBuffer<int32_t> d_pos(s.positions), d_slots(s.slots), d_tables(s.tables);
  DeviceBuffer<float> d_freq(s.inv_freq);
  GpuEnv env;
  // One variant's outputs (gemm_variant: variant 1's gemm, nullptr for the default).
  auto run = [&](const KernelEntry& e, const KernelEntry* gemm_variant) {
    DeviceBuffer<bf16_bits> d_qkv(size_t(m) * s.cols), d_q(size_t(m) * s.q_dim), d_pool(s.pool.bits);
    d_qkv.poison();
    d_q.poison();
    QkvRopeArgs args{d_a.get(), d_w.get(), d_qkv.get(), d_q.get(), d_pos.get(), d_slots.get(), d_freq.get(),
                     KvCacheRef{d_pool.get(), d_tables.get(), s.block_size, s.max_blocks, c.n_kv, hd}, m, k, c.n_q};
    if (c.norm) args.norm = PrologueNorm{d_nw.get(), d_xn.get(), Setup::kEps};
    args.gemm_variant = gemm_variant;
    launch(e, args, env.ctx(e, WorkspaceShape{}));
    env.sync();
    return Outputs{bf16_to_floats(d_q.download()), kv_columns(bf16_to_floats(d_qkv.download()), m, s.q_dim, s.kv_dim),
                   bf16_to_floats(d_pool.download())};
  };
  // Variant 5's wgmma path (17..128 rows, head_dim a multiple of 8 dividing 128, k % 64 == 0; the
  // GPUs we test on are sm_90) sums in gemm.8's order: its bit-identity reference is variant 1
  // with gemm.8 as the gemm variant. Elsewhere it runs variant 3's or variant 1's kernels.
  const bool wg_path = m >= 17 && m <= 128 && hd % 8 == 0 && 128 % hd == 0 && k % 64 == 0;
  const Registry& reg = Registry::global();
  const Outputs unfused_wg =
      wg_path ? run(reg.find(Family::qkv_rope, "unfused"), &reg.find(Family::gemm, "wgmma_split")) : Outputs{};
  Outputs unfused;  // variant 1's: the first in the loop
  for (const KernelEntry* e : cuda_variants(Family::qkv_rope)) {
    SCOPED_TRACE(variant_label(*e) + " heads " + std::to_string(c.n_q) + "/" + std::to_string(c.n_kv) + " hd=" +
                 std::to_string(hd) + " k=" + std::to_string(k) + " m=" + std::to_string(m) +
                 (c.norm ? " +norm" : ""));
    const Outputs got = run(*e, nullptr);
    EXPECT_LE(rel_l2(got.q, def.q), 5e-3) << "q_out vs the fp32 definition";
    EXPECT_LE(rel_l2(got.kv, def.kv), 5e-3) << "k, v vs the fp32 definition";
    EXPECT_LE(rel_l2(got.pool, def.pool), 5e-3) << "pool vs the fp32 definition";
    if (!c.norm) {
      EXPECT_EQ(beyond(got.q, rnd.out.q, rnd.bq, "q_out"), 0) << "q_out vs the rounded definition";
      EXPECT_EQ(beyond(got.kv, rnd.out.kv, rnd.bkv, "k/v"), 0) << "k, v vs the rounded definition";
      EXPECT_EQ(beyond(got.pool, rnd.out.pool, rnd.bpool, "pool"), 0) << "pool vs the rounded definition";
      EXPECT_LE(rel_l2(got.q, rnd.out.q), 4e-3) << "q_out vs the rounded definition";
    }
    std::printf("[qkv_rope] %s hd=%d k=%d m=%d%s: rel-L2 q %.2e k/v %.2e vs the definition\n", e->name, hd, k, m,
                c.norm ? " +norm" : "", rel_l2(got.q, def.q), rel_l2(got.kv, def.kv));
    if (e->variant == 1) {
      unfused = got;
      continue;
    }
    ASSERT_FALSE(unfused.q.empty()) << "variant 1 runs first";
    const bool vs_wg = e->variant == 5 && wg_path;
    const Outputs& ref = vs_wg ? unfused_wg : unfused;
    const char* who = vs_wg ? "variant 1 with gemm.8" : "variant 1";
    EXPECT_TRUE(matches(got.q, ref.q, 0, 0, 0)) << "q_out bit-identical to " << who;
    EXPECT_TRUE(matches(got.kv, ref.kv, 0, 0, 0)) << "k, v bit-identical to " << who;
    EXPECT_TRUE(matches(got.pool, ref.pool, 0, 0, 0)) << "pool bit-identical to " << who;
  }
}

TEST(QkvRopeGpu, MatchesTheDefinitionAndTheUnfusedKernels) {
  LANTERN_REQUIRE_GPU();
  for (int m : {1, 2, 8, 16, 17}) check_qkv_rope({32, 8, 64, 2048, m});
  check_qkv_rope({32, 8, 64, 2048, 1, true});
  check_qkv_rope({32, 8, 64, 2048, 5, true});
  check_qkv_rope({4, 2, 128, 8192, 3});
  check_qkv_rope({4, 2, 128, 8192, 11});
  check_qkv_rope({2, 1, 48, 1024, 4});
  check_qkv_rope({3, 1, 36, 256, 2});  // head_dim % 16 != 0: variant 1's composed rope_kv_write
}

// Variant 5's wgmma path (17..128 rows): the 1B shape at the kernel's batch
// widths of 64 (m = 33, 64) and 128 (m = 100, 128) columns, and of 32 with
// the prologue norm run ahead (m = 24; m = 17 above), head_dim 128 (one head
// per 128-row block, k 8192: a split-k cluster) and 32 (four heads per
// block), and m = 129 (variant 1's kernels).
TEST(QkvRopeGpu, WgmmaEpilogueMatchesGemm8ThenRopeKvWrite) {
  LANTERN_REQUIRE_GPU();
  for (int m : {33, 64, 100, 128}) check_qkv_rope({32, 8, 64, 2048, m});
  check_qkv_rope({32, 8, 64, 2048, 24, true});
  check_qkv_rope({4, 2, 128, 8192, 40});
  check_qkv_rope({8, 4, 32, 1024, 24});
  check_qkv_rope({32, 8, 64, 2048, 129});
}

}  // namespace
}  // namespace lantern::test
