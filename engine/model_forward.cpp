// Model::forward: walks the op table for the step's kind and launches each op
// through the registry. An op's kernel gets the arena views the table
// declares for it (reads in order, then writes), so what the alias tracker
// checks is what the kernels touch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <optional>
#include <tuple>
#include <type_traits>

#include "kernels/base/errors.h"
#include "engine/device_kernels.h"
#include "engine/model.h"

namespace lantern {

using kernels::Family;

namespace {

OpInfo op_info(const OpSpec& o, const kernels::KernelEntry* e, kernels::Cost cost, OpInfo::GraphMode mode) {
  OpInfo info;
  info.graph = mode;
  info.op = o.name;
  info.layer = o.layer;
  info.kernel = e;
  info.cost = cost;
  info.reads = o.reads.data();
  info.num_reads = o.num_reads;
  info.writes = o.writes.data();
  info.num_writes = o.num_writes;
  return info;
}

// The GEMM shape (n, k, c_f32) a family's cuBLASLt path plans: gemm's own, and
// the fused families that run a GEMM first (gate_up_swiglu, proj_residual_norm, qkv_rope).
// prepare_kernels collects them so that the manifest records -- and `lantern
// rerun` pins -- every plan a step may use; a shape left out is re-timed by the
// rerun, whose pick may differ and flip near-tie tokens.
std::optional<std::tuple<int, int, bool>> planned_gemm_shape(const kernels::GemmArgs& a) {
  return std::make_tuple(a.n, a.k, a.c_f32);
}
std::optional<std::tuple<int, int, bool>> planned_gemm_shape(const kernels::GateUpSwigluArgs& a) {
  return std::make_tuple(2 * a.inter, a.k, false);
}
std::optional<std::tuple<int, int, bool>> planned_gemm_shape(const kernels::ProjResidualNormArgs& a) {
  return std::make_tuple(a.hidden, a.k, false);
}
std::optional<std::tuple<int, int, bool>> planned_gemm_shape(const kernels::QkvRopeArgs& a) {
  return std::make_tuple(a.cols(), a.k, false);
}
template <class Args>
std::optional<std::tuple<int, int, bool>> planned_gemm_shape(const Args&) {
  return std::nullopt;
}

}  // namespace

// An op's launches between the observers' op hooks, recorded into the graph
// being captured (one capture leaf per op).
template <class Run>
void Model::observed(const OpInfo& info, const Run& run) {
  if (obs_) obs_->on_op_begin(info);
  run();
  if (capturing_) {
    captured_.push_back(info);
    leaves_.push_back(capture_leaf());
  }
  if (obs_) obs_->on_op_end(info);
}

template <class Args>
void Model::op(const OpSpec& o, const Args& args) {
  constexpr Family f = kernels::FamilyOf<Args>::value;
  const kernels::KernelEntry& e = kernels_.entry(f);
  kernels::LaunchCtx ctx = dev_.ctx(workspace_, workspace_bytes_);
  if (preparing_) {  // prepare_kernels: no launch, no op hooks
    if (const kernels::PrepareHook hook = kernels::Registry::global().prepare(e)) hook(&args, ctx);
    if (const auto shape = planned_gemm_shape(args)) gemm_shapes_.insert(*shape);
    return;
  }
#if LANTERN_INSTRUMENTATION
  if (obs_ || capturing_)
    return observed(op_info(o, &e, e.cost(&args), capturing_ ? OpInfo::kCapture : OpInfo::kEager),
                    [&] { kernels::launch(e, args, ctx); });
#endif
  kernels::launch(e, args, ctx);
}

void Model::engine_op(const OpSpec& o, kernels::Cost cost, const std::function<void()>& run) {
#if LANTERN_INSTRUMENTATION
  if (obs_ || capturing_) return observed(op_info(o, nullptr, cost, capturing_ ? OpInfo::kCapture : OpInfo::kEager), run);
#endif
  (void)o, (void)cost;
  run();
}

// The pruned last layer's gather: head_x[i] = x[logit_rows[i]], head_q[i] =
// q[logit_rows[i]] for the r (padded: the graph's) logit rows.
void Model::head_gather(const OpSpec& o, const ForwardShape& s) {
  if (s.r == 0) return;
  const size_t x_row = static_cast<size_t>(cfg_.hidden_size) * act_bytes_;
  const size_t q_row = static_cast<size_t>(cfg_.q_dim()) * act_bytes_;
  const auto* rows = reinterpret_cast<const int32_t*>(static_cast<char*>(arena_.ptr(v_.meta)) + meta_.logit_rows);
  auto* x = static_cast<const char*>(arena_.ptr(o.reads[0]));
  auto* q = static_cast<const char*>(arena_.ptr(o.reads[1]));
  auto* hx = static_cast<char*>(arena_.ptr(o.writes[0]));
  auto* hq = static_cast<char*>(arena_.ptr(o.writes[1]));
  const int r = s.r, n = s.n;
  engine_op(o, kernels::Cost{2.0 * r * static_cast<double>(x_row + q_row), 0}, [&] {
    if (dev_.is_cuda()) {
      launch_gather_rows(hx, x, x_row, hq, q, q_row, rows, r, n, dev_.stream());
      return;
    }
    for (int i = 0; i < r; ++i) {  // cpu: the arena and the metadata are host memory
      LANTERN_CHECK(rows[i] >= 0 && rows[i] < n, "head_gather: logit row %d is %d, outside [0, %d)", i, rows[i], n);
      std::memcpy(hx + i * x_row, x + rows[i] * x_row, x_row);
      std::memcpy(hq + i * q_row, q + rows[i] * q_row, q_row);
    }
  });
}

void Model::attention_mixed(const OpSpec& o, const kernels::AttentionPrefillArgs& prefill,
                            const kernels::AttentionDecodeArgs& decode) {
  const kernels::KernelEntry& pe = kernels_.entry(Family::attention_prefill);
  const kernels::KernelEntry& de = kernels_.entry(Family::attention_decode);
  kernels::LaunchCtx ctx = dev_.ctx(workspace_, workspace_bytes_);
#if LANTERN_INSTRUMENTATION
  if (obs_) {
    kernels::Cost cp = pe.cost(&prefill), cd = de.cost(&decode);
    const OpInfo info = op_info(o, &pe, kernels::Cost{cp.bytes + cd.bytes, cp.flops + cd.flops},
                                OpInfo::kEager);  // mixed steps are never captured
    obs_->on_op_begin(info);
    kernels::launch(pe, prefill, ctx);
    kernels::launch(de, decode, ctx);
    obs_->on_op_end(info);
    return;
  }
#endif
  (void)o;
  kernels::launch(pe, prefill, ctx);
  kernels::launch(de, decode, ctx);
}

int small_batch_carveout(int rows) {
  static const std::pair<int, int> policy = [] {  // (percent, up to rows)
    std::pair<int, int> p{50, 1};
    const char* env = std::getenv("LANTERN_SMALL_BATCH_CARVEOUT");
    if (!env || !*env) return p;
    if (std::string_view(env) == "off") return std::pair<int, int>{-1, 0};
    int percent = -1, up_to = -1;
    LANTERN_CHECK(std::sscanf(env, "%d:%d", &percent, &up_to) == 2 && percent >= 0 && percent <= 100 && up_to >= 0,
                  "LANTERN_SMALL_BATCH_CARVEOUT=%s: expected P:N (P percent 0-100 up to N rows) or off", env);
    return std::pair<int, int>{percent, up_to};
  }();
  return rows <= policy.second ? policy.first : -1;
}

void Model::forward(const ForwardShape& s) {
  // This step's launches (and graph captures) only.
  const kernels::ScopedLaunchCarveout carveout(dev_.is_cuda() ? small_batch_carveout(s.n) : -1);
  int layer = -1;
  for (const OpSpec& o : op_table_->ops(s.kind)) {
    if (o.layer != layer) {
      if (layer >= 0) LANTERN_OBSERVE(obs_, on_layer_end(layer));
      layer = o.layer;
      if (layer >= 0) LANTERN_OBSERVE(obs_, on_layer_begin(layer));
    }
    launch_op(o, s);
  }
  if (layer >= 0) LANTERN_OBSERVE(obs_, on_layer_end(layer));
}

// The paged KV cache of `layer` (block tables: one row per slot plus the scratch slot).
kernels::KvCacheRef Model::kv_cache(int layer) const {
  const size_t table_layer = static_cast<size_t>(limits_.max_seqs + 1) * max_blocks_per_seq_;
  return kernels::KvCacheRef{kv_pool_, block_tables_ + (layer >= 0 ? layer : 0) * table_layer,
                             limits_.kv_block_size, max_blocks_per_seq_, cfg_.num_kv_heads, cfg_.head_dim};
}

// The attention ops: fresh rows (attention_prefill), paged rows
// (attention_decode), both (attention_mixed), or the pruned last layer's
// logit rows over the paged cache (attention_head).
void Model::launch_attention(const OpSpec& o, const ForwardShape& s) {
  const int n = s.n, nf = s.nf, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  char* devm = static_cast<char*>(arena_.ptr(v_.meta));
  auto M = [devm](size_t off) { return reinterpret_cast<int32_t*>(devm + off); };
  auto in = [&](int i) { return arena_.ptr(o.reads[i]); };
  auto out = [&](int i) { return arena_.ptr(o.writes[i]); };
  const kernels::KvCacheRef cache = kv_cache(o.layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
  auto prefill = [&] {
    // Unfused: reads q, k, v. Fused: reads q and qkv, whose rows hold the
    // rotated k and v at columns Q and Q + KV.
    const bool fused = v_.fused();
    char* qkv = static_cast<char*>(in(1));
    const void* k = fused ? qkv + static_cast<size_t>(Q) * act_bytes_ : in(1);
    const void* v = fused ? qkv + static_cast<size_t>(Q + KV) * act_bytes_ : in(2);
    const int kv_stride = fused ? Q + 2 * KV : KV;
    return kernels::AttentionPrefillArgs{in(0), k, v, out(0),
                                         dev_.is_cuda() ? M(meta_.fresh_starts) : s.host_fresh_starts,
                                         s.host_fresh_starts, s.num_fresh, s.max_fresh_len,
                                         cfg_.num_q_heads, cfg_.num_kv_heads, cfg_.head_dim, Q, kv_stride, scale};
  };
  auto decode = [&] {  // the paged rows: after the nf fresh rows
    const size_t skip = static_cast<size_t>(nf) * Q * act_bytes_;
    kernels::AttentionDecodeArgs d{static_cast<char*>(in(0)) + skip, static_cast<char*>(out(0)) + skip,
                                   M(meta_.slots) + nf, M(meta_.ctx_lens) + nf, cache, n - nf,
                                   limits_.max_context, cfg_.num_q_heads, Q, scale,
                                   host_ctx_lens() + nf};
    d.one_row_per_seq = s.one_row_per_seq;
    return d;
  };
  switch (o.kind) {
    case OpKind::attention_prefill: return op(o, prefill());
    case OpKind::attention_decode: return op(o, decode());
    case OpKind::attention_mixed: return attention_mixed(o, prefill(), decode());
    case OpKind::attention_head: {  // the logit rows over the paged cache (every row's K/V written)
      kernels::AttentionDecodeArgs d{in(0), out(0), M(meta_.head_slots), M(meta_.head_ctx_lens), cache, s.r,
                                     limits_.max_context, cfg_.num_q_heads, Q, scale, host_head_ctx_lens()};
      d.one_row_per_seq = s.head_one_row_per_seq;
      return op(o, d);
    }
    default: LANTERN_FAIL("op %s is not an attention op", o.name);
  }
}

void Model::launch_op(const OpSpec& o, const ForwardShape& s) {
  const int n = o.head_rows ? s.r : s.n, r = s.r;  // head_rows: the pruned last layer
  const int H = cfg_.hidden_size, I = cfg_.intermediate_size, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  const float eps = cfg_.rms_norm_eps;
  char* devm = static_cast<char*>(arena_.ptr(v_.meta));
  auto M = [devm](size_t off) { return reinterpret_cast<int32_t*>(devm + off); };
  auto in = [&](int i) { return arena_.ptr(o.reads[i]); };
  auto out = [&](int i) { return arena_.ptr(o.writes[i]); };
  const LayerWeights* lw = o.layer >= 0 ? &w_.layers[o.layer] : nullptr;
  auto gemm = [&](const void* w, int rows, int cols, int inner) {
    op(o, kernels::GemmArgs{in(0), w, out(0), rows, cols, inner});
  };
  switch (o.kind) {
    case OpKind::embed: return op(o, kernels::EmbeddingArgs{M(meta_.ids), w_.embed, out(0), n, H, cfg_.vocab_size});
    case OpKind::attn_norm: return op(o, kernels::RmsnormArgs{in(0), lw->attn_norm, out(0), nullptr, n, H, eps});
    case OpKind::q_proj: return gemm(lw->wq, n, Q, H);
    case OpKind::k_proj: return gemm(lw->wk, n, KV, H);
    case OpKind::v_proj: return gemm(lw->wv, n, KV, H);
    case OpKind::rope:
      return op(o, kernels::RopeArgs{out(0), out(1), M(meta_.positions), static_cast<const float*>(arena_.ptr(v_.inv_freq)),
                                     n, cfg_.num_q_heads, cfg_.num_kv_heads, cfg_.head_dim, Q, KV});
    case OpKind::kv_write:
      return op(o, kernels::KvWriteArgs{in(0), in(1), M(meta_.positions), M(meta_.slots), kv_cache(o.layer), n, KV});
    case OpKind::attention_prefill:
    case OpKind::attention_decode:
    case OpKind::attention_mixed:
    case OpKind::attention_head: return launch_attention(o, s);
    case OpKind::head_gather: return head_gather(o, s);
    case OpKind::o_proj: return gemm(lw->wo, n, H, Q);
    case OpKind::attn_residual:
    case OpKind::mlp_residual:
      return op(o, kernels::ResidualArgs{out(0), in(1), static_cast<size_t>(n) * H});
    case OpKind::mlp_norm: return op(o, kernels::RmsnormArgs{in(0), lw->mlp_norm, out(0), nullptr, n, H, eps});
    case OpKind::gate_proj: return gemm(lw->w_gate, n, I, H);
    case OpKind::up_proj: return gemm(lw->w_up, n, I, H);
    case OpKind::swiglu:
      if (v_.fused())  // one [n, 2I] input: gate columns, then up columns
        return op(o, kernels::SwigluArgs{in(0), static_cast<char*>(in(0)) + static_cast<size_t>(I) * act_bytes_,
                                         out(0), n, I, 2 * I});
      return op(o, kernels::SwigluArgs{in(0), in(1), out(0), n, I});
    case OpKind::down_proj: return gemm(lw->w_down, n, H, I);
    case OpKind::qkv_proj: {  // deferred norm: reads x, normalises with attn_norm (xn: the scratch)
      kernels::GemmArgs g{in(0), lw->wqkv, out(0), n, Q + 2 * KV, H};
      if (o.defer_norm) g.norm = kernels::PrologueNorm{lw->attn_norm, out(1), eps};
      return op(o, g);
    }
    case OpKind::qkv_rope:        // writes qkv, q (deferred norm: reads x, normalises with attn_norm; xn the scratch)
    case OpKind::qkv_attention: {  // ... and attn_out: the folded decode attention (a pure decode step's rows)
      kernels::QkvRopeArgs a{in(0), lw->wqkv, out(0), out(1), M(meta_.positions), M(meta_.slots),
                             static_cast<const float*>(arena_.ptr(v_.inv_freq)), kv_cache(o.layer), n, H,
                             cfg_.num_q_heads};
      if (o.defer_norm) a.norm = kernels::PrologueNorm{lw->attn_norm, out(2), eps};
      a.gemm_variant = &kernels_.entry(Family::gemm);  // the unfused path's kernels: the separate ops' choices
      a.rope_variant = &kernels_.entry(Family::rope_kv_write);
      if (o.kind == OpKind::qkv_attention) {
        kernels::QkvAttention& at = a.attention;
        at.out = out(2);
        at.context_lens = M(meta_.ctx_lens);
        at.host_context_lens = host_ctx_lens();
        at.max_context = limits_.max_context;
        at.scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));  // launch_attention's
        at.one_row_per_seq = s.one_row_per_seq;
        at.variant = &kernels_.entry(Family::attention_decode);
      }
      return op(o, a);
    }
    case OpKind::rope_kv_write:
      return op(o, kernels::RopeKvWriteArgs{in(0), out(0), M(meta_.positions), M(meta_.slots),
                                            static_cast<const float*>(arena_.ptr(v_.inv_freq)), kv_cache(o.layer), n,
                                            cfg_.num_q_heads, Q + 2 * KV});
    case OpKind::attn_residual_norm:
      return op(o, kernels::AddRmsnormArgs{out(0), in(1), lw->mlp_norm, out(1), n, H, eps});
    case OpKind::gate_up_proj: return gemm(lw->w_gate_up, n, 2 * I, H);
    case OpKind::gate_up_swiglu: {  // deferred norm: reads x, normalises with mlp_norm (xn: the scratch)
      kernels::GateUpSwigluArgs g{in(0), lw->w_gate_up, out(0), out(1), n, I, H};
      if (o.defer_norm) g.norm = kernels::PrologueNorm{lw->mlp_norm, out(2), eps};
      return op(o, g);
    }
    case OpKind::mlp_residual_norm:  // the next layer's attn_norm
      return op(o, kernels::AddRmsnormArgs{out(0), in(1), w_.layers[o.layer + 1].attn_norm, out(1), n, H, eps});
    case OpKind::o_proj_residual_norm:  // reads attn_out, x; writes x, xn, o_out (deferred: x, o_out)
      if (o.defer_norm)
        return op(o, kernels::ProjResidualNormArgs{in(0), lw->wo, out(1), out(0), lw->mlp_norm, nullptr, n, H, Q, eps});
      return op(o, kernels::ProjResidualNormArgs{in(0), lw->wo, out(2), out(0), lw->mlp_norm, out(1), n, H, Q, eps});
    case OpKind::down_proj_residual_norm: {  // the next layer's attn_norm (deferred: its qkv_proj's)
      // The last layer's (StepKind::fuse_final): the final norm, its rows into logits_in (out(1)).
      const bool last = o.layer + 1 == cfg_.num_layers;
      const void* norm = last ? w_.final_norm : w_.layers[o.layer + 1].attn_norm;
      if (o.defer_norm)
        return op(o, kernels::ProjResidualNormArgs{in(0), lw->w_down, out(1), out(0), norm, nullptr, n, H, I, eps});
      return op(o, kernels::ProjResidualNormArgs{in(0), lw->w_down, out(2), out(0), norm, out(1), n, H, I, eps});
    }
    case OpKind::all_reduce: return all_reduce(o, n);
    case OpKind::all_gather: return all_gather(o, r);
    case OpKind::final_norm:
      return op(o, kernels::RmsnormArgs{in(0), w_.final_norm, out(0),
                                        o.reads[0] == v_.head_x ? nullptr : M(meta_.logit_rows), r, H, eps});
    case OpKind::lm_head: {  // split: this rank's V/N vocabulary rows -> logits_part
      const int cols = v_.split_lm_head() ? cfg_.vocab_size / comm_->world() : cfg_.vocab_size;
      kernels::GemmArgs head{in(0), w_.lm_head, out(0), r, cols, H};
      head.c_f32 = true;
      return op(o, head);
    }
    case OpKind::argmax:
      return op(o, kernels::ArgmaxArgs{static_cast<const float*>(in(0)), M(meta_.out_tokens), r, cfg_.vocab_size});
    case OpKind::sample:
      return op(o, kernels::SampleArgs{static_cast<const float*>(in(0)),
                                       reinterpret_cast<const float*>(devm + meta_.temperature), M(meta_.top_k),
                                       reinterpret_cast<const float*>(devm + meta_.top_p),
                                       reinterpret_cast<const uint64_t*>(devm + meta_.seeds), M(meta_.gen_index),
                                       M(meta_.out_tokens), r, cfg_.vocab_size});
  }
  LANTERN_FAIL("op %s has no launcher", o.name);
}

}  // namespace lantern
