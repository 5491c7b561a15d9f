// Exhaustion and concurrency on the CPU backend with a micro model (vocab 64,
// 2 layers): a workload that needs 4x the KV pool completes every request and
// returns every block; 100,000 submissions from 8 threads lose none; and
// submit()/idle()/take_finished() hammered from several threads while
// another thread steps (run under ThreadSanitizer by the tsan preset).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include <omp.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "engine/engine.h"
#include "engine/synth.h"
#include "tests/engine/kv_watch.h"
#include "tests/engine/model_fixtures.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

const std::filesystem::path& micro_model() {
  static const std::filesystem::path dir = [] {
    auto d = test::scratch_dir("engine-stress-micro");
    ModelConfig cfg = test::micro_config({});
    std::ofstream(d / "config.json") << cfg.to_json().dump(2);
    SynthOptions opt;
    opt.seed = 7;
    opt.with_tokenizer = false;
    write_synthetic_weights(cfg, d / "model.safetensors", opt);
    return d;
  }();
  return dir;
}

using test::KvWatch;

// The micro model gains nothing from OpenMP teams, and their spin-waiting
// barriers starve the submitter threads on a 2-core machine (and libgomp is
// not instrumented for ThreadSanitizer): the engine thread steps alone.
struct OneOmpThread {
  int saved = omp_get_max_threads();
  OneOmpThread() { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(saved); }
};

std::unique_ptr<Engine> make_engine(const EngineLimits& lim, Observer* obs = nullptr) {
  ModelConfig cfg = ModelConfig::load(micro_model());
  EngineOptions opt;
  opt.backend = kernels::Backend::cpu;
  opt.limits = lim;
  opt.observer = obs;
  return std::make_unique<Engine>(cfg, Weights::load(cfg, micro_model(), kernels::Backend::cpu), opt);
}

Request make_request(std::mt19937_64& rng, int min_prompt, int max_prompt, int max_new) {
  std::uniform_int_distribution<int32_t> tok(0, 63);
  std::uniform_int_distribution<int> len(min_prompt, max_prompt);
  Request r;
  r.prompt.resize(len(rng));
  for (auto& t : r.prompt) t = tok(rng);
  r.max_new_tokens = max_new;
  r.stop_at_eos = false;
  return r;
}

TEST(EngineStress, WorkloadOfFourTimesTheKvPoolCompletesAndReturnsEveryBlock) {
  OneOmpThread omp;
  // 2 layers x 4 blocks of 16 tokens per full sequence; the pool holds 2.
  EngineLimits lim;
  lim.max_context = 64;
  lim.max_seqs = 8;
  lim.max_batch_tokens = 128;
  lim.kv_block_size = 16;
  lim.kv_num_blocks = 16;
  std::mt19937_64 rng(test::test_seed());
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(make_request(rng, 20, 30, 64 - 30));  // 4 blocks/layer each
  std::vector<std::vector<int32_t>> solo;
  {
    auto e = make_engine(lim);
    for (const auto& r : reqs) {
      e->submit(r);
      e->run_until_idle();
      solo.push_back(e->take_finished().at(0).tokens);
    }
  }
  KvWatch kv;
  auto e = make_engine(lim, &kv);
  for (const auto& r : reqs) e->submit(r);
  e->run_until_idle();
  auto done = e->take_finished();
  ASSERT_EQ(done.size(), reqs.size()) << "no request may be lost";
  std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.id < b.id; });
  int preemptions = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(done[i].finish_reason, "length") << i;
    EXPECT_EQ(done[i].tokens, solo[i]) << "request " << i << " differs from its solo run";
    preemptions += done[i].preemptions;
  }
  EXPECT_GT(preemptions, 0) << "4x the pool must force preemption";
  EXPECT_EQ(kv.max_used, kv.last.total_blocks) << "the pool should have been full at some point";
  EXPECT_EQ(kv.last.used_blocks, 0) << "blocks leaked";
  EXPECT_EQ(kv.last.free_blocks, kv.last.total_blocks);
  EXPECT_EQ(kv.last.num_seqs, 0);
  EXPECT_TRUE(e->idle());
}

// Submitters retry on "queue is full" (back-pressure is an error the caller
// sees, never a silent drop); every accepted request finishes exactly once.
void hammer(Engine& e, int threads, int per_thread, bool poll_idle, std::vector<RequestResult>& done) {
  std::atomic<int> accepted{0}, submitters_left{threads};
  std::vector<std::vector<int64_t>> ids(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(test::test_seed() + t);
      for (int i = 0; i < per_thread; ++i) {
        Request r = make_request(rng, 1, 4, 1 + (i % 2));
        for (;;) {
          try {
            ids[t].push_back(e.submit(r));
            ++accepted;
            break;
          } catch (const Error& err) {
            ASSERT_THAT(err.what(), ::testing::HasSubstr("request queue is full"));
            // Sleep, not yield: spinning submitters starve the engine's
            // OpenMP workers on a 2-core CI machine.
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
        }
      }
      --submitters_left;
    });
  }
  // A reader that polls idle() and drains results from its own thread.
  std::mutex done_mu;
  std::atomic<bool> stop_reader{false};
  std::thread reader([&] {
    while (!stop_reader) {
      if (poll_idle) (void)e.idle();
      auto got = e.take_finished();
      {
        std::lock_guard<std::mutex> lock(done_mu);
        for (auto& r : got) done.push_back(std::move(r));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  while (submitters_left > 0 || !e.idle()) e.step();
  for (auto& th : pool) th.join();
  e.run_until_idle();
  stop_reader = true;
  reader.join();
  for (auto& r : e.take_finished()) done.push_back(std::move(r));
  ASSERT_EQ(accepted.load(), threads * per_thread);
  std::set<int64_t> submitted;
  for (const auto& v : ids) submitted.insert(v.begin(), v.end());
  ASSERT_EQ(submitted.size(), static_cast<size_t>(threads * per_thread)) << "ids must be unique";
  std::set<int64_t> finished;
  for (const auto& r : done) {
    EXPECT_TRUE(finished.insert(r.id).second) << "request " << r.id << " finished twice";
    EXPECT_EQ(r.finish_reason, "length");
  }
  EXPECT_EQ(finished, submitted) << "lost requests";
}

TEST(EngineStress, HundredThousandSubmissionsFromEightThreadsLoseNone) {
  OneOmpThread omp;
  EngineLimits lim;
  lim.max_context = 16;
  lim.max_seqs = 64;
  lim.max_batch_tokens = 512;
  lim.max_queue = 2048;  // smaller than the burst: back-pressure is exercised
  auto e = make_engine(lim);
  std::vector<RequestResult> done;
  hammer(*e, 8, 100000 / 8, /*poll_idle=*/false, done);
  EXPECT_EQ(done.size(), 100000u);
}

// The ThreadSanitizer target (tsan preset): submit, idle and take_finished
// from several threads while the engine thread steps.
TEST(EngineStress, SubmitIdleAndTakeFinishedRaceFreeWhileStepping) {
  OneOmpThread omp;
  EngineLimits lim;
  lim.max_context = 16;
  lim.max_seqs = 16;
  lim.max_batch_tokens = 64;
  lim.max_queue = 64;
  auto e = make_engine(lim);
  std::vector<RequestResult> done;
  hammer(*e, 4, 500, /*poll_idle=*/true, done);
  EXPECT_EQ(done.size(), 2000u);
}

}  // namespace
}  // namespace lantern
