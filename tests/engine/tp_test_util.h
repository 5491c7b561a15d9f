#pragma once
// Shared by the tensor-parallel CPU tests: a small synthetic model with fresh
// random weights (untied, or tied embeddings), and N engines on simulated
// ranks (threads of one process, LocalGroup) built as N processes would.
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/synth.h"
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

}  // namespace lantern::test
