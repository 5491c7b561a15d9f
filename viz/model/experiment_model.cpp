#include "viz/model/experiment_model.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "harness/runfmt/json_util.h"
#include "harness/runfmt/summary.h"
#include "viz/model/run_data.h"

namespace lantern::view {

namespace {

std::string print(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {  // 26.618660406200863 -> 26.6187
    char s[32];
    std::snprintf(s, sizeof s, "%.6g", v.get<double>());
    return s;
  }
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

using Flat = std::map<std::string, nlohmann::json>;

// Key `k` of both sides printed, and B / A when both are numbers and A != 0.
DiffRow diff_row(const std::string& k, const Flat& fa, const Flat& fb) {
  DiffRow row;
  row.key = k;
  auto ia = fa.find(k), ib = fb.find(k);
  if (ia != fa.end()) row.a = print(ia->second);
  if (ib != fb.end()) row.b = print(ib->second);
  if (ia != fa.end() && ib != fb.end() && ia->second.is_number() && ib->second.is_number() &&
      ia->second.get<double>() != 0)
    row.ratio = ib->second.get<double>() / ia->second.get<double>();
  return row;
}

}  // namespace

std::map<std::string, nlohmann::json> flatten(const nlohmann::json& j, const std::string& prefix) {
  std::map<std::string, nlohmann::json> out;
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) {
      auto sub = flatten(v, prefix.empty() ? k : prefix + "." + k);
      out.insert(sub.begin(), sub.end());
    }
  } else if (!prefix.empty()) {
    out[prefix] = j;
  }
  return out;
}

std::vector<DiffRow> diff_json(const nlohmann::json& a, const nlohmann::json& b) {
  auto fa = flatten(a), fb = flatten(b);
  std::set<std::string> keys;
  for (auto& [k, v] : fa) keys.insert(k);
  for (auto& [k, v] : fb) keys.insert(k);
  std::vector<DiffRow> out;
  for (const std::string& k : keys) {
    auto ia = fa.find(k), ib = fb.find(k);
    if (ia != fa.end() && ib != fb.end() && ia->second == ib->second) continue;
    out.push_back(diff_row(k, fa, fb));
  }
  return out;
}

std::vector<DiffRow> side_by_side_numbers(const nlohmann::json& a, const nlohmann::json& b) {
  auto fa = flatten(a), fb = flatten(b);
  std::set<std::string> keys;
  for (auto& [k, v] : fa)
    if (v.is_number() && !v.is_boolean()) keys.insert(k);
  for (auto& [k, v] : fb)
    if (v.is_number() && !v.is_boolean()) keys.insert(k);
  std::vector<DiffRow> out;
  for (const std::string& k : keys) out.push_back(diff_row(k, fa, fb));
  return out;
}

Sweep load_sweep(const std::filesystem::path& dir) {
  Sweep s;
  for (const auto& run : sweep_runs(dir)) {
    try {
      SweepPoint p;
      p.run = run.filename().string();
      nlohmann::json manifest = runfmt::detail::read_json_file(run / "manifest.json");
      p.config = manifest.value("config", nlohmann::json::object());
      p.metrics = runfmt::detail::read_json_file(run / "metrics.json");
      s.points.push_back(std::move(p));
    } catch (const std::exception& e) {
      s.errors.push_back(run.filename().string() + ": " + e.what());
    }
  }
  if (s.points.empty()) return s;
  std::vector<std::map<std::string, nlohmann::json>> configs, metrics;
  for (const auto& p : s.points) configs.push_back(flatten(p.config)), metrics.push_back(flatten(p.metrics));
  std::vector<std::string> numeric, other;
  for (const auto& [k, v] : configs[0]) {
    bool varies = false, all_numbers = v.is_number();
    for (const auto& c : configs) {
      auto it = c.find(k);
      if (it == c.end()) { all_numbers = false; varies = true; continue; }
      varies = varies || it->second != v;
      all_numbers = all_numbers && it->second.is_number();
    }
    if (varies) (all_numbers ? numeric : other).push_back(k);
  }
  // Sizes under "memory." follow from the limits: list them after the knobs.
  auto derived = [](const std::string& k) { return k.rfind("memory.", 0) == 0 || k == "limits.logits_rows"; };
  std::stable_partition(numeric.begin(), numeric.end(), [&](const std::string& k) { return !derived(k); });
  s.parameters = numeric;
  s.parameters.insert(s.parameters.end(), other.begin(), other.end());
  for (const auto& [k, v] : metrics[0]) {
    if (!v.is_number() || k == "format_version") continue;
    bool everywhere = true;
    for (const auto& m : metrics) {
      auto it = m.find(k);
      everywhere = everywhere && it != m.end() && it->second.is_number();
    }
    if (everywhere) s.metrics.push_back(k);
  }
  return s;
}

std::vector<std::pair<double, double>> sweep_series(const Sweep& s, const std::string& parameter,
                                                    const std::string& metric) {
  std::vector<std::pair<double, double>> out;
  for (const auto& p : s.points) {
    auto c = flatten(p.config), m = flatten(p.metrics);
    auto x = c.find(parameter), y = m.find(metric);
    if (x != c.end() && y != m.end() && x->second.is_number() && y->second.is_number())
      out.emplace_back(x->second.get<double>(), y->second.get<double>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string run_clocks_line(const nlohmann::json& manifest) {
  const std::string l = runfmt::clocks_line(manifest);
  return l.empty() || !runfmt::clocks_throttled(manifest) ? l : l + " -- THROTTLED";
}

}  // namespace lantern::view
