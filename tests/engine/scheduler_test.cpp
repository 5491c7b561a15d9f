// Scheduler + KV block manager on random workloads, with the model replaced by
// a simulation that appends a token whenever a chunk reaches the end of a
// sequence. Checks the invariants every step.
#include "engine/scheduler.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

struct CountingObserver : Observer {
  std::map<int, int64_t> owner;  // block -> seq
  int allocs = 0, frees = 0;
  bool double_alloc = false, bad_free = false;
  void on_kv_event(const KvEvent& e) override {
    if (e.kind == KvEvent::alloc) {
      ++allocs;
      if (owner.count(e.block)) double_alloc = true;
      owner[e.block] = e.seq;
    } else {
      ++frees;
      auto it = owner.find(e.block);
      if (it == owner.end() || it->second != e.seq) bad_free = true;
      if (it != owner.end()) owner.erase(it);
    }
  }
};

struct SimResult {
  int steps = 0, finished = 0, preemptions = 0, max_rows = 0, chunked = 0;
};

SimResult simulate(const EngineLimits& lim, int layers, int num_blocks, int num_requests, int max_prompt,
                   int max_new, CountingObserver& obs) {
  int max_blocks = (lim.max_context + lim.kv_block_size - 1) / lim.kv_block_size;
  KvBlockManager kv(num_blocks, lim.kv_block_size, layers, lim.max_seqs, max_blocks, &obs);
  Scheduler sched(lim, kv);
  std::uniform_int_distribution<int> plen(1, max_prompt), nnew(1, max_new);
  std::map<int64_t, int> want;  // id -> max_new
  for (int i = 0; i < num_requests; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = i;
    int p = plen(test::rng());
    s->tokens.assign(p, 7);
    s->num_prompt = p;
    s->req.max_new_tokens = nnew(test::rng());
    want[i] = s->req.max_new_tokens;
    sched.enqueue(std::move(s));
  }
  SimResult res;
  for (int64_t step = 0; !sched.idle(); ++step) {
    EXPECT_LT(step, 100000) << "scheduler did not drain";
    if (step >= 100000) break;
    StepPlan plan = sched.plan(step);
    res.preemptions += static_cast<int>(plan.preempted.size());
    EXPECT_FALSE(plan.empty()) << "no progress at step " << step;
    if (plan.empty()) break;
    int rows = plan.rows();
    EXPECT_LE(rows, lim.max_batch_tokens);
    res.max_rows = std::max(res.max_rows, rows);
    int logit_rows = 0;
    std::set<Sequence*> seen;
    for (const auto* list : {&plan.fresh, &plan.paged})
      for (const auto& c : *list) {
        EXPECT_TRUE(seen.insert(c.seq).second) << "sequence scheduled twice in one step";
        EXPECT_EQ(c.start, c.seq->cached);
        EXPECT_GE(c.seq->slot, 0);
        EXPECT_GE(kv.tokens(c.seq->slot), c.start + c.count) << "KV not reserved before the step";
        if (c.produces_token()) ++logit_rows;
        if (!c.fresh() && c.count > 1) ++res.chunked;
      }
    for (const auto& c : plan.fresh) EXPECT_EQ(c.start, 0);
    EXPECT_LE(logit_rows, lim.logits_rows);
    // The model's stand-in: token 1 for every logit row; postprocess appends
    // it, checks the stops and releases finished sequences.
    std::vector<int32_t> tokens(plan.logit_rows.size(), 1);
    for (const RequestResult& r : sched.postprocess(plan, StepTokens{tokens.data(), nullptr, 0}, step, 0.0)) {
      EXPECT_EQ(static_cast<int>(r.tokens.size()), std::min(want[r.id], lim.max_context - static_cast<int>(r.prompt.size())));
      ++res.finished;
    }
    ++res.steps;
  }
  EXPECT_EQ(kv.free_blocks(), num_blocks) << "blocks leaked";
  return res;
}

TEST(Scheduler, DrainsRandomWorkloadsAndReturnsEveryBlock) {
  EngineLimits lim;
  lim.max_batch_tokens = 64;
  lim.max_seqs = 8;
  lim.max_context = 256;
  lim.kv_block_size = 16;
  lim.logits_rows = 8;
  CountingObserver obs;
  SimResult r = simulate(lim, 2, 2 * 8 * 16, 40, 100, 40, obs);
  EXPECT_EQ(r.finished, 40);
  EXPECT_FALSE(obs.double_alloc);
  EXPECT_FALSE(obs.bad_free);
  EXPECT_EQ(obs.allocs, obs.frees);
  EXPECT_GT(r.chunked, 0) << "prompts longer than max_batch_tokens must be chunked";
}

TEST(Scheduler, PreemptsWhenThePoolRunsOutAndStillFinishesEverything) {
  EngineLimits lim;
  lim.max_batch_tokens = 128;
  lim.max_seqs = 8;
  lim.max_context = 128;
  lim.kv_block_size = 16;
  lim.logits_rows = 8;
  // Room for exactly one max-context sequence (2 layers x 8 blocks) plus a little.
  CountingObserver obs;
  SimResult r = simulate(lim, 2, 2 * 8 + 6, 24, 40, 80, obs);
  EXPECT_EQ(r.finished, 24);
  EXPECT_GT(r.preemptions, 0) << "the workload was sized to force preemption";
  EXPECT_FALSE(obs.double_alloc);
  EXPECT_FALSE(obs.bad_free);
}

// ---- postprocess: one sequence at a time, the model replaced by fixed tokens.
struct OneSequence {
  EngineLimits lim;
  KvBlockManager kv;
  Scheduler sched;
  int64_t step = 0;
  explicit OneSequence(EngineLimits l, std::vector<int> eos = {2})
      : lim(l), kv(64, l.kv_block_size, 2, l.max_seqs, (l.max_context + l.kv_block_size - 1) / l.kv_block_size),
        sched(l, kv, std::move(eos)) {}
  static EngineLimits limits(int max_context = 64) {
    EngineLimits l;
    l.max_batch_tokens = 32;
    l.max_seqs = 2;
    l.max_context = max_context;
    l.kv_block_size = 4;
    l.logits_rows = 32;
    return l;
  }
  void submit(Request req) {
    auto s = std::make_unique<Sequence>();
    s->id = 7;
    s->tokens = req.prompt;
    s->num_prompt = static_cast<int>(req.prompt.size());
    s->req = std::move(req);
    sched.enqueue(std::move(s));
  }
  // Steps until the sequence finishes, the model answering `token` on every
  // logit row (and logits rows of `vocab` floats whose first entry is the
  // row's position). Returns the result; fails after 100 steps.
  RequestResult run(int32_t token, int vocab = 3) {
    for (; step < 100; ++step) {
      StepPlan plan = sched.plan(step);
      EXPECT_FALSE(plan.empty());
      std::vector<int32_t> tokens(plan.logit_rows.size(), token);
      std::vector<float> logits(plan.logit_rows.size() * vocab, 0.0f);
      for (size_t i = 0; i < plan.logit_rows.size(); ++i) logits[i * vocab] = plan.logit_rows[i].position;
      auto done = sched.postprocess(plan, StepTokens{tokens.data(), logits.data(), vocab}, step, step * 0.5);
      if (!done.empty()) {
        EXPECT_EQ(done.size(), 1u);
        ++step;
        return done[0];
      }
    }
    ADD_FAILURE() << "the sequence never finished";
    return {};
  }
};

Request request(std::vector<int32_t> prompt, int max_new, bool stop_at_eos = true) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  r.stop_at_eos = stop_at_eos;
  return r;
}

TEST(SchedulerPostprocess, EosFinishesAndReleasesTheBlocks) {
  OneSequence t(OneSequence::limits());
  std::vector<int32_t> streamed;
  Request r = request({5, 6, 7}, 10);
  r.on_token = [&](int64_t id, int32_t tok) {
    EXPECT_EQ(id, 7);
    streamed.push_back(tok);
  };
  t.submit(std::move(r));
  RequestResult res = t.run(2);  // token 2 is an EOS id
  EXPECT_EQ(res.finish_reason, "eos");
  EXPECT_EQ(res.tokens, (std::vector<int32_t>{2}));
  EXPECT_EQ(res.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(streamed, (std::vector<int32_t>{2}));
  EXPECT_EQ(res.first_token_s, 0.0);
  EXPECT_EQ(res.finish_s, 0.0) << "finished in step 0 (the prefill produced the EOS)";
  EXPECT_EQ(t.kv.free_blocks(), 64) << "every block back in the pool";
  EXPECT_TRUE(t.sched.idle());
}

TEST(SchedulerPostprocess, LengthStopsAfterMaxNewTokensAndEosIsIgnoredWhenAsked) {
  OneSequence t(OneSequence::limits());
  t.submit(request({5, 6}, 4, /*stop_at_eos=*/false));
  RequestResult res = t.run(2);  // EOS every step, but stop_at_eos is off
  EXPECT_EQ(res.finish_reason, "length");
  EXPECT_EQ(res.tokens, (std::vector<int32_t>(4, 2)));
  EXPECT_EQ(res.first_token_s, 0.0);
  EXPECT_EQ(res.finish_s, 1.5) << "prefill at step 0, three decodes";
  EXPECT_EQ(t.kv.free_blocks(), 64);
}

TEST(SchedulerPostprocess, ContextStopsWhenTheSequenceFillsMaxContext) {
  OneSequence t(OneSequence::limits(/*max_context=*/8));
  t.submit(request({1, 1, 1, 1, 1}, 100));
  RequestResult res = t.run(9);
  EXPECT_EQ(res.finish_reason, "context");
  EXPECT_EQ(res.prompt.size() + res.tokens.size(), 8u);
  EXPECT_EQ(t.kv.free_blocks(), 64);
}

TEST(SchedulerPostprocess, ForcedTokensReplaceTheModelsAndNeverStopAtEos) {
  OneSequence t(OneSequence::limits());
  Request r = request({5, 6, 7}, 3);
  r.forced_tokens = {2, 2};  // EOS ids, forced: not a stop
  r.all_logits = true;
  std::vector<int> positions;
  r.on_logits = [&](int64_t, int position, const float* row) {
    EXPECT_EQ(row[0], static_cast<float>(position)) << "the row of that position";
    positions.push_back(position);
  };
  t.submit(std::move(r));
  RequestResult res = t.run(2);  // the third token is the model's: an EOS
  EXPECT_EQ(res.tokens, (std::vector<int32_t>{2, 2, 2}));
  EXPECT_EQ(res.finish_reason, "eos");
  EXPECT_EQ(positions, (std::vector<int>{0, 1, 2, 3, 4})) << "each position's logits once, in order";
  EXPECT_EQ(t.kv.free_blocks(), 64);
}

TEST(SchedulerPostprocess, LogitRowsFollowTheRowOrderOfThePlan) {
  OneSequence t(OneSequence::limits());
  t.submit(request({5, 6, 7}, 5));
  Request scored = request({8, 9}, 5);
  scored.all_logits = true;
  auto s = std::make_unique<Sequence>();
  s->id = 8;
  s->tokens = scored.prompt;
  s->num_prompt = 2;
  s->req = std::move(scored);
  t.sched.enqueue(std::move(s));
  StepPlan plan = t.sched.plan(0);
  ASSERT_EQ(plan.fresh.size(), 2u);
  ASSERT_EQ(plan.logit_rows.size(), 3u) << "the last row of the first prompt, every row of the scored one";
  EXPECT_EQ(plan.logit_rows[0].row, 2);
  EXPECT_EQ(plan.logit_rows[0].position, 2);
  EXPECT_EQ(plan.logit_rows[1].row, 3);
  EXPECT_EQ(plan.logit_rows[1].position, 0);
  EXPECT_EQ(plan.logit_rows[2].row, 4);
  EXPECT_EQ(plan.logit_rows[2].position, 1);
  EXPECT_TRUE(plan.copies_logits());
}

TEST(KvBlockManager, TablesUpdatesAndFragmentation) {
  KvBlockManager kv(64, 16, 3, 4, 8);
  kv.grow(2, 42, 17, 0);  // two blocks per layer
  EXPECT_EQ(kv.free_blocks(), 64 - 6);
  auto updates = kv.take_table_updates();
  ASSERT_EQ(updates.size(), 6u);
  std::set<int> blocks;
  for (const auto& u : updates) {
    EXPECT_EQ(kv.host_tables()[u.index], u.block);
    blocks.insert(u.block);
  }
  EXPECT_EQ(blocks.size(), 6u) << "each (layer, block index) needs its own physical block";
  EXPECT_TRUE(kv.take_table_updates().empty()) << "updates are handed out once";
  KvStepStats st = kv.stats(0);
  EXPECT_EQ(st.used_blocks, 6);
  EXPECT_EQ(st.used_token_slots, 17 * 3);
  EXPECT_EQ(st.wasted_token_slots, (32 - 17) * 3);
  EXPECT_EQ(kv.blocks_to_grow(2, 32), 0);
  EXPECT_EQ(kv.blocks_to_grow(2, 33), 3);
  kv.release(2, 42, 1);
  EXPECT_EQ(kv.free_blocks(), 64);
  EXPECT_THROW(kv.grow(1, 7, 8 * 16 + 1, 2), Error) << "past max_blocks_per_seq must be an error";
}

}  // namespace
}  // namespace lantern
