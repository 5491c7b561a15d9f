#pragma once
// The argument struct of every kernel family (kernels/registry.h maps each
// to its family: FamilyOf). Plain data: pointers, shapes and flags, no CUDA
// type, so the engine's host code includes it without the CUDA headers.
#include <cstddef>
#include <cstdint>

namespace lantern::kernels {

struct KernelEntry;

// ---------------------------------------------------------------- arguments
// Shapes in comments are [rows, cols], row-major. "act" = float (cpu) / bf16 (cuda).

struct EmbeddingArgs {
  const int32_t* ids;  // [n] token ids, each < vocab
  const void* table;   // bf16 [vocab, hidden]
  void* out;           // act [n, hidden]
  int n, hidden, vocab;
};

// out[i] = x[row(i)] * rsqrt(mean(x[row(i)]^2) + eps) * weight; row(i) = rows ? rows[i] : i.
struct RmsnormArgs {
  const void* x;        // act [*, hidden]
  const void* weight;   // bf16 [hidden]
  void* out;            // act [n, hidden]
  const int32_t* rows;  // [n] or nullptr: gather rows of x (final norm on logit rows only)
  int n, hidden;
  float eps;
};

// In-place rotary embedding, HF rotate-half convention: for pair (j, j + hd/2),
// angle = pos * inv_freq[j].
struct RopeArgs {
  void* q;                   // act [n, q_stride]  (heads contiguous, head_dim each)
  void* k;                   // act [n, k_stride]
  const int32_t* positions;  // [n]
  const float* inv_freq;     // [head_dim / 2], llama3 scaling already applied
  int n, n_q_heads, n_kv_heads, head_dim;
  int q_stride, k_stride;    // elements between consecutive tokens
};

// Paged KV cache. The pool holds num_blocks blocks; block b is
//   k: pool[b][0][block_size][n_kv_heads][head_dim]
//   v: pool[b][1][block_size][n_kv_heads][head_dim]
// Blocks are owned per (sequence, layer). block_tables for ONE layer is
// [max_seqs][max_blocks_per_seq] (physical block ids), indexed by a
// sequence's slot. Token at position p of slot s lives in block
// block_tables[s][p / block_size], row p % block_size.
struct KvCacheRef {
  void* pool;                  // act-typed elements (float cpu / bf16 cuda)
  const int32_t* block_tables; // [max_seqs][max_blocks_per_seq] for this layer
  int block_size, max_blocks_per_seq, n_kv_heads, head_dim;
};

struct KvWriteArgs {
  const void* k;             // act [n, kv_stride]
  const void* v;             // act [n, kv_stride]
  const int32_t* positions;  // [n]
  const int32_t* seq_slots;  // [n] slot of each token's sequence
  KvCacheRef cache;
  int n, kv_stride;
};

// Causal self-attention over whole prompts (each sequence attends to its own
// tokens only). Tokens of sequence s are rows [seq_starts[s], seq_starts[s+1]).
// out may alias q (the seed's q_proj / attention-output alias): a variant
// reads the q rows/heads it writes before writing them.
struct AttentionPrefillArgs {
  const void* q;                   // act [n, q_stride]
  const void* k;                   // act [n, kv_stride]
  const void* v;                   // act [n, kv_stride]
  void* out;                       // act [n, q_stride]
  const int32_t* seq_starts;       // [num_seqs + 1] device (cuda) / host (cpu)
  const int32_t* host_seq_starts;  // [num_seqs + 1] always host (per-head GEMM variants loop on host)
  int num_seqs, max_seq_len;
  int n_q_heads, n_kv_heads, head_dim, q_stride, kv_stride;
  float scale;                     // 1/sqrt(head_dim)
};

// One query token per sequence against its paged cache (which already holds
// the current token). out may alias q.
struct AttentionDecodeArgs {
  const void* q;                // act [b, q_stride]
  void* out;                    // act [b, q_stride]
  const int32_t* seq_slots;     // [b]
  const int32_t* context_lens;  // [b] tokens in cache including the current one
  KvCacheRef cache;
  int b, max_context, n_q_heads, q_stride;
  float scale;
  // The same lengths on the host, where the caller has them (the engine's pinned
  // step_meta mirror), for the cost only; kernels never read it. nullptr: the
  // CUDA cost counts every sequence at max_context.
  const int32_t* host_context_lens = nullptr;
  // Every row is its sequence's only row in the step (a pure decode step; not
  // a prompt chunk continuing as paged rows, nor score mode's row per
  // position), so of a row's context only position ctx - 1 is written by this
  // step's earlier kernels: variant 9 then loads the rest before its PDL
  // dependency wait. false: every variant waits before reading the cache.
  bool one_row_per_seq = false;
};

struct SwigluArgs {
  const void* gate;  // act [n, stride]: inter elements per row
  const void* up;    // act [n, stride]: inter elements per row
  void* out;         // act [n, inter]  out = silu(gate) * up
  int n, inter;
  // Elements between consecutive rows of gate and up; 0 means inter. The fused
  // gate/up projection writes [n, 2 * inter] rows (gate | up), so stride = 2 * inter.
  int stride = 0;
  int row_stride() const { return stride ? stride : inter; }
};

struct ResidualArgs {
  void* x;        // act [count]  x += y
  const void* y;  // act [count]
  size_t count;
};

// An RMSNorm a GEMM takes over from the op before it (the deferred-norm op
// table: proj_residual_norm.4 adds the projection into the residual stream and
// leaves the norm to the GEMMs that read it). When `weight` is set, the GEMM's
// `a` is the residual stream x and its A operand is rmsnorm(x) * weight,
// rounded to act exactly as the rmsnorm family rounds it (the sum of squares
// may be taken in another order). A variant whose entry has `norm_prologue`
// folds it into its own kernel (or runs the norm itself where it cannot);
// for any other variant kernels::launch first runs the backend's preferred
// rmsnorm from x into `out` and hands the variant a = out, so every variant
// serves the deferred table.
struct PrologueNorm {
  const void* weight = nullptr;  // bf16 [k]; nullptr: no norm, a is the A operand
  void* out = nullptr;           // act [m, k] scratch: the normalised rows (variants without the prologue)
  float eps = 0.0f;
};

// c[m, n] = a[m, k] @ w[n, k]^T (w in HF layout [out_features, in_features]).
struct GemmArgs {
  const void* a;     // act [m, k]
  const void* w;     // bf16 [n, k]
  void* c;           // act [m, n], or float when c_f32
  int m, n, k;
  bool c_f32 = false;  // logits: write float32 on every backend
  PrologueNorm norm = {};  // set: a is x and the A operand rmsnorm(x) * norm.weight
};

// Residual add fused with the next RMSNorm: x += y (rounded to act, exactly as
// the residual family), then out = rmsnorm(x) * weight over the updated x.
// The definition is residual followed by rmsnorm (rows == nullptr); the CPU
// reference runs exactly those two. out must not alias x or y.
struct AddRmsnormArgs {
  void* x;             // act [n, hidden], the residual stream, updated in place
  const void* y;       // act [n, hidden]
  const void* weight;  // bf16 [hidden]
  void* out;           // act [n, hidden]
  int n, hidden;
  float eps;
};

// RoPE fused with the KV write, over the fused q/k/v projection's output. Each
// token row of qkv is [q (n_q_heads * head_dim) | k | v (n_kv_heads * head_dim
// each)], qkv_stride elements apart. Writes the rotated q to q_out (a dense
// [n, q_dim] buffer, which attention reads), rotates k in place (fresh-prompt
// attention reads it from qkv), and stores the rotated k and v rows in the
// paged cache. The definition: copy q to q_out, rope (q_out, k), kv_write
// (k, v); the CPU reference runs exactly those. A token whose position, slot
// or table entry is out of range: as kv_write (CPU throws, CUDA skips its
// cache write).
struct RopeKvWriteArgs {
  void* qkv;                 // act [n, qkv_stride]
  void* q_out;               // act [n, n_q_heads * head_dim]
  const int32_t* positions;  // [n]
  const int32_t* seq_slots;  // [n]
  const float* inv_freq;     // [head_dim / 2], llama3 scaling already applied
  KvCacheRef cache;          // n_kv_heads and head_dim come from here
  int n, n_q_heads, qkv_stride;
};

// The fused table's q/k/v projection with RoPE and the KV write, as one op
// (decode steps; op_table.h): the definition is gemm (qkv = a @ w^T, w the
// fused [q_dim + 2 kv_dim, k] matrix) followed by rope_kv_write over qkv; the
// CPU reference runs exactly those two. qkv's q columns are the definition's
// intermediate (rope_kv_write reads them, every later reader takes q from
// q_out): a fused variant leaves them unwritten. Its k and v columns and the
// cache rows are what rope_kv_write leaves.
// The decode attention folded into the qkv_rope op (the engine's
// qkv_attention op in short-context decode steps; op_table.h): set (out !=
// nullptr), the op's definition continues with attention_decode over q_out
// and the paged cache (the rows' context_lens include the token this op
// writes) into out. The CPU reference runs exactly that.
struct QkvAttention {
  void* out = nullptr;                          // act [m, q_dim]
  const int32_t* context_lens = nullptr;        // [m]
  const int32_t* host_context_lens = nullptr;   // AttentionDecodeArgs::host_context_lens
  int max_context = 0;
  float scale = 0.0f;
  bool one_row_per_seq = false;
  // The attention_decode variant a composed path launches (the engine's
  // choice for that family); nullptr: the backend's default.
  const KernelEntry* variant = nullptr;
};

struct QkvRopeArgs {
  const void* a;             // act [m, k]
  const void* w;             // bf16 [q_dim + 2 kv_dim, k]
  void* qkv;                 // act [m, q_dim + 2 kv_dim]
  void* q_out;               // act [m, q_dim]
  const int32_t* positions;  // [m]
  const int32_t* seq_slots;  // [m]
  const float* inv_freq;     // [head_dim / 2], llama3 scaling already applied
  KvCacheRef cache;          // n_kv_heads and head_dim come from here
  int m, k, n_q_heads;
  PrologueNorm norm = {};  // set: a is x and the A operand rmsnorm(x) * norm.weight
  // The gemm and rope_kv_write variants an unfused path launches (the
  // engine's choice for those families, so `--kernels gemm=` / `rope_kv_write=`
  // reach decode steps as they reached the separate ops); nullptr: the
  // backend's defaults.
  const KernelEntry* gemm_variant = nullptr;
  const KernelEntry* rope_variant = nullptr;
  QkvAttention attention = {};  // out set: the folded decode attention
  int q_dim() const { return n_q_heads * cache.head_dim; }
  int kv_dim() const { return cache.n_kv_heads * cache.head_dim; }
  int cols() const { return q_dim() + 2 * kv_dim(); }  // qkv's row stride
  // The definition's two calls.
  GemmArgs gemm() const {
    GemmArgs g{a, w, qkv, m, cols(), k};
    g.norm = norm;
    return g;
  }
  RopeKvWriteArgs rope() const {
    return RopeKvWriteArgs{qkv, q_out, positions, seq_slots, inv_freq, cache, m, n_q_heads, cols()};
  }
  // The folded attention's call (attention.out set).
  AttentionDecodeArgs attention_args() const {
    AttentionDecodeArgs d{q_out, attention.out, seq_slots, attention.context_lens, cache, m, attention.max_context,
                          n_q_heads, q_dim(), attention.scale, attention.host_context_lens};
    d.one_row_per_seq = attention.one_row_per_seq;
    return d;
  }
};

// The MLP's gate/up projection fused with SwiGLU: out = silu(g) * u with
// [g | u] = a @ w^T, w the fused gate/up matrix [2 inter, k] (gate rows, then
// up rows). The definition is gemm (into `gate_up`, [m, 2 inter]) followed by
// swiglu (stride 2 inter); the CPU reference runs exactly those two, so g and u
// are rounded to act before silu(g) * u as in the unfused path. `gate_up` is
// scratch a variant may write (the definition's intermediate; a fused kernel
// does not touch it).
struct GateUpSwigluArgs {
  const void* a;  // act [m, k]
  const void* w;  // bf16 [2 inter, k]
  void* out;      // act [m, inter]
  void* gate_up;  // act [m, 2 inter] scratch
  int m, inter, k;
  PrologueNorm norm = {};  // set: a is x and the A operand rmsnorm(x) * norm.weight
};

// A projection followed by the residual add + RMSNorm it feeds (o_proj then
// attn_residual + mlp_norm; down_proj then mlp_residual + the next layer's
// attn_norm): y = a @ w^T (rounded to act), then add_rmsnorm (x += y, out =
// rmsnorm(x) * norm_weight). The definition is gemm into `y` followed by
// add_rmsnorm; the CPU reference runs exactly those two. `y` is the
// definition's intermediate, written by every variant (the fused kernel's
// blocks write their rows of it and the last block to finish reads them back).
// out == nullptr (the deferred-norm op table): no norm, only x += y -- the
// GEMMs that read x next normalise it in their prologue (PrologueNorm); a
// variant whose entry has `defers_norm` need not write y then.
struct ProjResidualNormArgs {
  const void* a;            // act [m, k]
  const void* w;            // bf16 [hidden, k]
  void* y;                  // act [m, hidden] scratch: the projection
  void* x;                  // act [m, hidden], the residual stream, updated in place
  const void* norm_weight;  // bf16 [hidden]
  void* out;                // act [m, hidden]: rmsnorm(x) * norm_weight; nullptr: none
  int m, hidden, k;
  float eps;
};

struct ArgmaxArgs {
  const float* logits;  // [b, vocab]
  int32_t* out;         // [b] device (cuda) / host (cpu)
  int b, vocab;
};

// Per-row sampling: temperature <= 0 means greedy. top_k <= 0 means off,
// top_p >= 1 means off. Reproducible: the draw for a row depends only on
// (seed, step) -- Philox counter-based.
struct SampleArgs {
  const float* logits;       // [b, vocab]
  const float* temperature;  // [b]
  const int32_t* top_k;      // [b]
  const float* top_p;        // [b]
  const uint64_t* seeds;     // [b]
  const int32_t* steps;      // [b] generated-token index (the Philox counter)
  int32_t* out;              // [b]
  int b, vocab;
};

}  // namespace lantern::kernels
