#include "engine/engine.h"

#include <chrono>
#include <mutex>

#include <nlohmann/json.hpp>

#include "engine/common.h"
#include "engine/device.h"
#include "engine/kv_cache.h"
#include "engine/limits_fit.h"
#include "engine/model.h"
#include "engine/scheduler.h"

namespace lantern {

// ------------------------------------------------------------------ limits
void EngineLimits::validate(const ModelConfig& cfg) const {
  LANTERN_CHECK(max_batch_tokens > 0, "limit max_batch_tokens=%d must be > 0", max_batch_tokens);
  LANTERN_CHECK(max_seqs > 0, "limit max_seqs=%d must be > 0", max_seqs);
  LANTERN_CHECK(max_seqs <= max_batch_tokens,
                "limit max_seqs=%d exceeds max_batch_tokens=%d: every running sequence needs a row "
                "per step; raise max_batch_tokens",
                max_seqs, max_batch_tokens);
  LANTERN_CHECK(max_context > 1, "limit max_context=%d must be > 1", max_context);
  LANTERN_CHECK(cfg.max_position_embeddings <= 0 || max_context <= cfg.max_position_embeddings,
                "limit max_context=%d exceeds the model's max_position_embeddings=%d: lower max_context",
                max_context, cfg.max_position_embeddings);
  LANTERN_CHECK(kv_block_size > 0 && kv_block_size <= 1024, "limit kv_block_size=%d must be in [1, 1024]",
                kv_block_size);
  LANTERN_CHECK(kv_num_blocks >= 0, "limit kv_num_blocks=%d must be >= 0 (0 = automatic)", kv_num_blocks);
  LANTERN_CHECK(kv_memory_fraction > 0 && kv_memory_fraction <= 1,
                "limit kv_memory_fraction=%g must be in (0, 1]", kv_memory_fraction);
  LANTERN_CHECK(max_queue > 0, "limit max_queue=%d must be > 0", max_queue);
  LANTERN_CHECK(logits_rows >= 0, "limit logits_rows=%d must be >= 0 (0 = max_seqs)", logits_rows);
}

nlohmann::json EngineLimits::to_json() const {
  return {{"max_batch_tokens", max_batch_tokens}, {"max_seqs", max_seqs},
          {"max_context", max_context},           {"kv_block_size", kv_block_size},
          {"kv_num_blocks", kv_num_blocks},       {"kv_memory_fraction", kv_memory_fraction},
          {"max_queue", max_queue},               {"logits_rows", logits_rows}};
}

EngineLimits EngineLimits::from_json(const nlohmann::json& j) {
  LANTERN_CHECK(j.is_object(), "limits must be a JSON object, got %s", j.type_name());
  EngineLimits l;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    auto num = [&](auto& field) {
      using T = std::remove_reference_t<decltype(field)>;
      const std::string shown = it->dump().substr(0, 60);
      if constexpr (std::is_integral_v<T>) {
        // Full range first: 4294967297 must not wrap to 1.
        LANTERN_CHECK(it->is_number_integer() && !(it->is_number_unsigned() && it->get<uint64_t>() > INT32_MAX) &&
                          it->get<int64_t>() >= INT32_MIN && it->get<int64_t>() <= INT32_MAX,
                      "limits.%s must be an integer in [%d, %d], got %s", k.c_str(), INT32_MIN, INT32_MAX,
                      shown.c_str());
        field = static_cast<T>(it->get<int64_t>());
      } else {
        LANTERN_CHECK(it->is_number(), "limits.%s must be a number, got %s", k.c_str(), shown.c_str());
        field = it->get<T>();
      }
    };
    if (k == "max_batch_tokens") num(l.max_batch_tokens);
    else if (k == "max_seqs") num(l.max_seqs);
    else if (k == "max_context") num(l.max_context);
    else if (k == "kv_block_size") num(l.kv_block_size);
    else if (k == "kv_num_blocks") num(l.kv_num_blocks);
    else if (k == "kv_memory_fraction") num(l.kv_memory_fraction);
    else if (k == "max_queue") num(l.max_queue);
    else if (k == "logits_rows") num(l.logits_rows);
    else
      LANTERN_FAIL("unknown limit '%s': valid limits are max_batch_tokens, max_seqs, max_context, "
                   "kv_block_size, kv_num_blocks, kv_memory_fraction, max_queue, logits_rows",
                   k.c_str());
  }
  return l;
}

std::string MemoryBudget::table() const {
  auto mib = [](size_t b) { return b / 1048576.0; };
  std::string s;
  s += strformat("  %-14s %10.1f MiB\n", "weights", mib(weights));
  s += strformat("  %-14s %10.1f MiB\n", "arena", mib(arena));
  s += strformat("  %-14s %10.1f MiB  (%d blocks)\n", "kv_pool", mib(kv_pool), kv_blocks);
  s += strformat("  %-14s %10.1f MiB\n", "block_tables", mib(block_tables));
  s += strformat("  %-14s %10.1f MiB\n", "workspace", mib(workspace));
  s += strformat("  %-14s %10.1f MiB\n", "total", mib(total()));
  return s;
}

nlohmann::json MemoryBudget::to_json() const {
  return {{"weights", weights},     {"arena", arena},         {"kv_pool", kv_pool},
          {"kv_blocks", kv_blocks}, {"workspace", workspace}, {"sampling", sampling},
          {"block_tables", block_tables}, {"total", total()}};
}

// ------------------------------------------------------------------ engine
class EngineImpl {
 public:
  EngineImpl(const ModelConfig& cfg, Weights&& weights, const EngineOptions& opt)
      : cfg_(cfg), opt_(opt), weights_(std::move(weights)), device_(opt.backend, opt.observer),
        start_(std::chrono::steady_clock::now()) {
    limits_ = opt.limits;
    if (limits_.logits_rows == 0) limits_.logits_rows = limits_.max_seqs;
    limits_.validate(cfg_);
    if (device_.is_cuda())
      check_limits_fit(cfg_, limits_, 2, device_.free_memory(), "the device memory free after the weights");
    else
      check_limits_fit(cfg_, limits_, 4, host_memory_bytes(), "host memory");
    LANTERN_CHECK(weights_.backend() == opt.backend, "weights were loaded for %s but the engine runs on %s",
                  kernels::backend_name(weights_.backend()), kernels::backend_name(opt.backend));
    kernels_ = kernels::KernelSet::defaults(opt.backend);
    for (const auto& [family, variant] : opt.kernels)
      kernels_.select(kernels::family_from_name(family), variant, opt.backend);
    if (opt.observer) {
      AllocEvent e{"weights", "weight block", reinterpret_cast<uint64_t>(weights_.block()),
                   weights_.bytes(), opt.backend, false};
      opt.observer->on_alloc(e);
    }
    model_ = std::make_unique<Model>(cfg_, weights_, device_, limits_, kernels_, opt.observer,
                                     opt.use_cuda_graphs);
    kv_ = std::make_unique<KvBlockManager>(model_->kv_num_blocks(), limits_.kv_block_size,
                                           cfg_.num_layers, limits_.max_seqs,
                                           model_->max_blocks_per_seq(), opt.observer);
    scheduler_ = std::make_unique<Scheduler>(limits_, *kv_);
  }

  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  int64_t submit(Request req) {
    LANTERN_CHECK(!req.prompt.empty(), "empty prompt: give at least one token (e.g. BOS)");
    for (int32_t t : req.prompt)
      LANTERN_CHECK(t >= 0 && t < cfg_.vocab_size, "prompt token id %d is outside the vocabulary [0, %d)",
                    t, cfg_.vocab_size);
    for (int32_t t : req.forced_tokens)
      LANTERN_CHECK(t >= 0 && t < cfg_.vocab_size, "forced token id %d is outside the vocabulary [0, %d)",
                    t, cfg_.vocab_size);
    int plen = static_cast<int>(req.prompt.size());
    LANTERN_CHECK(plen < limits_.max_context,
                  "prompt of %d tokens does not fit the context of %d tokens (max_context): shorten "
                  "the prompt or raise max_context",
                  plen, limits_.max_context);
    LANTERN_CHECK(req.max_new_tokens >= 1, "max_new_tokens=%d must be >= 1", req.max_new_tokens);
    LANTERN_CHECK(req.sampling.top_p > 0, "top_p=%g must be > 0", req.sampling.top_p);
    if (req.all_logits)
      LANTERN_CHECK(limits_.logits_rows >= 1, "all_logits needs logits_rows >= 1");
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    LANTERN_CHECK(static_cast<int>(inbox_.size() + queued_) < limits_.max_queue,
                  "request queue is full (%d waiting, max_queue=%d): retry later or raise max_queue",
                  static_cast<int>(inbox_.size() + queued_), limits_.max_queue);
    auto seq = std::make_unique<Sequence>();
    seq->id = next_id_++;
    seq->tokens = req.prompt;
    seq->num_prompt = plen;
    seq->submit_s = now();
    seq->req = std::move(req);
    int64_t id = seq->id;
    inbox_.push_back(std::move(seq));
    return id;
  }

  // Reads only what step() publishes under inbox_mutex_ (never the scheduler).
  bool idle() {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    return inbox_.empty() && !scheduler_busy_;
  }

  std::vector<RequestResult> take_finished() {
    std::vector<RequestResult> out;
    std::lock_guard<std::mutex> lock(finished_mutex_);
    out.swap(finished_);
    return out;
  }

  bool step() {
    {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      for (auto& s : inbox_) scheduler_->enqueue(std::move(s));
      inbox_.clear();
      scheduler_busy_ = !scheduler_->idle();
    }
    if (scheduler_->idle()) return false;
    StepPlan plan = scheduler_->plan(steps_);
    {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      queued_ = static_cast<int>(scheduler_->num_waiting());
    }
    LANTERN_ASSERT(!plan.empty(), "scheduler made no progress with %zu waiting and %zu running",
                   scheduler_->num_waiting(), scheduler_->num_running());

    StepInput in;
    in.fresh_starts.push_back(0);
    std::vector<const ScheduledChunk*> producers;  // chunk of each logit row
    std::vector<int> logit_pos;                    // position of each logit row
    int max_fresh = 0;
    auto add_rows = [&](const ScheduledChunk& c) {
      const Sequence& s = *c.seq;
      int base = in.num_rows();
      for (int i = 0; i < c.count; ++i) {
        in.tokens.push_back(s.tokens[c.start + i]);
        in.positions.push_back(c.start + i);
        in.slots.push_back(s.slot);
      }
      auto add_logit_row = [&](int row_in_chunk) {
        in.logit_rows.push_back(base + row_in_chunk);
        const SamplingParams& sp = s.req.sampling;
        in.temperature.push_back(sp.temperature);
        in.top_k.push_back(sp.top_k);
        in.top_p.push_back(sp.top_p);
        in.seeds.push_back(sp.seed);
        in.gen_index.push_back(s.num_generated());
        producers.push_back(&c);
        logit_pos.push_back(c.start + row_in_chunk);
      };
      if (s.req.all_logits) {
        for (int i = 0; i < c.count; ++i) add_logit_row(i);
      } else if (c.produces_token()) {
        add_logit_row(c.count - 1);
      }
      if (s.req.all_logits || s.req.on_logits) in.copy_logits = true;
    };
    for (const auto& c : plan.fresh) {
      add_rows(c);
      in.fresh_starts.push_back(in.num_rows());
      max_fresh = std::max(max_fresh, c.count);
    }
    in.max_fresh_len = max_fresh;
    for (const auto& c : plan.paged) add_rows(c);
    in.table_updates = kv_->take_table_updates();

    StepInfo info;
    info.step = steps_;
    info.num_prefill_seqs = static_cast<int>(plan.fresh.size());
    info.num_decode_seqs = 0;
    for (const auto& c : plan.paged) (c.count == 1 && c.produces_token() ? info.num_decode_seqs : info.num_prefill_seqs)++;
    info.num_tokens = in.num_rows();
    info.phase = info.num_decode_seqs == 0 ? "prefill" : (info.num_prefill_seqs == 0 ? "decode" : "mixed");
    info.captures_graph = opt_.observer && model_->will_capture(in);
    LANTERN_OBSERVE(opt_.observer, on_step_begin(info));
    if (opt_.profile_first_step == steps_) profiler(true);

    StepOutput out = model_->run(in, info);

    // Advance the sequences: cached tokens, logits, new tokens, finishing.
    for (const auto* list : {&plan.fresh, &plan.paged})
      for (const auto& c : *list) c.seq->cached = c.start + c.count;
    double t = now();
    std::vector<Sequence*> finished;
    for (size_t i = 0; i < producers.size(); ++i) {
      Sequence& s = *producers[i]->seq;
      if (s.req.on_logits && logit_pos[i] >= s.logits_delivered) {
        s.req.on_logits(s.id, logit_pos[i], out.logits.data() + i * static_cast<size_t>(cfg_.vocab_size));
        s.logits_delivered = logit_pos[i] + 1;
      }
      bool last_row = logit_pos[i] == static_cast<int>(s.tokens.size()) - 1;
      if (!last_row) continue;
      int g = s.num_generated();
      int32_t tok = g < static_cast<int>(s.req.forced_tokens.size()) ? s.req.forced_tokens[g] : out.tokens[i];
      s.tokens.push_back(tok);
      if (s.first_token_s < 0) s.first_token_s = t;
      if (s.req.on_token) s.req.on_token(s.id, tok);
      std::string reason;
      bool forced = g < static_cast<int>(s.req.forced_tokens.size());
      if (s.req.stop_at_eos && !forced && cfg_.is_eos(tok)) reason = "eos";
      else if (s.num_generated() >= s.req.max_new_tokens) reason = "length";
      else if (static_cast<int>(s.tokens.size()) >= limits_.max_context) reason = "context";
      if (!reason.empty()) {
        finished.push_back(&s);
        s.finish_reason = reason;
      }
    }
    for (Sequence* s : finished) {
      std::unique_ptr<Sequence> done = scheduler_->finish(s, steps_);
      RequestResult res;
      res.id = done->id;
      res.tag = done->req.tag;
      res.prompt.assign(done->tokens.begin(), done->tokens.begin() + done->num_prompt);
      res.tokens.assign(done->tokens.begin() + done->num_prompt, done->tokens.end());
      res.finish_reason = done->finish_reason;
      res.submit_s = done->submit_s;
      res.first_token_s = done->first_token_s;
      res.finish_s = t;
      res.preemptions = done->preemptions;
      std::lock_guard<std::mutex> lock(finished_mutex_);
      finished_.push_back(std::move(res));
    }
    {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      scheduler_busy_ = !scheduler_->idle();
      queued_ = static_cast<int>(scheduler_->num_waiting());
    }
    LANTERN_OBSERVE(opt_.observer, on_kv_step(kv_->stats(steps_)));
    if (opt_.profile_last_step == steps_) profiler(false);
    LANTERN_OBSERVE(opt_.observer, on_step_end(info));
    ++steps_;
    return true;
  }

  void profiler(bool start);

  const ModelConfig cfg_;
  EngineOptions opt_;
  EngineLimits limits_;
  Weights weights_;
  Device device_;
  kernels::KernelSet kernels_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvBlockManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::chrono::steady_clock::time_point start_;
  std::mutex inbox_mutex_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  int queued_ = 0;              // scheduler's waiting count, published under inbox_mutex_
  bool scheduler_busy_ = false;  // scheduler holds sequences, published under inbox_mutex_
  std::mutex finished_mutex_;
  int64_t next_id_ = 0;
  int64_t steps_ = 0;
  std::vector<RequestResult> finished_;
};

}  // namespace lantern

#include <cuda_profiler_api.h>

namespace lantern {

void EngineImpl::profiler(bool start) {
  if (!device_.is_cuda()) return;
  device_.synchronize();
  if (start)
    LANTERN_CUDA(cudaProfilerStart());
  else
    LANTERN_CUDA(cudaProfilerStop());
}

Engine::Engine(const ModelConfig& cfg, Weights&& weights, const EngineOptions& options)
    : impl_(std::make_unique<EngineImpl>(cfg, std::move(weights), options)) {}
Engine::~Engine() = default;
int64_t Engine::submit(Request r) { return impl_->submit(std::move(r)); }
bool Engine::step() { return impl_->step(); }
void Engine::run_until_idle() {
  while (impl_->step()) {
  }
}
bool Engine::idle() const { return impl_->idle(); }
std::vector<RequestResult> Engine::take_finished() { return impl_->take_finished(); }
const ModelConfig& Engine::config() const { return impl_->cfg_; }
const EngineLimits& Engine::limits() const { return impl_->limits_; }
const MemoryBudget& Engine::memory_budget() const { return impl_->model_->budget(); }
const kernels::KernelSet& Engine::kernel_set() const { return impl_->kernels_; }
int64_t Engine::steps_run() const { return impl_->steps_; }
double Engine::now_s() const { return impl_->now(); }

nlohmann::json Engine::describe() const {
  nlohmann::json k = nlohmann::json::object();
  for (int f = 0; f < kernels::kNumFamilies; ++f) {
    const auto& e = impl_->kernels_.entry(static_cast<kernels::Family>(f));
    k[kernels::family_name(e.family)] = {{"variant", e.variant}, {"name", e.name}};
  }
  return {{"backend", kernels::backend_name(impl_->opt_.backend)},
          {"model", impl_->cfg_.to_json()},
          {"limits", impl_->limits_.to_json()},
          {"kernels", k},
          {"memory", memory_budget().to_json()}};
}

}  // namespace lantern
