// `lantern generate`: run requests through the engine and stream the output.
#include <cstdio>

#include "engine/common.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"

namespace lantern::cli {
namespace {

int cmd_generate(const std::vector<std::string>& argv) {
  auto values = engine_value_options();
  for (const char* o : {"--prompt-ids", "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                        "--repeat"})
    values.push_back(o);
  auto flags = engine_flag_options();
  flags.push_back("--ignore-eos");
  Args args(argv, values, flags);
  LoadedEngine le = build_engine(args);
  Engine& engine = *le.engine;

  Request req;
  req.prompt = parse_ids(args.require("--prompt-ids"));
  req.max_new_tokens = static_cast<int>(args.get_int("--max-new-tokens", 32));
  req.sampling.temperature = static_cast<float>(args.get_double("--temperature", 0.0));
  req.sampling.top_k = static_cast<int>(args.get_int("--top-k", 0));
  req.sampling.top_p = static_cast<float>(args.get_double("--top-p", 1.0));
  req.sampling.seed = static_cast<uint64_t>(args.get_int("--seed", 0));
  req.stop_at_eos = !args.flag("--ignore-eos");
  int repeat = static_cast<int>(args.get_int("--repeat", 1));
  bool stream = repeat == 1;
  if (stream)
    req.on_token = [](int64_t, int32_t tok) {
      std::printf("%d ", tok);
      std::fflush(stdout);
    };
  for (int i = 0; i < repeat; ++i) engine.submit(req);
  double t0 = engine.now_s();
  engine.run_until_idle();
  double t1 = engine.now_s();
  if (stream) std::printf("\n");
  int64_t generated = 0;
  for (const RequestResult& r : engine.take_finished()) {
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
