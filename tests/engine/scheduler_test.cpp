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
    std::vector<Sequence*> done;
    for (const auto* list : {&plan.fresh, &plan.paged})
      for (const auto& c : *list) {
        c.seq->cached = c.start + c.count;
        if (c.produces_token()) {
          c.seq->tokens.push_back(1);
          if (c.seq->num_generated() >= c.seq->req.max_new_tokens ||
              static_cast<int>(c.seq->tokens.size()) >= lim.max_context)
            done.push_back(c.seq);
        }
      }
    for (Sequence* s : done) {
      auto owned = sched.finish(s, step);
      EXPECT_EQ(owned->num_generated(), std::min(want[owned->id], lim.max_context - owned->num_prompt));
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
