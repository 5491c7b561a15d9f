#include "engine/scheduler.h"

#include <algorithm>

#include "kernels/base/errors.h"

namespace lantern {

int StepPlan::rows() const {
  int n = 0;
  for (const auto& c : fresh) n += c.count;
  for (const auto& c : paged) n += c.count;
  return n;
}

bool StepPlan::copies_logits() const {
  for (const auto* list : {&fresh, &paged})
    for (const auto& c : *list)
      if (c.seq->req.all_logits || c.seq->req.on_logits) return true;
  return false;
}

Scheduler::Scheduler(const EngineLimits& limits, KvBlockManager& kv, std::vector<int> eos_token_ids)
    : limits_(limits), kv_(kv), eos_token_ids_(std::move(eos_token_ids)) {
  for (int s = limits.max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);
}

void Scheduler::enqueue(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

int Scheduler::logit_rows(const ScheduledChunk& c) const {
  if (c.seq->req.all_logits) return c.count;
  return c.produces_token() ? 1 : 0;
}

bool Scheduler::preempt_one(const Sequence* keep, int64_t step, StepPlan& plan) {
  Sequence* victim = nullptr;
  for (auto& s : running_)
    if (s.get() != keep && (!victim || s->admit_order > victim->admit_order)) victim = s.get();
  if (!victim) return false;
  // Drop anything already planned for the victim this step.
  auto drop = [victim](std::vector<ScheduledChunk>& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [victim](const ScheduledChunk& c) { return c.seq == victim; }),
            v.end());
  };
  drop(plan.fresh);
  drop(plan.paged);
  kv_.release(victim->slot, victim->id, step);
  free_slots_.push_back(victim->slot);
  victim->slot = -1;
  victim->cached = 0;  // recompute prompt + generated tokens on re-admission
  victim->preemptions++;
  plan.preempted.push_back(victim);
  auto it = std::find_if(running_.begin(), running_.end(),
                         [victim](const auto& p) { return p.get() == victim; });
  waiting_.push_front(std::move(*it));
  running_.erase(it);
  return true;
}

StepPlan Scheduler::plan(int64_t step) {
  StepPlan plan;
  int budget = limits_.max_batch_tokens;
  int logit_budget = limits_.logits_rows;

  // 1. Decodes first (one row each), oldest admitted first; preempt the newest
  //    sequences when the pool is short.
  std::vector<Sequence*> order;
  for (auto& s : running_) order.push_back(s.get());
  std::sort(order.begin(), order.end(),
            [](const Sequence* a, const Sequence* b) { return a->admit_order < b->admit_order; });
  for (Sequence* s : order) {
    if (s->slot < 0 || s->retired || s->pending() != 1) continue;
    if (budget < 1 || logit_budget < 1) break;
    while (!kv_.can_grow(s->slot, s->cached + 1))
      if (!preempt_one(s, step, plan)) break;
    if (!kv_.can_grow(s->slot, s->cached + 1)) continue;  // cannot happen with validated limits
    kv_.grow(s->slot, s->id, s->cached + 1, step);
    ScheduledChunk c{s, s->cached, 1};
    plan.paged.push_back(c);
    budget -= 1;
    logit_budget -= logit_rows(c);
  }

  // 2. Admitted sequences still prefilling (chunked prompts, recomputes).
  for (Sequence* s : order) {
    if (s->slot < 0 || s->retired || s->pending() <= 1 || budget <= 0) continue;
    int count = std::min(s->pending(), budget);
    ScheduledChunk c{s, s->cached, count};
    if (logit_rows(c) > logit_budget) {
      count = std::max(0, std::min(count, s->pending() - 1));  // defer the token-producing row
      if (s->req.all_logits) count = std::min(count, logit_budget);
      c.count = count;
    }
    if (count <= 0 || !kv_.can_grow(s->slot, s->cached + count)) continue;
    kv_.grow(s->slot, s->id, s->cached + count, step);
    (c.fresh() ? plan.fresh : plan.paged).push_back(c);
    budget -= count;
    logit_budget -= logit_rows(c);
  }

  // 3. Admit waiting requests in FCFS order while slot, budget and blocks allow.
  while (!waiting_.empty() && !free_slots_.empty() && budget > 0 && logit_budget > 0) {
    Sequence* s = waiting_.front().get();
    int count = std::min<int>(static_cast<int>(s->tokens.size()), budget);
    ScheduledChunk c{s, 0, count};
    if (logit_rows(c) > logit_budget) {
      if (s->req.all_logits) count = logit_budget;
      else if (count == static_cast<int>(s->tokens.size())) count -= 1;
      c.count = count;
    }
    if (count <= 0) break;
    int slot = free_slots_.back();
    // Reserve blocks for the whole known sequence plus one token so a fresh
    // admission does not immediately force a preemption.
    int want = std::min<int>(static_cast<int>(s->tokens.size()) + 1, limits_.max_context);
    if (kv_.blocks_to_grow(slot, want) > kv_.free_blocks()) break;
    free_slots_.pop_back();
    s->slot = slot;
    s->admit_order = admit_counter_++;
    kv_.grow(slot, s->id, count, step);
    plan.fresh.push_back(c);
    budget -= count;
    logit_budget -= logit_rows(c);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  list_logit_rows(plan);
  return plan;
}

void Scheduler::list_logit_rows(StepPlan& plan) const {
  int base = 0;
  for (const auto* list : {&plan.fresh, &plan.paged})
    for (const ScheduledChunk& c : *list) {
      if (c.seq->req.all_logits) {
        for (int i = 0; i < c.count; ++i) plan.logit_rows.push_back({c.seq, base + i, c.start + i});
      } else if (c.produces_token()) {
        plan.logit_rows.push_back({c.seq, base + c.count - 1, c.start + c.count - 1});
      }
      base += c.count;
    }
}

const char* Scheduler::stop_reason(const Sequence& s, bool forced) const {
  const int32_t tok = s.tokens.back();
  const bool eos = std::find(eos_token_ids_.begin(), eos_token_ids_.end(), tok) != eos_token_ids_.end();
  if (s.req.stop_at_eos && !forced && eos) return "eos";
  if (s.num_generated() >= s.req.max_new_tokens) return "length";
  if (static_cast<int>(s.tokens.size()) >= limits_.max_context) return "context";
  return "";
}

std::vector<RequestResult> Scheduler::postprocess(const StepPlan& plan, const StepTokens& out,
                                                  int64_t step, double now_s) {
  return postprocess(plan, out, step, now_s, nullptr, -1);
}

std::vector<RequestResult> Scheduler::postprocess(const StepPlan& plan, const StepTokens& out, int64_t step,
                                                  double now_s, const StepPlan* inflight,
                                                  int64_t inflight_step) {
  for (const auto* list : {&plan.fresh, &plan.paged})
    for (const auto& c : *list)
      if (!c.seq->retired) c.seq->cached = c.start + c.count;
  std::vector<Sequence*> finished;
  for (size_t i = 0; i < plan.logit_rows.size(); ++i) {
    const LogitRow& lr = plan.logit_rows[i];
    Sequence& s = *lr.seq;
    if (s.retired) {  // finished a step ago; this row was computed ahead and is ignored
      ++discarded_rows_;
      continue;
    }
    if (s.req.on_logits && lr.position >= s.logits_delivered) {
      LANTERN_ASSERT(out.logits != nullptr, "on_logits needs the step's logits on the host");
      s.req.on_logits(s.id, lr.position, out.logits + i * static_cast<size_t>(out.vocab));
      s.logits_delivered = lr.position + 1;
    }
    if (lr.position != static_cast<int>(s.tokens.size()) - 1) continue;  // not the last row yet
    const int g = s.num_generated();
    const bool forced = g < static_cast<int>(s.req.forced_tokens.size());
    const int32_t tok = forced ? s.req.forced_tokens[g] : out.tokens[i];
    s.tokens.push_back(tok);
    if (s.first_token_s < 0) s.first_token_s = now_s;
    if (s.req.on_token) s.req.on_token(s.id, tok);
    s.finish_reason = stop_reason(s, forced);
    if (!s.finish_reason.empty()) finished.push_back(&s);
  }
  auto in_flight = [inflight](const Sequence* s) {
    if (!inflight) return false;
    for (const auto& c : inflight->paged)
      if (c.seq == s) return true;
    return false;
  };
  std::vector<RequestResult> results;
  for (Sequence* s : finished) {
    RequestResult res;
    res.id = s->id;
    res.tag = s->req.tag;
    res.prompt.assign(s->tokens.begin(), s->tokens.begin() + s->num_prompt);
    res.tokens.assign(s->tokens.begin() + s->num_prompt, s->tokens.end());
    res.finish_reason = s->finish_reason;
    res.submit_s = s->submit_s;
    res.first_token_s = s->first_token_s;
    res.admit_s = s->admit_s;
    res.finish_s = now_s;
    res.preemptions = s->preemptions;
    results.push_back(std::move(res));
    if (in_flight(s)) {
      s->retired = true;
      s->retire_after = inflight_step;
      retired_.push_back(s);
    } else {
      finish(s, step);
    }
  }
  return results;
}

void Scheduler::release_retired(int64_t step) {
  auto keep = std::remove_if(retired_.begin(), retired_.end(), [&](Sequence* s) {
    if (s->retire_after > step) return false;
    finish(s, step);
    return true;
  });
  retired_.erase(keep, retired_.end());
}

bool Scheduler::plan_continuation(const StepPlan& prev, int64_t step, StepPlan& next) {
  if (!waiting_.empty() || !prev.fresh.empty() || prev.paged.empty()) return false;
  std::vector<const ScheduledChunk*> go;
  int blocks = 0;
  for (const ScheduledChunk& c : prev.paged) {
    const Sequence& s = *c.seq;
    if (s.retired) continue;
    const int g = s.num_generated();
    if (c.count != 1 || !c.produces_token() || s.req.all_logits || s.req.on_logits) return false;
    if (g + 1 >= s.req.max_new_tokens) return false;                           // stops by length
    if (static_cast<int>(s.tokens.size()) + 1 >= limits_.max_context) return false;  // ... or context
    if (!kv_.can_grow(s.slot, c.start + 2)) return false;
    blocks += kv_.blocks_to_grow(s.slot, c.start + 2);
    go.push_back(&c);
  }
  if (go.empty() || blocks > kv_.free_blocks()) return false;  // plan() would preempt
  next = StepPlan{};
  int row = 0;
  for (const ScheduledChunk* c : go) {
    kv_.grow(c->seq->slot, c->seq->id, c->start + 2, step);
    next.paged.push_back(ScheduledChunk{c->seq, c->start + 1, 1});
    next.logit_rows.push_back(LogitRow{c->seq, row++, c->start + 1});
  }
  return true;
}

std::unique_ptr<Sequence> Scheduler::finish(Sequence* seq, int64_t step) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [seq](const auto& p) { return p.get() == seq; });
  LANTERN_ASSERT(it != running_.end(), "finishing a sequence that is not running");
  kv_.release(seq->slot, seq->id, step);
  free_slots_.push_back(seq->slot);
  seq->slot = -1;
  std::unique_ptr<Sequence> out = std::move(*it);
  running_.erase(it);
  return out;
}

}  // namespace lantern
