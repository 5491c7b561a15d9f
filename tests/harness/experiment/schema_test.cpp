// Experiment files: every validation error one by one (one line naming the
// file, the JSON path and the fix), overrides, defaults and sweep expansion.
#include "harness/experiment/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "harness/experiment/experiment.h"
#include "harness/experiment/sweep.h"
#include "tests/test_util.h"

namespace lantern::experiment {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The problems `resolve` reports for `doc` (empty when it resolves).
std::vector<std::string> problems(const json& doc, const std::vector<Override>& sets = {}) {
  try {
    resolve(doc, "exp.json", sets);
    return {};
  } catch (const ExperimentError& e) {
    return e.lines();
  }
}

struct BadCase {
  const char* doc;
  const char* path;     // expected "$.x.y" in the line
  const char* problem;  // expected words of the problem
  const char* fix;      // expected words of the fix
};

class ValidationError : public ::testing::TestWithParam<BadCase> {};

TEST_P(ValidationError, IsOneLineNamingFilePathAndFix) {
  const BadCase& c = GetParam();
  auto lines = problems(json::parse(c.doc));
  ASSERT_FALSE(lines.empty()) << c.doc;
  EXPECT_LE(lines.size(), 2u) << c.doc;  // a second, consequent line at most
  std::string line = lines[0];
  for (const std::string& l : lines)
    if (l.find(c.problem) != std::string::npos) line = l;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("exp.json: ", 0), 0u) << line;
  EXPECT_THAT(line, HasSubstr(std::string(c.path) + ": ")) << line;
  EXPECT_THAT(line, HasSubstr(c.problem)) << line;
  EXPECT_THAT(line, HasSubstr("(fix: ")) << line;
  EXPECT_THAT(line, HasSubstr(c.fix)) << line;
}

INSTANTIATE_TEST_SUITE_P(
    OneByOne, ValidationError,
    ::testing::Values(
        BadCase{R"({"limits": {"max_seq": 4}})", "$.limits", "unknown key 'max_seq'",
                "did you mean 'max_seqs'?"},
        BadCase{R"({"repetitons": 3})", "$", "unknown key 'repetitons'",
                "did you mean 'repetitions'?"},
        BadCase{R"({"zzzz": 3})", "$", "unknown key 'zzzz'", "valid keys here: schema_version"},
        BadCase{R"({"limits": {"max_seqs": "4"}})", "$.limits.max_seqs",
                "expected integer, got string", "write a value of type integer"},
        BadCase{R"({"limits": {"max_seqs": 1.5}})", "$.limits.max_seqs", "expected integer",
                "e.g. 16"},
        BadCase{R"({"cuda_graphs": "yes"})", "$.cuda_graphs", "expected boolean",
                "write a value of type boolean"},
        BadCase{R"({"limits": {"max_seqs": 0}})", "$.limits.max_seqs",
                "value 0 is out of range [1, 4096]", "use a value in [1, 4096]"},
        BadCase{R"({"sampling": {"top_p": 1.5}})", "$.sampling.top_p", "out of range",
                "use a value in"},
        BadCase{R"({"device": "gpu"})", "$.device", "'gpu' is not one of auto, cpu, cuda",
                "did you mean 'cpu'?"},
        BadCase{R"({"workload": {"arrival": {"kind": "poison"}}})", "$.workload.arrival.kind",
                "not one of", "did you mean 'poisson'?"},
        BadCase{R"({"model": {"preset": "llama-3.2-1B"}})", "$.model.preset", "not one of",
                "did you mean 'llama-3.2-1b'?"},
        BadCase{R"({"model": "models/x"})", "$.model", "expected object, got string",
                "write a value of type object"},
        BadCase{R"({"kernels": {"gemm": 1.5}})", "$.kernels.gemm",
                "expected a variant name or number", "docs/kernels.md"},
        BadCase{R"({"workload": {"kind": "prompts", "prompts": [{"text": "a", "ids": [1]}]}})",
                "$.workload.prompts[0]", "more than one of text, ids, chat", "keep exactly one"},
        BadCase{R"({"workload": {"kind": "prompts", "prompts": [{"tag": "a"}]}})",
                "$.workload.prompts[0]", "needs one of text, ids or chat", "keep exactly one"},
        BadCase{R"({"workload": {"kind": "prompts", "prompts": [{"ids": [1, -2]}]}})",
                "$.workload.prompts[0].ids", "token ids (integers in [0, 2147483647])", "[128000, 9906]"},
        BadCase{
            R"({"workload": {"kind": "prompts", "prompts": [{"chat": [{"role": "robot", "content": "x"}]}]}})",
            "$.workload.prompts[0].chat[0].role", "not one of system, user, assistant",
            "use one of them"},
        BadCase{R"({"workload": {"kind": "prompts", "prompts": [{"txt": "x"}]}})",
                "$.workload.prompts[0]", "unknown key 'txt'", "did you mean 'text'?"},
        BadCase{R"({"workload": {"prompt_len": {"dist": "uniform", "min": 8}}})",
                "$.workload.prompt_len", "dist 'uniform' needs 'max'", "add \"max\""},
        BadCase{R"({"workload": {"prompt_len": {"dist": "normal", "mean": 8, "stdev": 2}}})",
                "$.workload.prompt_len", "unknown key 'stdev'", "did you mean 'stddev'?"},
        BadCase{R"({"workload": {"output_len": {"dist": "uniform", "min": 9, "max": 4}}})",
                "$.workload.output_len", "min 9 is above max 4", "swap them"},
        BadCase{R"({"workload": {"prompt_len": {"dist": "zipf", "value": 3}}})",
                "$.workload.prompt_len.dist", "not one of fixed, uniform, normal, lognormal",
                "use one of them"},
        BadCase{R"({"sweep": {"limits.max_seqz": [1, 2]}})", "$.sweep.limits.max_seqz",
                "is not a field that can be swept", "did you mean 'limits.max_seqs'?"},
        BadCase{R"({"sweep": {"limits.max_seqs": []}})", "$.sweep.limits.max_seqs",
                "non-empty array", "[1, 2, 4]"},
        BadCase{R"({"sweep": {"limits.max_seqs": [1, 0]}})", "$.sweep.limits.max_seqs[1]",
                "out of range", "[1, 4096]"},
        BadCase{R"({"schema_version": 2})", "$.schema_version", "newer than this build reads",
                "update Lantern"},
        // Contradictions: valid fields that cannot hold together.
        BadCase{
            R"({"limits": {"max_context": 8}, "workload": {"kind": "prompts", "prompts": [{"ids": [1,2,3,4,5,6,7,8,9]}]}})",
            "$.workload.prompts[0].ids", "prompt of 9 tokens does not fit limits.max_context = 8",
            "shorten the prompt or raise limits.max_context"},
        BadCase{
            R"({"limits": {"max_context": 64}, "workload": {"prompt_len": {"dist": "fixed", "value": 64}}})",
            "$.workload.prompt_len", "do not fit limits.max_context = 64",
            "raise limits.max_context"},
        BadCase{
            R"({"limits": {"max_context": 64}, "workload": {"prompt_len": {"dist": "fixed", "value": 40}, "output_len": {"dist": "fixed", "value": 40}}})",
            "$.workload.output_len", "exceed limits.max_context = 64", "lower the lengths"},
        BadCase{R"({"workload": {"kind": "prompts"}})", "$.workload.prompts", "the list is empty",
                "add prompts"},
        BadCase{R"({"workload": {"kind": "requests"}})", "$.workload.requests_file",
                "no requests_file", "name a .jsonl file"},
        BadCase{R"({"workload": {"kind": "requests", "requests_file": "no/such.jsonl"}})",
                "$.workload.requests_file", "does not exist", "relative to the experiment file"},
        BadCase{R"({"model": {"path": "m", "preset": "tiny"}})", "$.model",
                "both model.path and model.preset", "keep one"},
        BadCase{
            R"({"limits": {"max_context": 8, "kv_block_size": 16}, "workload": {"prompt_len": {"dist": "fixed", "value": 2}, "output_len": {"dist": "fixed", "value": 2}}})",
            "$.limits.kv_block_size", "larger than limits.max_context", "lower kv_block_size"},
        BadCase{R"({"limits": {"max_seqs": 64, "max_batch_tokens": 32}})", "$.limits.max_seqs",
                "max_seqs = 64 exceeds limits.max_batch_tokens = 32", "raise max_batch_tokens"}));

TEST(Experiment, EveryProblemIsReportedAtOnce) {
  auto lines = problems(
      json::parse(R"({"limits": {"max_seqs": 0, "max_contxt": 5}, "device": 1, "warmup": -1})"));
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& l : lines) EXPECT_EQ(l.rfind("exp.json: $.", 0), 0u) << l;
}

TEST(Experiment, InvalidJsonNamesLineAndColumn) {
  auto dir = std::filesystem::temp_directory_path() / "lantern-schema-test";
  std::filesystem::create_directories(dir);
  auto file = dir / "broken.json";
  std::ofstream(file) << "{\n  \"name\": \"x\",\n  \"limits\": {\"max_seqs\": 4,}\n}\n";
  try {
    load_json_file(file);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("broken.json is not valid JSON (line 3"));
    EXPECT_THAT(e.what(), HasSubstr("(fix: "));
  }
}

TEST(Experiment, DefaultsFillEveryFieldFromTheSchema) {
  Experiment e = resolve(json::object(), "dir/my-exp.json", {});
  EXPECT_EQ(e.name(), "my-exp");  // the file name without .json
  for (const Field& f : schema()) {
    if (f.kind == Kind::object || f.path == "name") continue;
    EXPECT_EQ(e.at(f.path), f.def) << f.path;
  }
  EXPECT_EQ(e.at("limits.max_seqs"), 16);
  EXPECT_EQ(e.at("workload.kind"), "synthetic");
  EXPECT_EQ(e.at("repetitions"), 1);
  EXPECT_TRUE(e.at("model.path").is_null());
  EXPECT_EQ(e.base_dir, std::filesystem::path("dir"));
}

TEST(Experiment, GivenValuesWinAndDistributionsReplaceTheirDefaultWhole) {
  Experiment e = resolve(json::parse(R"({"name": "n", "limits": {"max_seqs": 3},
      "workload": {"prompt_len": {"dist": "uniform", "min": 4, "max": 9}}})"),
                         "x.json", {});
  EXPECT_EQ(e.name(), "n");
  EXPECT_EQ(e.at("limits.max_seqs"), 3);
  EXPECT_EQ(e.at("limits.max_context"), 4096);  // sibling default kept
  EXPECT_EQ(e.at("workload.prompt_len"), json::parse(R"({"dist": "uniform", "min": 4, "max": 9})"));
}

TEST(Experiment, OverridesParseJsonOrBareStringsAndApplyBeforeValidation) {
  Override a = parse_override("limits.max_seqs=4");
  EXPECT_EQ(a.value, 4);
  Override b = parse_override("kernels.attention_decode=seed");
  EXPECT_EQ(b.value, "seed");
  Override c = parse_override("workload.prompts=[{\"ids\":[1,2]}]");
  EXPECT_TRUE(c.value.is_array());
  Override d = parse_override("model.path=models/x=y");  // only the first '=' splits
  EXPECT_EQ(d.value, "models/x=y");
  Override p = parse_override("workload.prompt_len.value=64");
  EXPECT_EQ(p.value, 64);

  Experiment e = resolve(json::parse(R"({"limits": {"max_seqs": 2}})"), "x.json", {a, b, c});
  EXPECT_EQ(e.at("limits.max_seqs"), 4);
  EXPECT_EQ(e.at("kernels.attention_decode"), "seed");
  EXPECT_EQ(e.overrides.size(), 3u);
  // An override that breaks a range is reported like a file error.
  auto lines = problems(json::object(), {parse_override("limits.max_seqs=0")});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("$.limits.max_seqs: value 0 is out of range"));
}

TEST(Experiment, OverrideOfAnUnknownFieldSuggestsTheNearestOne) {
  try {
    parse_override("limits.max_seq=4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--set limits.max_seq: no such field (fix: did you mean limits.max_seqs?)");
  }
  EXPECT_THROW(parse_override("limits.max_seqs"), Error);  // no '='
  EXPECT_THROW(parse_override("=4"), Error);
}

TEST(Experiment, KernelVariantsAndModelLimitsAreCheckedAgainstTheFacts) {
  ModelFacts facts;
  facts.max_position_embeddings = 2048;
  facts.kernel_variants = {{"attention_decode", {"cpu_ref", "0"}}, {"rmsnorm", {"cpu_ref", "0"}}};
  Experiment ok = resolve(json::parse(R"({"kernels": {"attention_decode": 0}})"), "x.json", {});
  EXPECT_TRUE(check_against(ok, facts).empty());
  Experiment bad = resolve(json::parse(R"({"kernels": {"attention_decode": "warp", "rmsnrm": 0},
                                            "limits": {"max_context": 4000}})"),
                           "x.json", {});
  auto lines = check_against(bad, facts);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "x.json: $.kernels.attention_decode: unknown variant 'warp' for this backend "
            "(fix: valid: cpu_ref, 0)");
  EXPECT_THAT(lines[1],
              HasSubstr("$.kernels: unknown key 'rmsnrm' (fix: did you mean 'rmsnorm'?)"));
  EXPECT_THAT(lines[2],
              HasSubstr("$.limits.max_context: limits.max_context = 4000 is above the model's"));
  // The default max_context is lowered to the model's limit, not an error.
  EXPECT_TRUE(check_against(resolve(json::object(), "x.json", {}), facts).empty());
}

TEST(Experiment, RecordedVariantListsBecomeTheSameFactsAndBadShapesAreRefused) {
  ModelFacts f = model_facts_from(
      json::parse(R"({"attention_decode": [{"variant": 0, "name": "cpu_ref"}], "rmsnorm": []})"), 2048);
  EXPECT_EQ(f.max_position_embeddings, 2048);
  EXPECT_EQ(f.kernel_variants["attention_decode"], (std::vector<std::string>{"cpu_ref", "0"}));
  EXPECT_TRUE(f.kernel_variants["rmsnorm"].empty());
  EXPECT_THROW(model_facts_from(json::array(), 0), ExperimentError);
  EXPECT_THROW(model_facts_from(json::parse(R"({"a": [{"variant": "x", "name": "y"}]})"), 0),
               ExperimentError);
}

TEST(Experiment, SavedFilesReadBackEqualAndFailuresNameTheFile) {
  const auto dir = lantern::test::scratch_dir("experiment-save");
  json e = resolve(json::parse(R"({"name": "saved", "limits": {"max_seqs": 3}})"), "x.json", {}).resolved;
  save_experiment_file(dir / "saved.json", e);
  EXPECT_EQ(load_json_file(dir / "saved.json"), e);
  EXPECT_FALSE(std::filesystem::exists(dir / "saved.json.tmp"));
  try {
    save_experiment_file(dir / "no" / "such" / "x.json", e);
    FAIL() << "expected a write error";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("x.json: cannot write"));
  }
}

TEST(Experiment, DidYouMeanOnlySuggestsCloseWords) {
  EXPECT_EQ(did_you_mean("max_seq", {"max_seqs", "max_context"}), "max_seqs");
  EXPECT_EQ(did_you_mean("temprature", {"temperature", "top_k"}), "temperature");
  EXPECT_EQ(did_you_mean("qqqqqq", {"temperature", "top_k"}), "");
}

TEST(Sweep, GridIsTheCartesianProductLastParameterFastest) {
  auto a = parse_sweep_param("limits.max_seqs=1,2,4");
  auto b = parse_sweep_param("kernels.attention_decode=seed,3");
  ASSERT_EQ(a.values.size(), 3u);
  EXPECT_EQ(b.values[0], "seed");
  EXPECT_EQ(b.values[1], 3);
  auto points = expand_grid({a, b});
  ASSERT_EQ(points.size(), 6u);
  EXPECT_EQ(points[0].label, "max_seqs=1,attention_decode=seed");
  EXPECT_EQ(points[1].label, "max_seqs=1,attention_decode=3");
  EXPECT_EQ(points[5].label, "max_seqs=4,attention_decode=3");
  for (const auto& p : points) ASSERT_EQ(p.overrides.size(), 2u);
  EXPECT_EQ(points[4].overrides[0].value, 4);
  EXPECT_EQ(points[4].overrides[1].value, "seed");
  EXPECT_EQ(expand_grid({}).size(), 1u);
}

TEST(Sweep, FileSectionAndBadParamsAreHandled) {
  auto params = sweep_params_of(json::parse(R"({"sweep": {"workload.arrival.rate": [1, 4, 16]}})"));
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].values.size(), 3u);
  EXPECT_THROW(parse_sweep_param("limits.max_seqs"), Error);
  EXPECT_THROW(parse_sweep_param("limits.max_seqs=1,,2"), Error);
  EXPECT_THROW(parse_sweep_param("limits.max_sqs=1,2"), Error);
}

}  // namespace
}  // namespace lantern::experiment

namespace lantern::experiment {
namespace {

TEST(Experiment, EveryShippedExperimentValidates) {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(test::test_data_dir() / ".." / "experiments")) {
    if (e.path().extension() != ".json") continue;
    ++n;
    try {
      Experiment x = load_experiment(e.path(), {});
      EXPECT_EQ(x.name(), e.path().stem().string()) << "name and file name agree";
      EXPECT_FALSE(x.at("description").get<std::string>().empty()) << e.path();
      for (const auto& point : expand_grid(sweep_params_of(load_json_file(e.path())))) {
        auto sets = point.overrides;
        resolve(load_json_file(e.path()), e.path().string(), sets);
      }
    } catch (const Error& err) {
      ADD_FAILURE() << err.what();
    }
  }
  EXPECT_GE(n, 8);
}

}  // namespace
}  // namespace lantern::experiment

namespace lantern::experiment {
namespace {

// Random damage to a valid experiment (values replaced by other JSON types,
// keys renamed, objects emptied): resolve() either succeeds or throws
// ExperimentError with one-line problems naming the file; it never crashes
// or throws anything else.
TEST(Experiment, RandomlyDamagedFilesFailCleanly) {
  for (const char* file : {"serving-poisson.json", "seed-baseline.json"}) {
    const json base = load_json_file(test::test_data_dir() / ".." / "experiments" / file);
    std::mt19937_64& rng = test::rng();
    const std::vector<json> junk = {nullptr,
                                    true,
                                    -1,
                                    0,
                                    3.5,
                                    1e300,
                                    "x",
                                    "",
                                    json::array(),
                                    json::object(),
                                    json::array({1, "a"}),
                                    json{{"dist", "normal"}},
                                    99999999999LL};
    int failures = 0;
    for (int trial = 0; trial < 1500; ++trial) {
      json doc = base;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < edits; ++k) {
        json flat = doc.flatten();
        auto it = flat.begin();
        std::advance(it, static_cast<long>(rng() % flat.size()));
        const std::string key = it.key();
        switch (rng() % 3) {
          case 0:
            flat[key] = junk[rng() % junk.size()];
            break;
          case 1: {
            json v = flat[key];
            flat.erase(key);
            flat[key + "x"] = v;  // a misspelt key
            break;
          }
          default:
            flat.erase(key);
        }
        try {
          doc = flat.unflatten();
        } catch (const json::exception&) {
          doc = base;
        }
      }
      try {
        resolve(doc, "fuzz.json", {});
      } catch (const ExperimentError& e) {
        ++failures;
        ASSERT_FALSE(e.lines().empty());
        for (const auto& l : e.lines()) {
          ASSERT_EQ(l.rfind("fuzz.json: $", 0), 0u) << l;
          ASSERT_EQ(l.find('\n'), std::string::npos);
        }
      } catch (const std::exception& e) {
        FAIL() << "unexpected " << e.what() << " for " << doc.dump();
      }
    }
    EXPECT_GT(failures, 500) << file;  // the damage was real
  }
}

}  // namespace
}  // namespace lantern::experiment
