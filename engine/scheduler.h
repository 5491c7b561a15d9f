#pragma once
// Scheduler: decides, each step, which sequences prefill (whole prompts or
// chunks of them) and which decode, under the limits -- and never touches
// CUDA. Admission control: a request stays queued until a slot, the step's
// token budget and its KV blocks are available; when a decoding sequence
// needs a block and none is free, the most recently admitted sequence is
// preempted (its blocks freed) and later recomputed from its tokens.
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

struct StepPlan {
  std::vector<ScheduledChunk> fresh;  // whole prompts / first chunks: prefill attention
  std::vector<ScheduledChunk> paged;  // decodes and later chunks: paged attention per row
  std::vector<Sequence*> preempted;   // moved back to the queue this step
  int rows() const;
  bool empty() const { return fresh.empty() && paged.empty(); }
};

class Scheduler {
 public:
  Scheduler(const EngineLimits& limits, KvBlockManager& kv);

  void enqueue(std::unique_ptr<Sequence> seq);  // back of the queue
  StepPlan plan(int64_t step);
  // Sequence finished: frees its slot and blocks; returns ownership.
  std::unique_ptr<Sequence> finish(Sequence* seq, int64_t step);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }

 private:
  EngineLimits limits_;
  KvBlockManager& kv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<int> free_slots_;
  int64_t admit_counter_ = 0;

  bool preempt_one(const Sequence* keep, int64_t step, StepPlan& plan);
  int logit_rows(const ScheduledChunk& c) const;
};

}  // namespace lantern
