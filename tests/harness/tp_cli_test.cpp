// `lantern generate --device cpu --tp N` through the built binary: two
// processes (rank 0 re-executes itself, the host communicator joins them)
// produce the tokens of one; an N the model cannot split is refused in one
// line naming the N that work; a rank killed mid-run makes the run fail
// within seconds naming the rank and the signal, and leaves no process behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/synth.h"
#include "kernels/base/errors.h"
#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path lantern_bin() {
  return fs::path(LANTERN_BINARY_DIR) / "bin" / "lantern";
}

// The tiny preset (2 KV heads: --tp 1 or 2), fresh weights per process.
const fs::path& tiny_model() {
  static const fs::path dir = [] {
    fs::path d = test::scratch_dir("tp-cli-model");
    SynthOptions o;
    o.seed = test::test_seed();
    o.with_tokenizer = false;
    write_synthetic_model(synth_preset("tiny"), d, o);
    return d;
  }();
  return dir;
}

struct Outcome {
  int status = -1;
  std::string output;
};

Outcome run_tp(const std::string& args) {
  const std::string cmd = lantern_bin().string() + " " + args + " 2>&1";
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

// Random prompts, sampled and greedy, so the tokens differ request to request.
// The sampled ones draw from the top 20: tensor parallelism sums in another
// order, so its logits differ from one process's in the last bits (~5e-6 on
// the tiny model), and an inverse-CDF draw over the whole vocabulary lands deep
// in a flat tail (rank ~1700 at temperature 0.9) where neighbouring logits are
// closer than that -- the token at the drawn rank then legitimately differs
// (seed 3184572474 did). The top 20 logits are ~0.1 apart.
fs::path requests_file() {
  fs::path f = test::scratch_dir("tp-cli-requests") / "requests.jsonl";
  std::ofstream out(f);
  std::uniform_int_distribution<int> id(0, 120000);
  for (int i = 0; i < 3; ++i) {
    nlohmann::json r;
    for (int k = 0; k < 4 + 3 * i; ++k) r["prompt_ids"].push_back(id(test::rng()));
    r["max_new_tokens"] = 6;
    r["ignore_eos"] = true;
    if (i > 0) {
      r["temperature"] = 0.9;
      r["top_k"] = 20;
      r["seed"] = 100 + i;
    }
    out << r.dump() << "\n";
  }
  return f;
}

std::vector<std::vector<int>> tokens_of(const fs::path& out) {
  std::vector<std::vector<int>> t;
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line))
    t.push_back(nlohmann::json::parse(line).at("tokens").get<std::vector<int>>());
  return t;
}

TEST(TpCli, TwoProcessesGenerateTheTokensOfOne) {
  const fs::path dir = test::scratch_dir("tp-cli-generate"), reqs = requests_file();
  const std::string common = "generate --device cpu --model " + tiny_model().string() +
                             " --requests " + reqs.string() + " --max-seqs 4";
  const Outcome one = run_tp(common + " --out " + (dir / "tp1.jsonl").string());
  ASSERT_EQ(one.status, 0) << one.output;
  const Outcome two = run_tp(common + " --tp 2 --out " + (dir / "tp2.jsonl").string());
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("tensor parallel over 2 ranks (host communicator)"));
  const auto a = tokens_of(dir / "tp1.jsonl"), b = tokens_of(dir / "tp2.jsonl");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[1], a[2]) << "sampled requests with different seeds should differ";
}

// The vocabulary-split LM head (--tp-lm-head split): each process computes
// its V/2 columns of the logits and an all_gather assembles them; the tokens
// (greedy and sampled) are the plain run's and the replicated head's.
TEST(TpCli, ASplitLmHeadGeneratesTheTokensOfOne) {
  const fs::path dir = test::scratch_dir("tp-cli-split"), reqs = requests_file();
  const std::string common = "generate --device cpu --model " + tiny_model().string() +
                             " --requests " + reqs.string() + " --max-seqs 4";
  const Outcome one = run_tp(common + " --out " + (dir / "tp1.jsonl").string());
  ASSERT_EQ(one.status, 0) << one.output;
  const Outcome split =
      run_tp(common + " --tp 2 --tp-lm-head split --out " + (dir / "split.jsonl").string());
  ASSERT_EQ(split.status, 0) << split.output;
  EXPECT_THAT(split.output,
              HasSubstr("tensor parallel over 2 ranks (host communicator, LM head split by vocabulary)"));
  const auto a = tokens_of(dir / "tp1.jsonl"), b = tokens_of(dir / "split.jsonl");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  // Without --tp there is nothing to split: one line saying so.
  const Outcome alone = run_tp("generate --device cpu --model " + tiny_model().string() +
                               " --prompt-ids 1,2,3 --max-new-tokens 2 --tp-lm-head split");
  EXPECT_EQ(alone.status, 1) << alone.output;
  EXPECT_THAT(alone.output, HasSubstr("--tp-lm-head split needs tensor parallelism: add --tp N"));
  const Outcome bad = run_tp("generate --device cpu --model " + tiny_model().string() +
                             " --prompt-ids 1 --max-new-tokens 1 --tp 2 --tp-lm-head both");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--tp-lm-head 'both': use replicated"));
}

// commbench on the CPU: two host processes, an exact sum checked on every
// rank before each size is timed, one table for the host path.
TEST(TpCli, CommbenchChecksTheSumAndTimesEachSize) {
  const Outcome o = run_tp("commbench --tp 2 --device cpu --sizes 64,4096 --iters 2");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("path host"));
  EXPECT_THAT(o.output, HasSubstr("64"));
  EXPECT_THAT(o.output, HasSubstr("4096"));
}

TEST(TpCli, RefusesAnNTheModelCannotSplit) {
  const Outcome o = run_tp("generate --device cpu --model " + tiny_model().string() +
                           " --prompt-ids 1,2,3 --max-new-tokens 2 --tp 3");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("lantern generate: error: --tp 3 cannot split this model"));
  EXPECT_THAT(o.output, HasSubstr("use --tp one of 1, 2"));
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

TEST(TpCli, AKilledRankFailsTheRunWithinSeconds) {
  const fs::path log = test::scratch_dir("tp-cli-kill") / "rank0.log";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    const std::string model = tiny_model().string();
    ::execl(lantern_bin().c_str(), "lantern", "generate", "--device", "cpu", "--model",
            model.c_str(), "--prompt-ids", "1,2,3,4", "--max-new-tokens", "2000", "--max-context",
            "4096", "--ids", "--tp", "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for rank 1 to exist and for rank 0 to be generating (its first tokens).
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::seconds(60);
  pid_t rank1 = -1;
  auto log_text = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  while (clock::now() < deadline) {
    const auto kids = children_of(pid);
    if (!kids.empty()) rank1 = kids[0];
    if (rank1 > 0 && log_text().find("memory budget") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(rank1, 0) << "rank 1 never started: " << log_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // mid-run
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  const auto killed = clock::now();
  int st = 0;
  pid_t got = 0;
  while ((got = waitpid(pid, &st, WNOHANG)) == 0 &&
         clock::now() - killed < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (got == 0) {
    ::kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    FAIL() << "rank 0 still running 30 s after rank 1 was killed: " << log_text();
  }
  const double seconds = std::chrono::duration<double>(clock::now() - killed).count();
  EXPECT_LT(seconds, 10.0);
  ASSERT_TRUE(WIFEXITED(st)) << "rank 0 died of a signal";
  EXPECT_EQ(WEXITSTATUS(st), 1);
  const std::string text = log_text();
  EXPECT_THAT(text, HasSubstr("lantern generate: error: tensor-parallel rank 1 (pid " +
                              std::to_string(rank1) + ") was killed by signal 9"))
      << text;
  EXPECT_NE(::kill(rank1, 0), 0) << "rank 1 still exists";
}

}  // namespace
}  // namespace lantern

namespace lantern {
namespace {

// The other direction: rank 0 killed mid-run; rank 1 (its child, now an
// orphan) exits within seconds with an error naming rank 0.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() ? 'X' : text[close + 2];
}

TEST(TpCli, AKilledRankZeroEndsTheOtherRanks) {
  const fs::path log = test::scratch_dir("tp-cli-kill0") / "ranks.log";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    const std::string model = tiny_model().string();
    ::execl(lantern_bin().c_str(), "lantern", "generate", "--device", "cpu", "--model",
            model.c_str(), "--prompt-ids", "1,2,3,4", "--max-new-tokens", "2000", "--max-context",
            "4096", "--ids", "--tp", "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  using clock = std::chrono::steady_clock;
  auto log_text = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  pid_t rank1 = -1;
  for (auto deadline = clock::now() + std::chrono::seconds(60); clock::now() < deadline;) {
    const auto kids = children_of(pid);
    if (!kids.empty()) rank1 = kids[0];
    if (rank1 > 0 && log_text().find("memory budget") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(rank1, 0) << "rank 1 never started: " << log_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int st = 0;
  waitpid(pid, &st, 0);
  const auto killed = clock::now();
  // Gone, or a zombie nobody reaps yet: it exited.
  while (process_state(rank1) != 'X' && process_state(rank1) != 'Z' &&
         clock::now() - killed < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double seconds = std::chrono::duration<double>(clock::now() - killed).count();
  if (process_state(rank1) != 'X' && process_state(rank1) != 'Z') {
    ::kill(rank1, SIGKILL);
    FAIL() << "rank 1 still running 30 s after rank 0 was killed: " << log_text();
  }
  EXPECT_LT(seconds, 10.0);
  EXPECT_THAT(log_text(), HasSubstr("lantern rank 1: error: tensor-parallel rank 0 exited"));
}

// One run directory for the whole run: rank 0's at the top, rank 1's in
// rank-1/, the merged trace (one Perfetto process per rank and track) and
// kernel table, and inspect's communication section.
TEST(TpCli, RecordsOneRunDirectoryWithEveryRank) {
  const fs::path run = test::scratch_dir("tp-cli-record") / "run";
  const Outcome o = run_tp(
      "generate --device cpu --model " + tiny_model().string() +
      " --prompt-ids 5,6,7,8 --max-new-tokens 3 --ids --quiet --tp 2 --record " + run.string());
  ASSERT_EQ(o.status, 0) << o.output;
  for (const char* f :
       {"manifest.json", "kernels.csv", "trace.json", "rank-1/manifest.json", "rank-1/kernels.csv",
        "rank-1/trace.json", "trace_ranks.json", "kernels_ranks.csv"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  const nlohmann::json trace = nlohmann::json::parse(std::ifstream(run / "trace_ranks.json"));
  std::set<std::string> processes;
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("name", "") == "process_name")
      processes.insert(e["args"]["name"].get<std::string>());
  EXPECT_TRUE(processes.count("rank 0: lantern host")) << trace.dump().substr(0, 400);
  EXPECT_TRUE(processes.count("rank 1: lantern host"));
  // Both ranks ran every layer's two all_reduce ops in every step.
  std::ifstream csv(run / "kernels_ranks.csv");
  std::string line;
  std::map<int, int> all_reduce;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("rank,", 0), 0u) << line;
  while (std::getline(csv, line))
    if (line.find(",all_reduce,") != std::string::npos) all_reduce[std::stoi(line)]++;
  const int layers = synth_preset("tiny").num_layers, steps = 3;  // prefill + 2 decodes
  EXPECT_EQ(all_reduce[0], 2 * layers * steps);
  EXPECT_EQ(all_reduce[1], 2 * layers * steps);

  const Outcome inspect = run_tp("inspect " + run.string() + " --check");
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_THAT(inspect.output,
              HasSubstr("communication (tensor parallel: rank 0 of 2, host communicator)"));
  EXPECT_THAT(inspect.output, HasSubstr(strformat("all_reduce: %d calls", 2 * layers * steps)));
  EXPECT_THAT(inspect.output, HasSubstr("busbw GB/s"));
  EXPECT_THAT(inspect.output, HasSubstr("1 run directory under"));
}

// The experiment of the rerun tests: the tiny model, three requests, on the CPU.
fs::path rerun_experiment(const fs::path& dir) {
  std::ofstream(dir / "exp.json") << nlohmann::json{
      {"name", "tp-rerun"},
      {"device", "cpu"},
      {"model", {{"path", tiny_model().string()}}},
      {"limits", {{"max_seqs", 4}, {"max_context", 64}, {"max_batch_tokens", 64}}},
      {"workload", {{"kind", "requests"}, {"requests_file", requests_file().string()}, {"ignore_eos", true}}},
      {"repetitions", 1}}.dump(2);
  return dir / "exp.json";
}

nlohmann::json tp_section(const fs::path& manifest) {
  return nlohmann::json::parse(std::ifstream(manifest))["config"]["tensor_parallel"];
}

// Writes `n` distinct GEMM plans (manifest entries) into a recorded manifest's config.gemm_plans.
void record_gemm_plans(const fs::path& manifest, int n) {
  nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
  m["config"]["gemm_plans"] = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    kernels::GemmPlan p;
    p.m_bucket = 32 << i, p.n = 64, p.k = 64, p.align = 256, p.algo_id = 6 + i;
    m["config"]["gemm_plans"].push_back(gemm_plan_json(p));
  }
  std::ofstream(manifest) << m.dump(2);
}

// `lantern run --tp 2` records the world in its manifest, and `lantern rerun`
// repeats the run over as many ranks (rank-1/ in the new run directory) with
// the recorded tokens.
TEST(TpCli, RerunRepeatsTheTensorParallelWorld) {
  const fs::path dir = test::scratch_dir("tp-cli-rerun");
  const Outcome run = run_tp("run " + rerun_experiment(dir).string() + " --tp 2 --quiet --out " + (dir / "a").string());
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(fs::exists(dir / "a" / "rank-1" / "manifest.json")) << run.output;
  const Outcome again = run_tp("rerun " + (dir / "a").string() + " --check --quiet --out " + (dir / "b").string());
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(fs::exists(dir / "b" / "rank-1" / "manifest.json")) << again.output;
  EXPECT_THAT(again.output, HasSubstr("tokens    identical"));
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(dir / "b" / "manifest.json"));
  EXPECT_EQ(m["config"]["tensor_parallel"]["world"], 2) << m["config"].dump();
  EXPECT_EQ(m["config"]["tensor_parallel"]["all_reduce"], "host") << m["config"].dump();
}


// --tp-allreduce auto|nccl|p2p: recorded as config.tensor_parallel.all_reduce_path
// on every rank (the CPU's host communicator runs its one path, "host", whatever
// the choice), LANTERN_TP_ALLREDUCE the default; `lantern rerun` repeats the
// recorded choice (over the environment) unless --tp-allreduce says otherwise,
// and each rank receives and pins the GEMM plans of its own recorded manifest.
TEST(TpCli, RerunRepeatsTheAllReduceChoiceAndEveryRanksGemmPlans) {
  const fs::path dir = test::scratch_dir("tp-cli-allreduce"), exp = rerun_experiment(dir);
  const Outcome run = run_tp("run " + exp.string() + " --tp 2 --tp-allreduce nccl --quiet --out " +
                             (dir / "a").string());
  ASSERT_EQ(run.status, 0) << run.output;
  for (const char* m : {"a/manifest.json", "a/rank-1/manifest.json"}) {
    EXPECT_EQ(tp_section(dir / m)["all_reduce_path"], "nccl") << m;
    EXPECT_EQ(tp_section(dir / m)["all_reduce"], "host") << m;
  }
  record_gemm_plans(dir / "a" / "manifest.json", 1);
  record_gemm_plans(dir / "a" / "rank-1" / "manifest.json", 2);
  ::setenv("LANTERN_TP_ALLREDUCE", "p2p", 1);  // the recorded choice wins over the environment
  const Outcome again = run_tp("rerun " + (dir / "a").string() + " --check --out " + (dir / "b").string());
  ::unsetenv("LANTERN_TP_ALLREDUCE");
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("lantern: pins 1 GEMM plan recorded in " + (dir / "a" / "manifest.json").string()));
  EXPECT_THAT(again.output, HasSubstr("lantern rank 1: pins 2 GEMM plans recorded in " +
                                      (dir / "a" / "rank-1" / "manifest.json").string()));
  EXPECT_THAT(again.output, HasSubstr("tokens    identical"));
  for (const char* m : {"b/manifest.json", "b/rank-1/manifest.json"})
    EXPECT_EQ(tp_section(dir / m)["all_reduce_path"], "nccl") << m;
  const Outcome other = run_tp("rerun " + (dir / "a").string() + " --tp-allreduce p2p --quiet --out " +
                               (dir / "c").string());
  ASSERT_EQ(other.status, 0) << other.output;
  EXPECT_THAT(other.output, ::testing::Not(HasSubstr("pins")));  // --quiet
  EXPECT_EQ(tp_section(dir / "c" / "manifest.json")["all_reduce_path"], "p2p");
  // Without the option, the environment; without either, auto.
  ::setenv("LANTERN_TP_ALLREDUCE", "p2p", 1);
  const Outcome env = run_tp("run " + exp.string() + " --tp 2 --quiet --out " + (dir / "d").string());
  ::unsetenv("LANTERN_TP_ALLREDUCE");
  ASSERT_EQ(env.status, 0) << env.output;
  EXPECT_EQ(tp_section(dir / "d" / "rank-1" / "manifest.json")["all_reduce_path"], "p2p");
  EXPECT_EQ(tp_section(dir / "b" / "rank-1" / "manifest.json")["rank"], 1);
}

// A bad value (option or environment) is one line naming the valid ones;
// the option without --tp says what is missing; --help documents it.
TEST(TpCli, TheAllReduceOptionRefusesBadValuesInOneLine) {
  const std::string gen = "generate --device cpu --model " + tiny_model().string() +
                          " --prompt-ids 1 --max-new-tokens 1 ";
  const Outcome bad = run_tp(gen + "--tp 2 --tp-allreduce ring");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--tp-allreduce 'ring': use auto (the P2P kernel up to 4 MiB"));
  EXPECT_THAT(bad.output, HasSubstr("), nccl or p2p\n"));
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  const Outcome alone = run_tp(gen + "--tp-allreduce nccl");
  EXPECT_EQ(alone.status, 1) << alone.output;
  EXPECT_THAT(alone.output, HasSubstr("--tp-allreduce nccl needs tensor parallelism: add --tp N"));
  ::setenv("LANTERN_TP_ALLREDUCE", "ring", 1);
  const Outcome env = run_tp(gen + "--tp 2");
  const Outcome off = run_tp(gen + "--ids --quiet");  // not read without --tp
  ::unsetenv("LANTERN_TP_ALLREDUCE");
  EXPECT_EQ(env.status, 1) << env.output;
  EXPECT_THAT(env.output, HasSubstr("LANTERN_TP_ALLREDUCE=ring: use auto"));
  EXPECT_EQ(off.status, 0) << off.output;
  const Outcome bench = run_tp("bench --model " + tiny_model().string() + " --device cpu --tp 2 --tp-allreduce x");
  EXPECT_EQ(bench.status, 1) << bench.output;
  EXPECT_THAT(bench.output, HasSubstr("--tp-allreduce 'x': use auto"));
  for (const char* cmd : {"generate", "bench", "run", "rerun"}) {
    const Outcome help = run_tp(std::string(cmd) + " --help");
    EXPECT_THAT(help.output, HasSubstr("--tp-allreduce auto|nccl|p2p")) << cmd;
    EXPECT_THAT(help.output, HasSubstr("LANTERN_TP_ALLREDUCE,")) << cmd;  // the default
    EXPECT_THAT(help.output, HasSubstr("else auto; e.g. ")) << cmd;       // and an example
    EXPECT_THAT(help.output, HasSubstr("--tp-allreduce nccl)")) << cmd;
  }
}

}  // namespace
}  // namespace lantern
