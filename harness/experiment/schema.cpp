#include "harness/experiment/schema.h"

#include <algorithm>

namespace lantern::experiment {

namespace {

using nlohmann::json;
constexpr double kBig = 1 << 24;

std::vector<Field> build_schema() {
  return {
      {"schema_version", Kind::integer, 1, 1, 1, {}, "version of this schema (1)"},
      {"name", Kind::string, "", {}, {}, {}, "run name (default: the file name without .json)"},
      {"description", Kind::string, "", {}, {}, {}, "free text, kept in the manifest"},
      {"model", Kind::object, nullptr, {}, {}, {}, "which weights"},
      {"model.path",
       Kind::nullable_string,
       nullptr,
       {},
       {},
       {},
       "an HF model directory (config.json, model.safetensors, tokenizer.json); null: synthesise "
       "model.preset"},
      {"model.preset",
       Kind::string,
       "auto",
       {},
       {},
       {"auto", "tiny", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"},
       "synthetic preset when model.path is null; auto: tiny on the cpu backend, llama-3.2-1b on "
       "cuda"},
      {"model.seed", Kind::integer, 0, 0, kBig, {}, "seed of the synthetic weights"},
      {"model.cache_dir",
       Kind::string,
       "models",
       {},
       {},
       {},
       "synthetic models are written once to CACHE_DIR/PRESET-seedN and reused"},
      {"device",
       Kind::string,
       "auto",
       {},
       {},
       {"auto", "cpu", "cuda"},
       "backend; auto: cuda when a GPU is usable, else the cpu reference"},
      {"limits", Kind::object, nullptr, {}, {}, {}, "EngineLimits: everything that sizes memory"},
      {"limits.max_batch_tokens",
       Kind::integer,
       512,
       1,
       kBig,
       {},
       "rows in one step (prefill tokens + decode rows)"},
      {"limits.max_seqs", Kind::integer, 16, 1, 4096, {}, "concurrent sequences (slots)"},
      {"limits.max_context",
       Kind::integer,
       4096,
       2,
       kBig,
       {},
       "tokens per sequence (prompt + generated); lowered to the model's limit when left at the "
       "default"},
      {"limits.kv_block_size", Kind::integer, 16, 1, 1024, {}, "tokens per KV block"},
      {"limits.kv_num_blocks",
       Kind::integer,
       0,
       0,
       kBig,
       {},
       "KV blocks; 0: from kv_memory_fraction (cuda) or max_seqs * max_context (cpu)"},
      {"limits.kv_memory_fraction",
       Kind::number,
       0.9,
       0.01,
       1.0,
       {},
       "cuda: share of the free memory after weights and arena given to the KV pool"},
      {"limits.max_queue", Kind::integer, 4096, 1, kBig, {}, "waiting requests the engine accepts"},
      {"limits.logits_rows",
       Kind::integer,
       0,
       0,
       65536,
       {},
       "rows of the logits buffer; 0: max_seqs"},
      {"kernels",
       Kind::family_map,
       json::object(),
       {},
       {},
       {},
       "kernel variant per family, by name or number (docs/kernels.md); unlisted families use the "
       "default"},
      {"cuda_graphs", Kind::boolean, true, {}, {}, {},
       "cuda: capture decode steps (and, unless `kernels.prefill_graphs` is `off`, prefill steps) as "
       "CUDA graphs"},
      {"workload", Kind::object, nullptr, {}, {}, {}, "what requests run and when they arrive"},
      {"workload.kind",
       Kind::string,
       "synthetic",
       {},
       {},
       {"prompts", "requests", "synthetic"},
       "prompts: workload.prompts; requests: a .jsonl file; synthetic: drawn from distributions"},
      {"workload.prompts",
       Kind::prompt_list,
       json::array(),
       {},
       {},
       {},
       "kind prompts: each a string, {\"text\"}, {\"ids\"} or {\"chat\": [{\"role\", "
       "\"content\"}]}, "
       "optionally with max_new_tokens and tag"},
      {"workload.requests_file",
       Kind::string,
       "",
       {},
       {},
       {},
       "kind requests: one JSON object a line ({\"prompt\"} or {\"prompt_ids\"}, max_new_tokens, "
       "temperature, top_k, top_p, seed, ignore_eos, tag); relative to the experiment file"},
      {"workload.max_new_tokens",
       Kind::integer,
       32,
       1,
       kBig,
       {},
       "kinds prompts and requests: tokens to generate when a request does not say"},
      {"workload.ignore_eos",
       Kind::boolean,
       false,
       {},
       {},
       {},
       "kinds prompts and requests: keep generating past EOS (synthetic always does)"},
      {"workload.count", Kind::integer, 16, 1, kBig, {}, "kind synthetic: number of requests"},
      {"workload.seed",
       Kind::integer,
       0,
       0,
       kBig,
       {},
       "kind synthetic: seed of lengths and prompt tokens"},
      {"workload.prompt_len",
       Kind::length_dist,
       json{{"dist", "fixed"}, {"value", 128}},
       {},
       {},
       {},
       "kind synthetic: prompt length distribution (tokens, BOS included)"},
      {"workload.output_len",
       Kind::length_dist,
       json{{"dist", "fixed"}, {"value", 128}},
       {},
       {},
       {},
       "kind synthetic: output length distribution (tokens generated)"},
      {"workload.arrival",
       Kind::object,
       nullptr,
       {},
       {},
       {},
       "when requests reach the engine (engine clock)"},
      {"workload.arrival.kind",
       Kind::string,
       "all_at_once",
       {},
       {},
       {"all_at_once", "interval", "poisson"},
       "all_at_once: every request at t=0; interval: one every interval_s; poisson: rate per "
       "second"},
      {"workload.arrival.interval_s",
       Kind::number,
       0.1,
       0.0,
       3600.0,
       {},
       "arrival kind interval: seconds between requests"},
      {"workload.arrival.rate",
       Kind::number,
       1.0,
       1e-6,
       1e6,
       {},
       "arrival kind poisson: requests per second"},
      {"workload.arrival.seed",
       Kind::integer,
       0,
       0,
       kBig,
       {},
       "arrival kind poisson: seed of the gaps"},
      {"sampling",
       Kind::object,
       nullptr,
       {},
       {},
       {},
       "how tokens are picked (requests files may override per line)"},
      {"sampling.temperature", Kind::number, 0.0, 0.0, 100.0, {}, "0: greedy (argmax)"},
      {"sampling.top_k", Kind::integer, 0, 0, kBig, {}, "0: off"},
      {"sampling.top_p", Kind::number, 1.0, 1e-6, 1.0, {}, "1: off"},
      {"sampling.seed",
       Kind::integer,
       0,
       0,
       kBig,
       {},
       "request i samples with seed + i (reproducible per request)"},
      {"harness", Kind::object, nullptr, {}, {}, {}, "what the harness records (docs/harness.md)"},
      {"harness.enabled",
       Kind::boolean,
       true,
       {},
       {},
       {},
       "false: no observer attached at all (--harness off)"},
      {"harness.record",
       Kind::boolean,
       true,
       {},
       {},
       {},
       "false: run and report metrics, write no run directory"},
      {"harness.nvtx", Kind::boolean, true, {}, {}, {}, "NVTX ranges for nsys"},
      {"harness.cupti", Kind::boolean, true, {}, {}, {}, "CUPTI kernel timings (cuda)"},
      {"harness.alias", Kind::boolean, true, {}, {}, {}, "alias-lifetime tracker"},
      {"harness.kv", Kind::boolean, true, {}, {}, {}, "KV block recorder"},
      {"harness.memory", Kind::boolean, true, {}, {}, {}, "memory map"},
      {"harness.roofline", Kind::boolean, true, {}, {}, {}, "roofline probes (cuda)"},
      {"harness.cupti_all_steps",
       Kind::boolean,
       false,
       {},
       {},
       {},
       "CUPTI on every step (costs 19-28 %)"},
      {"harness.cupti_budget_pct",
       Kind::number,
       1.5,
       0.01,
       100.0,
       {},
       "CUPTI windows within this share of wall time"},
      {"harness.cupti_every", Kind::integer, 1, 1, kBig, {}, "trace every Nth kernel-bearing step"},
      {"harness.cupti_window",
       Kind::string,
       "",
       {},
       {},
       {},
       "\"W:P\": trace W steps of every P; \"\": budget windows"},
      {"harness.profile_steps",
       Kind::string,
       "",
       {},
       {},
       {},
       "\"A:B\": cudaProfilerStart/Stop around steps A..B (nsys)"},
      {"warmup",
       Kind::integer,
       0,
       0,
       100,
       {},
       "untimed runs of the whole workload before the repetitions"},
      {"repetitions",
       Kind::integer,
       1,
       1,
       1000,
       {},
       "timed runs of the whole workload (metrics per repetition + median/min/max)"},
      {"sweep",
       Kind::sweep_map,
       json::object(),
       {},
       {},
       {},
       "{\"field.path\": [values]}: `lantern run` runs the grid (like `lantern sweep --param`)"},
  };
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

const std::vector<Field>& schema() {
  static const std::vector<Field> table = build_schema();
  return table;
}

const Field* find_field(const std::string& path) {
  for (const Field& f : schema())
    if (f.path == path) return &f;
  return nullptr;
}

std::vector<std::string> child_keys(const std::string& parent) {
  std::vector<std::string> keys;
  const std::string prefix = parent.empty() ? "" : parent + ".";
  for (const Field& f : schema()) {
    if (f.path.rfind(prefix, 0) != 0) continue;
    std::string rest = f.path.substr(prefix.size());
    if (rest.find('.') == std::string::npos) keys.push_back(rest);
  }
  return keys;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

nlohmann::json defaults() {
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : schema()) {
    if (f.kind == Kind::object) continue;
    std::string p = f.path;
    std::replace(p.begin(), p.end(), '.', '/');
    p.insert(p.begin(), '/');
    nlohmann::json::json_pointer ptr(p);
    j[ptr] = f.def;
  }
  return j;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::object:
      return "object";
    case Kind::string:
      return "string";
    case Kind::integer:
      return "integer";
    case Kind::number:
      return "number";
    case Kind::boolean:
      return "boolean";
    case Kind::nullable_string:
      return "string or null";
    case Kind::family_map:
      return "object {family: variant}";
    case Kind::sweep_map:
      return "object {path: [values]}";
    case Kind::prompt_list:
      return "array of prompts";
    case Kind::length_dist:
      return "length distribution";
  }
  return "?";
}

const std::vector<std::string>& length_dist_keys() {
  static const std::vector<std::string> keys = {"dist", "value",  "min",    "max",
                                                "mean", "stddev", "median", "sigma"};
  return keys;
}

const std::vector<std::string>& prompt_keys() {
  static const std::vector<std::string> keys = {"text", "ids", "chat", "max_new_tokens", "tag"};
  return keys;
}

}  // namespace lantern::experiment
