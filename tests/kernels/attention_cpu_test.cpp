// CPU reference: causal GQA prefill attention against an explicit double-precision
// softmax(QK^T * scale + mask) V, and paged decode attention against prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/base/errors.h"
#include "kernels/registry.h"
#include "tests/test_util.h"

namespace lantern::kernels {
namespace {

const KernelEntry& prefill_ref() {
  return Registry::global().find(Family::attention_prefill, "cpu_ref");
}
const KernelEntry& decode_ref() {
  return Registry::global().find(Family::attention_decode, "cpu_ref");
}

struct Shape {
  int n_q, n_kv, hd, q_stride, kv_stride;
};

std::vector<int32_t> starts_of(const std::vector<int>& lens) {
  std::vector<int32_t> starts = {0};
  for (int len : lens) starts.push_back(starts.back() + len);
  return starts;
}

// The definition, in double: out[i, h] = softmax_j(scale * q[i,h].k[j,h/g] + mask) v[j,h/g],
// mask = -inf unless j is in i's sequence and j <= i. Returns [n, n_q * hd].
std::vector<float> attention_formula(const std::vector<float>& q, const std::vector<float>& k,
                                     const std::vector<float>& v,
                                     const std::vector<int32_t>& starts, const Shape& s,
                                     float scale) {
  const int n = starts.back(), group = s.n_q / s.n_kv;
  std::vector<float> out(size_t(n) * s.n_q * s.hd);
  for (size_t seq = 0; seq + 1 < starts.size(); ++seq)
    for (int i = starts[seq]; i < starts[seq + 1]; ++i)
      for (int h = 0; h < s.n_q; ++h) {
        const float* qi = &q[size_t(i) * s.q_stride + h * s.hd];
        std::vector<double> logits;
        for (int j = starts[seq]; j <= i; ++j) {
          const float* kj = &k[size_t(j) * s.kv_stride + (h / group) * s.hd];
          double dot = 0;
          for (int d = 0; d < s.hd; ++d) dot += double(qi[d]) * kj[d];
          logits.push_back(dot * scale);
        }
        const double mx = *std::max_element(logits.begin(), logits.end());
        double denom = 0;
        for (double& l : logits) denom += (l = std::exp(l - mx));
        for (int d = 0; d < s.hd; ++d) {
          double acc = 0;
          for (int j = starts[seq]; j <= i; ++j)
            acc += logits[j - starts[seq]] * v[size_t(j) * s.kv_stride + (h / group) * s.hd + d];
          out[(size_t(i) * s.n_q + h) * s.hd + d] = float(acc / denom);
        }
      }
  return out;
}

// The head columns of a [n, stride] buffer, without its padding.
std::vector<float> heads_only(const std::vector<float>& buf, int n, int stride, int width) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i)
    out.insert(out.end(), &buf[size_t(i) * stride], &buf[size_t(i) * stride] + width);
  return out;
}

std::vector<float> run_prefill(const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v, const std::vector<int32_t>& starts,
                               const Shape& s, float scale) {
  const int n = starts.back();
  std::vector<float> out(size_t(n) * s.q_stride, NAN);
  int max_len = 0;
  for (size_t i = 0; i + 1 < starts.size(); ++i)
    max_len = std::max(max_len, starts[i + 1] - starts[i]);
  launch(prefill_ref(),
         AttentionPrefillArgs{q.data(), k.data(), v.data(), out.data(), starts.data(),
                              starts.data(), int(starts.size()) - 1, max_len, s.n_q, s.n_kv, s.hd,
                              s.q_stride, s.kv_stride, scale},
         LaunchCtx{});
  return out;
}

TEST(AttentionPrefillCpu, MatchesExplicitSoftmax) {
  // Lengths: a single token, one past a 16-block, an empty sequence, exact blocks.
  const std::vector<int> lens = {1, 17, 0, 16, 33, 2};
  for (Shape s : {Shape{8, 2, 16, 8 * 16 + 4, 2 * 16 + 2}, Shape{4, 4, 64, 256, 256},
                  Shape{6, 1, 8, 48, 8}}) {
    const std::vector<int32_t> starts = starts_of(lens);
    const int n = starts.back();
    const float scale = 1.0f / std::sqrt(float(s.hd));
    const std::vector<float> q = test::random_floats(size_t(n) * s.q_stride, -2.f, 2.f);
    const std::vector<float> k = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
    const std::vector<float> v = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
    const std::vector<float> out =
        heads_only(run_prefill(q, k, v, starts, s, scale), n, s.q_stride, s.n_q * s.hd);
    const std::vector<float> ref = attention_formula(q, k, v, starts, s, scale);
    // Float dot products of <= 64 terms against double: ~1e-6 typical, 1e-4 is far
    // below what one wrongly masked key changes (~|v| / len).
    EXPECT_TRUE(test::all_close(out, ref, 1e-4, 1e-4)) << "hd " << s.hd;
    EXPECT_LT(test::rel_l2(out, ref), 1e-5) << "hd " << s.hd;
  }
}

TEST(AttentionPrefillCpu, OutMayAliasQ) {
  const Shape s{8, 2, 16, 8 * 16 + 4, 2 * 16};
  const std::vector<int32_t> starts = starts_of({5, 17, 1});
  const int n = starts.back();
  std::vector<float> q = test::random_floats(size_t(n) * s.q_stride, -2.f, 2.f);
  const std::vector<float> k = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
  const std::vector<float> v = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
  const std::vector<float> separate = run_prefill(q, k, v, starts, s, 0.25f);
  const std::vector<float> padding_before = q;
  launch(prefill_ref(),
         AttentionPrefillArgs{q.data(), k.data(), v.data(), q.data(), starts.data(), starts.data(),
                              3, 17, s.n_q, s.n_kv, s.hd, s.q_stride, s.kv_stride, 0.25f},
         LaunchCtx{});
  const int width = s.n_q * s.hd;
  EXPECT_TRUE(test::all_close(heads_only(q, n, s.q_stride, width),
                              heads_only(separate, n, s.q_stride, width), 0, 0));
  for (int i = 0; i < n; ++i)
    for (int p = width; p < s.q_stride; ++p)
      ASSERT_EQ(q[size_t(i) * s.q_stride + p], padding_before[size_t(i) * s.q_stride + p]);
}

TEST(AttentionPrefillCpu, QueryHeadsUseKvHeadHOverGroup) {
  // Every value row of kv head g is the constant g + 1, so whatever the softmax
  // weights are, query head h must come out as h / group + 1.
  const Shape s{8, 2, 16, 8 * 16, 2 * 16};
  const std::vector<int32_t> starts = starts_of({9, 4});
  const int n = starts.back(), group = s.n_q / s.n_kv;
  const std::vector<float> q = test::random_floats(size_t(n) * s.q_stride, -2.f, 2.f);
  const std::vector<float> k = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
  std::vector<float> v(size_t(n) * s.kv_stride);
  for (int i = 0; i < n; ++i)
    for (int g = 0; g < s.n_kv; ++g)
      for (int d = 0; d < s.hd; ++d) v[size_t(i) * s.kv_stride + g * s.hd + d] = float(g + 1);
  const std::vector<float> out = run_prefill(q, k, v, starts, s, 0.25f);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < s.n_q; ++h)
      for (int d = 0; d < s.hd; ++d)
        ASSERT_NEAR(out[size_t(i) * s.q_stride + h * s.hd + d], float(h / group + 1), 1e-6)
            << "token " << i << " head " << h;
}

TEST(AttentionPrefillCpu, FutureTokensAndOtherSequencesDoNotLeakIn) {
  const Shape s{4, 2, 16, 64, 32};
  const std::vector<int32_t> starts = starts_of({6, 10, 3});
  const int n = starts.back();
  const std::vector<float> q = test::random_floats(size_t(n) * s.q_stride, -2.f, 2.f);
  std::vector<float> k = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
  std::vector<float> v = test::random_floats(size_t(n) * s.kv_stride, -2.f, 2.f);
  const std::vector<float> before = run_prefill(q, k, v, starts, s, 0.25f);
  const int changed = starts[2] - 1;  // last token of sequence 1
  for (int e = 0; e < s.kv_stride; ++e) {
    k[size_t(changed) * s.kv_stride + e] += 1.5f;
    v[size_t(changed) * s.kv_stride + e] -= 2.5f;
  }
  const std::vector<float> after = run_prefill(q, k, v, starts, s, 0.25f);
  for (int i = 0; i < n; ++i) {
    const bool same = std::memcmp(&before[size_t(i) * s.q_stride], &after[size_t(i) * s.q_stride],
                                  s.n_q * s.hd * sizeof(float)) == 0;
    EXPECT_EQ(same, i != changed) << "token " << i;
  }
}

TEST(AttentionPrefillCpu, HugeScoresStayFiniteAndConvex) {
  // Scores in the thousands: without max subtraction exp overflows to inf/inf = NaN.
  const Shape s{2, 1, 16, 32, 16};
  const std::vector<int32_t> starts = starts_of({20});
  const int n = starts.back();
  const std::vector<float> q = test::random_floats(size_t(n) * s.q_stride, -50.f, 50.f);
  const std::vector<float> k = test::random_floats(size_t(n) * s.kv_stride, -50.f, 50.f);
  const std::vector<float> v = test::random_floats(size_t(n) * s.kv_stride, -1.f, 1.f);
  const std::vector<float> out = run_prefill(q, k, v, starts, s, 1.0f);
  // Each output is a convex combination of the visible values.
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < s.n_q; ++h)
      for (int d = 0; d < s.hd; ++d) {
        float lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          lo = std::min(lo, v[size_t(j) * s.kv_stride + d]);
          hi = std::max(hi, v[size_t(j) * s.kv_stride + d]);
        }
        const float o = out[size_t(i) * s.q_stride + h * s.hd + d];
        ASSERT_TRUE(o >= lo - 1e-6f && o <= hi + 1e-6f)
            << o << " not in [" << lo << ", " << hi << "]";
      }
}

// ---------------------------------------------------------------- decode

struct PagedBatch {
  int block_size = 16, n_kv = 2, hd = 16, num_blocks = 40, max_seqs = 6, max_blocks = 4;
  std::vector<float> pool;            // [blocks][2][block_size][n_kv][hd], NaN where unused
  std::vector<int32_t> tables;        // [max_seqs][max_blocks]
  std::vector<std::vector<float>> k;  // per sequence: [len, n_kv * hd]
  std::vector<std::vector<float>> v;

  // Random non-contiguous blocks for each slot; K/V rows placed by hand.
  void fill(const std::vector<int32_t>& slots, const std::vector<int32_t>& lens) {
    const int row = n_kv * hd;
    pool.assign(size_t(num_blocks) * 2 * block_size * row, NAN);
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), test::rng());
    tables.assign(size_t(max_seqs) * max_blocks, -1);
    for (size_t i = 0; i < tables.size() && i < perm.size(); ++i) tables[i] = perm[i];
    k.clear();
    v.clear();
    for (size_t i = 0; i < slots.size(); ++i) {
      k.push_back(test::random_floats(size_t(lens[i]) * row, -2.f, 2.f));
      v.push_back(test::random_floats(size_t(lens[i]) * row, -2.f, 2.f));
      for (int t = 0; t < lens[i]; ++t) {
        const int block = tables[slots[i] * max_blocks + t / block_size];
        float* kdst = &pool[((size_t(block) * 2 + 0) * block_size + t % block_size) * row];
        float* vdst = &pool[((size_t(block) * 2 + 1) * block_size + t % block_size) * row];
        std::copy_n(&k.back()[size_t(t) * row], row, kdst);
        std::copy_n(&v.back()[size_t(t) * row], row, vdst);
      }
    }
  }
  KvCacheRef ref() {
    return KvCacheRef{pool.data(), tables.data(), block_size, max_blocks, n_kv, hd};
  }
};

TEST(AttentionDecodeCpu, EqualsPrefillLastRowOverAPagedCache) {
  PagedBatch cache;
  const int n_q = 8, q_stride = n_q * cache.hd + 3;
  const std::vector<int32_t> slots = {2, 0, 5, 3}, lens = {1, 16, 17, 50};
  cache.fill(slots, lens);
  const int b = int(slots.size());
  const float scale = 1.0f / std::sqrt(float(cache.hd));
  const std::vector<float> q = test::random_floats(size_t(b) * q_stride, -2.f, 2.f);
  std::vector<float> out(size_t(b) * q_stride, NAN);
  launch(decode_ref(),
         AttentionDecodeArgs{q.data(), out.data(), slots.data(), lens.data(), cache.ref(), b, 50,
                             n_q, q_stride, scale},
         LaunchCtx{});

  const int row = cache.n_kv * cache.hd;
  const Shape s{n_q, cache.n_kv, cache.hd, q_stride, row};
  for (int i = 0; i < b; ++i) {
    // The same tokens, contiguous, as one prompt whose last query is the decode query.
    const int len = lens[i];
    std::vector<float> pq = test::random_floats(size_t(len) * q_stride, -2.f, 2.f);
    std::copy_n(&q[size_t(i) * q_stride], q_stride, &pq[size_t(len - 1) * q_stride]);
    const std::vector<int32_t> starts = {0, len};
    const std::vector<float> prefill = run_prefill(pq, cache.k[i], cache.v[i], starts, s, scale);
    const std::vector<float> last(&prefill[size_t(len - 1) * q_stride],
                                  &prefill[size_t(len - 1) * q_stride] + n_q * cache.hd);
    const std::vector<float> got(&out[size_t(i) * q_stride],
                                 &out[size_t(i) * q_stride] + n_q * cache.hd);
    EXPECT_TRUE(test::all_close(got, last, 1e-6, 1e-6)) << "sequence " << i << " len " << len;
    const std::vector<float> formula =
        attention_formula(pq, cache.k[i], cache.v[i], starts, s, scale);
    const std::vector<float> formula_last(formula.end() - n_q * cache.hd, formula.end());
    EXPECT_TRUE(test::all_close(got, formula_last, 1e-4, 1e-4)) << "sequence " << i;
  }
}

TEST(AttentionDecodeCpu, OutMayAliasQ) {
  PagedBatch cache;
  const int n_q = 4, q_stride = n_q * cache.hd;
  const std::vector<int32_t> slots = {1, 4}, lens = {33, 7};
  cache.fill(slots, lens);
  std::vector<float> q = test::random_floats(size_t(2) * q_stride, -2.f, 2.f);
  std::vector<float> separate(q.size(), NAN);
  AttentionDecodeArgs args{q.data(), separate.data(), slots.data(), lens.data(), cache.ref(), 2, 33,
                           n_q,      q_stride,        0.25f};
  launch(decode_ref(), args, LaunchCtx{});
  args.out = q.data();
  launch(decode_ref(), args, LaunchCtx{});
  EXPECT_TRUE(test::all_close(q, separate, 0, 0));
}

TEST(AttentionDecodeCpu, RejectsEmptyContextsAndMissingBlocks) {
  PagedBatch cache;
  const int n_q = 2, q_stride = n_q * cache.hd;
  cache.fill({0}, {5});
  std::vector<float> q = test::random_floats(q_stride), out(q_stride);
  const int32_t slot = 0;
  for (int32_t len : {0, 65}) {  // nothing to attend to; more than the table holds
    EXPECT_THROW(launch(decode_ref(),
                        AttentionDecodeArgs{q.data(), out.data(), &slot, &len, cache.ref(), 1, 65,
                                            n_q, q_stride, 0.25f},
                        LaunchCtx{}),
                 Error)
        << len;
  }
  cache.tables[1] = -1;  // slot 0's second block is gone
  const int32_t len = 20;
  EXPECT_THROW(launch(decode_ref(),
                      AttentionDecodeArgs{q.data(), out.data(), &slot, &len, cache.ref(), 1, 20,
                                          n_q, q_stride, 0.25f},
                      LaunchCtx{}),
               Error);
}

}  // namespace
}  // namespace lantern::kernels
