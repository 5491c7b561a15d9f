#pragma once
// "Edit as new experiment" (experiment panel): a run's resolved experiment
// (manifest experiment.resolved) with other kernel variants, limits, name and
// description, checked as `lantern run` checks a file before any model loads
// (schema and ranges, contradictions, then kernel variants and max_context
// against the facts the run recorded) and written through the experiment
// library. No CUDA: the valid variants come from the manifest's
// experiment.kernel_variants (run format 1.3); older runs edit variants as
// text and are checked against the schema only.
//
//   auto x = editable_experiment(run.manifest.json, &why);
//   ExperimentEdits e = initial_edits(*x);
//   e.kernels["attention_decode"] = "split_k_fused"; e.limits["max_seqs"] = 8;
//   SaveResult r = save_edited_experiment(*x, e, "experiments/mine.json", false);
//   r.ok ? r.path : r.problems[0]
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/experiment/experiment.h"

namespace lantern::view {

struct VariantOption {
  int64_t number = 0;
  std::string name;
};

// What a run offers for editing.
struct EditableExperiment {
  nlohmann::json resolved;     // manifest experiment.resolved
  std::filesystem::path file;  // the experiment file it came from ("" when unknown)
  std::string backend;         // what "device" became (experiment.effective.device)
  // Every kernel family (config.kernels, else resolved.kernels) -> what ran ("rmsnorm: cpu_ref
  // (0)").
  std::map<std::string, std::string> ran;
  // Family -> valid variants on the run's backend; empty before run format 1.3.
  std::map<std::string, std::vector<VariantOption>> variants;
  experiment::ModelFacts facts;  // what check_against uses (no variants before 1.3)
  bool has_variant_list() const { return !variants.empty(); }
};
// nullopt, with the reason in *why, when the manifest holds no resolved experiment
// (a `lantern generate --record` run) or a malformed one.
std::optional<EditableExperiment> editable_experiment(const nlohmann::json& manifest,
                                                      std::string* why);

// One field of `limits` as the experiment schema defines it.
struct LimitSpec {
  std::string key;  // "max_seqs"
  bool integer = true;
  std::optional<double> min, max;
  std::string doc;
};
const std::vector<LimitSpec>& limit_specs();
// "[1, 4096]", "[0.01, 1]".
std::string limit_range(const LimitSpec& spec);
// "" when `value` is allowed, else the inline problem ("out of range [1, 4096]").
std::string limit_problem(const LimitSpec& spec, double value);

struct ExperimentEdits {
  std::string name, description;
  // Family -> variant name or number as text; "" or absent: the family's
  // default (the key is left out of "kernels").
  std::map<std::string, std::string> kernels;
  std::map<std::string, double> limits;  // key -> value
};
// The edits the panel starts from: the experiment's own values, name + "-edit".
ExperimentEdits initial_edits(const EditableExperiment& x);
// `resolved` with the edits applied: integer limits as JSON integers, a
// variant of digits only as a number, anything else as it was.
nlohmann::json apply_edits(const nlohmann::json& resolved, const ExperimentEdits& edits);

struct SaveResult {
  bool ok = false;
  std::filesystem::path path;
  std::vector<std::string> problems;  // one line each; empty when ok
  // "saved PATH" or the first problem (and how many more there are).
  std::string message() const;
};
// Applies the edits, validates (relative paths resolve beside `out`, as
// `lantern run OUT` resolves them) and writes `out`. Nothing is written when
// a problem is found or `out` exists and `overwrite` is false.
SaveResult save_edited_experiment(const EditableExperiment& x, const ExperimentEdits& edits,
                                  const std::filesystem::path& out, bool overwrite);
// Where "Save as..." starts: NAME-edit.json beside the original file (or in
// the working directory when it is unknown).
std::filesystem::path default_save_path(const EditableExperiment& x);

}  // namespace lantern::view
