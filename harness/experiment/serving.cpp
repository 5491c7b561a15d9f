#include "harness/experiment/serving.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace lantern::experiment {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

nlohmann::json latency_summary(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return {{"mean", v.empty() ? 0.0 : sum / static_cast<double>(v.size())},
          {"p50", percentile(v, 50)},
          {"p90", percentile(v, 90)},
          {"p99", percentile(v, 99)},
          {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

nlohmann::json serving_metrics(const std::vector<RequestTiming>& requests) {
  std::vector<double> ttft, tpot, itl, e2e, wait;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double start = INFINITY, end = -INFINITY;
  for (const RequestTiming& r : requests) {
    prompt_tokens += r.prompt_tokens;
    output_tokens += static_cast<int64_t>(r.token_s.size());
    start = std::min(start, r.submit_s);
    end = std::max(end, r.finish_s);
    e2e.push_back((r.finish_s - r.submit_s) * 1e3);
    wait.push_back(r.admit_s >= 0 ? (r.admit_s - r.submit_s) * 1e3 : 0.0);
    if (r.token_s.empty()) continue;
    ttft.push_back((r.token_s.front() - r.submit_s) * 1e3);
    if (r.token_s.size() >= 2)
      tpot.push_back((r.token_s.back() - r.token_s.front()) * 1e3 /
                     static_cast<double>(r.token_s.size() - 1));
    for (size_t i = 1; i < r.token_s.size(); ++i)
      itl.push_back((r.token_s[i] - r.token_s[i - 1]) * 1e3);
  }
  const double duration = requests.empty() ? 0.0 : std::max(0.0, end - start);
  auto per_s = [&](double n) { return duration > 0 ? n / duration : 0.0; };
  return {{"requests", requests.size()},
          {"prompt_tokens", prompt_tokens},
          {"output_tokens", output_tokens},
          {"duration_s", duration},
          {"request_throughput", per_s(static_cast<double>(requests.size()))},
          {"output_throughput", per_s(static_cast<double>(output_tokens))},
          {"total_token_throughput", per_s(static_cast<double>(prompt_tokens + output_tokens))},
          {"ttft_ms", latency_summary(ttft)},
          {"tpot_ms", latency_summary(tpot)},
          {"itl_ms", latency_summary(itl)},
          {"e2e_ms", latency_summary(e2e)},
          {"admission_wait_ms", latency_summary(wait)},
          {"admission_wait_per_request_ms", wait}};
}

namespace {

void leaves(const nlohmann::json& j, const std::string& prefix,
            std::map<std::string, double>& out) {
  if (j.is_number()) {
    out[prefix] = j.get<double>();
  } else if (j.is_object()) {
    for (auto& [k, v] : j.items()) leaves(v, prefix.empty() ? k : prefix + "." + k, out);
  }
}

}  // namespace

nlohmann::json summarize_repetitions(const std::vector<nlohmann::json>& reps) {
  std::map<std::string, std::vector<double>> values;
  for (const nlohmann::json& r : reps) {
    std::map<std::string, double> flat;
    leaves(r, "", flat);
    for (const auto& [k, v] : flat) values[k].push_back(v);
  }
  nlohmann::json out = nlohmann::json::object();
  for (auto& [k, v] : values) {
    if (v.size() != reps.size()) continue;
    const double med = percentile(v, 50);
    const double lo = *std::min_element(v.begin(), v.end()),
                 hi = *std::max_element(v.begin(), v.end());
    out[k] = {{"median", med},
              {"min", lo},
              {"max", hi},
              {"spread", std::abs(med) > 0 ? (hi - lo) / std::abs(med) : 0.0}};
  }
  return out;
}

}  // namespace lantern::experiment
