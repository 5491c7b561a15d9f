#include "harness/experiment/compare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "kernels/base/errors.h"
#include "harness/experiment/serving.h"
#include "harness/runfmt/summary.h"
#include "harness/runfmt/kernels_csv.h"

namespace lantern::experiment {

namespace {

using nlohmann::json;

struct MetricDef {
  const char* label;
  const char* key;
};
const MetricDef kMetrics[] = {
    {"output throughput (tok/s)", "output_throughput"},
    {"request throughput (req/s)", "request_throughput"},
    {"duration (s)", "duration_s"},
    {"TTFT p50 (ms)", "ttft_ms.p50"},
    {"TTFT p99 (ms)", "ttft_ms.p99"},
    {"TPOT p50 (ms)", "tpot_ms.p50"},
    {"TPOT p99 (ms)", "tpot_ms.p99"},
    {"ITL p50 (ms)", "itl_ms.p50"},
    {"ITL p99 (ms)", "itl_ms.p99"},
    {"E2E p50 (ms)", "e2e_ms.p50"},
    {"E2E p99 (ms)", "e2e_ms.p99"},
    {"admission wait p50 (ms)", "admission_wait_ms.p50"},
    {"admission wait p99 (ms)", "admission_wait_ms.p99"},
    {"decode tok/s (decode steps)", "decode_tokens_per_s"},
};

const json* find_path(const json& j, const std::string& dotted) {
  const json* cur = &j;
  std::stringstream ss(dotted);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (!cur->is_object() || !cur->contains(part)) return nullptr;
    cur = &(*cur)[part];
  }
  return cur;
}

std::string fmt(double v) {
  const double a = std::abs(v);
  return strformat(a >= 1000 ? "%.0f" : a >= 100 ? "%.1f" : a >= 1 ? "%.2f" : "%.4f", v);
}

std::string ratio_cell(const MetricValue& base, const MetricValue& v) {
  if (!base.present || !v.present || base.value == 0) return "-";
  std::string mark = noise_mark(base, v);
  return strformat("%.3f", v.value / base.value) + (mark.empty() ? "" : " " + mark);
}

std::vector<std::string> run_header(const std::vector<CompareRun>& runs, const std::string& first) {
  std::vector<std::string> h = {first};
  for (size_t i = 0; i < runs.size(); ++i) {
    h.push_back(runs[i].name);
    if (i > 0) h.push_back(runs[i].name + "/" + runs[0].name);
  }
  return h;
}

// Per repetition: the engine steps it covered ([first, end)); one range
// covering everything when the run did not record them.
std::vector<std::pair<int64_t, int64_t>> step_ranges(const CompareRun& run) {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (const json* reps = find_path(run.metrics, "repetitions"); reps && reps->is_array())
    for (const json& r : *reps)
      if (r.contains("step_range") && r["step_range"].is_array() && r["step_range"].size() == 2)
        out.emplace_back(r["step_range"][0].get<int64_t>(), r["step_range"][1].get<int64_t>());
  if (out.empty()) out.emplace_back(INT64_MIN, INT64_MAX);
  return out;
}

MetricValue from_samples(const std::vector<double>& samples) {
  MetricValue m;
  if (samples.empty()) return m;
  m.present = true;
  m.value = percentile(samples, 50);
  if (samples.size() >= 2 && m.value != 0)
    m.spread = (*std::max_element(samples.begin(), samples.end()) -
                *std::min_element(samples.begin(), samples.end())) /
               std::abs(m.value);
  return m;
}

struct KernelStats {
  std::map<std::string, MetricValue> op_us_per_call, family_us_per_step, op_path_us_per_step;
  std::map<std::string, std::string> op_variant;
  int reps = 0, reps_traced = 0;  // repetitions, and those with kernel rows
};

// One step's kernels (any order) onto its critical path (runfmt::path_shares):
// each charged the time it adds past the latest end before it, the idle gap
// before it included, per op; the step's span under "(step span)".
void charge_critical_path(std::vector<const runfmt::KernelRow*>& rows, std::map<std::string, double>& path_us) {
  double span = 0;
  for (const runfmt::PathShare& p : runfmt::path_shares(rows)) {
    path_us[p.row->op.empty() ? "(unattributed)" : p.row->op] += p.busy_us + p.gap_before_us;
    span += p.busy_us + p.gap_before_us;
  }
  path_us["(step span)"] += span;
}

KernelStats kernel_stats(const CompareRun& run) {
  KernelStats ks;
  std::map<std::string, std::vector<double>> op_samples, fam_samples, path_samples;
  int device = std::numeric_limits<int>::max();  // rank 0's device: the critical path is one GPU's
  for (const runfmt::KernelRow& r : run.kernels) device = std::min(device, r.device);
  for (const auto& [first, end] : step_ranges(run)) {
    // One op call = one (step, launch): a graph replay repeats its nodes' launch
    // ids in every step, and one call may run several kernels (summed).
    std::map<std::string, std::map<std::pair<int64_t, int64_t>, double>> op_calls;  // op -> call -> us
    std::map<std::string, double> fam_us, path_us;
    std::map<int64_t, std::vector<const runfmt::KernelRow*>> path_rows;  // step -> rank 0's kernels
    std::set<int64_t> steps;
    for (const runfmt::KernelRow& r : run.kernels) {
      if (r.step < first || r.step >= end) continue;
      if (r.device == device) path_rows[r.step].push_back(&r);
      if (r.launch < 0 || r.op.empty()) continue;
      op_calls[r.op][{r.step, r.launch}] += r.dur_us;
      fam_us[r.family.empty() ? r.op : r.family] += r.dur_us;  // engine kernels (kv_table_update) by op
      steps.insert(r.step);
      ks.op_variant[r.op] = r.family + "." + r.variant_name;
    }
    for (const auto& [op, calls] : op_calls) {
      double sum = 0;
      for (const auto& [_, us] : calls) sum += us;
      op_samples[op].push_back(sum / static_cast<double>(calls.size()));
    }
    for (const auto& [fam, us] : fam_us)
      fam_samples[fam].push_back(us / static_cast<double>(steps.size()));
    for (auto& [step, rows] : path_rows) charge_critical_path(rows, path_us);
    for (const auto& [op, us] : path_us)
      path_samples[op].push_back(us / static_cast<double>(path_rows.size()));
    ++ks.reps;
    if (!steps.empty()) ++ks.reps_traced;
  }
  for (const auto& [k, v] : op_samples) ks.op_us_per_call[k] = from_samples(v);
  for (const auto& [k, v] : fam_samples) ks.family_us_per_step[k] = from_samples(v);
  for (const auto& [k, v] : path_samples) ks.op_path_us_per_step[k] = from_samples(v);
  return ks;
}

enum class Keyed { op_call, family_step, op_path };

const std::map<std::string, MetricValue>& keyed_values(const KernelStats& s, Keyed kind) {
  return kind == Keyed::op_call ? s.op_us_per_call : kind == Keyed::family_step ? s.family_us_per_step
                                                                               : s.op_path_us_per_step;
}

Table keyed_table(const std::vector<CompareRun>& runs, const std::vector<KernelStats>& stats, Keyed kind) {
  const bool ops = kind == Keyed::op_call;
  Table t;
  t.title = kind == Keyed::op_call       ? "kernel time per op call (us, median over repetitions)"
            : kind == Keyed::family_step ? "kernel time per family (us per traced step, median over repetitions)"
                                         : "time on the step's critical path per op (us per traced step, median "
                                           "over repetitions)";
  t.header = run_header(runs, kind == Keyed::family_step ? "family" : "op");
  if (ops) t.header.insert(t.header.begin() + 1, "variant (first run)");
  std::vector<std::string> keys;
  for (const KernelStats& s : stats)
    for (const auto& [k, _] : keyed_values(s, kind))
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  // Largest first in the first run.
  auto first_value = [&](const std::string& k) {
    const auto& m = keyed_values(stats[0], kind);
    auto it = m.find(k);
    return it == m.end() ? 0.0 : it->second.value;
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](auto& a, auto& b) { return first_value(a) > first_value(b); });
  for (const std::string& k : keys) {
    std::vector<std::string> row = {k};
    if (ops) {
      std::string variants;
      for (size_t i = 0; i < stats.size(); ++i) {
        auto it = stats[i].op_variant.find(k);
        std::string v = it == stats[i].op_variant.end() ? "-" : it->second;
        if (variants.find(v) == std::string::npos) variants += (variants.empty() ? "" : " vs ") + v;
      }
      row.push_back(variants);
    }
    MetricValue base;
    for (size_t i = 0; i < stats.size(); ++i) {
      const auto& m = keyed_values(stats[i], kind);
      auto it = m.find(k);
      MetricValue v = it == m.end() ? MetricValue{} : it->second;
      if (i == 0) base = v;
      row.push_back(v.present ? fmt(v.value) : "-");
      if (i > 0) row.push_back(ratio_cell(base, v));
    }
    t.rows.push_back(row);
  }
  return t;
}

void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

std::map<std::string, std::string> config_of(const CompareRun& run) {
  std::map<std::string, std::string> flat;
  const json& m = run.manifest;
  if (const json* e = find_path(m, "experiment.resolved"))
    flatten(*e, "", flat);
  else if (m.contains("config"))
    flatten(m["config"], "config", flat);
  // What "auto" became in this run.
  if (const json* eff = find_path(m, "experiment.effective"); eff && eff->is_object()) {
    flat["device"] = eff->value("device", "");
    if (!eff->value("preset", "").empty()) flat["model.preset"] = eff->value("preset", "");
  }
  flat.erase("name");
  flat.erase("description");
  for (const char* key : {"backend", "config.tensor_parallel", "git.commit", "git.dirty", "gpu.name",
                          "peer.name", "peer.versions", "hashes.weights", "build.type"})
    if (const json* v = find_path(m, key); v && !v->is_null())
      flat[std::string("run.") + key] = v->is_string() ? v->get<std::string>() : v->dump();
  return flat;
}

Table config_diff(const std::vector<CompareRun>& runs) {
  Table t;
  t.title = "config diff (fields that differ)";
  t.header = {"field"};
  for (const CompareRun& r : runs) t.header.push_back(r.name);
  std::vector<std::map<std::string, std::string>> flats;
  std::set<std::string> keys;
  for (const CompareRun& r : runs) {
    flats.push_back(config_of(r));
    for (const auto& [k, _] : flats.back()) keys.insert(k);
  }
  for (const std::string& k : keys) {
    std::vector<std::string> row = {k};
    bool differs = false;
    for (size_t i = 0; i < flats.size(); ++i) {
      auto it = flats[i].find(k);
      row.push_back(it == flats[i].end() ? "(absent)" : it->second.substr(0, 60));
      differs = differs || row.back() != row[1];
    }
    if (differs) t.rows.push_back(row);
  }
  if (t.rows.empty()) t.notes.push_back("(no differences)");
  return t;
}

// The GPU's clocks over a run (runfmt::clocks_line): "NAME: ..." or "" when
// the run has none.
std::string clocks_line(const CompareRun& r) {
  const std::string l = runfmt::clocks_line(r.manifest);
  if (l.empty()) return "";
  return r.name + ": " + l + (runfmt::clocks_throttled(r.manifest) ? " (throttled)" : "");
}

// Notes on the runs' clocks: each run's line, and a warning when one ran
// throttled and another did not (their times then differ by the clock too).
std::vector<std::string> clocks_notes(const std::vector<CompareRun>& runs) {
  std::vector<std::string> notes;
  std::string lines;
  int throttled = 0, read = 0;
  for (const CompareRun& r : runs) {
    const std::string l = clocks_line(r);
    if (l.empty()) continue;
    lines += (lines.empty() ? "" : "; ") + l;
    if (find_path(r.manifest, "gpu.clocks")->contains("error")) continue;
    ++read;
    throttled += runfmt::clocks_throttled(r.manifest) ? 1 : 0;
  }
  if (lines.empty()) return notes;
  notes.push_back("GPU clocks: " + lines);
  if (throttled > 0 && throttled < read)
    notes.push_back("WARNING: some runs ran throttled and some did not: their times differ by the GPU's clock too "
                    "(rerun them back to back, or compare medians over several runs of each)");
  return notes;
}

}  // namespace

CompareRun load_compare_run(const std::filesystem::path& dir) {
  auto read_json = [&](const char* name) {
    std::ifstream in(dir / name);
    LANTERN_CHECK(in,
                  "%s: no %s (fix: give a run directory written by `lantern run` or a peer script)",
                  dir.c_str(), name);
    json j = json::parse(in, nullptr, false);
    LANTERN_CHECK(!j.is_discarded() && j.is_object(),
                  "%s/%s is not a JSON object (fix: re-record the run)", dir.c_str(), name);
    return j;
  };
  CompareRun r;
  r.dir = dir.string();
  r.manifest = read_json("manifest.json");
  r.metrics = read_json("metrics.json");
  r.name = r.manifest.value("name", dir.filename().string());
  if (std::ifstream k(dir / "kernels.csv"); k) {
    std::stringstream buf;
    buf << k.rdbuf();
    r.kernels = runfmt::parse_kernels_csv(buf.str(), (dir / "kernels.csv").string());
  }
  return r;
}

MetricValue metric_value(const CompareRun& run, const std::string& key) {
  MetricValue m;
  if (const json* s = find_path(run.metrics, "summary"); s && s->contains(key)) {
    const json& e = (*s)[key];
    m.present = true;
    m.value = e.value("median", 0.0);
    const json* reps = find_path(run.metrics, "repetitions");
    if (reps && reps->is_array() && reps->size() >= 2) m.spread = e.value("spread", 0.0);
    return m;
  }
  // Runs recorded by `lantern generate --record`: the harness's own keys.
  static const std::map<std::string, std::pair<std::string, double>> legacy = {
      {"output_throughput", {"tokens_per_s", 1}}, {"duration_s", {"wall_s", 1}},
      {"ttft_ms.p50", {"ttft_s.p50", 1e3}},       {"ttft_ms.p99", {"ttft_s.p99", 1e3}},
      {"tpot_ms.p50", {"tpot_s.p50", 1e3}},       {"tpot_ms.p99", {"tpot_s.p99", 1e3}},
      {"e2e_ms.p50", {"latency_s.p50", 1e3}},     {"e2e_ms.p99", {"latency_s.p99", 1e3}}};
  std::string path = key;
  double scale = 1;
  if (const json* v = find_path(run.metrics, key); !v || !v->is_number()) {
    auto it = legacy.find(key);
    if (it == legacy.end()) return m;
    std::tie(path, scale) = it->second;
  }
  if (const json* v = find_path(run.metrics, path); v && v->is_number()) {
    m.present = true;
    m.value = v->get<double>() * scale;
  }
  return m;
}

std::string noise_mark(const MetricValue& base, const MetricValue& value) {
  if (!base.present || !value.present || base.spread < 0 || value.spread < 0 || base.value == 0)
    return "";
  const double band = std::max(base.spread, value.spread);
  return std::abs(value.value / base.value - 1.0) > band ? "*" : "~";
}

Comparison compare_runs(const std::vector<CompareRun>& input) {
  LANTERN_CHECK(!input.empty(), "compare needs at least one run");
  // Runs with the same name (a rerun, a sweep's points) are told apart by directory.
  std::vector<CompareRun> runs = input;
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = 0; j < runs.size(); ++j)
      if (i != j && input[i].name == input[j].name)
        runs[i].name = std::filesystem::path(runs[i].dir).filename().string();
  Comparison c;
  c.metrics.title = "metrics (median over repetitions)";
  c.metrics.header = run_header(runs, "metric");
  for (const MetricDef& d : kMetrics) {
    std::vector<std::string> row = {d.label};
    MetricValue base = metric_value(runs[0], d.key);
    bool any = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      MetricValue v = metric_value(runs[i], d.key);
      any = any || v.present;
      row.push_back(v.present ? fmt(v.value) : "-");
      if (i > 0) row.push_back(ratio_cell(base, v));
    }
    if (any) c.metrics.rows.push_back(row);
  }
  std::vector<std::string> reps;
  for (const CompareRun& r : runs) {
    const json* x = find_path(r.metrics, "repetitions");
    reps.push_back(r.name + ": " + std::to_string(x && x->is_array() ? x->size() : 1));
  }
  std::string rep_note;
  for (const std::string& s : reps) rep_note += (rep_note.empty() ? "" : ", ") + s;
  c.metrics.notes = {
      "marks: * outside the noise band ((max-min)/median over the repetitions of either run), ~ "
      "within it; "
      "no mark: a run has one repetition. Repetitions: " +
      rep_note};
  for (std::string& n : clocks_notes(runs)) c.metrics.notes.push_back(std::move(n));
  std::vector<KernelStats> stats;
  bool kernels = false;
  for (const CompareRun& r : runs) {
    stats.push_back(kernel_stats(r));
    kernels = kernels || !r.kernels.empty();
  }
  if (kernels) {
    c.ops = keyed_table(runs, stats, Keyed::op_call);
    c.families = keyed_table(runs, stats, Keyed::family_step);
    c.path = keyed_table(runs, stats, Keyed::op_path);
    c.path.notes.push_back(
        "each kernel charged only the time by which it moved its step's end (a step's kernels sorted by "
        "start): PDL-launched kernels start early and wait, so per-call durations overlap and over-count; "
        "(step span): first kernel start to last end");
    c.ops.notes = c.metrics.notes;
    // CUPTI's default budget windows may miss repetitions of a short run: say how
    // many the medians cover, and how to cover them all.
    std::string traced;
    bool missed = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      traced += (traced.empty() ? "" : ", ") + runs[i].name + ": " + std::to_string(stats[i].reps_traced) +
                " of " + std::to_string(stats[i].reps);
      missed = missed || stats[i].reps_traced < stats[i].reps;
    }
    c.families.notes.push_back("repetitions with traced kernels: " + traced);
    if (missed)
      c.families.notes.push_back(
          "CUPTI's budget windows missed some repetitions (kernel medians cover the rest; '-': none); for "
          "kernel rows in every repetition rerun with --set harness.cupti_window=8:64 (or "
          "harness.cupti_all_steps=true, which slows every step)");
  }
  c.config = config_diff(runs);
  return c;
}

}  // namespace lantern::experiment
