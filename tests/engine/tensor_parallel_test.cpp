// Tensor parallelism on the CPU backend with simulated ranks (threads of one
// process, LocalGroup): each rank loads only its shard of a synthetic model
// with fresh random weights, runs its part of every step, and the sums happen
// where the all_reduce ops are. The logits must equal the unsharded engine's
// (the CPU fp32 reference) within 1e-5 relative L2 over a prefill and decode
// steps; the loader's slices must be the file's rows / columns; and a model
// N cannot split must be refused naming the N that work.
#include "engine/tensor_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/model.h"
#include "engine/safetensors.h"
#include "engine/synth.h"
#include "kernels/base/bf16.h"
#include "kernels/base/errors.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/tp_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using test::random_ids;
using test::tp_config;
using test::tp_model;

TEST(TensorParallel, ShardConfigSplitsHeadsAndIntermediate) {
  const ModelConfig c = tp_config();
  const ModelConfig r = shard_config(c, ShardSpec{1, 4});
  EXPECT_EQ(r.num_q_heads, 2);
  EXPECT_EQ(r.num_kv_heads, 1);
  EXPECT_EQ(r.intermediate_size, 24);
  EXPECT_EQ(r.head_dim, c.head_dim);
  EXPECT_EQ(r.hidden_size, c.hidden_size);
  EXPECT_EQ(r.gqa_group(), c.gqa_group());
  EXPECT_EQ(valid_tp_sizes(c), (std::vector<int>{1, 2, 4}));
}

TEST(TensorParallel, RefusesAnNThatDoesNotDivideTheKvHeads) {
  const ModelConfig c = tp_config();
  for (int bad : {3, 8, 0}) {
    try {
      check_shardable(c, bad);
      ADD_FAILURE() << "N=" << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("num_key_value_heads=4")) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("use --tp one of 1, 2, 4")) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW(Weights::load(c, tp_model(), kernels::Backend::cpu, {}, 0, ShardSpec{0, 3}), Error);
}

// The loader's slice of each tensor is the file's rows (q/k/v, gate/up) or
// columns (o, down) for that rank; replicated tensors are whole. Also from a
// checkpoint sharded in two files with an index.
void expect_slices_match_file(const Weights& w, const ModelConfig& cfg, const ShardSpec& shard,
                              const fs::path& dir) {
  const SafetensorsModel m = open_safetensors_model(dir);
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  ASSERT_EQ(w.views().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const SafetensorsEntry* e = m.find(specs[i].name);
    ASSERT_NE(e, nullptr);
    const std::string full = test::tensor_file_bytes(*e);
    const TensorSlice s = slice_of(specs[i], cfg, shard);
    const int64_t rows = specs[i].shape[0],
                  cols = specs[i].shape.size() > 1 ? specs[i].shape[1] : 1;
    std::string want;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const bool held = s.kind == TensorSlice::whole ||
                          (s.kind == TensorSlice::rows && r >= s.begin && r < s.begin + s.count) ||
                          (s.kind == TensorSlice::cols && c >= s.begin && c < s.begin + s.count);
        if (held) want.append(full, static_cast<size_t>(r * cols + c) * 2, 2);
      }
    const WeightView& v = w.views()[i];
    EXPECT_EQ(v.shape, sliced_shape(specs[i].shape, s)) << v.name;
    ASSERT_EQ(v.bytes, want.size()) << v.name;
    EXPECT_EQ(std::memcmp(static_cast<const char*>(w.block()) + v.offset, want.data(), want.size()),
              0)
        << v.name << " rank " << shard.rank << "/" << shard.world;
  }
}

TEST(TensorParallel, LoaderReadsTheRanksRowsAndColumns) {
  const ModelConfig c = tp_config();
  for (int world : {2, 4})
    for (int rank = 0; rank < world; ++rank) {
      const ShardSpec s{rank, world};
      Weights w = Weights::load(c, tp_model(), kernels::Backend::cpu, {}, 0, s);
      expect_slices_match_file(w, c, s, tp_model());
    }
  // wq of rank 1 of 2 starts at row q_dim / 2; wo of rank 1 at column q_dim / 2.
  const TensorSpec wq = expected_tensors(c)[2];  // a copy: expected_tensors returns a temporary
  ASSERT_EQ(wq.role, TensorRole::wq);
  EXPECT_EQ(slice_of(wq, c, ShardSpec{1, 2}).begin, c.q_dim() / 2);
}

TEST(TensorParallel, LoaderSlicesAShardedCheckpoint) {
  const ModelConfig c = tp_config();
  const fs::path dir = test::scratch_dir("tp-sharded");
  const SafetensorsModel m = open_safetensors_model(tp_model());
  nlohmann::json index;
  for (int part = 0; part < 2; ++part) {  // layer 1 in the second file, the rest in the first
    std::vector<TensorSpec> specs;
    for (const auto& s : expected_tensors(c))
      if ((s.layer == 1) == (part == 1)) specs.push_back(s);
    const std::string name =
        part == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    SafetensorsLayout l = safetensors_layout(specs);
    std::ofstream out(dir / name, std::ios::binary);
    out << l.prefix;
    for (const auto& s : specs) {
      out << test::tensor_file_bytes(*m.find(s.name));
      index["weight_map"][s.name] = name;
    }
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  for (int rank = 0; rank < 2; ++rank) {
    Weights a = Weights::load(c, tp_model(), kernels::Backend::cpu, {}, 0, ShardSpec{rank, 2});
    Weights b = Weights::load(c, dir, kernels::Backend::cpu, {}, 0, ShardSpec{rank, 2});
    expect_slices_match_file(b, c, ShardSpec{rank, 2}, dir);
    ASSERT_EQ(a.bytes(), b.bytes());
    EXPECT_EQ(std::memcmp(a.block(), b.block(), a.bytes()), 0) << "rank " << rank;
  }
}

TEST(TensorParallel, OpTableHasAnAllReduceAfterOProjAndDownProj) {
  for (bool fused : {false, true}) {  // the unfused and the fused op table
    SCOPED_TRACE(fused ? "fused" : "unfused");
    Arena arena;
    const ActivationViews v = declare_activations(arena, activation_layout(tp_config(), 8, 2, 4, 64, fused));
    const auto plain = step_ops(2, v, StepKind{}, false);
    const auto tp = step_ops(2, v, StepKind{}, true);
    // Two all_reduces per layer; the fused table also splits o_proj_residual_norm
    // into o_proj + attn_residual_norm (layers 0 and 1) and down_proj_residual_norm
    // into down_proj + mlp_residual_norm (layer 0; the last layer's are separate),
    // and (a decode step) keeps qkv_proj + rope_kv_write where the table without
    // tensor parallelism runs qkv_rope (+1 per layer).
    EXPECT_EQ(tp.size(), plain.size() + (fused ? 4 + 3 + 2 : 4));
    int found = 0;
    for (size_t i = 1; i < tp.size(); ++i) {
      if (tp[i].kind != OpKind::all_reduce) continue;
      ++found;
      EXPECT_STREQ(tp[i].name, "all_reduce");
      EXPECT_TRUE(tp[i - 1].kind == OpKind::o_proj || tp[i - 1].kind == OpKind::down_proj)
          << tp[i - 1].name;
      EXPECT_EQ(tp[i].reads[0], tp[i - 1].writes[0]);
      EXPECT_EQ(tp[i].writes[0], tp[i - 1].writes[0]);
      EXPECT_EQ(tp[i].layer, tp[i - 1].layer);
    }
    EXPECT_EQ(found, 4);
  }
}

TEST(TensorParallel, StepPlanRoundTrips) {
  StepInput in;
  in.tokens = {5, 6, 7};
  in.positions = {0, 1, 9};
  in.slots = {0, 0, 1};
  in.fresh_starts = {0, 2};
  in.max_fresh_len = 2;
  in.logit_rows = {1, 2};
  in.temperature = {0, 0.7f};
  in.top_p = {1, 0.9f};
  in.top_k = {0, 40};
  in.gen_index = {0, 3};
  in.seeds = {1, 0xdeadbeefcafeull};
  in.copy_logits = true;
  in.table_updates = {{3, 17}, {40, 2}};
  const std::vector<uint8_t> bytes = encode_step(in);
  const StepInput out = decode_step(bytes);
  EXPECT_EQ(out.tokens, in.tokens);
  EXPECT_EQ(out.positions, in.positions);
  EXPECT_EQ(out.slots, in.slots);
  EXPECT_EQ(out.fresh_starts, in.fresh_starts);
  EXPECT_EQ(out.max_fresh_len, 2);
  EXPECT_EQ(out.logit_rows, in.logit_rows);
  EXPECT_EQ(out.temperature, in.temperature);
  EXPECT_EQ(out.top_p, in.top_p);
  EXPECT_EQ(out.top_k, in.top_k);
  EXPECT_EQ(out.gen_index, in.gen_index);
  EXPECT_EQ(out.seeds, in.seeds);
  EXPECT_TRUE(out.copy_logits);
  ASSERT_EQ(out.table_updates.size(), 2u);
  EXPECT_EQ(out.table_updates[1].index, 40);
  EXPECT_EQ(out.table_updates[1].block, 2);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 3);
  EXPECT_THROW(decode_step(cut), Error);
  std::vector<uint8_t> bad = bytes;
  bad[0] ^= 1;
  EXPECT_THROW(decode_step(bad), Error);
}

// The oracle: N simulated ranks vs the unsharded CPU engine, teacher-forced
// over a 13-token prefill and 6 decode steps, fresh random ids.
TEST(TensorParallel, SimulatedRanksGiveTheUnshardedLogits) {
  const ModelConfig c = tp_config();
  const std::vector<int32_t> ids = random_ids(19, c.vocab_size);
  const int prefill = 13;
  const auto want = test::score_positions(*test::tp_reference(c), ids, prefill);
  for (int world : {2, 4})
    test::expect_logits_match(test::group_logits(c, world, TpLmHead::replicated, tp_model(), ids, prefill),
                              want, prefill - 1, c.vocab_size, "tensor parallel N=" + std::to_string(world));
}

// Several requests at once (batched decode, a prefill joining running
// decodes): greedy tokens of N=2 equal the unsharded engine's.
TEST(TensorParallel, SimulatedRanksGenerateTheUnshardedTokens) {
  const ModelConfig c = tp_config();
  const std::vector<Request> reqs = test::three_requests(c.vocab_size, /*sample_last=*/false);
  auto run = [&](Engine& e) {
    e.submit(reqs[0]);
    e.step();
    e.step();  // request 0 decodes while 1 and 2 arrive
    e.submit(reqs[1]);
    e.submit(reqs[2]);
    e.run_until_idle();
    return test::finished_tokens(e, reqs.size());
  };
  test::expect_group_generates_reference_tokens(c, TpLmHead::replicated, tp_model(), reqs.size(), run, "");
}

// A rank that fails makes the others fail with its reason instead of waiting.
TEST(TensorParallel, AnAbortedGroupFailsInsteadOfHanging) {
  auto comms = make_local_group(2);
  std::thread t([&] { comms[1]->abort("rank 1 lost its device"); });
  t.join();
  float x[4] = {1, 2, 3, 4};
  try {
    comms[0]->all_reduce(x, 4, ReduceType::f32, nullptr);
    ADD_FAILURE() << "all_reduce on an aborted group returned";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 lost its device"));
  }
}

// The collectives of both CPU communicators on 3 ranks (threads): every
// rank's part in rank order (all_gather), sums in rank order, rank 0's bytes
// everywhere, the minimum; the host one over
// socketpairs, as the launcher connects processes.
void exercise(std::vector<std::unique_ptr<Communicator>>& comms) {
  const int world = static_cast<int>(comms.size());
  const size_t n = 1000;
  std::vector<std::vector<float>> in(world);
  for (auto& v : in) v = test::random_floats(n);
  std::vector<std::vector<float>> out = in;
  std::vector<std::vector<uint8_t>> bytes(world);
  bytes[0] = {1, 2, 3, 250};
  std::vector<int64_t> mins(world);
  std::vector<std::vector<float>> gathered(world, std::vector<float>(world * n));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      comms[r]->all_gather(in[r].data(), gathered[r].data(), n, ReduceType::f32, nullptr);
      comms[r]->all_reduce(out[r].data(), n, ReduceType::f32, nullptr);
      comms[r]->broadcast(bytes[r]);
      mins[r] = comms[r]->all_min(100 - 7 * r);
      comms[r]->barrier();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < world; ++q) want += in[q][i];
      ASSERT_EQ(out[r][i], want) << "rank " << r << " element " << i;  // same order: bit-exact
    }
    for (int q = 0; q < world; ++q)  // rank-major: rank q's part at q * n
      ASSERT_EQ(std::memcmp(gathered[r].data() + q * n, in[q].data(), n * 4), 0)
          << "rank " << r << " part " << q;
    EXPECT_EQ(bytes[r], (std::vector<uint8_t>{1, 2, 3, 250})) << "rank " << r;
    EXPECT_EQ(mins[r], 100 - 7 * (world - 1)) << "rank " << r;
  }
}

TEST(TensorParallel, LocalGroupCollectives) {
  auto comms = make_local_group(3);
  exercise(comms);
}

std::vector<std::unique_ptr<Communicator>> socket_group(int world) {
  std::vector<int> root(world, -1);
  std::vector<std::unique_ptr<Communicator>> comms(world);
  for (int r = 1; r < world; ++r) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    root[r] = sv[0];
    comms[r] = make_host_comm(HostCommOptions{r, world, {sv[1]}, {}, 30});
  }
  comms[0] = make_host_comm(HostCommOptions{
      0, world, root, [](int r) { return "(test rank " + std::to_string(r) + " closed)"; }, 30});
  return comms;
}

TEST(TensorParallel, HostCommunicatorCollectivesAndALostPeer) {
  auto comms = socket_group(3);
  exercise(comms);
  comms[2].reset();  // rank 2 "exits": its socket closes
  EXPECT_THAT(comms[0]->poll_peers(), HasSubstr("rank 2 (test rank 2 closed)"));
  float x[2] = {1, 2};
  std::thread t([&] {
    try {
      comms[1]->all_reduce(x, 2, ReduceType::f32, nullptr);
    } catch (const Error&) {
    }
  });
  try {
    float y[2] = {3, 4};
    comms[0]->all_reduce(y, 2, ReduceType::f32, nullptr);
    ADD_FAILURE() << "all_reduce with a lost rank returned";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor-parallel rank 2 (test rank 2 closed)"));
  }
  comms[0]->abort("test");  // rank 1 waits for the result: the abort ends its wait
  t.join();
}

}  // namespace
}  // namespace lantern
