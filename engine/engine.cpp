#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/device.h"
#include "engine/kv_cache.h"
#include "engine/limits_fit.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "engine/step_input.h"
#include "engine/tensor_parallel.h"

namespace lantern {

// ------------------------------------------------------------------ engine
class EngineImpl {
 public:
  EngineImpl(const ModelConfig& cfg, Weights&& weights, const EngineOptions& opt)
      : cfg_(cfg), opt_(opt), comm_(opt.comm),
        local_cfg_(comm_ ? shard_config(cfg, ShardSpec{comm_->rank(), comm_->world()}) : cfg),
        weights_(std::move(weights)), device_(opt.backend, opt.observer, opt.gpu),
        start_(std::chrono::steady_clock::now()) {
    limits_ = opt.limits;
    if (limits_.logits_rows == 0) limits_.logits_rows = limits_.max_seqs;
    limits_.validate(cfg_);
    // A split LM head adds its logits part and gather scratch (op_table.h).
    const int lm_head_parts = comm_ && opt.tp_lm_head == TpLmHead::split ? comm_->world() : 0;
    if (device_.is_cuda())
      check_limits_fit(local_cfg_, limits_, 2, device_.free_memory(),
                       "the device memory free after the weights", lm_head_parts);
    else
      check_limits_fit(local_cfg_, limits_, 4, host_memory_bytes(), "host memory", lm_head_parts);
    LANTERN_CHECK(weights_.backend() == opt.backend, "weights were loaded for %s but the engine runs on %s",
                  kernels::backend_name(weights_.backend()), kernels::backend_name(opt.backend));
    LANTERN_CHECK(!device_.is_cuda() || weights_.gpu() == opt.gpu,
                  "weights were loaded on GPU %d but the engine runs on GPU %d: load them with "
                  "the same gpu index",
                  weights_.gpu(), opt.gpu);
    const TpLmHead lm_head = comm_ ? opt.tp_lm_head : TpLmHead::replicated;
    if (comm_) check_shardable(cfg_, comm_->world(), lm_head);
    LANTERN_CHECK(weights_.shard().lm_head == lm_head &&
                      (!comm_ || weights_.shard().world == comm_->world()),
                  "the weights hold a %s LM head over %d rank(s) but the engine runs a %s one over %d: "
                  "load them with the engine's ShardSpec",
                  tp_lm_head_name(weights_.shard().lm_head), weights_.shard().world, tp_lm_head_name(lm_head),
                  comm_ ? comm_->world() : 1);
    kernels_ = kernels::KernelSet::defaults(opt.backend);
    bool fused = opt.fused, prefill_graphs = opt.prefill_graphs, overlap = opt.overlap,
         prune_last = opt.prune_last_layer;
    std::string fold = opt.fold_attention;
    bool fuse_final = opt.fuse_final_norm;
    // Pseudo-families (engine switches, not registry families): "on" / "off".
    auto on_off = [](const std::string& family, const std::string& variant) {
      LANTERN_CHECK(variant == "on" || variant == "off", "kernels: %s must be 'on' or 'off', got '%s'",
                    family.c_str(), variant.c_str());
      return variant == "on";
    };
    for (const auto& [family, variant] : opt.kernels) {
      if (family == "fusion")
        fused = on_off(family, variant);
      else if (family == "prefill_graphs")
        prefill_graphs = on_off(family, variant);
      else if (family == "overlap")
        overlap = on_off(family, variant);
      else if (family == "prune_last")
        prune_last = on_off(family, variant);
      else if (family == "fold_attention")
        fold = variant;
      else if (family == "final_fuse")
        fuse_final = on_off(family, variant);
      else
        kernels_.select(kernels::family_from_name(family), variant, opt.backend);
    }
    if (opt.observer) {
      AllocEvent e{"weights", "weight block", reinterpret_cast<uint64_t>(weights_.block()),
                   weights_.bytes(), opt.backend, false};
      opt.observer->on_alloc(e);
    }
    LANTERN_CHECK(fold == "auto" || fold == "on" || fold == "off",
                  "kernels: fold_attention must be 'auto', 'on' or 'off', got '%s'", fold.c_str());
    LANTERN_CHECK(opt.fold_max_context >= 0, "fold_max_context must be >= 0, got %d", opt.fold_max_context);
    const bool folding =
        fold == "on" || (fold == "auto" && kernels_.entry(kernels::Family::qkv_rope).folds_attention);
    model_ = std::make_unique<Model>(local_cfg_, weights_, device_, limits_, kernels_, opt.observer,
                                     opt.use_cuda_graphs, fused, comm_, prefill_graphs, lm_head, prune_last,
                                     folding ? opt.fold_max_context : 0, fuse_final);
    if (fused && !model_->fused())
      std::fprintf(stderr,
                   "note: the fused op table needs each layer's q/k/v and gate/up weights adjacent in the "
                   "weight block; this model's are not, so the unfused table runs (fusion off)\n");
    // Tensor parallel: rank 0 schedules blocks every rank's pool holds (each
    // sized its pool from its own free memory).
    const int kv_blocks = comm_ ? static_cast<int>(comm_->all_min(model_->kv_num_blocks())) : model_->kv_num_blocks();
    kv_ = std::make_unique<KvBlockManager>(kv_blocks, limits_.kv_block_size,
                                           cfg_.num_layers, limits_.max_seqs,
                                           model_->max_blocks_per_seq(), opt.observer);
    scheduler_ = std::make_unique<Scheduler>(limits_, *kv_, cfg_.eos_token_ids);
    overlap_ = overlap && comm_ == nullptr;
  }

  double now() const {
    if (opt_.clock) return opt_.clock();
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
    LANTERN_CHECK(static_cast<int>(inbox_.size()) + queued_ < limits_.max_queue,
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
    ++unfinished_;
    return id;
  }

  // Reads only what step() publishes under inbox_mutex_ (never the scheduler).
  bool idle() {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    return unfinished_ == 0 && !inflight_;
  }

  std::vector<RequestResult> take_finished() {
    std::vector<RequestResult> out;
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    out.swap(finished_);
    return out;
  }

  // plan -> launch -> wait -> postprocess. Called from one thread (the
  // engine's); the state other threads read (inbox_, queued_, unfinished_,
  // inflight_, finished_) is touched only under inbox_mutex_.
  //
  // Overlapped decode (docs/architecture.md, "Overlapped steps"): once a pure
  // decode step is launched, its continuation (Scheduler::plan_continuation:
  // the same sequences one token further, their tokens gathered on the
  // device) is launched before waiting for it, and stays in flight into the
  // next call. So the host's postprocess and planning run while the GPU
  // computes, and the GPU goes from one step to the next without waiting for
  // the host. Each call still collects exactly one step.
  bool step() {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t_begin = Clock::now();
    model_s_ = 0;
    move_inbox();
    std::optional<Launched> cur;
    if (pending_) {
      cur = std::move(pending_);
      pending_.reset();
    } else {
      if (scheduler_->idle()) return false;
      StepPlan plan = scheduler_->plan(steps_);
      {
        std::lock_guard<std::mutex> lock(inbox_mutex_);
        queued_ = static_cast<int>(scheduler_->num_waiting());
      }
      LANTERN_ASSERT(!plan.empty(), "scheduler made no progress with %zu waiting and %zu running",
                     scheduler_->num_waiting(), scheduler_->num_running());
      const bool overlapped = overlap_ && overlappable(plan) && !profile_stops_at(steps_);
      cur = launch(std::move(plan), nullptr, overlapped);
      if (!overlapped) {
        collect(*cur, t_begin, nullptr, -1);
        LANTERN_OBSERVE(opt_.observer, on_kv_step(kv_->stats(cur->step)));
        LANTERN_OBSERVE(opt_.observer, on_step_end(cur->info));
        return true;
      }
    }
    // `cur` is in flight: launch its continuation before waiting for it.
    std::optional<Launched> next;
    StepPlan cont;
    if (!profile_stops_at(steps_) && scheduler_->plan_continuation(cur->plan, steps_, cont)) {
      next = launch(std::move(cont), &*cur, true);
      ++overlap_stats_.continuations;
    }
    collect(*cur, t_begin, next ? &next->plan : nullptr, next ? next->step : -1);
    // The newest step's KV record, now with the blocks this collection released.
    LANTERN_OBSERVE(opt_.observer, on_kv_step(kv_->stats(steps_ - 1)));
    pending_ = std::move(next);
    {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      inflight_ = pending_.has_value();
    }
    return true;
  }

  // --profile-steps A:B stops the profiler once step B's work is done, inside
  // step B's observer range (nsys's capture range then ends with that step),
  // so step B runs synchronously: no continuation launched ahead of it, none
  // launched from it.
  bool profile_stops_at(int64_t step) const { return opt_.profile_last_step >= 0 && step == opt_.profile_last_step; }

  // A step that may stay in flight: single-token decodes only, no logits to the host.
  static bool overlappable(const StepPlan& plan) {
    if (!plan.fresh.empty() || plan.copies_logits()) return false;
    for (const auto& c : plan.paged)
      if (c.count != 1 || !c.produces_token() || c.start < c.seq->num_prompt) return false;
    return true;
  }

  // A step launched on the device, not yet postprocessed.
  struct Launched {
    StepPlan plan;
    StepInfo info;
    int64_t step = 0;
    int rows = 0, decode_rows = 0;
  };

  // Builds the step input, reports the step to the observers and launches
  // it. `prev`: the step `plan` continues (its tokens are gathered on the
  // device). `overlapped`: the step stays in flight, so its observer range
  // closes here (it covers the planning and the launches); otherwise the
  // caller closes it after collect().
  Launched launch(StepPlan&& plan, const Launched* prev, bool overlapped) {
    Launched l;
    l.step = steps_;
    const double step_start = now();
    for (const auto& c : plan.fresh)  // admission wait ends when the prefill begins
      if (c.seq->admit_s < 0) c.seq->admit_s = step_start;
    StepInput in = prev ? continuation_input(plan, prev->plan) : step_input(plan);
    in.table_updates = kv_->take_table_updates();
    // Single-token decodes past the prompt (StepTiming), counted before postprocess appends the tokens.
    l.rows = plan.rows();
    l.decode_rows = prev ? l.rows : static_cast<int>(std::count_if(plan.paged.begin(), plan.paged.end(), [](const ScheduledChunk& c) {
      return c.count == 1 && c.start >= c.seq->num_prompt && c.produces_token();
    }));
    l.info = describe_step(plan, in, steps_, prev != nullptr);  // hooks only
    LANTERN_OBSERVE(opt_.observer, on_step_begin(l.info));
    if (opt_.profile_first_step == steps_) profiler(true);
    if (comm_) {  // the followers run the same step on their shards
      std::vector<uint8_t> plan_bytes = encode_step(in);
      comm_->broadcast(plan_bytes);
    }
    const auto t_launch = std::chrono::steady_clock::now();
    model_->launch(in);
    model_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_launch).count();
    if (overlapped) {
      LANTERN_OBSERVE(opt_.observer, on_kv_step(kv_->stats(steps_)));
      LANTERN_OBSERVE(opt_.observer, on_step_end(l.info));
    }
    ++steps_;
    l.plan = std::move(plan);
    return l;
  }

  // Waits for `l`'s tokens, postprocesses them and publishes the finished
  // requests. `inflight`: the continuation already launched after `l`.
  void collect(Launched& l, std::chrono::steady_clock::time_point t_begin, const StepPlan* inflight,
               int64_t inflight_step) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t_wait = Clock::now();
    StepOutput out = model_->wait();
    const Clock::time_point t_ran = Clock::now();
    std::vector<RequestResult> done = scheduler_->postprocess(
        l.plan, StepTokens{out.tokens.data(), out.logits.empty() ? nullptr : out.logits.data(), cfg_.vocab_size},
        l.step, now(), inflight, inflight_step);
    scheduler_->release_retired(l.step);
    if (!done.empty()) {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      unfinished_ -= static_cast<int64_t>(done.size());
      for (auto& r : done) finished_.push_back(std::move(r));
    }
    if (opt_.profile_last_step == l.step) profiler(false);
    LANTERN_OBSERVE(opt_.observer, on_step_collected(l.step));
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    model_s_ += secs(t_ran - t_wait);
    timing_.model_s = model_s_;
    timing_.host_s = secs(Clock::now() - t_begin) - model_s_;
    timing_.rows = l.rows;
    timing_.decode_rows = l.decode_rows;
  }

  // Moves submitted requests into the scheduler's queue.
  void move_inbox() {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    for (auto& s : inbox_) scheduler_->enqueue(std::move(s));
    inbox_.clear();
  }

  void profiler(bool start);

  // Ranks > 0: the broadcast plans until the empty one (end of the group).
  void follow() {
    LANTERN_CHECK(comm_ && comm_->rank() > 0, "Engine::follow is for tensor-parallel ranks > 0");
    for (;;) {
      std::vector<uint8_t> plan_bytes;
      comm_->broadcast(plan_bytes);
      if (plan_bytes.empty()) return;
      const StepInput in = decode_step(plan_bytes);
      [[maybe_unused]] StepInfo info;
      info.step = steps_;
      info.num_tokens = in.num_rows();
      info.phase = in.num_fresh_rows() == in.num_rows() ? "prefill"
                   : in.num_fresh_rows() == 0            ? "decode"
                                                         : "mixed";
      LANTERN_OBSERVE(opt_.observer, on_step_begin(info));
      model_->run(in);
      LANTERN_OBSERVE(opt_.observer, on_step_end(info));
      ++steps_;
    }
  }

  void end_group() {
    if (!comm_ || comm_->rank() != 0 || group_ended_) return;
    group_ended_ = true;
    std::vector<uint8_t> end;
    comm_->broadcast(end);
  }

  ~EngineImpl() {
    try {
      end_group();
    } catch (const std::exception&) {
      // A peer is gone: the failure that ended the run has been reported.
    }
  }

  const ModelConfig cfg_;
  EngineOptions opt_;
  Communicator* comm_ = nullptr;  // tensor parallelism (world 1 included: --tp 1)
  ModelConfig local_cfg_;         // this rank's config (== cfg_ without tensor parallelism)
  bool group_ended_ = false;
  EngineLimits limits_;
  Weights weights_;
  Device device_;
  kernels::KernelSet kernels_;
  StepTiming timing_;  // of the last step
  double model_s_ = 0;  // this step() call's seconds in Model::launch and Model::wait
  OverlapStats overlap_stats_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvBlockManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::chrono::steady_clock::time_point start_;
  // Guards what submit(), idle() and take_finished() share with step().
  std::mutex inbox_mutex_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  int queued_ = 0;           // the scheduler's waiting queue after the last plan
  int64_t unfinished_ = 0;   // submitted and not yet finished
  bool inflight_ = false;    // a step is in flight (its retired sequences still hold their blocks)
  bool overlap_ = false;     // opt_.overlap without tensor parallelism
  std::optional<Launched> pending_;  // launched, not yet collected (engine thread only)
  int64_t next_id_ = 0;
  std::vector<RequestResult> finished_;
  int64_t steps_ = 0;        // engine thread only
};

}  // namespace lantern

#include <cuda_profiler_api.h>

#include "kernels/base/cuda_check.h"

namespace lantern {

void EngineImpl::profiler(bool start) {
  if (!device_.is_cuda()) return;
  device_.synchronize();
  if (start)
    CUDA_CHECK(cudaProfilerStart());
  else
    CUDA_CHECK(cudaProfilerStop());
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
void Engine::follow() { impl_->follow(); }
void Engine::end_group() { impl_->end_group(); }
bool Engine::idle() const { return impl_->idle(); }
std::vector<RequestResult> Engine::take_finished() { return impl_->take_finished(); }
const ModelConfig& Engine::config() const { return impl_->cfg_; }
const EngineLimits& Engine::limits() const { return impl_->limits_; }
const MemoryBudget& Engine::memory_budget() const { return impl_->model_->budget(); }
const kernels::KernelSet& Engine::kernel_set() const { return impl_->kernels_; }
int64_t Engine::steps_run() const { return impl_->steps_; }
const StepTiming& Engine::last_step_timing() const { return impl_->timing_; }
OverlapStats Engine::overlap_stats() const {
  OverlapStats s = impl_->overlap_stats_;
  s.discarded_rows = impl_->scheduler_->discarded_rows();
  return s;
}
double Engine::now_s() const { return impl_->now(); }

std::vector<kernels::GemmPlan> Engine::gemm_plans() const { return impl_->model_->gemm_plans(); }

nlohmann::json Engine::describe() const {
  nlohmann::json k = nlohmann::json::object();
  for (int f = 0; f < kernels::kNumFamilies; ++f) {
    const auto& e = impl_->kernels_.entry(static_cast<kernels::Family>(f));
    k[kernels::family_name(e.family)] = {{"variant", e.variant}, {"name", e.name}};
    if (!e.tested) k[kernels::family_name(e.family)]["untested"] = true;  // not yet run on a GPU
  }
  const bool cuda = impl_->opt_.backend == kernels::Backend::cuda;
  const Communicator* comm = impl_->comm_;
  // all_reduce: what the collective runs; all_reduce_path: the choice it was made with.
  nlohmann::json tp = comm ? nlohmann::json{{"world", comm->world()}, {"rank", comm->rank()},
                                            {"communicator", comm->kind()},
                                            {"all_reduce", comm->all_reduce_desc()},
                                            {"all_reduce_path",
                                             tp_all_reduce_name(impl_->opt_.tp_all_reduce)},
                                            {"lm_head", tp_lm_head_name(impl_->opt_.tp_lm_head)}}
                           : nlohmann::json(nullptr);
  nlohmann::json out = {{"backend", kernels::backend_name(impl_->opt_.backend)},
                        {"tensor_parallel", tp},
                        {"gpu", cuda ? nlohmann::json(impl_->opt_.gpu) : nlohmann::json(nullptr)},
                        {"model", impl_->cfg_.to_json()},
                        {"limits", impl_->limits_.to_json()},
                        {"kernels", k},
                        {"fusion", impl_->model_->fused() ? "on" : "off"},
                        {"prefill_graphs", impl_->model_->prefill_graphs() ? "on" : "off"},
                        {"overlap", impl_->overlap_ ? "on" : "off"},
                        {"prune_last", impl_->model_->prunes_last_layer() ? "on" : "off"},
                        {"fold_attention", impl_->model_->fold_max_context() > 0 ? "on" : "off"},
                        {"fold_max_context", impl_->model_->fold_max_context()},
                        {"final_fuse", impl_->model_->fuses_final_norm() ? "on" : "off"},
                        {"memory", memory_budget().to_json()}};
  const std::vector<kernels::GemmPlan> plans = gemm_plans();
  if (!plans.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const kernels::GemmPlan& p : plans) list.push_back(gemm_plan_json(p));
    out["gemm_plans"] = std::move(list);
  }
  return out;
}

}  // namespace lantern
