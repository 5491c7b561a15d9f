#include "harness/runfmt/summary.h"

#include <algorithm>
#include <map>
#include <tuple>

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

}  // namespace

std::vector<TimeSummary> summarize(const std::vector<KernelRow>& rows, GroupBy by,
                                   const std::string& phase) {
  struct Acc {
    TimeSummary s;
    double roofline_us = 0, roofline_covered_us = 0;
    std::map<LaunchConfig, std::pair<double, const KernelRow*>> configs;  // -> (time, a row)
  };
  std::map<std::tuple<std::string, std::string, std::string>, Acc> groups;
  double total = 0;
  for (const KernelRow& r : rows) {
    if (!phase.empty() && r.phase != phase) continue;
    std::string key = by == GroupBy::op ? (r.op.empty() ? "(unattributed)" : r.op) : r.kernel;
    auto id = by == GroupBy::op ? std::make_tuple(key, r.family, r.variant_name)
                                : std::make_tuple(key, std::string(), std::string());
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

}  // namespace lantern::runfmt
