#pragma once
// Workloads: the experiment's requests as token ids with their output
// lengths, sampling and arrival times. Explicit prompts (text, ids, chat), a
// requests .jsonl file, or synthetic requests drawn from seeded length
// distributions (fixed, uniform, normal, lognormal; clamped to the limits),
// arriving all at once, at a fixed interval or as a Poisson process.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "harness/experiment/experiment.h"
#include "harness/experiment/rng.h"

namespace lantern::experiment {

struct WorkItem {
  std::vector<int32_t> prompt;  // token ids, BOS included
  std::string prompt_text;      // "" for id prompts and synthetic requests
  int max_new_tokens = 32;
  float temperature = 0, top_p = 1;
  int top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string tag;
  double arrival_s = 0;  // since the start of the repetition (engine clock)

  nlohmann::json to_json() const;  // one line of `lantern run --workload-out`
};

// How text becomes ids (the model's tokenizer); empty functions: the model
// has no tokenizer.json and only id prompts work.
struct TextEncoder {
  std::function<std::vector<int32_t>(const std::string&)> encode;  // BOS prepended
  // (role, content) messages through the Llama 3 chat template.
  std::function<std::vector<int32_t>(const std::vector<std::pair<std::string, std::string>>&)>
      encode_chat;
  std::function<std::string(const std::vector<std::pair<std::string, std::string>>&)> render_chat;
};

struct VocabFacts {
  int vocab_size = 0;
  int bos_id = -1;         // prepended to synthetic prompts when >= 0
  int first_special = -1;  // synthetic prompt ids stay below this (>= 0), else below vocab_size
};

// One length drawn from a distribution object, clamped to [lo, hi] (and to
// the distribution's own min / max when given).
int draw_length(const nlohmann::json& dist, Rng& rng, int lo, int hi);

// Arrival times (seconds, non-decreasing, the first at 0) for n requests.
std::vector<double> arrival_times(const nlohmann::json& arrival, size_t n);

// The whole workload of a resolved experiment. Throws ExperimentError naming
// the file and path (a text prompt longer than max_context, a bad requests
// line, a text prompt without a tokenizer).
std::vector<WorkItem> build_workload(const Experiment& e, const TextEncoder& enc,
                                     const VocabFacts& vocab);

}  // namespace lantern::experiment
