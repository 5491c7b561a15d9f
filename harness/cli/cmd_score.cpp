// `lantern score`: teacher-forced logits for a token sequence, for comparing
// against other implementations (HF transformers, the CPU reference).
// The first --prefill-tokens ids are prefilled in one step (logits for every
// position), each later id is fed by a decode step. Output: little-endian
// float32 [positions x vocab].
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernels/base/errors.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"

namespace lantern::cli {
namespace {

int cmd_score(const std::vector<std::string>& argv) {
  auto values = engine_value_options();
  for (const char* o : {"--ids-file", "--out", "--prefill-tokens"}) values.push_back(o);
  Args args(argv, values, engine_flag_options());
  std::string ids_path = args.require("--ids-file");
  std::ifstream in(ids_path);
  LANTERN_CHECK(in, "cannot open --ids-file %s", ids_path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> ids = parse_ids(ss.str());
  LANTERN_CHECK(!ids.empty(), "--ids-file %s holds no token ids", ids_path.c_str());
  int n = static_cast<int>(ids.size());
  int prefill = static_cast<int>(args.get_int("--prefill-tokens", n));
  LANTERN_CHECK(prefill >= 1 && prefill <= n, "--prefill-tokens=%d must be in [1, %d]", prefill, n);

  EngineLimits limits = limits_from_args(args);
  limits.max_seqs = 1;
  limits.max_batch_tokens = std::max(limits.max_batch_tokens, prefill);
  limits.logits_rows = limits.max_batch_tokens;
  limits.max_context = std::max(limits.max_context, n + 1);
  LoadedEngine le = build_engine(args, nullptr, &limits);
  const int vocab = le.config.vocab_size;

  std::vector<float> logits(static_cast<size_t>(n) * vocab, 0.0f);
  std::vector<char> seen(n, 0);
  Request req;
  req.prompt.assign(ids.begin(), ids.begin() + prefill);
  req.forced_tokens.assign(ids.begin() + prefill, ids.end());
  req.max_new_tokens = static_cast<int>(req.forced_tokens.size()) + 1;
  req.stop_at_eos = false;
  req.all_logits = true;
  req.on_logits = [&](int64_t, int pos, const float* row) {
    if (pos >= n) return;  // the row after the last id is not asked for
    std::copy(row, row + vocab, logits.begin() + static_cast<size_t>(pos) * vocab);
    seen[pos] = 1;
  };
  le.engine->submit(std::move(req));
  le.engine->run_until_idle();
  for (int p = 0; p < n; ++p) LANTERN_ASSERT(seen[p], "no logits were produced for position %d", p);

  std::string out_path = args.require("--out");
  std::ofstream out(out_path, std::ios::binary);
  LANTERN_CHECK(out, "cannot write --out %s", out_path.c_str());
  out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  LANTERN_CHECK(out.good(), "writing %s failed", out_path.c_str());
  if (!args.flag("--quiet"))
    std::fprintf(stderr, "lantern score: %d positions x %d vocab -> %s (%d prefilled, %d decode steps)\n", n,
                 vocab, out_path.c_str(), prefill, n - prefill);
  return 0;
}

}  // namespace
LANTERN_COMMAND("score", "teacher-forced logits of a token sequence (float32 [positions x vocab])",
                cmd_score);
}  // namespace lantern::cli
