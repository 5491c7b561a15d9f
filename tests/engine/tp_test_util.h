#pragma once
// Shared by the tensor-parallel CPU tests (tensor_parallel_test.cpp,
// tensor_parallel_vocab_test.cpp): a small synthetic model with fresh random
// weights (untied, or tied embeddings), the unsharded CPU engine on it, N
// engines on simulated ranks (threads of one process, LocalGroup) built as N
// processes would, and the two oracles both files check them with: the
// teacher-forced logits and the generated tokens of the unsharded engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/safetensors.h"
#include "engine/synth.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern::test {

// 8 query heads, 4 KV heads (GQA group 2), intermediate 96, vocabulary 256:
// N = 1, 2, 4 work (also with a split LM head).
inline ModelConfig tp_config(bool tied = false) {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_q_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 8;
  c.vocab_size = 256;
  c.max_position_embeddings = 256;
  c.rope_theta = 500000.0f;
  c.tie_word_embeddings = tied;
  c.validate();
  return c;
}

// A fresh random model per process (the test seed picks the weights).
inline const std::filesystem::path& tp_model(bool tied = false) {
  auto make = [](bool t) {
    std::filesystem::path d = scratch_dir(t ? "tp-model-tied" : "tp-model");
    SynthOptions o;
    o.seed = test_seed() + (t ? 1 : 0);
    o.with_tokenizer = false;
    write_synthetic_model(tp_config(t), d, o);
    return d;
  };
  static const std::filesystem::path untied = make(false), tied_dir = make(true);
  return tied ? tied_dir : untied;
}

inline EngineOptions tp_cpu_options() {
  EngineOptions o;
  o.backend = kernels::Backend::cpu;
  o.limits.max_batch_tokens = 64;
  o.limits.max_seqs = 4;
  o.limits.max_context = 128;
  return o;
}

// N engines on simulated ranks: rank 0 on the calling thread (it schedules),
// ranks > 0 following on their own threads. Each loads its shard of `model`
// with the LM head laid out as `lm_head` says.
struct SimulatedGroup {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::unique_ptr<Engine> rank0;
  std::vector<std::thread> followers;
  std::vector<std::exception_ptr> errors;

  SimulatedGroup(const ModelConfig& cfg, int world, TpLmHead lm_head = TpLmHead::replicated,
                 const std::filesystem::path& model = tp_model())
      : comms(make_local_group(world)), errors(world) {
    // Each rank builds its engine on its own thread (as its own process would).
    auto build = [cfg, world, lm_head, model, this](int r) {
      EngineOptions o = tp_cpu_options();
      o.comm = comms[r].get();
      o.tp_lm_head = lm_head;
      return std::make_unique<Engine>(
          cfg,
          Weights::load(cfg, model, kernels::Backend::cpu, {}, 0, ShardSpec{r, world, lm_head}),
          o);
    };
    for (int r = 1; r < world; ++r)
      followers.emplace_back([this, r, build] {
        try {
          std::unique_ptr<Engine> engine = build(r);
          engine->follow();
        } catch (const std::exception& e) {
          errors[r] = std::current_exception();
          comms[r]->abort(std::string("follower failed: ") + e.what());
        }
      });
    rank0 = build(0);
  }
  ~SimulatedGroup() {
    try {
      finish();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  void finish() {
    rank0.reset();  // ends the group: the followers return
    for (auto& t : followers) t.join();
    followers.clear();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
};

inline std::vector<int32_t> random_ids(int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = d(rng());
  return ids;
}

// The unsharded CPU engine on `model`: the reference the ranks must match.
inline std::unique_ptr<Engine> tp_reference(const ModelConfig& cfg,
                                            const std::filesystem::path& model = tp_model()) {
  return std::make_unique<Engine>(cfg, Weights::load(cfg, model, kernels::Backend::cpu), tp_cpu_options());
}

// Teacher-forced logits of every position of `ids` (the first `prefill` in
// one step) from `world` simulated ranks, the group ended (a follower's
// failure rethrown) before they are returned.
inline std::vector<std::vector<float>> group_logits(const ModelConfig& cfg, int world, TpLmHead lm_head,
                                                    const std::filesystem::path& model,
                                                    const std::vector<int32_t>& ids, int prefill) {
  SimulatedGroup g(cfg, world, lm_head, model);
  auto got = score_positions(*g.rank0, ids, prefill);
  g.finish();
  return got;
}

// Positions [first, want.size()) of `got` within 1e-5 relative L2 of `want`,
// every row a whole vocabulary; prints the worst under `label`.
inline void expect_logits_match(const std::vector<std::vector<float>>& got,
                                const std::vector<std::vector<float>>& want, size_t first, int vocab,
                                const std::string& label) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t p = first; p < want.size(); ++p) {
    ASSERT_EQ(got[p].size(), static_cast<size_t>(vocab)) << "position " << p;
    const double e = rel_l2(got[p], want[p]);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-5) << label << " position " << p;
  }
  std::printf("%s: worst rel-L2 %.3g over %zu positions\n", label.c_str(), worst, want.size() - first);
}

// Three requests with random prompts of 5, 9 and 13 ids, 8 new tokens each
// (no EOS stop); the last sampled (temperature 0.9, top 20, seed 7) when
// `sample_last`. Top 20: the ranks sum in another order, so their logits differ
// in the last bits, and a draw deep in the whole vocabulary's flat tail can
// pick a neighbouring token (tests/harness/tp_cli_test.cpp, requests_file).
inline std::vector<Request> three_requests(int vocab, bool sample_last) {
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.prompt = random_ids(5 + 4 * i, vocab);
    r.max_new_tokens = 8;
    r.stop_at_eos = false;
    if (sample_last && i == 2) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 20;
      r.sampling.seed = 7;
    }
    reqs.push_back(r);
  }
  return reqs;
}

// Submits and runs requests on an engine (a test's order of submits and
// steps); returns the tokens by request id.
using RunRequests = std::function<std::vector<std::vector<int32_t>>(Engine&)>;

inline std::vector<std::vector<int32_t>> finished_tokens(Engine& e, size_t n) {
  std::vector<std::vector<int32_t>> out(n);
  for (auto& r : e.take_finished()) out[r.id] = r.tokens;
  return out;
}

// `run` on the unsharded engine and on 2 simulated ranks with `lm_head`:
// every request's 8 tokens equal.
inline void expect_group_generates_reference_tokens(const ModelConfig& cfg, TpLmHead lm_head,
                                                    const std::filesystem::path& model, size_t requests,
                                                    const RunRequests& run, const std::string& label) {
  const auto want = run(*tp_reference(cfg, model));
  SimulatedGroup g(cfg, 2, lm_head, model);
  const auto got = run(*g.rank0);
  g.finish();
  for (size_t i = 0; i < requests; ++i) {
    EXPECT_EQ(got[i].size(), 8u);
    EXPECT_EQ(got[i], want[i]) << label << "request " << i;
  }
}

// The bytes of one tensor as the file holds them.
inline std::string tensor_file_bytes(const SafetensorsEntry& e) {
  std::ifstream in(e.file, std::ios::binary);
  std::string bytes(e.bytes(), '\0');
  in.seekg(static_cast<std::streamoff>(e.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

}  // namespace lantern::test
