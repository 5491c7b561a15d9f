// `lantern run / rerun / compare / sweep / help` through the built binary on
// the CPU backend and the tiny synthetic model: every --help, validation
// before anything loads, the recorded manifest and metrics, rerun identity
// (greedy and seeded sampling), compare with its noise marks and config
// diff, the inspect --compare alias, and sweep's grid.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/test_util.h"

namespace lantern {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

fs::path binary() {
  return fs::path(LANTERN_BINARY_DIR) / "bin" / "lantern";
}

struct Result {
  int status;
  std::string out;  // stdout + stderr
};

Result lantern(const std::string& args, bool with_stderr = true) {
  std::string command = binary().string() + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

json read_json(const fs::path& p) {
  return json::parse(std::ifstream(p));
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

TEST(ExperimentCli, EveryCommandAnswersHelpWithUsageDefaultsAndAnExample) {
  ASSERT_TRUE(fs::exists(binary())) << binary();
  for (const char* cmd : {"run", "rerun", "compare", "sweep", "generate", "bench", "score",
                          "inspect", "synth", "tokenize", "detokenize", "help"}) {
    Result r = lantern(std::string(cmd) + " --help", /*with_stderr=*/false);
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_EQ(r.out.rfind(std::string("usage: lantern ") + cmd, 0), 0u) << cmd << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("options:")) << cmd;
    EXPECT_THAT(r.out, HasSubstr("\nexample:\n  ")) << cmd;
    EXPECT_THAT(r.out.substr(r.out.find("\nexample:")), HasSubstr(std::string("lantern ") + cmd))
        << cmd;
    if (std::string(cmd) != "help") {
      EXPECT_THAT(r.out, HasSubstr("default")) << cmd;
    }
  }
  // `lantern help CMD` and `-h` print the same text (binary start-up is slow
  // on the CI machine: two commands stand for all).
  for (const char* cmd : {"run", "compare"}) {
    const std::string text = lantern(std::string(cmd) + " --help", false).out;
    EXPECT_EQ(lantern(std::string("help ") + cmd, false).out, text) << cmd;
    EXPECT_EQ(lantern(std::string(cmd) + " -h", false).out, text) << cmd;
  }
  Result list = lantern("help", false);
  EXPECT_EQ(list.status, 0);
  for (const char* cmd : {"run", "rerun", "compare", "sweep", "generate"})
    EXPECT_THAT(list.out, HasSubstr(cmd));
  EXPECT_EQ(lantern("help nosuch").status, 1);
}

TEST(ExperimentCli, ValidationFailsBeforeAnythingLoadsWithOneLinePerProblem) {
  auto dir = test::scratch_dir("exp-cli-invalid");
  std::ofstream(dir / "bad.json") << R"({"limits": {"max_seq": 2, "max_context": 0},
      "workload": {"arrival": {"kind": "poison"}}, "model": {"cache_dir": ")"
                                  << (dir / "models").string() << "\"}}";
  Result r = lantern("run " + (dir / "bad.json").string());
  EXPECT_EQ(r.status, 1) << r.out;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  for (const auto& l : lines) {
    EXPECT_EQ(l.rfind("lantern run: error: " + (dir / "bad.json").string() + ": $.", 0), 0u) << l;
    EXPECT_THAT(l, HasSubstr("(fix: "));
  }
  EXPECT_FALSE(fs::exists(dir / "models")) << "nothing may load before validation passes";
  Result s = lantern("run " + (dir / "bad.json").string() + " --set limits.max_sqs=2");
  EXPECT_EQ(s.status, 1);
  EXPECT_THAT(
      s.out, HasSubstr("--set limits.max_sqs: no such field (fix: did you mean limits.max_seqs?)"));
  Result m = lantern("run " + (dir / "missing.json").string());
  EXPECT_EQ(m.status, 1);
  EXPECT_THAT(m.out, HasSubstr("missing.json: cannot open the file"));
}

// One recorded run shared by the tests below: greedy and seeded-sampling
// requests, two repetitions, on the CPU reference.
// (One recording per test process: ctest runs each test in its own process,
// so the checks are grouped into two tests rather than six.)
struct RecordedRun {
  static void record() {
    if (run_) return;  // both tests in one process: record once
    dir_ = new fs::path(test::scratch_dir("exp-cli-runs"));
    std::ofstream(*dir_ / "reqs.jsonl")
        << R"({"prompt_ids": [128000, 9906, 11, 1268], "max_new_tokens": 4, "tag": "greedy"})"
        << "\n"
        << R"({"prompt": "Hello there", "max_new_tokens": 4, "tag": "greedy-text"})"
        << "\n"
        << R"({"prompt_ids": [128000, 9906, 11, 1268], "max_new_tokens": 4, "temperature": 1.0, "seed": 1, "tag": "s1"})"
        << "\n"
        << R"({"prompt_ids": [128000, 9906, 11, 1268], "max_new_tokens": 4, "temperature": 1.0, "seed": 2, "tag": "s2"})"
        << "\n";
    std::ofstream(*dir_ / "exp.json") << json{
        {"name", "cli-exp"},
        {"device", "cpu"},
        {"model", {{"preset", "tiny"}, {"seed", 1}, {"cache_dir", (*dir_ / "models").string()}}},
        {"limits", {{"max_seqs", 4}, {"max_context", 64}, {"max_batch_tokens", 64}}},
        {"workload", {{"kind", "requests"}, {"requests_file", "reqs.jsonl"}, {"ignore_eos", true}}},
        {"repetitions", 2}}.dump(2);
    run_ = new Result(lantern("run " + (*dir_ / "exp.json").string() +
                              " --set limits.max_batch_tokens=48 --out " + (*dir_ / "a").string()));
  }
  static fs::path* dir_;
  static Result* run_;
};
fs::path* RecordedRun::dir_ = nullptr;
Result* RecordedRun::run_ = nullptr;

void check_run_output() {
  ASSERT_EQ(RecordedRun::run_->status, 0) << RecordedRun::run_->out;
  EXPECT_THAT(RecordedRun::run_->out,
              HasSubstr("run directory: " + (*RecordedRun::dir_ / "a").string()));
  EXPECT_THAT(RecordedRun::run_->out, HasSubstr("top ops by kernel time"));
  EXPECT_THAT(RecordedRun::run_->out, HasSubstr("alias plan: 0 violations"));
  EXPECT_THAT(RecordedRun::run_->out, HasSubstr("kv cache: peak"));
  EXPECT_THAT(RecordedRun::run_->out, HasSubstr("next: lantern inspect"));
  EXPECT_THAT(RecordedRun::run_->out, HasSubstr("lantern-view"));
  EXPECT_THAT(RecordedRun::run_->out, HasSubstr("synthesising tiny"));
}

void check_manifest_and_metrics() {
  ASSERT_EQ(RecordedRun::run_->status, 0) << RecordedRun::run_->out;
  json m = read_json(*RecordedRun::dir_ / "a" / "manifest.json");
  EXPECT_EQ(m["name"], "cli-exp");
  EXPECT_EQ(m["experiment"]["resolved"]["limits"]["max_batch_tokens"], 48);  // the override
  EXPECT_EQ(m["experiment"]["resolved"]["limits"]["max_seqs"], 4);           // the file
  EXPECT_EQ(m["experiment"]["resolved"]["limits"]["kv_block_size"], 16);     // the default
  EXPECT_EQ(m["experiment"]["overrides"], json::array({"limits.max_batch_tokens=48"}));
  EXPECT_EQ(m["experiment"]["effective"]["device"], "cpu");
  // Run format 1.3: the registry's variants on the run's backend (what lantern-view offers).
  EXPECT_EQ(m["format_version"], "1.3");
  EXPECT_EQ(m["experiment"]["kernel_variants"]["rmsnorm"],
            json::parse(R"([{"variant": 0, "name": "cpu_ref"}])"));
  EXPECT_EQ(m["hashes"]["weights"].get<std::string>().size(), 16u);
  EXPECT_EQ(m["hashes"]["tokenizer"].get<std::string>().size(), 16u);
  EXPECT_TRUE(m["git"].contains("commit"));
  EXPECT_EQ(m["config"]["limits"]["max_batch_tokens"], 48);  // what the engine ran with
  json x = read_json(*RecordedRun::dir_ / "a" / "metrics.json");
  ASSERT_EQ(x["repetitions"].size(), 2u);
  for (const json& rep : x["repetitions"]) {
    EXPECT_EQ(rep["requests"], 4);
    EXPECT_EQ(rep["output_tokens"], 16);
    EXPECT_EQ(rep["admission_wait_per_request_ms"].size(), 4u);
    EXPECT_GT(rep["ttft_ms"]["p50"].get<double>(), 0);
  }
  for (const char* k :
       {"output_throughput", "ttft_ms.p99", "itl_ms.p50", "e2e_ms.p90", "admission_wait_ms.p50"}) {
    ASSERT_TRUE(x["summary"].contains(k)) << k;
    EXPECT_LE(x["summary"][k]["min"].get<double>(), x["summary"][k]["median"].get<double>());
    EXPECT_LE(x["summary"][k]["median"].get<double>(), x["summary"][k]["max"].get<double>());
  }
  // outputs.jsonl: both repetitions, tagged.
  std::ifstream out(*RecordedRun::dir_ / "a" / "outputs.jsonl");
  int rows = 0;
  for (std::string line; std::getline(out, line); ++rows)
    EXPECT_EQ(json::parse(line)["tag"].get<std::string>().rfind("rep", 0), 0u);
  EXPECT_EQ(rows, 8);
}

void check_rerun() {
  ASSERT_EQ(RecordedRun::run_->status, 0) << RecordedRun::run_->out;
  Result r = lantern("rerun " + (*RecordedRun::dir_ / "a").string() + " --check --quiet --out " +
                     (*RecordedRun::dir_ / "a-rerun").string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("rerun: weights   same"));
  EXPECT_THAT(r.out, HasSubstr("rerun: tokenizer same"));
  EXPECT_THAT(r.out, HasSubstr("rerun: commit    same"));
  EXPECT_THAT(r.out, HasSubstr("rerun: tokens    identical for all 4 requests"));
  json m = read_json(*RecordedRun::dir_ / "a-rerun" / "manifest.json");
  EXPECT_EQ(m["experiment"]["resolved"]["limits"]["max_batch_tokens"],
            48);  // from the manifest alone
  EXPECT_EQ(m["rerun_of"]["run"], (*RecordedRun::dir_ / "a").string());
  // The sampled requests really sampled: two seeds, two continuations of one prompt.
  std::vector<json> rows;
  std::ifstream out(*RecordedRun::dir_ / "a" / "outputs.jsonl");
  for (std::string line; std::getline(out, line);) rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_NE(rows[6]["tokens"], rows[7]["tokens"]) << "seeds 1 and 2 drew the same tokens";
  EXPECT_EQ(rows[0]["tokens"], rows[4]["tokens"]);  // repetitions agree

  // A different sampling seed is a different run, and --check says so.
  Result d = lantern("rerun " + (*RecordedRun::dir_ / "a").string() +
                     " --check --quiet --set sampling.temperature=1.0 "
                     "--set workload.ignore_eos=true --out " +
                     (*RecordedRun::dir_ / "a-hot").string());
  EXPECT_EQ(d.status, 1) << d.out;
  EXPECT_THAT(d.out, HasSubstr("rerun: tokens    DIFFER in"));
}

void check_compare() {
  ASSERT_EQ(RecordedRun::run_->status, 0) << RecordedRun::run_->out;
  Result b =
      lantern("run " + (*RecordedRun::dir_ / "exp.json").string() +
              " --quiet --set limits.max_seqs=1 --out " + (*RecordedRun::dir_ / "b").string());
  ASSERT_EQ(b.status, 0) << b.out;
  const std::string a_dir = (*RecordedRun::dir_ / "a").string(),
                    b_dir = (*RecordedRun::dir_ / "b").string();
  Result c = lantern("compare " + a_dir + " " + b_dir, false);
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_THAT(c.out, HasSubstr("metrics (median over repetitions)"));
  EXPECT_THAT(c.out, HasSubstr("b/a"));
  EXPECT_THAT(c.out, HasSubstr("kernel time per op call"));
  EXPECT_THAT(c.out, HasSubstr("lm_head"));
  EXPECT_THAT(c.out, HasSubstr("kernel time per family"));
  EXPECT_THAT(c.out, HasSubstr("Repetitions: a: 2, b: 2"));
  // Every ratio of a measured metric carries a mark: both runs have two repetitions.
  for (const std::string& line : lines_of(c.out))
    if (line.find("TTFT p50") != std::string::npos ||
        line.find("output throughput") != std::string::npos) {
      EXPECT_TRUE(line.back() == '*' || line.back() == '~') << line;
    }
  EXPECT_THAT(c.out, HasSubstr("limits.max_seqs"));          // the config diff
  EXPECT_THAT(c.out, Not(HasSubstr("limits.max_context")));  // ...only what differs

  // A run made 10x faster (doctored) is marked outside the noise band.
  fs::copy(*RecordedRun::dir_ / "b", *RecordedRun::dir_ / "b-fast", fs::copy_options::recursive);
  json x = read_json(*RecordedRun::dir_ / "b-fast" / "metrics.json");
  for (const char* k : {"median", "min", "max"})
    x["summary"]["output_throughput"][k] = x["summary"]["output_throughput"][k].get<double>() * 10;
  std::ofstream(*RecordedRun::dir_ / "b-fast" / "metrics.json") << x.dump();
  Result f = lantern("compare " + b_dir + " " + (*RecordedRun::dir_ / "b-fast").string() + " --csv",
                     false);
  ASSERT_EQ(f.status, 0) << f.out;
  EXPECT_THAT(f.out, HasSubstr("output throughput (tok/s),"));
  EXPECT_THAT(f.out, HasSubstr(",10.000 *\n"));
  Result md = lantern("compare " + a_dir + " " + b_dir + " --markdown --no-kernels", false);
  EXPECT_THAT(md.out, HasSubstr("| metric | a | b | b/a |\n| --- | ---: | ---: | ---: |"));
  EXPECT_THAT(md.out, Not(HasSubstr("kernel time")));
  // inspect --compare is an alias.
  EXPECT_EQ(lantern("inspect " + a_dir + " --compare " + b_dir, false).out, c.out);
  EXPECT_EQ(lantern("compare " + a_dir).status, 1);
}

void check_sweep() {
  ASSERT_EQ(RecordedRun::run_->status, 0) << RecordedRun::run_->out;
  const fs::path sweep = *RecordedRun::dir_ / "sweep";
  Result r = lantern("sweep " + (*RecordedRun::dir_ / "exp.json").string() +
                     " --quiet --set repetitions=1 "
                     "--set workload.requests_file=one.jsonl --param limits.max_seqs=1,2 --param "
                     "limits.kv_block_size=8,16 --out " +
                     sweep.string());
  // one.jsonl does not exist: every point is validated before any runs.
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("$.workload.requests_file: file 'one.jsonl' does not exist"));
  EXPECT_FALSE(fs::exists(sweep));
  std::ofstream(*RecordedRun::dir_ / "one.jsonl")
      << R"({"prompt_ids": [128000, 5], "max_new_tokens": 2})"
      << "\n";
  r = lantern("sweep " + (*RecordedRun::dir_ / "exp.json").string() +
              " --quiet --set repetitions=1 "
              "--set workload.requests_file=one.jsonl --param limits.max_seqs=1,2 --param "
              "limits.kv_block_size=8,16 --out " +
              sweep.string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream csv(sweep / "sweep.csv");
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].rfind("point,limits.max_seqs,limits.kv_block_size,output_throughput,", 0), 0u)
      << rows[0];
  EXPECT_EQ(rows[1].rfind("0,1,8,", 0), 0u) << rows[1];
  EXPECT_EQ(rows[4].rfind("3,2,16,", 0), 0u) << rows[4];
  int points = 0;
  for (const auto& e : fs::directory_iterator(sweep)) {
    if (!e.is_directory()) continue;
    ++points;
    json m = read_json(e.path() / "manifest.json");
    const json& l = m["experiment"]["resolved"]["limits"];
    EXPECT_NE(e.path().filename().string().find("max_seqs=" + l["max_seqs"].dump()),
              std::string::npos);
    EXPECT_NE(e.path().filename().string().find("kv_block_size=" + l["kv_block_size"].dump()),
              std::string::npos);
    EXPECT_EQ(m["config"]["limits"]["kv_block_size"], l["kv_block_size"]);
  }
  EXPECT_EQ(points, 4);
}

void check_dry_run() {
  ASSERT_EQ(RecordedRun::run_->status, 0) << RecordedRun::run_->out;
  const fs::path w = *RecordedRun::dir_ / "workload.jsonl";
  Result r = lantern("run " + (*RecordedRun::dir_ / "exp.json").string() +
                     " --dry-run --workload-out " + w.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("valid (cli-exp)"));
  std::ifstream in(w);
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["prompt_ids"], json::array({128000, 9906, 11, 1268}));
  EXPECT_EQ(rows[1]["prompt_ids"][0], 128000);  // text prompt, BOS prepended
  EXPECT_GT(rows[1]["prompt_ids"].size(), 2u);
  EXPECT_EQ(rows[3]["seed"], 2);
  EXPECT_EQ(rows[3]["arrival_s"], 0.0);
}

TEST(RecordedRun, RunWritesManifestMetricsOutputsAndRerunsIdentically) {
  RecordedRun::record();
  check_run_output();
  check_manifest_and_metrics();
  check_dry_run();
  check_rerun();
}

TEST(RecordedRun, CompareMarksNoiseAndSweepRunsTheGrid) {
  RecordedRun::record();
  check_compare();
  check_sweep();
}

}  // namespace
}  // namespace lantern

namespace lantern {
namespace {

TEST(ExperimentDocs, FieldTableInDocsIsTheSchema) {
  Result r = lantern("help schema", false);
  ASSERT_EQ(r.status, 0);
  std::ifstream in(test::test_data_dir() / ".." / "docs" / "experiments.md");
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_THAT(doc.str(), HasSubstr(r.out))
      << "docs/experiments.md is stale: paste `lantern help schema` into it";
  EXPECT_THAT(r.out, HasSubstr("| `limits.max_seqs` | integer | `16` | 1 .. 4096 |"));
}

}  // namespace
}  // namespace lantern
