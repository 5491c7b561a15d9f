// What the experiment-file fuzz target (tests/fuzz/fuzz_experiment.cpp)
// found, each as the test that would have caught it: every one is now a
// clear one-line problem naming the field and the fix, never a crash, an
// undefined-behaviour report or a raw nlohmann exception. The inputs are
// also kept in tests/fuzz/regressions/experiment/ and replayed by
// scripts/fuzz.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "harness/experiment/experiment.h"
#include "harness/experiment/workload.h"
#include "tests/test_util.h"

namespace lantern::experiment {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The one problem resolve() reports for `doc`; fails when it accepts it.
std::string only_problem(const std::string& doc, const std::vector<Override>& sets = {}) {
  try {
    resolve(json::parse(doc), "f.json", sets);
  } catch (const ExperimentError& e) {
    EXPECT_EQ(e.lines().size(), 1u) << e.what();
    for (const std::string& l : e.lines()) EXPECT_EQ(l.find('\n'), std::string::npos) << l;
    return e.lines().front();
  }
  ADD_FAILURE() << "accepted: " << doc;
  return "";
}

TEST(ExperimentFuzzFindings, SetValueThatIsNotUtf8IsRefusedNotThrownByTheJsonDump) {
  // Was: nlohmann type_error.316 "invalid UTF-8 byte" from the error message's dump().
  try {
    parse_override("workload.output_len={\"dist\":\"fix\xba\"}");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--set workload.output_len: the value is not valid UTF-8 (fix: write it in UTF-8)");
  }
}

TEST(ExperimentFuzzFindings, DeeplyNestedFileIsOneLineNotAStackOverflow) {
  // Was: AddressSanitizer stack-overflow in nlohmann's recursive dump() at 200,000 levels.
  const auto file = test::scratch_dir("experiment-fuzz") / "deep.json";
  std::ofstream(file) << "{\"description\": " << std::string(200000, '[')
                      << std::string(200000, ']') << "}";
  try {
    load_json_file(file);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("deep.json: JSON nested deeper than 256 levels"));
  }
}

TEST(ExperimentFuzzFindings, UniformWithMaxZeroBelowMinIsRefused) {
  // Was: a division by zero (SIGFPE) drawing from the empty range [1, 0].
  EXPECT_EQ(only_problem(
                R"({"workload": {"prompt_len": {"dist": "uniform", "min": 1, "max": 0}}})"),
            "f.json: $.workload.prompt_len: min 1 is above max 0 (fix: swap them)");
  // max 0 still means "no cap" for the other distributions.
  EXPECT_NO_THROW(resolve(
      json::parse(R"({"workload": {"prompt_len": {"dist": "normal", "mean": 8, "stddev": 2,
                                                  "min": 4, "max": 0}}})"),
      "f.json", {}));
}

TEST(ExperimentFuzzFindings, HugeLengthsAreOutOfRangeNotCastToLong) {
  // Was: UBSan "1e+300 is outside the range of representable values of type 'long'".
  EXPECT_EQ(only_problem(R"({"workload": {"prompt_len": {"dist": "fixed", "value": 1e300}}})"),
            "f.json: $.workload.prompt_len.value: expected a number in [1, 16777216], got 1e+300 "
            "(fix: write a token count)");
  EXPECT_THAT(only_problem(R"({"workload": {"output_len": {"dist": "uniform", "min": 3,
                                                           "max": 1e300}}})"),
              HasSubstr("$.workload.output_len.max: expected a number in [0, 16777216]"));
  EXPECT_THAT(only_problem(R"({"workload": {"output_len": {"dist": "lognormal", "median": 3,
                                                           "sigma": 1000}}})"),
              HasSubstr("$.workload.output_len.sigma: expected a number in [0, 16]"));
}

TEST(ExperimentFuzzFindings, IdsAndMaxNewTokensBeyond32BitsAreRefusedNotWrapped) {
  // Was: id 4294967296 became token 0 and max_new_tokens 4294967297 became 1, silently.
  EXPECT_THAT(
      only_problem(R"({"workload": {"kind": "prompts", "prompts": [{"ids": [1, 4294967296]}]}})"),
      HasSubstr("$.workload.prompts[0].ids: expected a non-empty array of token ids (integers "
                "in [0, 2147483647])"));
  EXPECT_THAT(only_problem(R"({"workload": {"kind": "prompts",
                               "prompts": [{"ids": [1], "max_new_tokens": 4294967297}]}})"),
              HasSubstr("$.workload.prompts[0].max_new_tokens: expected an integer in [1, "
                        "16777216], got 4294967297"));
}

TEST(ExperimentFuzzFindings, KeysWithControlCharactersStayOnOneLine) {
  // Was: an unknown key "a\nb" split its problem over two lines of output.
  EXPECT_THAT(only_problem(R"({"limits": {"a\nb": 1}})"),
              HasSubstr("$.limits: unknown key 'a\\x0ab'"));
  try {
    parse_override("a\nb=1");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--set a\\x0ab: no such field"));
  }
}

TEST(ExperimentFuzzFindings, SetKeysWithTildeOrSlashAreKeysNotPointerSyntax) {
  // Was: nlohmann parse_error.108 "escape character '~' must be followed with '0' or '1'",
  // uncaught, from the JSON pointer built out of `--set kernels.<key with ~>=...` (a
  // kernel-family key may hold anything, so the path passed the field check).
  // The key stays a key (the family name is checked against the registry when the engine starts).
  const Override o = parse_override("kernels.a~b/c=2");
  const Experiment e = resolve(json::object(), "f.json", {o});
  EXPECT_EQ(e.at("kernels.a~b/c"), 2);
  json doc = json::object();
  apply_override(doc, o);
  EXPECT_EQ(doc["kernels"]["a~b/c"], 2);
}

TEST(ExperimentFuzzFindings, AcceptedUniformWorkloadDrawsInsideItsRange) {
  Experiment e = resolve(json::parse(R"({"limits": {"max_context": 64}, "workload": {"count": 50,
                             "prompt_len": {"dist": "uniform", "min": 3, "max": 9},
                             "output_len": {"dist": "uniform", "min": 4, "max": 4}}})"),
                         "f.json", {});
  std::set<size_t> lengths;
  for (const WorkItem& w : build_workload(e, {}, {1000, -1, -1})) {
    EXPECT_GE(w.prompt.size(), 3u);
    EXPECT_LE(w.prompt.size(), 9u);
    EXPECT_EQ(w.max_new_tokens, 4);
    lengths.insert(w.prompt.size());
  }
  EXPECT_GE(lengths.size(), 4u);  // 50 draws from 7 values
}

}  // namespace
}  // namespace lantern::experiment
