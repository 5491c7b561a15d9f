// Workloads (prompt forms, requests files, synthetic lengths and arrival
// schedules, all seeded) and the serving metrics computed from them.
#include "harness/experiment/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "harness/experiment/serving.h"
#include "tests/test_util.h"

namespace lantern::experiment {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

Experiment exp(const char* doc) {
  return resolve(json::parse(doc), "w.json", {});
}

// A stand-in tokenizer: one id per byte, BOS 1000; the chat form wraps the
// messages in ids 2000/2001 so tests can tell the forms apart.
TextEncoder byte_encoder() {
  TextEncoder enc;
  enc.encode = [](const std::string& s) {
    std::vector<int32_t> ids = {1000};
    for (unsigned char c : s) ids.push_back(c);
    return ids;
  };
  enc.encode_chat = [](const std::vector<std::pair<std::string, std::string>>& m) {
    std::vector<int32_t> ids = {2000};
    for (const auto& [role, content] : m)
      for (unsigned char c : role + ":" + content) ids.push_back(c);
    ids.push_back(2001);
    return ids;
  };
  enc.render_chat = [](const std::vector<std::pair<std::string, std::string>>& m) {
    std::string s;
    for (const auto& [role, content] : m) s += "<" + role + ">" + content;
    return s;
  };
  return enc;
}

const VocabFacts kVocab{128256, 128000, 128000};

TEST(Workload, PromptsAsTextIdsAndChat) {
  auto items =
      build_workload(exp(R"({"workload": {"kind": "prompts", "max_new_tokens": 7, "prompts": [
      "hi", {"ids": [5, 6, 7], "max_new_tokens": 3, "tag": "ids"},
      {"chat": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}]},
      "sampling": {"seed": 10, "temperature": 0.5}})"),
                     byte_encoder(), kVocab);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].prompt, (std::vector<int32_t>{1000, 'h', 'i'}));
  EXPECT_EQ(items[0].prompt_text, "hi");
  EXPECT_EQ(items[0].max_new_tokens, 7);
  EXPECT_EQ(items[1].prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(items[1].max_new_tokens, 3);
  EXPECT_EQ(items[1].tag, "ids");
  EXPECT_EQ(items[2].prompt.front(), 2000);
  EXPECT_EQ(items[2].prompt.back(), 2001);
  EXPECT_EQ(items[2].prompt_text, "<system>s<user>u");
  // Request i samples with seed + i; sampling settings carry over.
  EXPECT_EQ(items[0].seed, 10u);
  EXPECT_EQ(items[2].seed, 12u);
  EXPECT_FLOAT_EQ(items[1].temperature, 0.5f);
  for (const auto& w : items) EXPECT_EQ(w.arrival_s, 0.0);
}

TEST(Workload, TextPromptLongerThanTheContextIsNamed) {
  try {
    build_workload(exp(R"({"limits": {"max_context": 16},
        "workload": {"kind": "prompts", "prompts": ["a text of more than sixteen bytes"]}})"),
                   byte_encoder(), kVocab);
    FAIL();
  } catch (const ExperimentError& e) {
    ASSERT_EQ(e.lines().size(), 1u);
    EXPECT_THAT(e.lines()[0],
                HasSubstr("w.json: $.workload.prompts[0]: prompt of 34 tokens does not fit "
                          "limits.max_context = 16"));
  }
  // Without a tokenizer only ids work, and the error says so.
  try {
    build_workload(exp(R"({"workload": {"kind": "prompts", "prompts": ["x"]}})"), TextEncoder{},
                   kVocab);
    FAIL();
  } catch (const ExperimentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs the model's tokenizer.json (fix: give token ids"));
  }
}

TEST(Workload, RequestsFileLinesWithTheirOwnSettings) {
  auto dir = test::scratch_dir("workload-requests");
  std::ofstream(dir / "r.jsonl")
      << R"({"prompt_ids": [1, 2], "max_new_tokens": 5, "temperature": 0.7, "seed": 9, "tag": "a"})"
      << "\n\n"
      << R"({"prompt": "ab", "ignore_eos": true})"
      << "\n";
  Experiment e =
      resolve(json::parse(R"({"workload": {"kind": "requests", "requests_file": "r.jsonl",
                                          "max_new_tokens": 11}})"),
              (dir / "exp.json").string(), {});
  auto items = build_workload(e, byte_encoder(), kVocab);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(items[0].max_new_tokens, 5);
  EXPECT_FLOAT_EQ(items[0].temperature, 0.7f);
  EXPECT_EQ(items[0].seed, 9u);
  EXPECT_EQ(items[1].prompt, (std::vector<int32_t>{1000, 'a', 'b'}));
  EXPECT_EQ(items[1].max_new_tokens, 11);  // the experiment's default
  EXPECT_TRUE(items[1].ignore_eos);

  std::ofstream(dir / "r.jsonl") << "{\"prompt_ids\": \"oops\"}\nnot json\n";
  try {
    build_workload(e, byte_encoder(), kVocab);
    FAIL();
  } catch (const ExperimentError& err) {
    ASSERT_EQ(err.lines().size(), 2u);
    EXPECT_THAT(err.lines()[0], HasSubstr("r.jsonl line 1: a field has the wrong type"));
    EXPECT_THAT(err.lines()[1], HasSubstr("r.jsonl line 2: not a JSON object"));
  }
}

TEST(Workload, SyntheticIsSeededClampedAndStartsWithBos) {
  const char* doc = R"({"limits": {"max_context": 100}, "workload": {"count": 300, "seed": 3,
      "prompt_len": {"dist": "uniform", "min": 1, "max": 99}, "output_len": {"dist": "normal", "mean": 50, "stddev": 40}}})";
  auto a = build_workload(exp(doc), {}, kVocab);
  auto b = build_workload(exp(doc), {}, kVocab);
  ASSERT_EQ(a.size(), 300u);
  bool saw_clamp = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);  // same seed, same workload
    EXPECT_EQ(a[i].max_new_tokens, b[i].max_new_tokens);
    EXPECT_EQ(a[i].prompt[0], 128000);
    const int p = static_cast<int>(a[i].prompt.size());
    EXPECT_GE(p, 1);
    EXPECT_LE(p, 99);
    EXPECT_GE(a[i].max_new_tokens, 1);
    EXPECT_LE(p + a[i].max_new_tokens, 100);  // clamped to the context
    saw_clamp = saw_clamp || p + a[i].max_new_tokens == 100 || a[i].max_new_tokens == 1;
    EXPECT_TRUE(a[i].ignore_eos);
    for (size_t t = 1; t < a[i].prompt.size(); ++t)
      EXPECT_LT(a[i].prompt[t], 128000);  // no special tokens
  }
  EXPECT_TRUE(saw_clamp);
  auto c =
      build_workload(exp(R"({"limits": {"max_context": 100}, "workload": {"count": 300, "seed": 4,
      "prompt_len": {"dist": "uniform", "min": 1, "max": 99}, "output_len": {"dist": "fixed", "value": 1}}})"),
                     {}, kVocab);
  int same = 0;
  for (size_t i = 0; i < c.size(); ++i) same += c[i].prompt.size() == a[i].prompt.size();
  EXPECT_LT(same, 30);  // another seed, another workload
}

// Sample moments of many draws against the distribution's own (tolerances
// are > 5 standard errors for 20000 draws).
TEST(Workload, LengthDistributionsHaveTheirMoments) {
  Rng rng(test::test_seed());
  const int n = 20000;
  auto draws = [&](const char* dist, int lo, int hi) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(draw_length(json::parse(dist), rng, lo, hi));
    return v;
  };
  auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  };
  auto sd = [&](const std::vector<double>& v) {
    double m = mean(v), s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / (v.size() - 1));
  };
  EXPECT_EQ(draws(R"({"dist": "fixed", "value": 37})", 1, 1000), std::vector<double>(n, 37));
  auto u = draws(R"({"dist": "uniform", "min": 10, "max": 20})", 1, 1000);
  EXPECT_EQ(*std::min_element(u.begin(), u.end()), 10);
  EXPECT_EQ(*std::max_element(u.begin(), u.end()), 20);
  EXPECT_NEAR(mean(u), 15.0, 0.15);
  auto g = draws(R"({"dist": "normal", "mean": 500, "stddev": 50})", 1, 10000);
  EXPECT_NEAR(mean(g), 500, 2.0);
  EXPECT_NEAR(sd(g), 50, 1.5);
  auto ln = draws(R"({"dist": "lognormal", "median": 200, "sigma": 0.5})", 1, 100000);
  std::sort(ln.begin(), ln.end());
  EXPECT_NEAR(ln[n / 2], 200, 6);
  std::vector<double> logs;
  for (double x : ln) logs.push_back(std::log(x));
  EXPECT_NEAR(sd(logs), 0.5, 0.02);
  // Clamps: to the caller's limits, then to the distribution's own min/max.
  auto c = draws(R"({"dist": "normal", "mean": 50, "stddev": 100})", 5, 60);
  EXPECT_EQ(*std::min_element(c.begin(), c.end()), 5);
  EXPECT_EQ(*std::max_element(c.begin(), c.end()), 60);
  auto d = draws(R"({"dist": "normal", "mean": 50, "stddev": 100, "min": 20, "max": 30})", 1, 1000);
  EXPECT_EQ(*std::min_element(d.begin(), d.end()), 20);
  EXPECT_EQ(*std::max_element(d.begin(), d.end()), 30);
}

TEST(Arrivals, AllAtOnceAndFixedIntervalAreExact) {
  EXPECT_EQ(arrival_times(json::parse(R"({"kind": "all_at_once"})"), 3),
            (std::vector<double>{0, 0, 0}));
  auto t = arrival_times(json::parse(R"({"kind": "interval", "interval_s": 0.25})"), 4);
  EXPECT_EQ(t, (std::vector<double>{0, 0.25, 0.5, 0.75}));
}

TEST(Arrivals, PoissonGapsAreExponentialAtTheRateAndSeeded) {
  const double rate = 8.0;
  const size_t n = 20001;
  auto t = arrival_times(json{{"kind", "poisson"}, {"rate", rate}, {"seed", 7}}, n);
  EXPECT_EQ(t, arrival_times(json{{"kind", "poisson"}, {"rate", rate}, {"seed", 7}}, n));
  EXPECT_NE(t, arrival_times(json{{"kind", "poisson"}, {"rate", rate}, {"seed", 8}}, n));
  EXPECT_EQ(t[0], 0.0);
  std::vector<double> gaps;
  for (size_t i = 1; i < n; ++i) {
    ASSERT_GE(t[i], t[i - 1]);
    gaps.push_back(t[i] - t[i - 1]);
  }
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
  EXPECT_NEAR(mean, 1.0 / rate, 0.05 / rate);  // standard error 0.7 %
  // Exponential shape: P(gap < mean) = 1 - 1/e.
  const double below =
      std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g < 1.0 / rate; });
  EXPECT_NEAR(below / gaps.size(), 1.0 - std::exp(-1.0), 0.015);
}

TEST(Arrivals, WorkloadItemsCarryTheirArrivalTimes) {
  auto items = build_workload(exp(R"({"limits": {"max_context": 64}, "workload": {"count": 5,
      "prompt_len": {"dist": "fixed", "value": 4}, "output_len": {"dist": "fixed", "value": 2},
      "arrival": {"kind": "interval", "interval_s": 0.5}}})"),
                              {}, kVocab);
  ASSERT_EQ(items.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(items[i].arrival_s, 0.5 * i);
}

TEST(ServingMetrics, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);  // numpy.percentile([1,2,3,4], 90)
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(ServingMetrics, FromHandMadeTimings) {
  // Request A: submitted 0, admitted 0.1, tokens at 0.5, 0.6, 0.8; request B:
  // submitted 1.0, admitted 1.0, one token at 1.2, finished 1.2.
  RequestTiming a{0, 0, 0.1, 0.8, {0.5, 0.6, 0.8}, 10};
  RequestTiming b{1.0, 1.0, 1.0, 1.2, {1.2}, 6};
  json m = serving_metrics({a, b});
  EXPECT_EQ(m["requests"], 2);
  EXPECT_EQ(m["output_tokens"], 4);
  EXPECT_EQ(m["prompt_tokens"], 16);
  EXPECT_DOUBLE_EQ(m["duration_s"].get<double>(), 1.2);
  EXPECT_NEAR(m["request_throughput"].get<double>(), 2 / 1.2, 1e-12);
  EXPECT_NEAR(m["output_throughput"].get<double>(), 4 / 1.2, 1e-12);
  EXPECT_NEAR(m["ttft_ms"]["p50"].get<double>(), 350, 1e-9);   // 500 and 200
  EXPECT_NEAR(m["tpot_ms"]["mean"].get<double>(), 150, 1e-9);  // only A has >= 2 tokens
  EXPECT_NEAR(m["itl_ms"]["max"].get<double>(), 200, 1e-9);    // gaps 100 and 200
  EXPECT_NEAR(m["itl_ms"]["p50"].get<double>(), 150, 1e-9);
  EXPECT_NEAR(m["e2e_ms"]["max"].get<double>(), 800, 1e-9);
  ASSERT_EQ(m["admission_wait_per_request_ms"].size(), 2u);
  EXPECT_NEAR(m["admission_wait_per_request_ms"][0].get<double>(), 100, 1e-9);
  EXPECT_NEAR(m["admission_wait_per_request_ms"][1].get<double>(), 0, 1e-9);
}

TEST(ServingMetrics, RepetitionSummaryHasMedianMinMaxAndSpread) {
  json s = summarize_repetitions({json{{"x", 10.0}, {"l", {1, 2}}, {"o", {{"p50", 1.0}}}},
                                  json{{"x", 14.0}, {"o", {{"p50", 3.0}}}},
                                  json{{"x", 11.0}, {"o", {{"p50", 2.0}}}}});
  EXPECT_DOUBLE_EQ(s["x"]["median"].get<double>(), 11);
  EXPECT_DOUBLE_EQ(s["x"]["min"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(s["x"]["max"].get<double>(), 14);
  EXPECT_DOUBLE_EQ(s["x"]["spread"].get<double>(), 4.0 / 11);
  EXPECT_DOUBLE_EQ(s["o.p50"]["median"].get<double>(), 2);
  EXPECT_FALSE(s.contains("l"));  // lists are per request, not summarised
}

}  // namespace
}  // namespace lantern::experiment
