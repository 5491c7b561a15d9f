#include "engine/step_input.h"

#include <algorithm>
#include <vector>

#include "kernels/base/errors.h"

namespace lantern {

namespace {

// The plan's logit rows with their sampling parameters; `gen_offset`: tokens
// in flight per sequence, not yet appended (1 for a continuation).
void add_logit_rows(StepInput& in, const StepPlan& plan, int gen_offset) {
  for (const LogitRow& lr : plan.logit_rows) {
    const SamplingParams& sp = lr.seq->req.sampling;
    in.logit_rows.push_back(lr.row);
    in.temperature.push_back(sp.temperature);
    in.top_k.push_back(sp.top_k);
    in.top_p.push_back(sp.top_p);
    in.seeds.push_back(sp.seed);
    in.gen_index.push_back(lr.seq->num_generated() + gen_offset);
  }
}

}  // namespace

StepInput step_input(const StepPlan& plan) {
  StepInput in;
  in.fresh_starts.push_back(0);
  auto add_rows = [&in](const ScheduledChunk& c) {
    for (int i = 0; i < c.count; ++i) {
      in.tokens.push_back(c.seq->tokens[c.start + i]);
      in.positions.push_back(c.start + i);
      in.slots.push_back(c.seq->slot);
    }
  };
  for (const auto& c : plan.fresh) {
    add_rows(c);
    in.fresh_starts.push_back(in.num_rows());
    in.max_fresh_len = std::max(in.max_fresh_len, c.count);
  }
  for (const auto& c : plan.paged) add_rows(c);
  add_logit_rows(in, plan, 0);
  in.copy_logits = plan.copies_logits();
  return in;
}

StepInput continuation_input(const StepPlan& plan, const StepPlan& prev) {
  StepInput in;
  in.fresh_starts.push_back(0);
  // plan.paged is a subsequence of prev's chunks, in their order, and prev's
  // logit rows follow its chunks (one per sequence): one forward walk finds
  // them all; the wrap-around keeps any other order correct.
  const std::vector<LogitRow>& rows = prev.logit_rows;
  size_t next = 0;
  for (const auto& c : plan.paged) {
    int src = -1;
    for (size_t n = 0; n < rows.size() && src < 0; ++n) {
      const size_t k = (next + n) % rows.size();
      if (rows[k].seq == c.seq) src = rows[k].row, next = k + 1;
    }
    LANTERN_ASSERT(src >= 0, "continuation of a sequence without a logit row in the previous step");
    // A forced token (Request::forced_tokens) is the host's: no gather.
    const Sequence& s = *c.seq;
    const int g = s.num_generated();
    const bool forced = g < static_cast<int>(s.req.forced_tokens.size());
    in.tokens.push_back(forced ? s.req.forced_tokens[g] : 0);
    in.token_src.push_back(forced ? -1 : src);
    in.positions.push_back(c.start);
    in.slots.push_back(c.seq->slot);
  }
  add_logit_rows(in, plan, 1);
  return in;
}

StepInfo describe_step(const StepPlan& plan, const StepInput& in, int64_t step, bool continuation) {
  StepInfo info;
  info.step = step;
  info.num_prefill_seqs = static_cast<int>(plan.fresh.size());
  info.num_decode_seqs = 0;
  for (const auto& c : plan.paged)
    (c.count == 1 && (continuation || c.produces_token()) ? info.num_decode_seqs : info.num_prefill_seqs)++;
  info.num_tokens = in.num_rows();
  info.phase = info.num_decode_seqs == 0 ? "prefill" : (info.num_prefill_seqs == 0 ? "decode" : "mixed");
  return info;
}

}  // namespace lantern
