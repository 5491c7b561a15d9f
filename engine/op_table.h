#pragma once
// The op table: the ops of one engine step as data -- name, kernel family,
// layer, and the arena views each reads and writes -- and the layout of the
// activation arena those views live in. Model::forward runs this table (the
// views an op declares are the buffers its kernel gets); the alias tracker,
// the timeline and the harness tests read the same table. Building it needs
// no CUDA and no device.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "kernels/registry.h"

namespace lantern {

// One view of the activation arena. Views that name the same buffer alias it
// (the buffer is as large as its largest view; each view starts at its
// offset 0).
struct ViewDecl {
  std::string view;
  std::string buffer;
  size_t bytes = 0;
  std::string shape;  // human-readable, e.g. "[512, 2048] bf16"
};

// The seed engine's activation buffers for `rows` step rows and `logit_rows`
// logits rows, with its two aliases: q / attn_out share buffer "q_attn",
// o_out / mlp_down share buffer "o_down". `act_bytes`: 2 (bf16, cuda) or 4
// (f32, cpu); `meta_bytes`: the step metadata block (model_meta.h).
// `fused`: the layout of the fused op table (step_ops): buffer "qkv" [rows,
// q_dim + 2 kv_dim] (the fused q/k/v projection's output) replaces k and v,
// and "gate_up" [rows, 2 inter] replaces gate and up; it also has the pruned
// last layer's buffers (step_ops, StepKind::prune): "head_x" [logit_rows,
// hidden] (the residual stream of the logit rows) and "head_q" [logit_rows,
// q_dim] with its alias head_attn (their rotated q, then their attention
// output).
// `lm_head_parts` > 0 (tensor parallelism, split LM head over that many
// ranks): "logits_part" [logit_rows, vocab / parts] f32 (this rank's LM-head
// output) and "logits_gather" [parts, logit_rows, vocab / parts] f32 (the
// all_gather's rank-major result before it is reordered into "logits").
std::vector<ViewDecl> activation_layout(const ModelConfig& cfg, int rows, int logit_rows,
                                        size_t act_bytes, size_t meta_bytes, bool fused = false,
                                        int lm_head_parts = 0);

// The view ids of the activation arena, by role; -1 for the views the layout
// does not have (k, v, gate, up in the fused layout; qkv, gate_up in the unfused).
struct ActivationViews {
  ViewId x, xn, q, attn_out, k, v, o_out, mlp_down, gate, up, mlp_act, logits_in, logits, meta,
      inv_freq;
  ViewId qkv = -1, gate_up = -1;
  ViewId logits_part = -1, logits_gather = -1;  // a split LM head only
  ViewId head_x = -1, head_q = -1, head_attn = -1;  // the fused layout only (the pruned last layer)
  bool fused() const { return qkv >= 0; }
  bool split_lm_head() const { return logits_part >= 0; }
};

// Adds the layout's buffers (in first-use order) and views to `arena` (not
// allocated yet) and returns the views by role.
ActivationViews declare_activations(Arena& arena, const std::vector<ViewDecl>& layout);
// The views of an arena declared so (e.g. the one Observer::on_arena shows).
ActivationViews find_activations(const Arena& arena);

enum class OpKind : uint8_t {
  embed, attn_norm, q_proj, k_proj, v_proj, rope, kv_write, attention_prefill, attention_decode,
  attention_mixed, o_proj, attn_residual, mlp_norm, gate_proj, up_proj, swiglu, down_proj,
  mlp_residual, final_norm, lm_head, argmax, sample,
  // The fused table's ops (step_ops with fused views).
  qkv_proj, rope_kv_write, attn_residual_norm, gate_up_proj, mlp_residual_norm,
  gate_up_swiglu,  // gate/up projection + swiglu (the fused table since session 6)
  // o_proj + attn_residual_norm, down_proj + mlp_residual_norm (the fused table
  // without tensor parallelism, since session 8)
  o_proj_residual_norm, down_proj_residual_norm,
  all_reduce,  // tensor parallelism: sum of the ranks' partial o_proj / down_proj outputs
  all_gather,  // split LM head: every rank's logits columns into the full logits rows
  // The pruned last layer (StepKind::prune): the logit rows of x and of the
  // rotated q gathered into head_x / head_q (an engine-side copy, no registry
  // family), then their attention over the paged cache (attention_decode).
  head_gather, attention_head,
  // Decode steps of the fused table without tensor parallelism: qkv_proj and
  // rope_kv_write as one op (family qkv_rope; since session 30).
  qkv_rope,
  // ... and with the decode attention folded in (StepKind::fold; family
  // qkv_rope with QkvAttention set; since session 33).
  qkv_attention,
};

// One op of the forward pass: one registry launch (attention_mixed: the
// prefill and the decode launch of a mixed step, reported as one op named
// "attention" whose kernel is attention_prefill's).
struct OpSpec {
  OpKind kind = OpKind::embed;
  const char* name = "";  // stable op name reported to observers
  kernels::Family family = kernels::Family::embedding;
  int layer = -1;         // -1 outside the layer loop
  std::array<ViewId, 3> reads{};
  int num_reads = 0;
  std::array<ViewId, 3> writes{};
  int num_writes = 0;
  // The deferred-norm table (step_ops, defer_norm): a projection that adds
  // into x without normalising it (o/down_proj_residual_norm: out = nullptr),
  // or a GEMM that normalises its input x in its prologue (qkv_proj of layers
  // >= 1 with the layer's attn_norm, gate_up_swiglu with its mlp_norm; the xn
  // view it writes is the scratch of variants without the prologue).
  bool defer_norm = false;
  // Runs on the step's logit rows (r), not its rows (n): the pruned last
  // layer's ops after head_gather, which read and write head_x instead of x.
  bool head_rows = false;
};

// Which ops a step runs: its attention (fresh rows only, paged rows only, or
// both) and what it does with logits rows (none, argmax or sampling).
struct StepKind {
  enum Attention : uint8_t { prefill, decode, mixed } attention = decode;
  enum Head : uint8_t { none, argmax, sample } head = argmax;
  // The last layer prunes to the logit rows (steps with fewer logit rows than
  // rows -- prompts, continuing chunks, mixed steps -- in the fused table
  // without tensor parallelism or the deferred norm): after its
  // qkv projection and KV write (every row's K/V are cached), only the rows
  // whose logits the step takes go on -- their attention over the paged cache
  // and their o_proj, MLP and residual. With no head, the last layer ends at
  // the KV write. The other rows' last-layer outputs fed nothing but the LM
  // head, so the logits are the same up to the kernels' rounding at the
  // smaller row count (docs/engine.md, "The pruned last layer").
  bool prune = false;
  // Decode steps of the fused table without tensor parallelism or the
  // deferred norm (can_fold_attention) whose contexts are short
  // (Model::choose_folding): each layer's qkv_rope and attention_decode are
  // one op, qkv_attention (reads xn; writes qkv, q, attn_out), whose variant
  // runs the attention in the same launch (qkv_rope.4) or after it (the
  // composed variants, the CPU reference). A pruned last layer (a decode-kind
  // chunk with fewer logit rows than rows) keeps qkv_rope: its attention is
  // attention_head's.
  bool fold = false;
  // Every row is a logit row, in row order (pure decode steps, score mode;
  // Model::choose_final): in the fused table without tensor parallelism or
  // the deferred norm (can_fold_attention's conditions), the last layer ends
  // with down_proj_residual_norm like the others, its norm the final norm and
  // its normalised rows written to logits_in -- down_proj, mlp_residual and
  // final_norm (whose gather is then the identity) as one op.
  bool fuse_final = false;
};

// The ops of a step of `kind`, in launch order: embed, num_layers x 15 layer
// ops, then (head != none) final_norm, lm_head, argmax or sample.
//
// With a fused layout (v.fused()), a layer is 6 ops: qkv_proj (one GEMM over
// the fused q/k/v weights), rope_kv_write, attention, o_proj_residual_norm
// (o_proj + attn_residual + mlp_norm: family proj_residual_norm; it writes
// o_out, the projection its unfused variant and large batches keep, as
// well as x and xn), gate_up_swiglu (the GEMM over the fused gate/up weights
// and swiglu as one op; it declares the [n, 2 inter] gate_up buffer as a write
// too -- the scratch its unfused variant and large batches use),
// down_proj_residual_norm (down_proj + mlp_residual + the NEXT layer's
// attn_norm; attributed to this layer). Layer 0 starts with attn_norm; the
// last layer ends with down_proj and a plain mlp_residual (final_norm gathers
// logit rows and stays separate).
// Decode steps (kind.attention == decode) without tensor parallelism start
// the layer with qkv_rope instead of qkv_proj + rope_kv_write: one op (family
// qkv_rope: the projection, RoPE and the KV write; reads xn, or x with the
// deferred norm; writes qkv, q, and xn with the deferred norm), so a decode
// layer is 5 ops. Its fused variant writes the rotated q, k and the cache
// rows from the GEMV's epilogue (no rope_kv_write launch); its unfused
// variant launches the same two kernels as the separate ops did.
// `tensor_parallel`: an all_reduce op (reads and writes o_out / mlp_down, in
// place; no registry family) right after each o_proj and down_proj -- so with
// tensor parallelism the projections stay separate from the residual norms
// (o_proj, all_reduce, attn_residual_norm; down_proj, all_reduce,
// mlp_residual_norm).
// A split LM head (v.split_lm_head()): lm_head writes logits_part and an
// all_gather op (reads logits_part, writes logits_gather and logits) follows it.
//
// `defer_norm` (the deferred-norm table; proj_residual_norm variants with
// defers_norm, fused layout, no tensor parallelism): o_proj_residual_norm and
// down_proj_residual_norm write x only (the residual add), and the GEMMs that
// read x next -- gate_up_swiglu and the next layer's qkv_proj -- read x and
// normalise it themselves (OpSpec::defer_norm; kernels::PrologueNorm). The ops
// and their order do not change; only views and the norm's place do.
//
// `kind.prune` (the pruned last layer; can_prune_last_layer): the last layer's
// qkv_proj and rope_kv_write run on every row; then, with a head,
// head_gather (x and q's logit rows into head_x and head_q), attention_head
// (attention_decode over the paged cache for those rows: head_q -> head_attn),
// o_proj_residual_norm, gate_up_swiglu, down_proj and mlp_residual on the
// logit rows (OpSpec::head_rows), and final_norm reads head_x; without one,
// the layer ends at rope_kv_write.
std::vector<OpSpec> step_ops(int num_layers, const ActivationViews& v, StepKind kind,
                             bool tensor_parallel = false, bool defer_norm = false);

// Whether the op table can prune its last layer (StepKind::prune): the fused
// layout (it declares head_x / head_q), no tensor parallelism, no deferred norm.
bool can_prune_last_layer(const ActivationViews& v, bool tensor_parallel, bool defer_norm);
// Whether it can fold the decode attention into qkv_rope (StepKind::fold):
// the fused layout, no tensor parallelism, no deferred norm.
bool can_fold_attention(const ActivationViews& v, bool tensor_parallel, bool defer_norm);

// step_ops for every kind, built once: the table Model::forward walks.
class OpTable {
 public:
  OpTable(int num_layers, const ActivationViews& v, bool tensor_parallel = false, bool defer_norm = false);
  const std::vector<OpSpec>& ops(StepKind kind) const { return tables_[index(kind)]; }
  bool defer_norm() const { return defer_norm_; }
  // Whether ops({.., prune = true}) differs from the full table (can_prune_last_layer).
  bool can_prune() const { return can_prune_; }
  // Whether ops({decode, .., fold = true}) differs from the full table (can_fold_attention).
  bool can_fold() const { return can_fold_; }

 private:
  // A table that cannot prune (fold, fuse the final norm) serves those kinds with its full ops.
  int index(StepKind k) const {
    return 8 * (3 * k.attention + k.head) + (k.prune && can_prune_ ? 1 : 0) + (k.fold && can_fold_ ? 2 : 0) +
           (k.fuse_final && can_fold_ ? 4 : 0);
  }
  std::array<std::vector<OpSpec>, 72> tables_;
  bool defer_norm_ = false;
  bool can_prune_ = false;
  bool can_fold_ = false;
};

}  // namespace lantern
