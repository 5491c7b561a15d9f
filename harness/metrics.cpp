#include "harness/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace lantern::harness {

nlohmann::json distribution(std::vector<double> values) {
  nlohmann::json j = {{"count", values.size()}, {"mean", 0.0}, {"p50", 0.0},
                      {"p90", 0.0},             {"p99", 0.0},  {"max", 0.0}};
  if (values.empty()) return j;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  auto pct = [&](double p) {  // nearest-rank percentile
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
    return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
  };
  j["mean"] = sum / values.size();
  j["p50"] = pct(50);
  j["p90"] = pct(90);
  j["p99"] = pct(99);
  j["max"] = values.back();
  return j;
}

nlohmann::json compute_metrics(const std::vector<runfmt::OutputRow>& outputs,
                               const Timeline* timeline) {
  nlohmann::json m;
  int64_t prompt_tokens = 0, generated = 0;
  double first_submit = INFINITY, last_finish = -INFINITY;
  std::vector<double> ttft, tpot, latency;
  std::map<std::string, int> finish_reasons;
  for (const runfmt::OutputRow& o : outputs) {
    prompt_tokens += static_cast<int64_t>(o.prompt.size());
    generated += static_cast<int64_t>(o.tokens.size());
    first_submit = std::min(first_submit, o.submit_s);
    last_finish = std::max(last_finish, o.finish_s);
    finish_reasons[o.finish_reason] += 1;
    if (!o.tokens.empty()) ttft.push_back(o.ttft_s);
    if (o.tokens.size() >= 2) tpot.push_back(o.tpot_s);
    latency.push_back(o.finish_s - o.submit_s);
  }
  const double wall = outputs.empty() ? 0.0 : std::max(0.0, last_finish - first_submit);
  m["requests"] = outputs.size();
  m["finish_reasons"] = finish_reasons;
  m["prompt_tokens"] = prompt_tokens;
  m["generated_tokens"] = generated;
  m["wall_s"] = wall;
  m["tokens_per_s"] = wall > 0 ? generated / wall : 0.0;
  m["ttft_s"] = distribution(ttft);
  m["tpot_s"] = distribution(tpot);
  m["latency_s"] = distribution(latency);

  nlohmann::json steps = {{"count", 0}, {"time_s", 0.0}};
  double decode_tokens = 0, decode_time = 0;
  if (timeline) {
    std::map<std::string, nlohmann::json> phases;
    std::map<std::string, std::vector<double>> step_ms;
    double total = 0;
    int64_t count = 0;
    // A step's time is its share of the run (step_share_ns): with overlapped
    // decode steps the time from the previous step's collection to its own,
    // not its range (which covers only its planning and launches).
    uint64_t prev_collected = 0;
    for (const StepRecord& s : timeline->steps()) {
      const uint64_t prev = prev_collected;
      if (s.collected_ns) prev_collected = s.collected_ns;
      if (s.end_ns <= s.begin_ns) continue;
      const double secs = static_cast<double>(step_share_ns(s, prev)) * 1e-9;
      std::string phase = *s.phase ? s.phase : "unknown";
      nlohmann::json& p = phases[phase];
      if (p.is_null()) p = {{"count", 0}, {"time_s", 0.0}, {"tokens", 0}};
      p["count"] = p["count"].get<int64_t>() + 1;
      p["time_s"] = p["time_s"].get<double>() + secs;
      p["tokens"] = p["tokens"].get<int64_t>() + s.tokens;
      step_ms[phase].push_back(secs * 1e3);
      total += secs;
      ++count;
      if (phase == "decode") {
        decode_tokens += s.tokens;
        decode_time += secs;
      }
    }
    for (auto& [phase, p] : phases) p["step_ms"] = distribution(step_ms[phase]);
    steps = {{"count", count}, {"time_s", total}, {"phases", phases}};
  }
  m["steps"] = steps;
  // Decode throughput over pure decode steps only (mixed steps excluded).
  m["decode_tokens_per_s"] = decode_time > 0 ? decode_tokens / decode_time : 0.0;
  return m;
}

}  // namespace lantern::harness
