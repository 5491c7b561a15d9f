#include "viz/model/kernel_stats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "harness/runfmt/summary.h"

namespace lantern::view {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::vector<double>* fcol(const runfmt::IndexTable* t, const char* name) {
  const runfmt::IndexColumn* c = t ? t->find(name) : nullptr;
  return c && c->type == runfmt::IndexColumn::f64 ? &c->f : nullptr;
}
const std::vector<int64_t>* icol(const runfmt::IndexTable* t, const char* name) {
  const runfmt::IndexColumn* c = t ? t->find(name) : nullptr;
  return c && c->type != runfmt::IndexColumn::f64 ? &c->i : nullptr;
}

// Summed duration of each step's host range.
std::unordered_map<int64_t, double> step_durations(const RunData& run) {
  std::unordered_map<int64_t, double> out;
  const runfmt::IndexTable* r = run.index.find("ranges");
  auto cat = icol(r, "cat"), step = icol(r, "step");
  auto dur = fcol(r, "dur_us");
  if (!cat || !step || !dur) return out;
  for (size_t i = 0; i < r->rows; ++i)
    if (run.str((*cat)[i]) == "step") out[(*step)[i]] += (*dur)[i];
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return kNaN;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

std::vector<KernelStat> kernel_stats(const RunData& run, StatsGroup by, const std::string& phase) {
  const runfmt::IndexTable* k = run.index.find("kernels");
  auto dur = fcol(k, "dur_us"), bytes = fcol(k, "bytes"), flops = fcol(k, "flops"),
       pct = fcol(k, "pct_roofline"), starts = fcol(k, "start_us");
  auto devices = icol(k, "device");
  auto op = icol(k, "op"), family = icol(k, "family"), variant_name = icol(k, "variant_name"),
       kernel = icol(k, "kernel"), phases = icol(k, "phase"), steps = icol(k, "step");
  if (!k || !dur) return {};
  struct Acc {
    KernelStat s;
    std::vector<double> durs;
    std::set<std::string> variants;
    std::set<int64_t> steps;
    double roof_us = 0, roof_covered_us = 0;
  };
  std::unordered_map<std::string, Acc> groups;
  std::vector<KernelStat*> stat_of(k->rows, nullptr);  // each kept row's group, for the wall times
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> timelines;  // (device, step) -> rows
  for (size_t r = 0; r < k->rows; ++r) {
    if (!phase.empty() && (!phases || run.str((*phases)[r]) != phase)) continue;
    std::string fv = run.str(family ? (*family)[r] : -1);
    if (variant_name && !run.str((*variant_name)[r]).empty()) fv += "." + run.str((*variant_name)[r]);
    std::string key;
    switch (by) {
      case StatsGroup::op: key = run.str(op ? (*op)[r] : -1); break;
      case StatsGroup::family_variant: key = fv; break;
      case StatsGroup::kernel: key = run.str(kernel ? (*kernel)[r] : -1); break;
    }
    if (key.empty()) key = "(unattributed)";
    timelines[{devices ? (*devices)[r] : 0, steps ? (*steps)[r] : -1}].push_back(r);
    Acc& a = groups[key];  // unordered_map: references stay valid as it grows
    stat_of[r] = &a.s;
    a.s.key = key;
    a.variants.insert(fv);
    a.s.count += 1;
    a.s.total_us += (*dur)[r];
    a.durs.push_back((*dur)[r]);
    if (bytes) a.s.bytes += (*bytes)[r];
    if (flops) a.s.flops += (*flops)[r];
    if (pct && !std::isnan((*pct)[r])) {
      a.roof_us += (*pct)[r] / 100.0 * (*dur)[r];
      a.roof_covered_us += (*dur)[r];
    }
    if (steps) a.steps.insert((*steps)[r]);
  }
  double wall_total = 0;
  if (starts) {
    std::vector<double> busy, gap;
    for (auto& [_, rows] : timelines) {
      runfmt::interval_shares(*starts, *dur, rows, busy, gap);
      for (size_t r : rows) stat_of[r]->wall_us += busy[r], wall_total += busy[r];
    }
  }
  const auto step_us = step_durations(run);
  double all_rows_us = 0;
  for (auto& [key, a] : groups) all_rows_us += a.s.total_us;
  std::vector<KernelStat> out;
  out.reserve(groups.size());
  for (auto& [key, a] : groups) {
    KernelStat s = a.s;
    s.family_variant = a.variants.size() == 1 ? *a.variants.begin() : "*";
    s.mean_us = s.total_us / static_cast<double>(s.count);
    s.p50_us = percentile(a.durs, 50);
    s.p99_us = percentile(a.durs, 99);
    const double seconds = s.total_us * 1e-6;
    s.gb_per_s = s.bytes > 0 && seconds > 0 ? s.bytes / seconds / 1e9 : kNaN;
    s.tflop_per_s = s.flops > 0 && seconds > 0 ? s.flops / seconds / 1e12 : kNaN;
    s.pct_roofline = a.roof_covered_us > 0 ? a.roof_us / a.roof_covered_us * 100.0 : kNaN;
    double steps_us = 0;
    for (int64_t st : a.steps)
      if (auto it = step_us.find(st); it != step_us.end()) steps_us += it->second;
    const double denominator = steps_us > 0 ? steps_us : all_rows_us;
    s.share_of_steps = denominator > 0 ? s.total_us / denominator : 0;
    s.wall_share = wall_total > 0 ? s.wall_us / wall_total : 0;
    out.push_back(std::move(s));
  }
  sort_stats(out, StatsColumn::total, false);
  return out;
}

void sort_stats(std::vector<KernelStat>& stats, StatsColumn column, bool ascending) {
  auto value = [column](const KernelStat& s) -> double {
    switch (column) {
      case StatsColumn::count: return static_cast<double>(s.count);
      case StatsColumn::total: return s.total_us;
      case StatsColumn::mean: return s.mean_us;
      case StatsColumn::p50: return s.p50_us;
      case StatsColumn::p99: return s.p99_us;
      case StatsColumn::gb_per_s: return s.gb_per_s;
      case StatsColumn::tflop_per_s: return s.tflop_per_s;
      case StatsColumn::pct_roofline: return s.pct_roofline;
      case StatsColumn::share: return s.share_of_steps;
      case StatsColumn::wall: return s.wall_us;
      case StatsColumn::key: return 0;
    }
    return 0;
  };
  std::stable_sort(stats.begin(), stats.end(), [&](const KernelStat& a, const KernelStat& b) {
    if (column == StatsColumn::key) return ascending ? a.key < b.key : a.key > b.key;
    const double x = value(a), y = value(b);
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return ascending ? x < y : x > y;
  });
}

std::vector<size_t> filter_stats(const std::vector<KernelStat>& stats, const std::string& filter) {
  std::vector<size_t> out;
  const std::string f = lower(filter);
  for (size_t i = 0; i < stats.size(); ++i)
    if (f.empty() || lower(stats[i].key).find(f) != std::string::npos ||
        lower(stats[i].family_variant).find(f) != std::string::npos)
      out.push_back(i);
  return out;
}

}  // namespace lantern::view
