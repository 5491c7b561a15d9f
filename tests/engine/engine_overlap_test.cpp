// The CPU engine's overlapped decode (the host preparing step N + 1 while step
// N runs) against synchronous steps, and its thread safety: requests submitted
// from another thread while the engine runs, submit / idle / take_finished
// against a concurrent step. (The other CPU engine tests: engine_test.cpp.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/kv_watch.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

using test::make_cpu_engine;
using test::run_all;
using test::tiny_engine_model;

// OverlappedDecodeMatchesSynchronousSteps's requests: prompts of 2-37
// random tokens, greedy and sampled rows, one with forced tokens.
std::vector<Request> overlap_test_requests() {
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.prompt = test::random_token_ids(2 + 5 * i);
    r.max_new_tokens = 10 + 2 * i;
    r.stop_at_eos = false;
    if (i % 2) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 1000 + i;
    }
    if (i == 3) r.forced_tokens = test::random_token_ids(3);
    r.tag = std::to_string(i);
    reqs.push_back(r);
  }
  return reqs;
}

// Requests 0-5 at once, 6 and 7 after 5 steps (while continuations are in
// flight); the results in request order.
std::vector<RequestResult> run_with_late_arrivals(Engine& e, const std::vector<Request>& reqs, bool stop_at_eos) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i == 6) {
      for (int k = 0; k < 5; ++k) EXPECT_TRUE(e.step());
    }
    Request r = reqs[i];
    r.stop_at_eos = stop_at_eos;
    e.submit(r);
  }
  e.run_until_idle();
  EXPECT_TRUE(e.idle());
  auto res = e.take_finished();
  std::sort(res.begin(), res.end(), [](const auto& a, const auto& b) { return a.tag < b.tag; });
  return res;
}

// EOS ids for OverlappedDecodeMatchesSynchronousSteps, from the run without
// stops (`full`): a token early in one sequence and two or three in the
// all-decode phase, each in a step that launches a continuation (so the
// stopped sequence's next row is computed and discarded). Greedy rows of the
// tiny random model repeat tokens, so each EOS is a token that no other
// sequence ever produces and that its own sequence first produces there.
//
// Step numbers, overlapped engine: prefill of requests 0-5 in step 0, so
// token p of request i < 6 comes out of step p. Five step() calls collect
// steps 0-4 with step 5 (a continuation) in flight; requests 6 and 7 wait,
// so step 5 launches no continuation and they prefill in step 6 (token p in
// step p + 6). The synchronous engine prefills them in step 5. A
// continuation is launched from every decode step except 5, 6 and steps
// where a sequence makes its last token by length.
struct OverlapStops {
  std::vector<int> eos;        // empty: this draw has no such tokens
  int64_t continuations = 0;   // what the overlapped engine launches with them
};

OverlapStops choose_overlap_stops(const std::vector<Request>& reqs, const std::vector<RequestResult>& full) {
  auto step_of = [](size_t i, size_t p, bool overlapped) {
    return static_cast<int>(p) + (i < 6 ? 0 : (overlapped ? 6 : 5));
  };
  auto length_stop_step = [&](int step, bool overlapped) {
    for (size_t j = 0; j < full.size(); ++j)
      if (step_of(j, full[j].tokens.size() - 1, overlapped) == step) return true;
    return false;
  };
  auto continued = [&](int step) {
    return step != 0 && step != 5 && step != 6 && !length_stop_step(step, true);
  };
  auto produces = [](const RequestResult& r, int token) {
    return std::find(r.tokens.begin(), r.tokens.end(), token) != r.tokens.end();
  };
  OverlapStops out;
  std::vector<size_t> eos_seq;
  auto pick = [&](size_t i, int first_step, int last_step) {
    if (std::find(eos_seq.begin(), eos_seq.end(), i) != eos_seq.end()) return;
    const auto& t = full[i].tokens;
    for (size_t p = reqs[i].forced_tokens.size(); p + 1 < t.size(); ++p) {
      const int step = step_of(i, p, true);
      if (step < first_step || step > last_step || !continued(step) ||
          length_stop_step(step_of(i, p, false), false))
        continue;
      if (std::find(t.begin(), t.begin() + p, t[p]) != t.begin() + p) continue;
      bool elsewhere = false;
      for (size_t j = 0; j < full.size(); ++j) elsewhere |= j != i && produces(full[j], t[p]);
      if (elsewhere) continue;
      out.eos.push_back(t[p]);
      eos_seq.push_back(i);
      return;
    }
  };
  for (size_t i : {5, 1, 3, 0, 2, 4})
    if (out.eos.empty()) pick(i, 1, 3);
  if (out.eos.size() != 1) return {};
  for (size_t i : {2, 4, 7, 6, 3, 1, 5, 0})
    if (out.eos.size() < 4) pick(i, 8, 1000);
  if (out.eos.size() < 3) return {};
  // Continuations: one from every step up to the last one that continues,
  // where no sequence (of those that do not stop at an EOS first) makes its
  // last token by length.
  int last_step = 0;
  std::vector<int> length_steps;
  for (size_t i = 0; i < full.size(); ++i) {
    size_t n = full[i].tokens.size();
    bool eos_stop = false;
    for (size_t p = reqs[i].forced_tokens.size(); p < n && !eos_stop; ++p)
      if (std::find(out.eos.begin(), out.eos.end(), full[i].tokens[p]) != out.eos.end())
        n = p + 1, eos_stop = true;
    last_step = std::max(last_step, step_of(i, n - 1, true));
    if (!eos_stop) length_steps.push_back(step_of(i, n - 1, true));
  }
  for (int step = 1; step <= last_step; ++step)
    out.continuations +=
        step != 5 && step != 6 &&
        std::find(length_steps.begin(), length_steps.end(), step) == length_steps.end();
  return out;
}

// Overlapped decode (a step's continuation launched before its tokens are
// postprocessed) against synchronous steps and against a run without stops:
// with EOS stops that only postprocess can see (the continuation's row of a
// stopping sequence is computed and ignored), length stops, a forced-token
// request, sampled and greedy rows and requests that arrive mid-run, both
// engines return the same tokens and finish reasons, each sequence is the
// unstopped run's tokens cut at its first EOS, and every KV block comes back.
TEST(EngineCpu, OverlappedDecodeMatchesSynchronousSteps) {
  ModelConfig cfg = ModelConfig::load(tiny_engine_model());
  auto engine = [&](bool overlap, const std::vector<int>& eos, test::KvWatch* watch) {
    ModelConfig c = cfg;
    c.eos_token_ids = eos;
    EngineOptions opt;
    opt.backend = kernels::Backend::cpu;
    opt.kernels = {{"overlap", overlap ? "on" : "off"}};
    opt.observer = watch;
    return std::make_unique<Engine>(c, Weights::load(c, tiny_engine_model(), kernels::Backend::cpu), opt);
  };
  std::vector<Request> reqs;
  auto run = [&](Engine& e, bool stop_at_eos) { return run_with_late_arrivals(e, reqs, stop_at_eos); };
  // Fresh prompts until the unstopped run has such EOS tokens (nearly
  // always the first draw).
  std::vector<RequestResult> full;
  OverlapStops stops;
  for (int attempt = 0; attempt < 8 && stops.eos.empty(); ++attempt) {
    reqs = overlap_test_requests();
    full = run(*engine(false, cfg.eos_token_ids, nullptr), false);  // no stops but length
    ASSERT_EQ(full.size(), reqs.size());
    stops = choose_overlap_stops(reqs, full);
  }
  ASSERT_FALSE(stops.eos.empty())
      << "in 8 draws of prompts, no run had a token of its own in one request in steps "
         "1-3 and in two more from step 8 on (replay with the seed)";
  const std::vector<int>& eos = stops.eos;

  test::KvWatch watch_sync, watch_overlap;
  auto e_sync = engine(false, eos, &watch_sync);
  auto e_overlap = engine(true, eos, &watch_overlap);
  EXPECT_EQ(e_sync->describe()["overlap"], "off");
  EXPECT_EQ(e_overlap->describe()["overlap"], "on");
  auto sync = run(*e_sync, true);
  auto overlapped = run(*e_overlap, true);
  ASSERT_EQ(sync.size(), reqs.size());
  ASSERT_EQ(overlapped.size(), reqs.size());
  int eos_stops = 0, length_stops = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(overlapped[i].tokens, sync[i].tokens) << "request " << i;
    EXPECT_EQ(overlapped[i].finish_reason, sync[i].finish_reason) << "request " << i;
    std::vector<int32_t> want;
    for (size_t k = 0; k < full[i].tokens.size(); ++k) {
      want.push_back(full[i].tokens[k]);
      const bool forced = k < reqs[i].forced_tokens.size();
      if (!forced && std::find(eos.begin(), eos.end(), full[i].tokens[k]) != eos.end()) break;
    }
    EXPECT_EQ(overlapped[i].tokens, want) << "request " << i;
    eos_stops += overlapped[i].finish_reason == "eos";
    length_stops += overlapped[i].finish_reason == "length";
  }
  EXPECT_EQ(eos_stops, static_cast<int>(eos.size()));
  EXPECT_GE(length_stops, 1);
  // The overlapped engine did launch continuations, and computed (and
  // ignored) rows of sequences that had stopped; the synchronous one none.
  EXPECT_EQ(e_overlap->overlap_stats().continuations, stops.continuations);
  EXPECT_EQ(e_overlap->overlap_stats().discarded_rows, static_cast<int64_t>(eos.size()));
  EXPECT_EQ(e_sync->overlap_stats().continuations, 0);
  EXPECT_EQ(e_sync->overlap_stats().discarded_rows, 0);
  for (test::KvWatch* w : {&watch_sync, &watch_overlap}) {
    EXPECT_EQ(w->last.used_blocks, 0);
    EXPECT_GT(w->max_used, 0);
  }
  // Continuation rows of stopped sequences are extra launches, never fewer.
  EXPECT_GE(e_overlap->steps_run(), e_sync->steps_run());
}

TEST(EngineCpu, AcceptsRequestsFromAnotherThreadWhileRunning) {
  auto e = make_cpu_engine();
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.prompt = test::random_token_ids(2 + 3 * i);
    r.max_new_tokens = 6 + i;
    r.stop_at_eos = false;
    reqs.push_back(r);
  }
  std::atomic<int> submitted{0};
  std::thread producer([&] {
    for (const auto& r : reqs) {
      e->submit(r);
      ++submitted;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<RequestResult> done;
  // The engine thread keeps stepping while the producer submits.
  while (submitted.load() < static_cast<int>(reqs.size()) || !e->idle()) {
    e->step();
    for (auto& r : e->take_finished()) done.push_back(std::move(r));
  }
  producer.join();
  e->run_until_idle();
  for (auto& r : e->take_finished()) done.push_back(std::move(r));
  ASSERT_EQ(done.size(), reqs.size()) << "no request may be lost";
  std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.id < b.id; });
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(done[i].tokens.size(), static_cast<size_t>(reqs[i].max_new_tokens)) << i;
}

// submit(), idle() and take_finished() from other threads while the engine
// thread steps (issue 15's race: queued_ and the scheduler's state were read
// without the lock step() holds). Run under the tsan preset it must report
// nothing; here it checks that no request is lost or finished twice.
TEST(EngineCpu, SubmitIdleAndTakeFinishedAreSafeAgainstAConcurrentStep) {
  auto e = make_cpu_engine();
  constexpr int kThreads = 3, kPerThread = 8;
  std::atomic<int> submitted{0};
  std::atomic<bool> stop{false};
  std::mutex done_mutex;
  std::vector<RequestResult> done;
  auto collect = [&] {
    for (auto& r : e->take_finished()) {
      std::lock_guard<std::mutex> lock(done_mutex);
      done.push_back(std::move(r));
    }
  };
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Request r;
        r.prompt = {static_cast<int32_t>(1 + t), static_cast<int32_t>(2 + i)};
        r.max_new_tokens = 1 + i % 3;
        r.stop_at_eos = false;
        e->submit(std::move(r));
        ++submitted;
        (void)e->idle();
        collect();
      }
    });
  std::thread watcher([&] {
    while (!stop.load()) {
      (void)e->idle();
      collect();
    }
  });
  while (submitted.load() < kThreads * kPerThread || !e->idle()) e->step();
  for (auto& c : clients) c.join();
  stop = true;
  watcher.join();
  collect();
  ASSERT_EQ(done.size(), static_cast<size_t>(kThreads * kPerThread)) << "no request may be lost";
  std::set<int64_t> ids;
  for (const auto& r : done) {
    EXPECT_TRUE(ids.insert(r.id).second) << "request " << r.id << " finished twice";
    EXPECT_EQ(r.finish_reason, "length");
  }
  EXPECT_TRUE(e->idle());
}

}  // namespace
}  // namespace lantern
