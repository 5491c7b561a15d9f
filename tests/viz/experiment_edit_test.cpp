// The experiment panel's "Edit as new experiment" without a window: a run
// recorded on the CPU by `lantern run`, edited (a kernel variant, a limit,
// name, description), saved, read back with the experiment parser and run
// through `lantern run --dry-run`; bad edits name the problem and write nothing.
#include "viz/model/experiment_edit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "harness/experiment/schema.h"
#include "tests/test_util.h"
#include "tests/viz/recorded_run.h"
#include "viz/model/run_data.h"

namespace lantern::view {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

struct Fixture {
  RunData run = load_run(test::recorded_cpu_run().dir);
  EditableExperiment x;
  Fixture() {
    std::string why;
    auto e = editable_experiment(run.manifest.json, &why);
    EXPECT_TRUE(e) << why;
    if (e) x = *e;
  }
};

TEST(ExperimentEdit, ARecordedRunOffersEveryFamilysVariantsAndEveryEngineLimit) {
  Fixture f;
  ASSERT_TRUE(f.x.has_variant_list())
      << "format " << f.run.manifest.format_major << "." << f.run.manifest.format_minor;
  EXPECT_EQ(f.x.backend, "cpu");
  // Every family the engine ran (Engine::describe, an independent list) has
  // its CPU reference variant on offer.
  const json& ran = f.run.manifest.json["config"]["kernels"];
  ASSERT_FALSE(ran.empty());
  for (const auto& [family, v] : ran.items()) {
    ASSERT_TRUE(f.x.variants.count(family)) << family;
    const auto& options = f.x.variants.at(family);
    // The CPU backend has variant 0 (the reference) in every family, and in
    // sample also 8 (cpu_race, the race algorithm's reference).
    ASSERT_EQ(options.size(), family == "sample" ? 2u : 1u) << family;
    if (family == "sample") {
      EXPECT_EQ(options[1].number, 8);
      EXPECT_EQ(options[1].name, "cpu_race");
    }
    EXPECT_EQ(options[0].number, 0);
    EXPECT_EQ(options[0].name, v["name"]);
    EXPECT_EQ(f.x.ran.at(family), v["name"].get<std::string>() + " (0)");
  }
  // Every EngineLimits field (EngineLimits::to_json in the engine config) is editable.
  std::set<std::string> specs;
  for (const LimitSpec& s : limit_specs()) specs.insert(s.key);
  for (const auto& [key, _] : f.run.manifest.json["config"]["limits"].items())
    EXPECT_TRUE(specs.count(key)) << key;
  const ExperimentEdits e = initial_edits(f.x);
  EXPECT_EQ(e.name, "viz-cpu-edit");
  EXPECT_EQ(e.limits.at("max_seqs"), 3);
  EXPECT_EQ(e.limits.at("kv_num_blocks"), 16);
}

TEST(ExperimentEdit, SavedFileEqualsTheResolvedExperimentExceptTheEditsAndLanternRunAcceptsIt) {
  Fixture f;
  ExperimentEdits e = initial_edits(f.x);
  const std::string family = f.x.variants.begin()->first;
  e.kernels[family] = "0";  // by number, as a user may type it
  e.limits["max_seqs"] = 2;
  e.limits["kv_memory_fraction"] = 0.5;
  e.description = "two slots";
  const fs::path out = test::scratch_dir("viz-edit-save") / "two-slots.json";
  SaveResult r = save_edited_experiment(f.x, e, out, false);
  ASSERT_TRUE(r.ok) << r.message();
  EXPECT_EQ(r.message(), "saved " + out.string());

  json expected = f.run.manifest.json["experiment"]["resolved"];
  expected["name"] = "viz-cpu-edit";
  expected["description"] = "two slots";
  expected["kernels"][family] = 0;
  expected["limits"]["max_seqs"] = 2;
  expected["limits"]["kv_memory_fraction"] = 0.5;
  const experiment::Experiment back = experiment::load_experiment(out, {});
  EXPECT_EQ(back.resolved, expected);
  EXPECT_EQ(back.resolved["schema_version"], experiment::kSchemaVersion);

  test::CommandResult dry = test::run_command(test::built_binary("lantern").string() + " run " +
                                              out.string() + " --dry-run --quiet");
  EXPECT_EQ(dry.status, 0) << dry.output;
  EXPECT_THAT(dry.output, HasSubstr("valid (viz-cpu-edit)"));

  // Saving again over it needs "overwrite".
  SaveResult again = save_edited_experiment(f.x, e, out, false);
  EXPECT_FALSE(again.ok);
  EXPECT_THAT(again.message(),
              HasSubstr("the file exists (fix: choose another name or tick overwrite)"));
  EXPECT_TRUE(save_edited_experiment(f.x, e, out, true).ok);
}

// Each bad edit gives `lantern run`'s one-line error and writes nothing.
TEST(ExperimentEdit, OutOfRangeLimitsAndUnknownVariantsAreRefusedAndNothingIsWritten) {
  Fixture f;
  const fs::path dir = test::scratch_dir("viz-edit-refused");
  struct Case {
    std::function<void(ExperimentEdits&)> edit;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {[](ExperimentEdits& e) { e.limits["max_seqs"] = 0; },
       "$.limits.max_seqs: value 0 is out of range [1, 4096] (fix: use a value in [1, 4096])"},
      {[](ExperimentEdits& e) { e.limits["kv_memory_fraction"] = 1.5; },
       "$.limits.kv_memory_fraction: value 1.5 is out of range [0.01, 1]"},
      {[](ExperimentEdits& e) { e.limits["max_batch_tokens"] = 2; },
       "$.limits.max_seqs: limits.max_seqs = 3 exceeds limits.max_batch_tokens = 2"},
      {[](ExperimentEdits& e) { e.limits["max_context"] = 1e6; },
       "is above the model's max_position_embeddings"},
      {[](ExperimentEdits& e) { e.kernels["attention_decode"] = "split_k_fused"; },
       "$.kernels.attention_decode: unknown variant 'split_k_fused' for this backend (fix: valid: "
       "cpu_ref, 0)"},
      {[](ExperimentEdits& e) { e.kernels["attention_decod"] = "cpu_ref"; },
       "$.kernels: unknown key 'attention_decod' (fix: did you mean 'attention_decode'?)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    ExperimentEdits e = initial_edits(f.x);
    cases[i].edit(e);
    const fs::path out = dir / ("bad" + std::to_string(i) + ".json");
    SaveResult r = save_edited_experiment(f.x, e, out, false);
    EXPECT_FALSE(r.ok) << i;
    EXPECT_THAT(r.message(), HasSubstr(cases[i].problem)) << i;
    EXPECT_THAT(r.message(), HasSubstr(out.string() + ": $.")) << "names the file: " << r.message();
    EXPECT_FALSE(fs::exists(out)) << i;
    EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << i;
  }
  EXPECT_EQ(limit_problem(limit_specs()[0], 0), "out of range [1, 16777216]");  // max_batch_tokens
  EXPECT_EQ(limit_problem(limit_specs()[0], 2.5), "must be an integer");
  EXPECT_EQ(limit_problem(limit_specs()[0], 64), "");
  EXPECT_EQ(limit_range(limit_specs()[5]), "[0.01, 1]");  // kv_memory_fraction
  SaveResult no_name = save_edited_experiment(f.x, initial_edits(f.x), "", false);
  EXPECT_THAT(no_name.message(), HasSubstr("no file name given"));
}

TEST(ExperimentEdit, OlderRunsEditVariantsAsTextAndGenerateRunsHaveNothingToEdit) {
  Fixture f;
  json older = f.run.manifest.json;
  older["experiment"].erase("kernel_variants");  // as run format 1.2 wrote it
  older["format_version"] = "1.2";
  older["experiment"]["resolved"]["limits"].erase("max_queue");  // a limit it lacks starts at the default
  std::string why;
  auto x = editable_experiment(older, &why);
  ASSERT_TRUE(x) << why;
  EXPECT_FALSE(x->has_variant_list());
  EXPECT_EQ(x->ran.size(),
            f.run.manifest.json["config"]["kernels"].size());  // families still listed
  ExperimentEdits e = initial_edits(*x);
  EXPECT_EQ(e.limits.at("max_queue"), 4096);
  e.limits["max_seqs"] = 5000;  // the schema is still checked
  EXPECT_THAT(
      save_edited_experiment(*x, e, test::scratch_dir("viz-edit-old") / "o.json", false).message(),
      HasSubstr("out of range [1, 4096]"));

  json generated = f.run.manifest.json;
  generated.erase("experiment");
  EXPECT_FALSE(editable_experiment(generated, &why));
  EXPECT_THAT(why, HasSubstr("no resolved experiment"));
  json damaged = f.run.manifest.json;
  damaged["experiment"]["kernel_variants"] = json::array({1, 2});
  EXPECT_FALSE(editable_experiment(damaged, &why));
  EXPECT_THAT(why, HasSubstr("kernel_variants"));
}

}  // namespace
}  // namespace lantern::view
