#include "harness/runfmt/summary.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "kernels/base/errors.h"

namespace lantern::runfmt {

namespace {

void set_main_launch(TimeSummary& s,
                     const std::map<LaunchConfig, std::pair<double, const KernelRow*>>& configs) {
  s.launch_configs = static_cast<int>(configs.size());
  const KernelRow* main = nullptr;
  double most = -1;
  for (const auto& [config, time_row] : configs)
    if (time_row.first > most) {
      most = time_row.first;
      main = time_row.second;
    }
  if (!main) return;
  s.launch_config = main->launch_config;
  s.occupancy = main->occupancy;
}

// The rows (phase-filtered) by (device, step), for path_shares.
std::map<std::pair<int, int64_t>, std::vector<const KernelRow*>> by_step(const std::vector<KernelRow>& rows,
                                                                        const std::string& phase) {
  std::map<std::pair<int, int64_t>, std::vector<const KernelRow*>> steps;
  for (const KernelRow& r : rows)
    if (phase.empty() || r.phase == phase) steps[{r.device, r.step}].push_back(&r);
  return steps;
}

}  // namespace

void interval_shares(const std::vector<double>& start_us, const std::vector<double>& dur_us,
                     std::vector<size_t>& order, std::vector<double>& busy, std::vector<double>& gap) {
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return start_us[a] < start_us[b]; });
  if (busy.size() < start_us.size()) busy.resize(start_us.size());  // grown once by a caller's loop
  if (gap.size() < start_us.size()) gap.resize(start_us.size());
  double latest = order.empty() ? 0 : start_us[order.front()];
  for (size_t i : order) {
    const double start = start_us[i], stop = start + dur_us[i];
    busy[i] = std::max(0.0, stop - std::max(latest, start));
    gap[i] = std::max(0.0, start - latest);
    latest = std::max(latest, stop);
  }
}

std::vector<PathShare> path_shares(std::vector<const KernelRow*>& rows) {
  std::vector<double> start(rows.size()), dur(rows.size()), busy, gap;
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) start[i] = rows[i]->start_us, dur[i] = rows[i]->dur_us, order[i] = i;
  interval_shares(start, dur, order, busy, gap);  // sorts `order` by start
  std::vector<const KernelRow*> sorted(rows.size());
  std::vector<PathShare> out;
  out.reserve(rows.size());
  for (size_t k = 0; k < order.size(); ++k) {
    sorted[k] = rows[order[k]];
    out.push_back({sorted[k], busy[order[k]], gap[order[k]]});
  }
  rows = std::move(sorted);
  return out;
}

double idle_in_steps_us(const std::vector<GapSummary>& gaps) {
  double idle = 0;
  for (const GapSummary& g : gaps) idle += g.total_us;
  return idle;
}

std::vector<GapSummary> idle_gaps(const std::vector<KernelRow>& rows, const std::string& phase) {
  auto op_of = [](const KernelRow* r) { return r->op.empty() ? std::string("(unattributed)") : r->op; };
  std::map<std::pair<std::string, std::string>, GapSummary> by;
  for (auto& [device_step, step_rows] : by_step(rows, phase)) {
    if (device_step.second < 0) continue;
    const KernelRow* latest = nullptr;  // the row with the latest end so far
    for (const PathShare& p : path_shares(step_rows)) {
      if (p.gap_before_us > 0 && latest) {
        GapSummary& g = by[{op_of(latest), op_of(p.row)}];
        g.before = op_of(latest), g.after = op_of(p.row);
        ++g.count;
        g.total_us += p.gap_before_us;
        g.max_us = std::max(g.max_us, p.gap_before_us);
      }
      if (!latest || p.row->start_us + p.row->dur_us > latest->start_us + latest->dur_us) latest = p.row;
    }
  }
  std::vector<GapSummary> out;
  for (auto& [_, g] : by) out.push_back(std::move(g));
  std::stable_sort(out.begin(), out.end(), [](const GapSummary& a, const GapSummary& b) { return a.total_us > b.total_us; });
  return out;
}

std::vector<TimeSummary> summarize(const std::vector<KernelRow>& rows, GroupBy by,
                                   const std::string& phase) {
  struct Acc {
    TimeSummary s;
    double roofline_us = 0, roofline_covered_us = 0;
    std::map<LaunchConfig, std::pair<double, const KernelRow*>> configs;  // -> (time, a row)
  };
  std::map<std::tuple<std::string, std::string, std::string>, Acc> groups;
  auto id_of = [by](const KernelRow& r) {
    std::string key = by == GroupBy::op ? (r.op.empty() ? "(unattributed)" : r.op) : r.kernel;
    return by == GroupBy::op ? std::make_tuple(key, r.family, r.variant_name)
                             : std::make_tuple(key, std::string(), std::string());
  };
  double total = 0, wall_total = 0;
  for (auto& [_, step_rows] : by_step(rows, phase))
    for (const PathShare& p : path_shares(step_rows)) {
      groups[id_of(*p.row)].s.wall_us += p.busy_us;
      wall_total += p.busy_us;
    }
  for (const KernelRow& r : rows) {
    if (!phase.empty() && r.phase != phase) continue;
    const auto id = id_of(r);
    const std::string& key = std::get<0>(id);
    Acc& a = groups[id];
    a.s.key = key;
    if (by == GroupBy::op) {
      a.s.family = r.family;
      a.s.variant_name = r.variant_name;
    } else if (a.s.family.empty()) {
      a.s.family = r.family;
      a.s.variant_name = r.variant_name;
    }
    a.s.rows += 1;
    a.s.total_us += r.dur_us;
    a.s.bytes += r.bytes;
    a.s.flops += r.flops;
    if (r.pct_roofline) {
      a.roofline_us += *r.pct_roofline / 100.0 * r.dur_us;
      a.roofline_covered_us += r.dur_us;
    }
    if (r.launch_config.known()) {
      auto& [time, row] = a.configs[r.launch_config];
      time += r.dur_us;
      row = &r;
    }
    total += r.dur_us;
  }
  std::vector<TimeSummary> out;
  for (auto& [id, a] : groups) {
    TimeSummary s = a.s;
    s.mean_us = s.rows ? s.total_us / s.rows : 0;
    s.share = total > 0 ? s.total_us / total : 0;
    s.wall_share = wall_total > 0 ? s.wall_us / wall_total : 0;
    if (s.total_us > 0 && s.bytes > 0) s.gb_per_s = s.bytes / (s.total_us * 1e-6) / 1e9;
    if (s.total_us > 0 && s.flops > 0) s.tflop_per_s = s.flops / (s.total_us * 1e-6) / 1e12;
    if (a.roofline_covered_us > 0) s.pct_roofline = a.roofline_us / a.roofline_covered_us * 100.0;
    set_main_launch(s, a.configs);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const TimeSummary& a, const TimeSummary& b) {
    if (a.total_us != b.total_us) return a.total_us > b.total_us;
    return a.key < b.key;
  });
  return out;
}

namespace {
// manifest.gpu.clocks when it is an object, else nullptr.
const nlohmann::json* gpu_clocks(const nlohmann::json& manifest) {
  if (!manifest.is_object() || !manifest.contains("gpu") || !manifest["gpu"].is_object()) return nullptr;
  const nlohmann::json& g = manifest["gpu"];
  return g.contains("clocks") && g["clocks"].is_object() ? &g["clocks"] : nullptr;
}
}  // namespace

std::string clocks_line(const nlohmann::json& manifest) {
  const nlohmann::json* k = gpu_clocks(manifest);
  if (!k) return "";
  if (k->contains("error")) {
    const nlohmann::json& e = (*k)["error"];
    return "not read (" + (e.is_string() ? e.get<std::string>() : e.dump()) + ")";
  }
  auto num = [&](const char* key) {
    return k->contains(key) && (*k)[key].is_number() ? std::optional<double>((*k)[key].get<double>()) : std::nullopt;
  };
  auto mhz = [&](const char* key) { return num(key) ? strformat("%.0f", *num(key)) : std::string("?"); };
  std::string s = "SM " + mhz("sm_mhz_start") + " -> " + mhz("sm_mhz_end") + " MHz (max " + mhz("sm_max_mhz") + ")";
  std::string limits;
  if (const auto p = num("power_cap_ms")) limits += strformat(", power cap %.1f ms", *p);
  if (const auto t = num("thermal_ms")) limits += strformat(", thermal %.1f ms", *t);
  if (!limits.empty()) {
    s += limits;
    if (const auto sec = num("seconds")) s += strformat(" of %.0f ms", 1e3 * *sec);
  }
  return s;
}

bool clocks_throttled(const nlohmann::json& manifest) {
  const nlohmann::json* k = gpu_clocks(manifest);
  return k && !k->contains("error") && k->contains("throttled") && (*k)["throttled"].is_boolean() &&
         (*k)["throttled"].get<bool>();
}

}  // namespace lantern::runfmt
