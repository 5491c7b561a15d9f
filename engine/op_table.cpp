#include "engine/op_table.h"

#include <map>

#include "kernels/base/errors.h"

namespace lantern {

std::vector<ViewDecl> activation_layout(const ModelConfig& cfg, int rows, int logit_rows,
                                        size_t act_bytes, size_t meta_bytes, bool fused,
                                        int lm_head_parts) {
  const long T = rows, R = logit_rows, H = cfg.hidden_size, I = cfg.intermediate_size;
  const long Q = cfg.q_dim(), KV = cfg.kv_dim();
  const char* act = act_bytes == 2 ? "bf16" : "f32";
  auto decl = [&](const char* view, const char* buffer, long r, long c) {
    return ViewDecl{view, buffer, static_cast<size_t>(r) * c * act_bytes,
                    strformat("[%ld, %ld] %s", r, c, act)};
  };
  std::vector<ViewDecl> qkv, gate_up, head;
  if (fused) {
    qkv = {decl("qkv", "qkv", T, Q + 2 * KV)};
    gate_up = {decl("gate_up", "gate_up", T, 2 * I)};
    head = {decl("head_x", "head_x", R, H), decl("head_q", "head_q", R, Q),
            decl("head_attn", "head_q", R, Q)};  // the pruned last layer; head_attn aliases head_q
  } else {
    qkv = {decl("k", "k", T, KV), decl("v", "v", T, KV)};
    gate_up = {decl("gate", "gate", T, I), decl("up", "up", T, I)};
  }
  std::vector<ViewDecl> layout = {
      decl("x", "x", T, H),
      decl("xn", "xn", T, H),
      decl("q", "q_attn", T, Q),
      decl("attn_out", "q_attn", T, Q),  // seed alias 1
  };
  layout.insert(layout.end(), qkv.begin(), qkv.end());
  layout.push_back(decl("o_out", "o_down", T, H));
  layout.push_back(decl("mlp_down", "o_down", T, H));  // seed alias 2
  layout.insert(layout.end(), gate_up.begin(), gate_up.end());
  std::vector<ViewDecl> rest = {
      decl("mlp_act", "mlp_act", T, I),
      decl("logits_in", "logits_in", R, H),
      ViewDecl{"logits", "logits", static_cast<size_t>(R) * cfg.vocab_size * 4,
               strformat("[%ld, %d] f32", R, cfg.vocab_size)},
      ViewDecl{"step_meta", "step_meta", meta_bytes, "ids, positions, slots, ... (int32)"},
      ViewDecl{"rope_inv_freq", "rope_inv_freq", static_cast<size_t>(cfg.head_dim / 2) * 4,
               strformat("[%d] f32", cfg.head_dim / 2)},
  };
  layout.insert(layout.end(), rest.begin(), rest.end());
  layout.insert(layout.end(), head.begin(), head.end());
  if (lm_head_parts > 0) {
    const long P = lm_head_parts, part = cfg.vocab_size / P;
    layout.push_back(ViewDecl{"logits_part", "logits_part", static_cast<size_t>(R) * part * 4,
                              strformat("[%ld, %ld] f32", R, part)});
    layout.push_back(ViewDecl{"logits_gather", "logits_gather", static_cast<size_t>(P) * R * part * 4,
                              strformat("[%ld, %ld, %ld] f32", P, R, part)});
  }
  return layout;
}

ActivationViews declare_activations(Arena& arena, const std::vector<ViewDecl>& layout) {
  std::map<std::string, size_t> bytes;  // buffer -> its largest view
  for (const ViewDecl& d : layout) bytes[d.buffer] = std::max(bytes[d.buffer], d.bytes);
  std::map<std::string, int> buffer;
  for (const ViewDecl& d : layout) {
    auto it = buffer.find(d.buffer);
    if (it == buffer.end()) it = buffer.emplace(d.buffer, arena.add_buffer(d.buffer, bytes[d.buffer], d.shape)).first;
    arena.add_view(d.view, it->second, 0, d.bytes == bytes[d.buffer] ? 0 : d.bytes);
  }
  return find_activations(arena);
}

ActivationViews find_activations(const Arena& arena) {
  auto optional = [&arena](const char* name) {
    for (const ArenaView& view : arena.views())
      if (view.name == name) return arena.find(name);
    return ViewId(-1);
  };
  ActivationViews v;
  v.x = arena.find("x");
  v.xn = arena.find("xn");
  v.q = arena.find("q");
  v.attn_out = arena.find("attn_out");
  v.k = optional("k");
  v.v = optional("v");
  v.o_out = arena.find("o_out");
  v.mlp_down = arena.find("mlp_down");
  v.gate = optional("gate");
  v.up = optional("up");
  v.mlp_act = arena.find("mlp_act");
  v.logits_in = arena.find("logits_in");
  v.logits = arena.find("logits");
  v.meta = arena.find("step_meta");
  v.inv_freq = arena.find("rope_inv_freq");
  v.qkv = optional("qkv");
  v.gate_up = optional("gate_up");
  v.logits_part = optional("logits_part");
  v.logits_gather = optional("logits_gather");
  v.head_x = optional("head_x");
  v.head_q = optional("head_q");
  v.head_attn = optional("head_attn");
  return v;
}

namespace {

OpSpec spec(OpKind kind, const char* name, kernels::Family family, int layer,
            std::initializer_list<ViewId> reads, std::initializer_list<ViewId> writes) {
  OpSpec o;
  o.kind = kind;
  o.name = name;
  o.family = family;
  o.layer = layer;
  for (ViewId r : reads) o.reads[o.num_reads++] = r;
  for (ViewId w : writes) o.writes[o.num_writes++] = w;
  return o;
}

// Tensor parallelism: the sum of the ranks' partial outputs, in place. Its
// family field is unused (no registry kernel; Model::all_reduce runs it).
OpSpec all_reduce_op(int l, ViewId view) {
  return spec(OpKind::all_reduce, "all_reduce", kernels::Family::gemm, l, {view}, {view});
}

void add_layer(std::vector<OpSpec>& ops, int l, const ActivationViews& v, StepKind::Attention attention,
               bool tensor_parallel) {
  using F = kernels::Family;
  using K = OpKind;
  ops.push_back(spec(K::attn_norm, "attn_norm", F::rmsnorm, l, {v.x}, {v.xn}));
  ops.push_back(spec(K::q_proj, "q_proj", F::gemm, l, {v.xn}, {v.q}));
  ops.push_back(spec(K::k_proj, "k_proj", F::gemm, l, {v.xn}, {v.k}));
  ops.push_back(spec(K::v_proj, "v_proj", F::gemm, l, {v.xn}, {v.v}));
  ops.push_back(spec(K::rope, "rope", F::rope, l, {v.q, v.k}, {v.q, v.k}));
  ops.push_back(spec(K::kv_write, "kv_write", F::kv_write, l, {v.k, v.v}, {}));
  // Mixed step: fresh rows and paged rows read disjoint rows of q and write
  // the same rows of attn_out, which aliases q. At view granularity two ops
  // would look like "prefill overwrote q that decode still reads", so both
  // launches form one "attention" op (reads q, k, v; writes attn_out).
  switch (attention) {
    case StepKind::prefill:
      ops.push_back(spec(K::attention_prefill, "attention_prefill", F::attention_prefill, l,
                         {v.q, v.k, v.v}, {v.attn_out}));
      break;
    case StepKind::decode:
      ops.push_back(spec(K::attention_decode, "attention_decode", F::attention_decode, l, {v.q},
                         {v.attn_out}));
      break;
    case StepKind::mixed:
      ops.push_back(spec(K::attention_mixed, "attention", F::attention_prefill, l, {v.q, v.k, v.v},
                         {v.attn_out}));
      break;
  }
  ops.push_back(spec(K::o_proj, "o_proj", F::gemm, l, {v.attn_out}, {v.o_out}));
  if (tensor_parallel) ops.push_back(all_reduce_op(l, v.o_out));
  ops.push_back(spec(K::attn_residual, "attn_residual", F::residual, l, {v.x, v.o_out}, {v.x}));
  ops.push_back(spec(K::mlp_norm, "mlp_norm", F::rmsnorm, l, {v.x}, {v.xn}));
  ops.push_back(spec(K::gate_proj, "gate_proj", F::gemm, l, {v.xn}, {v.gate}));
  ops.push_back(spec(K::up_proj, "up_proj", F::gemm, l, {v.xn}, {v.up}));
  ops.push_back(spec(K::swiglu, "swiglu", F::swiglu, l, {v.gate, v.up}, {v.mlp_act}));
  ops.push_back(spec(K::down_proj, "down_proj", F::gemm, l, {v.mlp_act}, {v.mlp_down}));
  if (tensor_parallel) ops.push_back(all_reduce_op(l, v.mlp_down));
  ops.push_back(spec(K::mlp_residual, "mlp_residual", F::residual, l, {v.x, v.mlp_down}, {v.x}));
}

// The fused layer (op_table.h, step_ops): 6 ops (5 in decode steps: qkv_rope), one more in layer 0.
OpSpec deferred(OpSpec o) {
  o.defer_norm = true;
  return o;
}

OpSpec on_head_rows(OpSpec o) {
  o.head_rows = true;
  return o;
}

// The pruned last layer (StepKind::prune) after its KV write: nothing without
// a head; else the logit rows of x and q gathered, their attention over the
// paged cache (which now holds every row's K/V), o_proj + residual + norm,
// the MLP and the residual, all on the logit rows (head_x for x).
void add_pruned_tail(std::vector<OpSpec>& ops, int l, const ActivationViews& v, StepKind::Head head) {
  using F = kernels::Family;
  using K = OpKind;
  if (head == StepKind::none) return;
  // Its family field is unused (an engine-side copy, Model::head_gather; as all_reduce_op).
  ops.push_back(spec(K::head_gather, "head_gather", F::embedding, l, {v.x, v.q}, {v.head_x, v.head_q}));
  ops.push_back(on_head_rows(spec(K::attention_head, "attention_head", F::attention_decode, l, {v.head_q},
                                  {v.head_attn})));
  ops.push_back(on_head_rows(spec(K::o_proj_residual_norm, "o_proj_residual_norm", F::proj_residual_norm, l,
                                  {v.head_attn, v.head_x}, {v.head_x, v.xn, v.o_out})));
  ops.push_back(on_head_rows(
      spec(K::gate_up_swiglu, "gate_up_swiglu", F::gate_up_swiglu, l, {v.xn}, {v.mlp_act, v.gate_up})));
  ops.push_back(on_head_rows(spec(K::down_proj, "down_proj", F::gemm, l, {v.mlp_act}, {v.mlp_down})));
  ops.push_back(on_head_rows(
      spec(K::mlp_residual, "mlp_residual", F::residual, l, {v.head_x, v.mlp_down}, {v.head_x})));
}

void add_fused_layer(std::vector<OpSpec>& ops, int l, int num_layers, const ActivationViews& v,
                     StepKind kind, bool tensor_parallel, bool defer) {
  using F = kernels::Family;
  using K = OpKind;
  const StepKind::Attention attention = kind.attention;
  if (l == 0) ops.push_back(spec(K::attn_norm, "attn_norm", F::rmsnorm, l, {v.x}, {v.xn}));
  const bool qkv_rope = attention == StepKind::decode && !tensor_parallel;  // op_table.h: one op for the three
  // op_table.h, StepKind::fold: not in a pruned last layer (its attention is attention_head's)
  const bool fold = qkv_rope && kind.fold && !defer && !(kind.prune && l + 1 == num_layers);
  if (fold) {
    ops.push_back(spec(K::qkv_attention, "qkv_attention", F::qkv_rope, l, {v.xn}, {v.qkv, v.q, v.attn_out}));
  } else if (qkv_rope) {
    if (defer && l > 0)
      ops.push_back(deferred(spec(K::qkv_rope, "qkv_rope", F::qkv_rope, l, {v.x}, {v.qkv, v.q, v.xn})));
    else
      ops.push_back(spec(K::qkv_rope, "qkv_rope", F::qkv_rope, l, {v.xn}, {v.qkv, v.q}));
  } else if (defer && l > 0)  // the previous down_proj_residual_norm left x unnormalised
    ops.push_back(deferred(spec(K::qkv_proj, "qkv_proj", F::gemm, l, {v.x}, {v.qkv, v.xn})));
  else
    ops.push_back(spec(K::qkv_proj, "qkv_proj", F::gemm, l, {v.xn}, {v.qkv}));
  // Rotated q goes to its own dense buffer (attention's q and output rows);
  // k is rotated in place in qkv, where fresh-prompt attention reads k and v.
  if (!qkv_rope)
    ops.push_back(spec(K::rope_kv_write, "rope_kv_write", F::rope_kv_write, l, {v.qkv}, {v.q, v.qkv}));
  if (kind.prune && l + 1 == num_layers) return add_pruned_tail(ops, l, v, kind.head);
  switch (attention) {
    case StepKind::prefill:
      ops.push_back(spec(K::attention_prefill, "attention_prefill", F::attention_prefill, l,
                         {v.q, v.qkv}, {v.attn_out}));
      break;
    case StepKind::decode:
      if (!fold)
        ops.push_back(spec(K::attention_decode, "attention_decode", F::attention_decode, l, {v.q},
                           {v.attn_out}));
      break;
    case StepKind::mixed:
      ops.push_back(spec(K::attention_mixed, "attention", F::attention_prefill, l, {v.q, v.qkv},
                         {v.attn_out}));
      break;
  }
  if (tensor_parallel) {  // the sum of the ranks' partial projections comes before the residual
    ops.push_back(spec(K::o_proj, "o_proj", F::gemm, l, {v.attn_out}, {v.o_out}));
    ops.push_back(all_reduce_op(l, v.o_out));
    ops.push_back(spec(K::attn_residual_norm, "attn_residual_norm", F::add_rmsnorm, l, {v.x, v.o_out},
                       {v.x, v.xn}));
  } else if (defer) {
    ops.push_back(deferred(spec(K::o_proj_residual_norm, "o_proj_residual_norm", F::proj_residual_norm, l,
                                {v.attn_out, v.x}, {v.x, v.o_out})));
  } else {
    ops.push_back(spec(K::o_proj_residual_norm, "o_proj_residual_norm", F::proj_residual_norm, l,
                       {v.attn_out, v.x}, {v.x, v.xn, v.o_out}));
  }
  if (defer)
    ops.push_back(deferred(spec(K::gate_up_swiglu, "gate_up_swiglu", F::gate_up_swiglu, l, {v.x},
                                {v.mlp_act, v.gate_up, v.xn})));
  else
    ops.push_back(spec(K::gate_up_swiglu, "gate_up_swiglu", F::gate_up_swiglu, l, {v.xn},
                       {v.mlp_act, v.gate_up}));
  const bool last = l + 1 == num_layers;
  if (!tensor_parallel && last && kind.fuse_final && !defer && kind.head != StepKind::none) {
    // op_table.h, StepKind::fuse_final: the final norm's rows straight into logits_in
    ops.push_back(spec(K::down_proj_residual_norm, "down_proj_residual_norm", F::proj_residual_norm, l,
                       {v.mlp_act, v.x}, {v.x, v.logits_in, v.mlp_down}));
    return;
  }
  if (!tensor_parallel && !last) {
    if (defer)
      ops.push_back(deferred(spec(K::down_proj_residual_norm, "down_proj_residual_norm", F::proj_residual_norm,
                                  l, {v.mlp_act, v.x}, {v.x, v.mlp_down})));
    else
      ops.push_back(spec(K::down_proj_residual_norm, "down_proj_residual_norm", F::proj_residual_norm, l,
                         {v.mlp_act, v.x}, {v.x, v.xn, v.mlp_down}));
    return;
  }
  ops.push_back(spec(K::down_proj, "down_proj", F::gemm, l, {v.mlp_act}, {v.mlp_down}));
  if (tensor_parallel) ops.push_back(all_reduce_op(l, v.mlp_down));
  if (!last)
    ops.push_back(spec(K::mlp_residual_norm, "mlp_residual_norm", F::add_rmsnorm, l, {v.x, v.mlp_down},
                       {v.x, v.xn}));
  else
    ops.push_back(spec(K::mlp_residual, "mlp_residual", F::residual, l, {v.x, v.mlp_down}, {v.x}));
}

}  // namespace

std::vector<OpSpec> step_ops(int num_layers, const ActivationViews& v, StepKind kind, bool tensor_parallel,
                             bool defer_norm) {
  LANTERN_CHECK(!defer_norm || (v.fused() && !tensor_parallel),
                "the deferred-norm op table needs the fused layout and no tensor parallelism");
  using F = kernels::Family;
  using K = OpKind;
  LANTERN_CHECK(!kind.fold || can_fold_attention(v, tensor_parallel, defer_norm),
                "the folded decode attention needs the fused layout, no tensor parallelism and no deferred norm");
  LANTERN_CHECK(!kind.prune || can_prune_last_layer(v, tensor_parallel, defer_norm),
                "the pruned last layer needs the fused layout, no tensor parallelism and no deferred norm");
  std::vector<OpSpec> ops;
  ops.push_back(spec(K::embed, "embed", F::embedding, -1, {}, {v.x}));
  for (int l = 0; l < num_layers; ++l) {
    if (v.fused())
      add_fused_layer(ops, l, num_layers, v, kind, tensor_parallel, defer_norm);
    else
      add_layer(ops, l, v, kind.attention, tensor_parallel);
  }
  if (kind.head == StepKind::none) return ops;
  // The final norm gathers the logit rows, so the LM head runs on r rows, not
  // n; after a pruned last layer they are head_x's rows already; with
  // fuse_final the last layer's down_proj_residual_norm wrote them.
  if (!(kind.fuse_final && !kind.prune && can_fold_attention(v, tensor_parallel, defer_norm)))
    ops.push_back(spec(K::final_norm, "final_norm", F::rmsnorm, -1, {kind.prune ? v.head_x : v.x}, {v.logits_in}));
  if (v.split_lm_head()) {  // this rank's vocabulary columns, then every rank's
    ops.push_back(spec(K::lm_head, "lm_head", F::gemm, -1, {v.logits_in}, {v.logits_part}));
    ops.push_back(spec(K::all_gather, "all_gather", F::gemm, -1, {v.logits_part},
                       {v.logits_gather, v.logits}));
  } else {
    ops.push_back(spec(K::lm_head, "lm_head", F::gemm, -1, {v.logits_in}, {v.logits}));
  }
  if (kind.head == StepKind::sample)
    ops.push_back(spec(K::sample, "sample", F::sample, -1, {v.logits}, {}));
  else
    ops.push_back(spec(K::argmax, "argmax", F::argmax, -1, {v.logits}, {}));
  return ops;
}

OpTable::OpTable(int num_layers, const ActivationViews& v, bool tensor_parallel, bool defer_norm)
    : defer_norm_(defer_norm),
      can_prune_(can_prune_last_layer(v, tensor_parallel, defer_norm)),
      can_fold_(can_fold_attention(v, tensor_parallel, defer_norm)) {
  for (auto a : {StepKind::prefill, StepKind::decode, StepKind::mixed})
    for (auto h : {StepKind::none, StepKind::argmax, StepKind::sample})
      for (bool prune : {false, true})
        for (bool fold : {false, true})
          for (bool final : {false, true}) {
            if ((prune && !can_prune_) || ((fold || final) && !can_fold_)) continue;
            const StepKind k{a, h, prune, fold, final};
            tables_[index(k)] = step_ops(num_layers, v, k, tensor_parallel, defer_norm);
          }
}

bool can_prune_last_layer(const ActivationViews& v, bool tensor_parallel, bool defer_norm) {
  return v.fused() && v.head_x >= 0 && !tensor_parallel && !defer_norm;
}

bool can_fold_attention(const ActivationViews& v, bool tensor_parallel, bool defer_norm) {
  return v.fused() && !tensor_parallel && !defer_norm;
}

}  // namespace lantern
