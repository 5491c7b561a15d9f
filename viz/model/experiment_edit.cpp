#include "viz/model/experiment_edit.h"

#include <cmath>

#include "harness/experiment/schema.h"
#include "kernels/base/errors.h"

namespace lantern::view {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const json* find_path(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* k : path) {
    if (!at->is_object() || !at->contains(k)) return nullptr;
    at = &(*at)[k];
  }
  return at;
}

// The variant list a 1.3 manifest recorded; nothing before 1.3.
void read_variants(const json& section, EditableExperiment& x) {
  const json* list = find_path(section, {"kernel_variants"});
  if (!list) return;
  x.facts =
      experiment::model_facts_from(*list, x.facts.max_position_embeddings);  // checks the shape
  for (const auto& [family, entries] : list->items())
    for (const json& v : entries)
      x.variants[family].push_back({v["variant"].get<int64_t>(), v["name"]});
}

// What each family ran with: "cpu_ref (0)" from the engine's config, and
// every family the experiment names.
void read_ran(const json& manifest, EditableExperiment& x) {
  if (const json* k = find_path(manifest, {"config", "kernels"}); k && k->is_object())
    for (const auto& [family, v] : k->items())
      x.ran[family] = v.is_object() && v.contains("name") && v.contains("variant")
                          ? v["name"].get<std::string>() + " (" + v["variant"].dump() + ")"
                          : v.dump();
  for (const auto& [family, v] : x.resolved["kernels"].items())
    if (!x.ran.count(family)) x.ran[family] = v.is_string() ? v.get<std::string>() : v.dump();
  for (const auto& [family, _] : x.variants)
    if (!x.ran.count(family)) x.ran[family] = "-";
}

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string number_text(double v) {
  return v == std::floor(v) && std::abs(v) < 1e15 ? strformat("%.0f", v) : strformat("%g", v);
}

// check_against with what the run recorded; before 1.3 the variants are
// unknown, so only the model's context limit is checked.
std::vector<std::string> check_facts(const EditableExperiment& x, const experiment::Experiment& e) {
  if (x.has_variant_list()) return experiment::check_against(e, x.facts);
  experiment::Experiment without_kernels = e;
  without_kernels.resolved["kernels"] = json::object();
  return experiment::check_against(without_kernels, x.facts);
}

}  // namespace

std::optional<EditableExperiment> editable_experiment(const json& manifest, std::string* why) {
  const json* section = find_path(manifest, {"experiment"});
  const json* resolved = section ? find_path(*section, {"resolved"}) : nullptr;
  if (!resolved || !resolved->is_object() || !resolved->contains("limits") ||
      !resolved->contains("kernels")) {
    if (why)
      *why =
          "this run holds no resolved experiment (recorded by `lantern generate`, not `lantern "
          "run`)";
    return std::nullopt;
  }
  try {
    EditableExperiment x;
    x.resolved = *resolved;
    if (const json* f = find_path(*section, {"file"}); f && f->is_string())
      x.file = f->get<std::string>();
    if (const json* d = find_path(*section, {"effective", "device"}); d && d->is_string())
      x.backend = *d;
    if (const json* m = find_path(manifest, {"config", "model", "max_position_embeddings"});
        m && m->is_number_integer())
      x.facts.max_position_embeddings = m->get<int>();
    read_variants(*section, x);
    read_ran(manifest, x);
    return x;
  } catch (const std::exception& e) {
    if (why) *why = std::string("manifest.json: experiment: ") + e.what();
    return std::nullopt;
  }
}

const std::vector<LimitSpec>& limit_specs() {
  static const std::vector<LimitSpec> specs = [] {
    std::vector<LimitSpec> out;
    const std::string prefix = "limits.";
    for (const experiment::Field& f : experiment::schema())
      if (f.path.rfind(prefix, 0) == 0)
        out.push_back({f.path.substr(prefix.size()), f.kind == experiment::Kind::integer, f.min,
                       f.max, f.doc});
    return out;
  }();
  return specs;
}

std::string limit_range(const LimitSpec& spec) {
  return "[" + (spec.min ? number_text(*spec.min) : "-inf") + ", " +
         (spec.max ? number_text(*spec.max) : "inf") + "]";
}

std::string limit_problem(const LimitSpec& spec, double value) {
  if (!std::isfinite(value)) return "not a number";
  if (spec.integer && value != std::floor(value)) return "must be an integer";
  if ((spec.min && value < *spec.min) || (spec.max && value > *spec.max))
    return "out of range " + limit_range(spec);
  return "";
}

ExperimentEdits initial_edits(const EditableExperiment& x) {
  ExperimentEdits e;
  e.name = x.resolved.value("name", std::string()) + "-edit";
  e.description = x.resolved.value("description", std::string());
  for (const auto& [family, v] : x.resolved["kernels"].items())
    e.kernels[family] = v.is_string() ? v.get<std::string>() : v.dump();
  const json& limits = x.resolved["limits"];
  for (const LimitSpec& s : limit_specs()) {  // a limit the experiment lacks starts at its default
    const json& v =
        limits.contains(s.key) ? limits[s.key] : experiment::find_field("limits." + s.key)->def;
    if (v.is_number()) e.limits[s.key] = v.get<double>();
  }
  return e;
}

json apply_edits(const json& resolved, const ExperimentEdits& edits) {
  json doc = resolved;
  doc["name"] = edits.name;
  doc["description"] = edits.description;
  json& kernels = doc["kernels"];
  for (const auto& [family, text] : edits.kernels) {
    if (text.empty())
      kernels.erase(family);
    else
      kernels[family] = all_digits(text) ? json(std::stoll(text)) : json(text);
  }
  for (const LimitSpec& s : limit_specs()) {
    auto it = edits.limits.find(s.key);
    if (it == edits.limits.end()) continue;
    const double v = it->second;
    // A non-integer integer field stays a double so validation names it.
    doc["limits"][s.key] = s.integer && v == std::floor(v) && std::abs(v) < 9e15
                               ? json(static_cast<int64_t>(v))
                               : json(v);
  }
  return doc;
}

std::string SaveResult::message() const {
  if (ok) return "saved " + path.string();
  if (problems.empty()) return "not saved";
  return problems.front() +
         (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "");
}

SaveResult save_edited_experiment(const EditableExperiment& x, const ExperimentEdits& edits,
                                  const fs::path& out, bool overwrite) {
  SaveResult r;
  r.path = out;
  if (out.empty() || out.filename().empty()) {
    r.problems.push_back("no file name given (fix: type a path ending in .json)");
    return r;
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !overwrite) {
    r.problems.push_back(out.string() +
                         ": the file exists (fix: choose another name or tick overwrite)");
    return r;
  }
  try {
    // As `lantern run OUT` resolves it: relative paths beside the new file.
    experiment::Experiment e =
        experiment::resolve(apply_edits(x.resolved, edits), out.string(), {}, out.parent_path());
    r.problems = check_facts(x, e);
    if (!r.problems.empty()) return r;
    experiment::save_experiment_file(out, e.resolved);
    r.ok = true;
  } catch (const experiment::ExperimentError& err) {
    r.problems = err.lines();
  } catch (const std::exception& err) {
    r.problems = {err.what()};
  }
  return r;
}

fs::path default_save_path(const EditableExperiment& x) {
  const std::string stem = x.resolved.value("name", std::string("experiment")) + "-edit.json";
  return x.file.empty() ? fs::path(stem) : x.file.parent_path() / stem;
}

}  // namespace lantern::view
