#pragma once
// Serving metrics, as a serving benchmark reports them: TTFT, TPOT,
// inter-token latency (ITL) and end-to-end latency (E2E) at p50/p90/p99,
// request and output-token throughput, and the time each request waited for
// admission. Percentiles interpolate linearly between order statistics
// (numpy's default, what vLLM's benchmark_serving uses).
#include <nlohmann/json.hpp>
#include <vector>

namespace lantern::experiment {

// Times of one request on the engine clock (seconds).
struct RequestTiming {
  double arrival_s = 0;  // scheduled arrival (since the repetition started)
  double submit_s = 0;   // handed to the engine
  double admit_s = -1;   // first scheduled (prefill began); -1 unknown
  double finish_s = 0;
  std::vector<double> token_s;  // each generated token
  int prompt_tokens = 0;
};

// Linear-interpolation percentile of unsorted values (p in [0, 100]); 0 when empty.
double percentile(std::vector<double> values, double p);
// {"mean", "p50", "p90", "p99", "max"} in the unit the values carry.
nlohmann::json latency_summary(const std::vector<double>& values);

// Metrics of one repetition. Keys (ms unless said otherwise):
//   requests, prompt_tokens, output_tokens, duration_s,
//   request_throughput (requests/s), output_throughput (tokens/s),
//   total_token_throughput (prompt + output tokens/s),
//   ttft_ms, tpot_ms, itl_ms, e2e_ms, admission_wait_ms: latency_summary,
//   admission_wait_per_request_ms: [per request, in submission order].
nlohmann::json serving_metrics(const std::vector<RequestTiming>& requests);

// {"median", "min", "max", "spread"} of every numeric leaf the repetitions
// share (lists skipped), keyed by dotted path ("ttft_ms.p50"). spread is
// (max - min) / |median|: the noise band `lantern compare` uses.
nlohmann::json summarize_repetitions(const std::vector<nlohmann::json>& repetitions);

}  // namespace lantern::experiment
