#pragma once
// Scheduler: owns a sequence's life from admission to release, and never
// touches CUDA. plan() decides, each step, which sequences prefill (whole
// prompts or chunks of them) and which decode, under the limits;
// postprocess() takes the step's tokens (and logits), appends them, checks
// the stops and releases finished sequences (as nano-vllm's
// Scheduler.postprocess does). Admission control: a request stays queued
// until a slot, the step's token budget and its KV blocks are available; when
// a decoding sequence needs a block and none is free, the most recently
// admitted sequence is preempted (its blocks freed) and later recomputed from
// its tokens.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache.h"

namespace lantern {

struct Sequence {
  int64_t id = -1;
  Request req;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int num_prompt = 0;
  int slot = -1;                // engine slot while admitted, else -1
  int cached = 0;               // tokens whose K/V are in the cache
  int logits_delivered = 0;     // positions whose logits went to on_logits (score mode)
  int64_t admit_order = -1;     // larger = admitted later (preemption victim order)
  int preemptions = 0;
  double submit_s = 0, first_token_s = -1, admit_s = -1;
  std::string finish_reason;    // set when the sequence ends
  // Finished (result delivered) while a launched step still computes a row of
  // it (overlapped decode): that row is ignored, and the slot and blocks are
  // released when that step is collected (Scheduler::release_retired).
  bool retired = false;
  int64_t retire_after = -1;    // the step whose collection releases it

  int num_generated() const { return static_cast<int>(tokens.size()) - num_prompt; }
  int pending() const { return static_cast<int>(tokens.size()) - cached; }
};

// One sequence's rows in a step: tokens [start, start + count).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int start = 0;
  int count = 0;
  bool fresh() const { return start == 0; }  // in-chunk causal attention (prefill kernel)
  bool produces_token() const {              // reaches the end of the known tokens
    return start + count == static_cast<int>(seq->tokens.size());
  }
};

// A row of the step whose logits are computed: the model returns one token
// (and, when asked, one logits row) per LogitRow, in this order.
struct LogitRow {
  Sequence* seq = nullptr;
  int row = 0;       // row in the step: fresh chunks' rows first, then paged chunks'
  int position = 0;  // token position in its sequence
};

struct StepPlan {
  std::vector<ScheduledChunk> fresh;  // whole prompts / first chunks: prefill attention
  std::vector<ScheduledChunk> paged;  // decodes and later chunks: paged attention per row
  std::vector<Sequence*> preempted;   // moved back to the queue this step
  std::vector<LogitRow> logit_rows;   // filled at the end of Scheduler::plan
  int rows() const;
  bool empty() const { return fresh.empty() && paged.empty(); }
  bool copies_logits() const;  // some scheduled sequence wants logits on the host
};

// What the model produced for a plan: one token per LogitRow, and the logits
// rows ([logit_rows][vocab] f32) when the plan copies logits, else null.
struct StepTokens {
  const int32_t* tokens = nullptr;
  const float* logits = nullptr;
  int vocab = 0;
};

class Scheduler {
 public:
  // `eos_token_ids`: tokens that end a sequence with stop_at_eos.
  Scheduler(const EngineLimits& limits, KvBlockManager& kv, std::vector<int> eos_token_ids = {});

  void enqueue(std::unique_ptr<Sequence> seq);  // back of the queue
  StepPlan plan(int64_t step);
  // After the model ran `plan`: marks the chunks cached, delivers logits to
  // on_logits, appends one token (forced or sampled) to every sequence whose
  // last row was computed (on_token), checks the stops (EOS unless forced,
  // max_new_tokens, max_context) and finishes those sequences: slot and
  // blocks released, results returned in finishing order, stamped `now_s`.
  std::vector<RequestResult> postprocess(const StepPlan& plan, const StepTokens& out, int64_t step,
                                         double now_s);
  // Sequence finished: frees its slot and blocks; returns ownership.
  std::unique_ptr<Sequence> finish(Sequence* seq, int64_t step);

  // Overlapped decode (docs/architecture.md, "Overlapped steps"). The plan
  // of step `step` that continues `prev` -- a pure decode step launched but
  // not yet postprocessed -- assuming each of its sequences takes the token
  // `prev` is computing and goes on: the same sequences in the same order,
  // one position further, their blocks grown. False (nothing changed) when
  // that is not what plan() would do after postprocess(prev): a request is
  // waiting, a row of `prev` is not a plain decode (prompt chunk, logits
  // wanted), a sequence stops by length or context with
  // prev's token, or a block is short (plan() would preempt). Sequences
  // that stop at EOS are only known after postprocess(prev): their row in
  // the continuation is computed and ignored (Sequence::retired).
  bool plan_continuation(const StepPlan& prev, int64_t step, StepPlan& next);
  // Postprocess with a continuation in flight: sequences finishing here that
  // have a row in `inflight` are retired instead of finished; their results
  // are returned now all the same. Rows of retired sequences are skipped.
  std::vector<RequestResult> postprocess(const StepPlan& plan, const StepTokens& out, int64_t step,
                                         double now_s, const StepPlan* inflight, int64_t inflight_step);
  // Finishes the sequences retired until `step` was collected.
  void release_retired(int64_t step);
  bool has_retired() const { return !retired_.empty(); }
  int64_t discarded_rows() const { return discarded_rows_; }  // continuation rows of retired sequences

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }

 private:
  EngineLimits limits_;
  KvBlockManager& kv_;
  std::vector<int> eos_token_ids_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<int> free_slots_;
  int64_t admit_counter_ = 0;
  int64_t discarded_rows_ = 0;
  std::vector<Sequence*> retired_;  // finished, slot and blocks held until retire_after is collected

  bool preempt_one(const Sequence* keep, int64_t step, StepPlan& plan);
  int logit_rows(const ScheduledChunk& c) const;
  void list_logit_rows(StepPlan& plan) const;
  // The stop a sequence reached with its newest token, or "" to go on.
  const char* stop_reason(const Sequence& s, bool forced) const;
};

}  // namespace lantern
