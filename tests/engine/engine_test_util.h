#pragma once
// Helpers shared by the CPU and GPU engine tests: a tiny synthetic model
// written once per process, random prompts, and teacher-forced scoring.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/synth.h"
#include "tests/test_util.h"

namespace lantern::test {

// The tiny preset (real vocabulary, 2 layers), without tokenizer files.
inline std::filesystem::path synth_tiny(const std::string& name, uint64_t seed) {
  auto d = scratch_dir(name);
  SynthOptions opt;
  opt.seed = seed;
  opt.with_tokenizer = false;
  write_synthetic_model(synth_preset("tiny"), d, opt);
  return d;
}

// The CPU engine tests' model: the tiny preset written once per process.
inline const std::filesystem::path& tiny_engine_model() {
  static const std::filesystem::path dir = synth_tiny("engine-tiny", 1234);
  return dir;
}

// A CPU-backend engine on tiny_engine_model(), max_context capped at the model's.
inline std::unique_ptr<Engine> make_cpu_engine(EngineLimits lim = {}, bool fused = true) {
  ModelConfig cfg = ModelConfig::load(tiny_engine_model());
  EngineOptions opt;
  opt.backend = kernels::Backend::cpu;
  opt.fused = fused;
  if (lim.max_context > cfg.max_position_embeddings) lim.max_context = cfg.max_position_embeddings;
  opt.limits = lim;
  return std::make_unique<Engine>(cfg, Weights::load(cfg, tiny_engine_model(), kernels::Backend::cpu), opt);
}

// Submits `reqs`, runs until idle; the results in request-id order.
inline std::vector<RequestResult> run_all(Engine& e, const std::vector<Request>& reqs) {
  for (const auto& r : reqs) e.submit(r);
  e.run_until_idle();
  auto res = e.take_finished();
  std::sort(res.begin(), res.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return res;
}

inline std::vector<int32_t> random_token_ids(int n) {
  std::uniform_int_distribution<int32_t> d(0, 128000 - 1);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng());
  return p;
}

// Logits of every position of `ids`: the first `prefill` ids in one step,
// then one decode step per id (teacher forcing).
inline std::vector<std::vector<float>> score_positions(Engine& e, const std::vector<int32_t>& ids,
                                                       int prefill) {
  std::vector<std::vector<float>> rows(ids.size());
  Request r;
  r.prompt.assign(ids.begin(), ids.begin() + prefill);
  r.forced_tokens.assign(ids.begin() + prefill, ids.end());
  r.max_new_tokens = static_cast<int>(r.forced_tokens.size()) + 1;
  r.stop_at_eos = false;
  r.all_logits = true;
  int vocab = e.config().vocab_size;
  r.on_logits = [&](int64_t, int pos, const float* row) {
    if (pos < static_cast<int>(rows.size())) rows[pos].assign(row, row + vocab);
  };
  e.submit(r);
  e.run_until_idle();
  e.take_finished();
  return rows;
}

// Teacher-forced requests (prompt, forced tokens): every decoded position's
// logits row, keyed by (request, position).
using ForcedWork = std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>;
using LogitRows = std::map<std::pair<int64_t, int>, std::vector<float>>;
// Runs `work` on `e` into `rows`; returns how many requests finished.
inline size_t run_forced(Engine& e, const ForcedWork& work, LogitRows& rows) {
  const int vocab = e.config().vocab_size;
  for (size_t i = 0; i < work.size(); ++i) {
    Request r;
    r.prompt = work[i].first;
    r.forced_tokens = work[i].second;
    r.max_new_tokens = static_cast<int>(r.forced_tokens.size());
    r.stop_at_eos = false;
    const int64_t tag = static_cast<int64_t>(i);
    r.on_logits = [&rows, tag, vocab](int64_t, int pos, const float* row) {
      rows[{tag, pos}].assign(row, row + vocab);
    };
    e.submit(r);
  }
  e.run_until_idle();
  return e.take_finished().size();
}

// How many of b's rows differ (bit for bit) from a's row at the same key; a
// key of b missing from a counts as differing (and fails the test).
inline size_t differing_rows(const LogitRows& a, const LogitRows& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (const auto& [key, row] : b) {
    auto it = a.find(key);
    EXPECT_NE(it, a.end()) << "request " << key.first << " position " << key.second;
    differ += it == a.end() || it->second != row;
  }
  return differ;
}
// The same for score_positions' rows (per position).
inline size_t differing_rows(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t p = 0; p < std::min(a.size(), b.size()); ++p) differ += a[p] != b[p];
  return differ;
}

}  // namespace lantern::test
