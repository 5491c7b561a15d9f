// Tensor parallelism on GPUs. With one GPU: a one-rank NCCL group (the --tp 1
// path: all_reduce ops through ncclAllReduce, in CUDA graphs too) gives the
// plain engine's logits and tokens; `--tp 1` through the launcher gives the
// plain CLI's tokens, also with a split LM head (a one-rank all_gather);
// `--tp N` with fewer GPUs than N exits 1 saying how many it found. With two
// or more GPUs: `lantern score --tp 2` (replicated and split LM head) vs
// `--tp 1` teacher-forced logits within the bf16 tolerance of
// docs/engine-verification.md, top-1 agreement where the margin exceeds it.
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "engine/communicator.h"
#include "engine/tensor_parallel.h"
#include "kernels/base/errors.h"
#include "tests/engine/engine_test_util.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path& tiny_model() {
  static const fs::path dir = [] {
    fs::path d = test::scratch_dir("tp-gpu-model");
    SynthOptions o;
    o.seed = test::test_seed();
    o.with_tokenizer = false;
    write_synthetic_model(synth_preset("tiny"), d, o);
    return d;
  }();
  return dir;
}

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

EngineOptions gpu_options() {
  EngineOptions o;
  o.backend = kernels::Backend::cuda;
  o.limits.max_batch_tokens = 128;
  o.limits.max_seqs = 4;
  o.limits.max_context = 256;
  o.limits.kv_num_blocks = 256;
  return o;
}

struct Outcome {
  int status = -1;
  std::string output;
};

Outcome run_lantern(const std::string& args) {
  const std::string cmd =
      (fs::path(LANTERN_BINARY_DIR) / "bin" / "lantern").string() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  Outcome o;
  if (!pipe) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) o.output.append(buf, n);
  const int st = pclose(pipe);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

std::vector<int32_t> generate(Engine& e, const std::vector<int32_t>& prompt, int n) {
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = n;
  r.stop_at_eos = false;
  e.submit(r);
  e.run_until_idle();
  return e.take_finished().at(0).tokens;
}

// A one-rank NCCL group (replicated or split LM head: a one-rank all_gather)
// vs the plain engine: prefill rows (r > 1), decode rows, CUDA-graph decode.
void expect_one_rank_group_matches_the_plain_engine(TpLmHead lm_head) {
  const ModelConfig cfg = ModelConfig::load(tiny_model());
  const std::vector<int32_t> ids = test::random_token_ids(40);
  Engine plain(cfg, Weights::load(cfg, tiny_model(), kernels::Backend::cuda), gpu_options());
  const auto want = test::score_positions(plain, ids, 24);
  const auto want_tokens = generate(plain, {ids.begin(), ids.begin() + 9}, 32);

  std::unique_ptr<Communicator> comm = make_nccl_comm(make_host_comm(HostCommOptions{}), 0);
  ASSERT_STREQ(comm->kind(), "nccl");
  EngineOptions o = gpu_options();
  o.comm = comm.get();
  o.tp_lm_head = lm_head;
  {
    Engine tp(cfg,
              Weights::load(cfg, tiny_model(), kernels::Backend::cuda, {}, 0, ShardSpec{0, 1, lm_head}),
              o);
    const auto got = test::score_positions(tp, ids, 24);
    for (size_t p = 0; p < ids.size(); ++p)
      EXPECT_LE(test::rel_l2(got[p], want[p]), 1e-6)
          << "position " << p << ": a one-rank sum / gather is the identity";
    EXPECT_EQ(generate(tp, {ids.begin(), ids.begin() + 9}, 32), want_tokens)
        << "greedy, CUDA-graph decode";
  }
}

TEST(TensorParallelGpu, OneRankNcclGroupMatchesThePlainEngine) {
  LANTERN_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  expect_one_rank_group_matches_the_plain_engine(TpLmHead::replicated);
}

TEST(TensorParallelGpu, OneRankSplitLmHeadMatchesThePlainEngine) {
  LANTERN_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  expect_one_rank_group_matches_the_plain_engine(TpLmHead::split);
}

TEST(TensorParallelGpu, CliTp1TokensEqualThePlainCli) {
  LANTERN_REQUIRE_GPU();
  const std::string common = "generate --device cuda --model " + tiny_model().string() +
                             " --prompt-ids 11,22,33,44,55 --max-new-tokens 24 --ids --quiet";
  const Outcome plain = run_lantern(common);
  ASSERT_EQ(plain.status, 0) << plain.output;
  const Outcome tp1 = run_lantern(common + " --tp 1");
  ASSERT_EQ(tp1.status, 0) << tp1.output;
  EXPECT_EQ(tp1.output, plain.output);
  const Outcome split = run_lantern(common + " --tp 1 --tp-lm-head split");
  ASSERT_EQ(split.status, 0) << split.output;
  EXPECT_EQ(split.output, plain.output);
}

TEST(TensorParallelGpu, TooFewGpusIsAOneLineError) {
  LANTERN_REQUIRE_GPU();
  const int n = gpu_count();
  // Ranks on GPUs n-1 and n: one more than there are.
  const Outcome o =
      run_lantern("generate --device cuda --model " + tiny_model().string() +
                  " --prompt-ids 1,2 --max-new-tokens 2 --tp 2 --gpu " + std::to_string(n - 1));
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("--tp 2 needs 2 GPUs"));
  EXPECT_THAT(o.output, HasSubstr(strformat("but found %d GPU", n)));
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
}

std::vector<float> read_floats(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v(fs::file_size(p) / 4);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// `lantern score` with `tp_args` vs one GPU: logits within the bf16
// tolerance, top-1 agreement where the margin exceeds 0.25.
void expect_two_gpus_score_like_one(const std::string& tp_args, const std::string& name) {
  const fs::path dir = test::scratch_dir("tp-gpu-score-" + name);
  {
    std::ofstream ids(dir / "ids.txt");
    for (int32_t t : test::random_token_ids(80)) ids << t << " ";
  }
  const std::string common = "score --device cuda --model " + tiny_model().string() +
                             " --ids-file " + (dir / "ids.txt").string() +
                             " --prefill-tokens 40 --quiet --out ";
  ASSERT_EQ(run_lantern(common + (dir / "tp1.f32").string()).status, 0);
  const Outcome two = run_lantern(common + (dir / "tp2.f32").string() + " " + tp_args);
  ASSERT_EQ(two.status, 0) << two.output;
  const auto a = read_floats(dir / "tp1.f32"), b = read_floats(dir / "tp2.f32");
  ASSERT_EQ(a.size(), b.size());
  const int vocab = synth_preset("tiny").vocab_size;
  const size_t positions = a.size() / vocab;
  int checked = 0, agree = 0;
  for (size_t p = 0; p < positions; ++p) {
    std::vector<float> ra(a.begin() + p * vocab, a.begin() + (p + 1) * vocab),
        rb(b.begin() + p * vocab, b.begin() + (p + 1) * vocab);
    EXPECT_LE(test::rel_l2(rb, ra), 2e-2)
        << "position " << p;  // bf16 (docs/engine-verification.md)
    std::vector<float> sorted = ra;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] <= 0.25f) continue;  // a near-tie: bf16 rounding may swap it
    ++checked;
    agree += std::max_element(ra.begin(), ra.end()) - ra.begin() ==
             std::max_element(rb.begin(), rb.end()) - rb.begin();
  }
  EXPECT_EQ(agree, checked);
  std::printf("%s vs TP=1: top-1 agreement %d/%d where the margin exceeds 0.25\n", tp_args.c_str(),
              agree, checked);
}

TEST(TensorParallelGpu, TwoGpusScoreLikeOne) {
  LANTERN_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  expect_two_gpus_score_like_one("--tp 2", "replicated");
}

TEST(TensorParallelGpu, TwoGpusSplitLmHeadScoresLikeOne) {
  LANTERN_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  expect_two_gpus_score_like_one("--tp 2 --tp-lm-head split", "split");
}

// Both all_reduce paths on two GPUs: commbench checks an exact integer sum on
// every rank before timing each size (P2P up to 4 MiB, including sizes that
// are not a whole number of 8 KB chunks, and NCCL), and a TP=2 score through
// NCCL only matches the default (P2P for decode-sized messages).
TEST(TensorParallelGpu, TwoGpusAllReducePathsSumExactly) {
  LANTERN_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << gpu_count();
  const Outcome bench =
      run_lantern("commbench --tp 2 --device cuda --sizes 16,8192,24592,524288,4194304,8388608 --iters 3");
  ASSERT_EQ(bench.status, 0) << bench.output;
  EXPECT_THAT(bench.output, HasSubstr("path nccl"));
  EXPECT_THAT(bench.output, HasSubstr("path p2p"));

  const fs::path dir = test::scratch_dir("tp-gpu-paths");
  {
    std::ofstream ids(dir / "ids.txt");
    for (int32_t t : test::random_token_ids(48)) ids << t << " ";
  }
  const std::string common = "score --device cuda --tp 2 --model " + tiny_model().string() + " --ids-file " +
                              (dir / "ids.txt").string() + " --prefill-tokens 20 --quiet --out ";
  const Outcome p2p = run_lantern(common + (dir / "p2p.f32").string());
  ASSERT_EQ(p2p.status, 0) << p2p.output;
  ::setenv("LANTERN_TP_ALLREDUCE", "nccl", 1);
  const Outcome nccl = run_lantern(common + (dir / "nccl.f32").string());
  ::unsetenv("LANTERN_TP_ALLREDUCE");
  ASSERT_EQ(nccl.status, 0) << nccl.output;
  const auto a = read_floats(dir / "nccl.f32"), b = read_floats(dir / "p2p.f32");
  ASSERT_EQ(a.size(), b.size());
  const int vocab = synth_preset("tiny").vocab_size;
  size_t identical = 0;
  for (size_t p = 0; p < a.size() / vocab; ++p) {
    std::vector<float> ra(a.begin() + p * vocab, a.begin() + (p + 1) * vocab),
        rb(b.begin() + p * vocab, b.begin() + (p + 1) * vocab);
    EXPECT_LE(test::rel_l2(rb, ra), 2e-2) << "position " << p;
    identical += ra == rb;
  }
  std::printf("P2P vs NCCL all_reduce: %zu of %zu positions bit-identical\n", identical, a.size() / vocab);
}

}  // namespace
}  // namespace lantern
