// `lantern generate`: run requests through the engine and stream the output.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/common.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"

namespace lantern::cli {
namespace {

int cmd_generate(const std::vector<std::string>& argv) {
  auto values = engine_value_options();
  for (const char* o : {"--prompt-ids", "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                        "--repeat", "--requests", "--out"})
    values.push_back(o);
  auto flags = engine_flag_options();
  flags.push_back("--ignore-eos");
  Args args(argv, values, flags);
  LoadedEngine le = build_engine(args);
  Engine& engine = *le.engine;

  Request req;
  std::vector<Request> batch;
  if (auto file = args.get("--requests")) {
    // One JSON object per line: {"prompt_ids": [...], "max_new_tokens": N,
    // "temperature": T, "top_k": K, "top_p": P, "seed": S, "tag": "..."}.
    std::ifstream in(*file);
    LANTERN_CHECK(in, "cannot open --requests %s", file->c_str());
    std::string line;
    for (int lineno = 1; std::getline(in, line); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
        Request r;
        r.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
        r.max_new_tokens = j.value("max_new_tokens", 32);
        r.sampling.temperature = j.value("temperature", 0.0f);
        r.sampling.top_k = j.value("top_k", 0);
        r.sampling.top_p = j.value("top_p", 1.0f);
        r.sampling.seed = j.value("seed", uint64_t{0});
        r.stop_at_eos = !j.value("ignore_eos", false);
        r.tag = j.value("tag", std::string());
        batch.push_back(std::move(r));
      } catch (const nlohmann::json::exception& e) {
        LANTERN_FAIL("--requests %s line %d: %s (expected {\"prompt_ids\": [...], ...})", file->c_str(),
                     lineno, e.what());
      }
    }
    LANTERN_CHECK(!batch.empty(), "--requests %s holds no requests", file->c_str());
  } else {
    req.prompt = parse_ids(args.require("--prompt-ids"));
  }
  req.max_new_tokens = static_cast<int>(args.get_int("--max-new-tokens", 32));
  req.sampling.temperature = static_cast<float>(args.get_double("--temperature", 0.0));
  req.sampling.top_k = static_cast<int>(args.get_int("--top-k", 0));
  req.sampling.top_p = static_cast<float>(args.get_double("--top-p", 1.0));
  req.sampling.seed = static_cast<uint64_t>(args.get_int("--seed", 0));
  req.stop_at_eos = !args.flag("--ignore-eos");
  int repeat = static_cast<int>(args.get_int("--repeat", 1));
  bool stream = repeat == 1 && batch.empty();
  if (stream)
    req.on_token = [](int64_t, int32_t tok) {
      std::printf("%d ", tok);
      std::fflush(stdout);
    };
  if (batch.empty())
    for (int i = 0; i < repeat; ++i) batch.push_back(req);
  for (auto& r : batch) engine.submit(r);
  double t0 = engine.now_s();
  engine.run_until_idle();
  double t1 = engine.now_s();
  if (stream) std::printf("\n");
  int64_t generated = 0;
  auto results = engine.take_finished();
  std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  if (auto out = args.get("--out")) {
    std::ofstream f(*out);
    LANTERN_CHECK(f, "cannot write --out %s", out->c_str());
    for (const RequestResult& r : results)
      f << nlohmann::json{{"id", r.id}, {"tag", r.tag}, {"prompt_ids", r.prompt}, {"tokens", r.tokens},
                          {"finish_reason", r.finish_reason}, {"ttft_ms", (r.first_token_s - r.submit_s) * 1e3},
                          {"latency_ms", (r.finish_s - r.submit_s) * 1e3}, {"preemptions", r.preemptions}}
               .dump()
        << "\n";
  }
  for (const RequestResult& r : results) {
    generated += static_cast<int64_t>(r.tokens.size());
    if (!stream) {
      std::printf("request %lld:", static_cast<long long>(r.id));
      for (int32_t t : r.tokens) std::printf(" %d", t);
      std::printf("\n");
    }
    if (!args.flag("--quiet"))
      std::fprintf(stderr, "request %lld: %zu tokens, finish=%s, ttft %.1f ms\n", static_cast<long long>(r.id),
                   r.tokens.size(), r.finish_reason.c_str(), (r.first_token_s - r.submit_s) * 1e3);
  }
  if (!args.flag("--quiet"))
    std::fprintf(stderr, "lantern: %lld tokens in %.3f s (%.1f tokens/s), %lld steps\n",
                 static_cast<long long>(generated), t1 - t0, generated / std::max(1e-9, t1 - t0),
                 static_cast<long long>(engine.steps_run()));
  return 0;
}

}  // namespace
LANTERN_COMMAND("generate", "generate tokens from a prompt (streams as it goes)", cmd_generate);
}  // namespace lantern::cli
