// The op table (engine/op_table.h): the layout's aliases, the data flow of
// every step kind, and that the CPU engine runs exactly the table's ops.
#include "engine/op_table.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"

namespace lantern {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 256;
  c.num_layers = 3;
  c.num_q_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.vocab_size = 1000;
  return c;
}

TEST(OpTable, LayoutHasTheSeedsTwoAliasesAndNoOthers) {
  Arena arena;
  ActivationViews v = declare_activations(arena, activation_layout(small_config(), 8, 4, 2, 512));
  std::map<int, std::set<std::string>> views_of_buffer;
  for (const ArenaView& view : arena.views()) views_of_buffer[view.buffer].insert(view.name);
  std::set<std::set<std::string>> shared;
  for (const auto& [buffer, names] : views_of_buffer)
    if (names.size() > 1) shared.insert(names);
  EXPECT_EQ(shared, (std::set<std::set<std::string>>{{"q", "attn_out"}, {"o_out", "mlp_down"}}));
  EXPECT_EQ(arena.views()[v.k].bytes, 8u * 16 * 2) << "[rows, kv_dim] bf16";
  EXPECT_EQ(arena.views()[v.logits].bytes, 4u * 1000 * 4) << "[logit rows, vocab] f32";
  EXPECT_EQ(arena.views()[v.meta].bytes, 512u);
  EXPECT_EQ(find_activations(arena).mlp_act, v.mlp_act);
}

// Within a step every view an op reads was written by an earlier op of the
// same step (the alias tracker's notion of a live value), for every kind.
TEST(OpTable, EveryReadFollowsAWriteInEveryStepKind) {
  Arena arena;
  ActivationViews v = declare_activations(arena, activation_layout(small_config(), 8, 4, 4, 512));
  OpTable table(3, v);
  for (auto a : {StepKind::prefill, StepKind::decode, StepKind::mixed})
    for (auto h : {StepKind::none, StepKind::argmax, StepKind::sample}) {
      const auto& ops = table.ops(StepKind{a, h});
      SCOPED_TRACE(testing::Message() << "attention " << int(a) << " head " << int(h));
      EXPECT_EQ(ops.size(), 1u + 15 * 3 + (h == StepKind::none ? 0 : 3));
      std::set<ViewId> written;
      for (const OpSpec& o : ops) {
        for (int i = 0; i < o.num_reads; ++i)
          EXPECT_TRUE(written.count(o.reads[i])) << o.name << " (layer " << o.layer << ") reads "
                                                 << arena.views()[o.reads[i]].name << " before any write";
        for (int i = 0; i < o.num_writes; ++i) written.insert(o.writes[i]);
      }
      const char* attention = a == StepKind::prefill ? "attention_prefill"
                              : a == StepKind::decode ? "attention_decode" : "attention";
      EXPECT_STREQ(ops[7].name, attention);
      EXPECT_EQ(ops[7].layer, 0);
      if (h != StepKind::none) {
        EXPECT_STREQ(ops.back().name, h == StepKind::sample ? "sample" : "argmax");
      }
    }
}

// The fused layout: qkv and gate_up replace k, v, gate, up (no new alias), and
// the fused table keeps every read after a write, 6 ops per layer (+ layer
// 0's attn_norm, + the last layer's separate down_proj and mlp_residual),
// down_proj_residual_norm carrying the next layer's norm; decode steps run
// qkv_rope (family qkv_rope) in place of qkv_proj + rope_kv_write: 5 per layer.
TEST(OpTable, FusedTableReadsAfterWritesWithSixOpsPerLayer) {
  Arena arena;
  ActivationViews v = declare_activations(arena, activation_layout(small_config(), 8, 4, 2, 512, true));
  ASSERT_TRUE(v.fused());
  EXPECT_EQ(v.k, -1);
  EXPECT_EQ(v.gate, -1);
  EXPECT_EQ(arena.views()[v.qkv].bytes, 8u * (64 + 2 * 16) * 2) << "[rows, q_dim + 2 kv_dim] bf16";
  EXPECT_EQ(arena.views()[v.gate_up].bytes, 8u * 2 * 256 * 2) << "[rows, 2 inter] bf16";
  std::map<int, std::set<std::string>> views_of_buffer;
  for (const ArenaView& view : arena.views()) views_of_buffer[view.buffer].insert(view.name);
  std::set<std::set<std::string>> shared;
  for (const auto& [buffer, names] : views_of_buffer)
    if (names.size() > 1) shared.insert(names);
  EXPECT_EQ(shared, (std::set<std::set<std::string>>{
                        {"q", "attn_out"}, {"o_out", "mlp_down"}, {"head_q", "head_attn"}}));
  OpTable table(3, v);
  for (auto a : {StepKind::prefill, StepKind::decode, StepKind::mixed})
    for (auto h : {StepKind::none, StepKind::argmax, StepKind::sample}) {
      const auto& ops = table.ops(StepKind{a, h});
      SCOPED_TRACE(testing::Message() << "attention " << int(a) << " head " << int(h));
      const bool decode = a == StepKind::decode;
      EXPECT_EQ(ops.size(), 1u + 1 + (decode ? 5 : 6) * 3 + 1 + (h == StepKind::none ? 0 : 3));
      std::set<ViewId> written;
      std::map<std::string, int> count;
      for (const OpSpec& o : ops) {
        ++count[o.name];
        for (int i = 0; i < o.num_reads; ++i)
          EXPECT_TRUE(written.count(o.reads[i])) << o.name << " (layer " << o.layer << ") reads "
                                                 << arena.views()[o.reads[i]].name << " before any write";
        for (int i = 0; i < o.num_writes; ++i) written.insert(o.writes[i]);
      }
      EXPECT_EQ(count["qkv_proj"], decode ? 0 : 3);
      EXPECT_EQ(count["qkv_rope"], decode ? 3 : 0);
      for (const OpSpec& o : ops)
        if (std::string(o.name) == "qkv_rope") {
          EXPECT_EQ(o.family, kernels::Family::qkv_rope);
          EXPECT_EQ(o.num_writes, 2);
          EXPECT_EQ(o.writes[0], v.qkv);
          EXPECT_EQ(o.writes[1], v.q) << "attention_decode reads the rotated q it writes";
        }
      EXPECT_EQ(count["gate_up_swiglu"], 3);
      EXPECT_EQ(count["gate_up_proj"] + count["swiglu"], 0);
      EXPECT_EQ(count["rope_kv_write"], decode ? 0 : 3);
      EXPECT_EQ(count["o_proj_residual_norm"], 3);
      EXPECT_EQ(count["down_proj_residual_norm"], 2);
      EXPECT_EQ(count["down_proj"], 1);
      EXPECT_EQ(count["mlp_residual"], 1);
      EXPECT_EQ(count["o_proj"] + count["attn_residual_norm"] + count["mlp_residual_norm"], 0);
      EXPECT_EQ(count["attn_norm"], 1);
      EXPECT_EQ(count["q_proj"] + count["k_proj"] + count["rope"] + count["kv_write"] + count["mlp_norm"], 0);
    }
}

// The folded decode attention (StepKind::fold): a decode table's layers are 4
// ops, qkv_attention (family qkv_rope; reads xn, writes qkv, q and attn_out)
// instead of qkv_rope + attention_decode, every read still after a write;
// the other kinds' tables are their full ones; a pruned last layer keeps
// qkv_rope (its attention is attention_head's); tables that cannot fold
// (tensor parallelism, the deferred norm, the unfused layout) serve the
// folded kinds with their full ops. The same for StepKind::fuse_final (the
// last layer's down_proj_residual_norm with the final norm, into logits_in).
TEST(OpTable, FoldedDecodeTableRunsQkvAttentionInPlaceOfQkvRopeAndAttention) {
  Arena arena;
  ActivationViews v = declare_activations(arena, activation_layout(small_config(), 8, 4, 2, 512, true));
  OpTable table(3, v);
  ASSERT_TRUE(table.can_fold());
  for (auto a : {StepKind::prefill, StepKind::decode, StepKind::mixed})
    for (auto h : {StepKind::none, StepKind::argmax, StepKind::sample}) {
      SCOPED_TRACE(testing::Message() << "attention " << int(a) << " head " << int(h));
      const auto& full = table.ops(StepKind{a, h});
      const auto& folded = table.ops(StepKind{a, h, false, true});
      if (a != StepKind::decode) {
        ASSERT_EQ(folded.size(), full.size());
        for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(folded[i].kind, full[i].kind);
        continue;
      }
      EXPECT_EQ(folded.size(), full.size() - 3) << "one op fewer per layer";
      std::set<ViewId> written;
      std::map<std::string, int> count;
      for (const OpSpec& o : folded) {
        ++count[o.name];
        for (int i = 0; i < o.num_reads; ++i)
          EXPECT_TRUE(written.count(o.reads[i])) << o.name << " (layer " << o.layer << ") reads "
                                                 << arena.views()[o.reads[i]].name << " before any write";
        for (int i = 0; i < o.num_writes; ++i) written.insert(o.writes[i]);
        if (o.kind == OpKind::qkv_attention) {
          EXPECT_EQ(o.family, kernels::Family::qkv_rope);
          ASSERT_EQ(o.num_reads, 1);
          EXPECT_EQ(o.reads[0], v.xn);
          ASSERT_EQ(o.num_writes, 3);
          EXPECT_EQ(o.writes[0], v.qkv);
          EXPECT_EQ(o.writes[1], v.q);
          EXPECT_EQ(o.writes[2], v.attn_out) << "o_proj_residual_norm reads the attention it writes";
        }
      }
      EXPECT_EQ(count["qkv_attention"], 3);
      EXPECT_EQ(count["qkv_rope"] + count["attention_decode"], 0);
      EXPECT_EQ(count["o_proj_residual_norm"], 3);
    }
  // A decode-kind chunk that prunes its last layer: layers 0-1 fold, the pruned last keeps qkv_rope.
  std::map<std::string, int> both;
  for (const OpSpec& o : table.ops(StepKind{StepKind::decode, StepKind::argmax, true, true})) ++both[o.name];
  EXPECT_EQ(both["qkv_attention"], 2);
  EXPECT_EQ(both["qkv_rope"], 1);
  EXPECT_EQ(both["attention_head"], 1);
  EXPECT_EQ(both["attention_decode"], 0);
  // fuse_final (every row a logit row in order): the last layer ends with
  // down_proj_residual_norm writing logits_in, and no final_norm follows.
  for (bool fold : {false, true}) {
    const auto& ops = table.ops(StepKind{StepKind::decode, StepKind::sample, false, fold, true});
    std::map<std::string, int> n;
    std::set<ViewId> written;
    for (const OpSpec& o : ops) {
      ++n[o.name];
      for (int i = 0; i < o.num_reads; ++i) EXPECT_TRUE(written.count(o.reads[i])) << o.name << " layer " << o.layer;
      for (int i = 0; i < o.num_writes; ++i) written.insert(o.writes[i]);
    }
    EXPECT_EQ(n["down_proj_residual_norm"], 3);
    EXPECT_EQ(n["final_norm"] + n["down_proj"] + n["mlp_residual"], 0);
    const OpSpec& last = ops[ops.size() - 3];  // ..., the last layer's down_proj_residual_norm, lm_head, sample
    EXPECT_STREQ(last.name, "down_proj_residual_norm");
    EXPECT_EQ(last.layer, 2);
    ASSERT_EQ(last.num_writes, 3);
    EXPECT_EQ(last.writes[1], v.logits_in) << "the final norm's rows go where lm_head reads them";
  }
  OpTable tp(3, v, /*tensor_parallel=*/true), deferred(3, v, false, /*defer_norm=*/true);
  Arena unfused_arena;
  OpTable unfused(3, declare_activations(unfused_arena, activation_layout(small_config(), 8, 4, 2, 512, false)));
  for (const OpTable* t : {&tp, &deferred, &unfused}) {
    EXPECT_FALSE(t->can_fold());
    const auto& folded = t->ops(StepKind{StepKind::decode, StepKind::argmax, false, true});
    const auto& full = t->ops(StepKind{StepKind::decode, StepKind::argmax});
    EXPECT_EQ(folded.size(), full.size());
    EXPECT_EQ(t->ops(StepKind{StepKind::decode, StepKind::argmax, false, false, true}).size(), full.size());
  }
}

// The pruned last layer (StepKind::prune): every kind keeps every
// layer but the last as they are; the last one runs qkv_proj and
// rope_kv_write (decode kinds: qkv_rope) on every row, then -- with a head -- head_gather, the logit
// rows' attention_head and the rest of the layer on the logit rows
// (head_rows), final_norm reading head_x; without a head it ends at the KV
// write. Reads still follow writes. The unfused, tensor-parallel and
// deferred-norm tables do not prune. (Decode kinds prune too: a continuing
// chunk's rows are paged rows; Model::choose_pruning keeps pure decode steps,
// whose rows all take logits, on the full table.)
TEST(OpTable, PrunedLastLayerRunsOnTheLogitRows) {
  Arena arena;
  ActivationViews v = declare_activations(arena, activation_layout(small_config(), 8, 4, 2, 512, true));
  ASSERT_GE(v.head_x, 0);
  EXPECT_EQ(arena.views()[v.head_x].bytes, 4u * 64 * 2) << "[logit rows, hidden] bf16";
  EXPECT_EQ(arena.views()[v.head_q].bytes, 4u * 64 * 2) << "[logit rows, q_dim] bf16";
  const OpTable table(3, v);
  ASSERT_TRUE(table.can_prune());
  for (auto a : {StepKind::prefill, StepKind::decode, StepKind::mixed})
    for (auto h : {StepKind::none, StepKind::argmax, StepKind::sample}) {
      SCOPED_TRACE(testing::Message() << "attention " << int(a) << " head " << int(h));
      const auto& full = table.ops(StepKind{a, h});
      const auto& ops = table.ops(StepKind{a, h, true});
      // Layers 0 and 1 as the full table: embed, attn_norm, 6 + 6 ops (decode: 5 + 5).
      const size_t kept = a == StepKind::decode ? 12 : 14;
      for (size_t i = 0; i < kept; ++i) EXPECT_STREQ(ops[i].name, full[i].name) << i;
      std::vector<std::string> last;
      for (size_t i = kept; i < ops.size(); ++i) last.push_back(ops[i].name);
      std::vector<std::string> want = a == StepKind::decode ? std::vector<std::string>{"qkv_rope"}
                                                            : std::vector<std::string>{"qkv_proj", "rope_kv_write"};
      if (h != StepKind::none)
        for (const char* n : {"head_gather", "attention_head", "o_proj_residual_norm", "gate_up_swiglu", "down_proj",
                              "mlp_residual", "final_norm", "lm_head", h == StepKind::sample ? "sample" : "argmax"})
          want.push_back(n);
      EXPECT_EQ(last, want);
      std::set<ViewId> written;
      for (const OpSpec& o : ops) {
        for (int i = 0; i < o.num_reads; ++i)
          EXPECT_TRUE(written.count(o.reads[i])) << o.name << " reads " << arena.views()[o.reads[i]].name
                                                 << " before any write";
        for (int i = 0; i < o.num_writes; ++i) written.insert(o.writes[i]);
        const std::string name = o.name;
        const bool on_head = o.layer == 2 && name != "qkv_proj" && name != "rope_kv_write" && name != "qkv_rope" &&
                             name != "head_gather";
        EXPECT_EQ(o.head_rows, on_head) << name;
        if (on_head && name != "attention_head") {
          for (int i = 0; i < o.num_reads; ++i) EXPECT_NE(o.reads[i], v.x) << name << " reads x";
        }
        if (name == "final_norm") {
          EXPECT_EQ(o.reads[0], v.head_x);
        }
        if (name == "attention_head") {
          EXPECT_EQ(o.family, kernels::Family::attention_decode);
        }
      }
    }
  Arena unfused_arena;
  ActivationViews unfused =
      declare_activations(unfused_arena, activation_layout(small_config(), 8, 4, 2, 512, false));
  EXPECT_FALSE(can_prune_last_layer(unfused, false, false));
  EXPECT_FALSE(can_prune_last_layer(v, true, false)) << "tensor parallel";
  EXPECT_FALSE(can_prune_last_layer(v, false, true)) << "deferred norm";
  EXPECT_FALSE(OpTable(3, v, true).can_prune());
}

// The deferred-norm table (proj_residual_norm.4): the fused table's ops in the
// same order, reads still after writes; the projections write x but not xn,
// and the GEMMs that follow them -- gate_up_swiglu, and qkv_proj of every
// layer but the first -- read x, write xn (their fallback's scratch) and carry
// defer_norm. Nothing else moves, and xn is never read by a deferred GEMM.
TEST(OpTable, DeferredNormTableMovesOnlyTheNorm) {
  Arena arena;
  ActivationViews v = declare_activations(arena, activation_layout(small_config(), 8, 4, 2, 512, true));
  const OpTable plain(3, v), deferred(3, v, false, /*defer_norm=*/true);
  EXPECT_FALSE(plain.defer_norm());
  EXPECT_TRUE(deferred.defer_norm());
  auto names = [&](const OpSpec& o, bool reads) {
    std::set<std::string> out;
    for (int i = 0; i < (reads ? o.num_reads : o.num_writes); ++i)
      out.insert(arena.views()[reads ? o.reads[i] : o.writes[i]].name);
    return out;
  };
  using Names = std::set<std::string>;
  for (auto a : {StepKind::prefill, StepKind::decode, StepKind::mixed}) {
    const auto& p = plain.ops(StepKind{a, StepKind::argmax});
    const auto& d = deferred.ops(StepKind{a, StepKind::argmax});
    ASSERT_EQ(p.size(), d.size());
    std::set<ViewId> written;
    int deferred_ops = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      SCOPED_TRACE(testing::Message() << d[i].name << " layer " << d[i].layer);
      EXPECT_STREQ(p[i].name, d[i].name);
      EXPECT_EQ(p[i].family, d[i].family);
      EXPECT_FALSE(p[i].defer_norm);
      for (int r = 0; r < d[i].num_reads; ++r) EXPECT_TRUE(written.count(d[i].reads[r]));
      for (int w = 0; w < d[i].num_writes; ++w) written.insert(d[i].writes[w]);
      const std::string name = d[i].name;
      const bool gemm_after =
          name == "gate_up_swiglu" || ((name == "qkv_proj" || name == "qkv_rope") && d[i].layer > 0);
      const bool proj = name == "o_proj_residual_norm" || name == "down_proj_residual_norm";
      EXPECT_EQ(d[i].defer_norm, gemm_after || proj);
      deferred_ops += d[i].defer_norm;
      if (gemm_after) {
        EXPECT_EQ(names(d[i], true), Names{"x"});
        EXPECT_TRUE(names(d[i], false).count("xn"));
        EXPECT_EQ(names(d[i], false).size(), names(p[i], false).size() + 1);
      } else if (proj) {
        EXPECT_EQ(names(d[i], false).count("xn"), 0u);
        EXPECT_EQ(names(d[i], false).count("x"), 1u);
        EXPECT_EQ(names(d[i], true), names(p[i], true));
      } else {
        EXPECT_EQ(names(d[i], true), names(p[i], true));
        EXPECT_EQ(names(d[i], false), names(p[i], false));
      }
    }
    EXPECT_EQ(deferred_ops, 3 /* gate_up */ + 2 /* qkv of layers 1, 2 */ + 3 /* o_proj */ + 2 /* down */);
  }
  Arena unfused_arena;
  ActivationViews u = declare_activations(unfused_arena, activation_layout(small_config(), 8, 4, 2, 512));
  EXPECT_THROW(OpTable(3, u, false, true), Error) << "the deferred norm needs the fused layout";
  EXPECT_THROW(OpTable(3, v, true, true), Error) << "and no tensor parallelism";
}

// What the CPU engine hooks in a prefill step and a decode step is the table.
class OpTableEngine : public testing::TestWithParam<bool> {};

TEST_P(OpTableEngine, TheEngineRunsTheTablesOps) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "the engine's hooks are compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  struct Log : Observer {
    const Arena* arena = nullptr;
    std::vector<std::vector<std::string>> steps;
    void on_arena(const Arena& a) override { arena = &a; }
    void on_step_begin(const StepInfo&) override { steps.emplace_back(); }
    void on_op_begin(const OpInfo& op) override {
      std::string line = std::string(op.op) + "@" + std::to_string(op.layer) + ":";
      for (int i = 0; i < op.num_reads; ++i) line += " r" + arena->views()[op.reads[i]].name;
      for (int i = 0; i < op.num_writes; ++i) line += " w" + arena->views()[op.writes[i]].name;
      steps.back().push_back(line);
    }
  } log;
  const auto dir = test::synth_tiny("op-table-tiny", 3);
  ModelConfig cfg = ModelConfig::load(dir);
  EngineOptions opt;
  opt.backend = kernels::Backend::cpu;
  opt.limits.max_context = 64;
  opt.observer = &log;
  opt.fused = GetParam();
  Engine engine(cfg, Weights::load(cfg, dir, kernels::Backend::cpu), opt);
  Request r;
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 2;
  r.stop_at_eos = false;
  engine.submit(r);
  engine.run_until_idle();
  ASSERT_EQ(log.steps.size(), 2u);
  const ActivationViews v = find_activations(*log.arena);
  auto expected = [&](StepKind::Attention a) {
    std::vector<std::string> lines;
    // The prompt's step has 3 rows and 1 logit row: the fused table prunes its last layer.
    const bool prune = a != StepKind::decode && v.fused();
    for (const OpSpec& o : step_ops(cfg.num_layers, v, StepKind{a, StepKind::argmax, prune})) {
      std::string line = std::string(o.name) + "@" + std::to_string(o.layer) + ":";
      for (int i = 0; i < o.num_reads; ++i) line += " r" + log.arena->views()[o.reads[i]].name;
      for (int i = 0; i < o.num_writes; ++i) line += " w" + log.arena->views()[o.writes[i]].name;
      lines.push_back(line);
    }
    return lines;
  };
  EXPECT_EQ(v.fused(), GetParam());
  EXPECT_EQ(log.steps[0], expected(StepKind::prefill));
  EXPECT_EQ(log.steps[1], expected(StepKind::decode));
}

INSTANTIATE_TEST_SUITE_P(FusedAndUnfused, OpTableEngine, testing::Bool());

}  // namespace
}  // namespace lantern
