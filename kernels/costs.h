#pragma once
// Bytes and FLOPs of one call of each kernel family, shared by every variant.
//
// The counts are the minimum a call must do: each input read once, each output
// written once (in-place tensors count once each way), weights bf16 (2 bytes),
// logits float (4 bytes), indices int32. Activations are ActBytes wide: 4 on the
// CPU reference (float), 2 on CUDA (bf16). A variant that moves more than this
// (re-reads, spills) shows up as a lower achieved GB/s, which is the point.
//
// FLOP conventions: a multiply-add is 2; exp, rsqrt, division and sin/cos count
// as 1; comparisons (argmax, masking) count as 0. Attention counts
// 4 * head_dim FLOPs per query head per (query, key) pair that is not masked
// (q.k and p.v, two FLOPs per multiply-add each); softmax is not counted.
//
// The cost functions only read host memory: indices that live on the device on
// CUDA (seq_starts, context_lens) are read only where the contract says they are
// host pointers (see attention_decode_cost).
#include <algorithm>
#include <cstdint>

#include "kernels/registry.h"

namespace lantern::kernels {

namespace cost_detail {
constexpr double kBf16 = 2, kF32 = 4, kI32 = 4;
// A GEMM's prologue norm (PrologueNorm): the norm weight read, and rmsnorm's
// arithmetic on the A operand (square-accumulate, two scales: 3 per element;
// an rsqrt per row). The rows themselves replace the A operand's read.
struct NormExtra {
  double bytes = 0, flops = 0;
  NormExtra(const PrologueNorm& n, int m, int k) {
    if (n.weight == nullptr) return;
    bytes = double(k) * kBf16;
    flops = 3.0 * m * k + m;
  }
};
}  // namespace cost_detail

template <int ActBytes>
Cost embedding_cost(const EmbeddingArgs& a) {
  using namespace cost_detail;
  const double elems = double(a.n) * a.hidden;
  return {a.n * kI32 + elems * kBf16 + elems * ActBytes, 0};
}

template <int ActBytes>
Cost rmsnorm_cost(const RmsnormArgs& a) {
  using namespace cost_detail;
  const double elems = double(a.n) * a.hidden;
  const double bytes = elems * ActBytes * 2 + a.hidden * kBf16 + (a.rows ? a.n * kI32 : 0);
  // square-accumulate (2), scale by rsqrt and by weight (2) per element; rsqrt per row.
  return {bytes, elems * 4 + a.n};
}

template <int ActBytes>
Cost rope_cost(const RopeArgs& a) {
  using namespace cost_detail;
  const double elems = double(a.n) * (a.n_q_heads + a.n_kv_heads) * a.head_dim;
  const double bytes = elems * ActBytes * 2 + a.n * kI32 + (a.head_dim / 2) * kF32;
  // Each pair: 4 multiplies + 2 adds (= 3 per element); angle + sin + cos per
  // (token, frequency) counted as 3.
  return {bytes, elems * 3 + double(a.n) * (a.head_dim / 2) * 3};
}

template <int ActBytes>
Cost kv_write_cost(const KvWriteArgs& a) {
  using namespace cost_detail;
  const double elems = 2.0 * a.n * a.cache.n_kv_heads * a.cache.head_dim;  // k and v
  // positions, slots and one block-table entry per token.
  return {elems * ActBytes * 2 + a.n * kI32 * 3, 0};
}

// Unmasked (query, key) pairs of causal attention over the given sequences.
inline double causal_pairs(const int32_t* seq_starts, int num_seqs) {
  double pairs = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const double len = seq_starts[s + 1] - seq_starts[s];
    pairs += len * (len + 1) / 2;
  }
  return pairs;
}

template <int ActBytes>
Cost attention_prefill_cost(const AttentionPrefillArgs& a) {
  using namespace cost_detail;
  const int32_t* starts = a.host_seq_starts;
  if (!starts && ActBytes == 4) starts = a.seq_starts;  // CPU: seq_starts is a host pointer
  const int n = starts ? starts[a.num_seqs] - starts[0] : a.num_seqs * a.max_seq_len;
  const double pairs =
      starts ? causal_pairs(starts, a.num_seqs)
             : double(a.num_seqs) * a.max_seq_len * (a.max_seq_len + 1) / 2;  // upper bound
  const double q_elems = double(n) * a.n_q_heads * a.head_dim;
  const double kv_elems = double(n) * a.n_kv_heads * a.head_dim;
  const double bytes = (2 * q_elems + 2 * kv_elems) * ActBytes + (a.num_seqs + 1) * kI32;
  return {bytes, 4.0 * a.n_q_heads * a.head_dim * pairs};
}

// context_lens is a device pointer on CUDA: there the cost reads
// host_context_lens (clamped to max_context, as the kernels do) and, without
// it, counts every sequence at max_context (an upper bound, exact when the
// batch's contexts are equal). The CPU reference reads context_lens.
template <int ActBytes>
Cost attention_decode_cost(const AttentionDecodeArgs& a) {
  using namespace cost_detail;
  const int32_t* lens = ActBytes == 4 ? a.context_lens : a.host_context_lens;
  double tokens = 0, blocks = 0;
  for (int i = 0; i < a.b; ++i) {
    const int ctx = lens ? (ActBytes == 4 ? lens[i] : std::min(lens[i], a.max_context)) : a.max_context;
    tokens += ctx;
    blocks += (ctx + a.cache.block_size - 1) / a.cache.block_size;
  }
  const double q_elems = double(a.b) * a.n_q_heads * a.cache.head_dim;
  const double kv_elems = 2.0 * tokens * a.cache.n_kv_heads * a.cache.head_dim;
  const double bytes = (2 * q_elems + kv_elems) * ActBytes + blocks * kI32 + a.b * 2 * kI32;
  return {bytes, 4.0 * a.n_q_heads * a.cache.head_dim * tokens};
}

template <int ActBytes>
Cost swiglu_cost(const SwigluArgs& a) {
  const double elems = double(a.n) * a.inter;
  // silu(g) * u = g * u / (1 + exp(-g)): exp, add, multiply, divide.
  return {elems * ActBytes * 3, elems * 4};
}

template <int ActBytes>
Cost residual_cost(const ResidualArgs& a) {
  const double elems = double(a.count);
  return {elems * ActBytes * 3, elems};
}

// residual + rmsnorm in one pass: x and y read, x and out written.
template <int ActBytes>
Cost add_rmsnorm_cost(const AddRmsnormArgs& a) {
  using namespace cost_detail;
  const double elems = double(a.n) * a.hidden;
  // add (1) + rmsnorm's 4 per element; rsqrt per row.
  return {elems * ActBytes * 4 + a.hidden * kBf16, elems * 5 + a.n};
}

// q, k, v read once; q_out, k (in place) and the two cache rows written;
// position, slot and one block-table entry per token; inv_freq.
template <int ActBytes>
Cost rope_kv_write_cost(const RopeKvWriteArgs& a) {
  using namespace cost_detail;
  const double hd = a.cache.head_dim;
  const double q = double(a.n) * a.n_q_heads * hd, kv = double(a.n) * a.cache.n_kv_heads * hd;
  const double bytes = (q + 2 * kv) * ActBytes + (q + 3 * kv) * ActBytes + a.n * kI32 * 3 + (hd / 2) * kF32;
  return {bytes, (q + kv) * 3 + double(a.n) * (hd / 2) * 3};
}

template <int ActBytes>
Cost gemm_cost(const GemmArgs& a) {
  using namespace cost_detail;
  const double c_bytes = a.c_f32 ? kF32 : ActBytes;
  const double bytes =
      double(a.m) * a.k * ActBytes + double(a.n) * a.k * kBf16 + double(a.m) * a.n * c_bytes;
  const NormExtra e(a.norm, a.m, a.k);  // a prologue norm: its weight and 3 FLOPs per element
  return {bytes + e.bytes, 2.0 * a.m * a.n * a.k + e.flops};
}

// gate/up projection + swiglu: a and the [2 inter, k] weight read once, the
// [m, inter] activation written once (the intermediate is not counted: a fused
// variant never writes it). FLOPs: the GEMM's plus swiglu's 4 per element.
template <int ActBytes>
Cost gate_up_swiglu_cost(const GateUpSwigluArgs& a) {
  using namespace cost_detail;
  const double rows = 2.0 * a.inter;
  const double bytes = double(a.m) * a.k * ActBytes + rows * a.k * kBf16 + double(a.m) * a.inter * ActBytes;
  const NormExtra e(a.norm, a.m, a.k);
  return {bytes + e.bytes, 2.0 * a.m * rows * a.k + 4.0 * a.m * a.inter + e.flops};
}

// q/k/v projection + RoPE + KV write: the GEMM's a and weight read once,
// then rope_kv_write's traffic and FLOPs without its qkv read (a fused variant
// never writes qkv's q columns or reads them back): q_out, k and v in qkv, and
// the two cache rows written. FLOPs: the GEMM's plus rope_kv_write's.
template <int ActBytes>
Cost qkv_rope_cost(const QkvRopeArgs& a) {
  using namespace cost_detail;
  const double hd = a.cache.head_dim, q = double(a.m) * a.q_dim(), kv = double(a.m) * a.kv_dim();
  const double bytes = double(a.m) * a.k * ActBytes + double(a.cols()) * a.k * kBf16 + (q + 4 * kv) * ActBytes +
                       a.m * kI32 * 3 + (hd / 2) * kF32;
  const NormExtra e(a.norm, a.m, a.k);
  Cost c{bytes + e.bytes, 2.0 * a.m * a.cols() * a.k + (q + kv) * 3 + double(a.m) * (hd / 2) * 3 + e.flops};
  if (a.attention.out) {  // the folded attention: attention_decode's traffic and FLOPs (q read back from q_out)
    const Cost at = attention_decode_cost<ActBytes>(a.attention_args());
    c.bytes += at.bytes;
    c.flops += at.flops;
  }
  return c;
}

// projection + residual add + RMSNorm: a and the [hidden, k] weight read
// once, y written (the definition's intermediate, which every variant writes),
// then add_rmsnorm's traffic with y read back. FLOPs: the GEMM's plus
// add_rmsnorm's. With out == nullptr (the deferred norm): a, the weight and x
// read, x written, one add per element.
template <int ActBytes>
Cost proj_residual_norm_cost(const ProjResidualNormArgs& a) {
  using namespace cost_detail;
  const double elems = double(a.m) * a.hidden;
  if (a.out == nullptr)
    return {double(a.m) * a.k * ActBytes + double(a.hidden) * a.k * kBf16 + elems * ActBytes * 2,
            2.0 * elems * a.k + elems};
  const double bytes = double(a.m) * a.k * ActBytes + double(a.hidden) * a.k * kBf16 + elems * ActBytes +
                       elems * ActBytes * 4 + a.hidden * kBf16;
  return {bytes, 2.0 * elems * a.k + elems * 5 + a.m};
}

template <int ActBytes>
Cost argmax_cost(const ArgmaxArgs& a) {
  using namespace cost_detail;
  return {double(a.b) * a.vocab * kF32 + a.b * kI32, 0};
}

// Counts every row as sampled (not greedy): per logit a subtract, a divide, an
// exp and an add into the running mass. Sorting is not counted.
template <int ActBytes>
Cost sample_cost(const SampleArgs& a) {
  using namespace cost_detail;
  const double logits = double(a.b) * a.vocab;
  // temperature, top_k, top_p, step (4 bytes each), seed (8), out (4) per row.
  return {logits * kF32 + a.b * (4 * 4 + 8 + 4), logits * 4};
}

}  // namespace lantern::kernels
