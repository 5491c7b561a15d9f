#include "viz/model/timeline_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include <nlohmann/json.hpp>

namespace lantern::view {

namespace {

// Column accessors that tolerate absent columns (older or newer writers).
struct Cols {
  const runfmt::IndexTable* t = nullptr;
  const std::vector<double>* f(const char* name) const {
    const runfmt::IndexColumn* c = t ? t->find(name) : nullptr;
    return c && c->type == runfmt::IndexColumn::f64 ? &c->f : nullptr;
  }
  const std::vector<int64_t>* i(const char* name) const {
    const runfmt::IndexColumn* c = t ? t->find(name) : nullptr;
    return c && c->type != runfmt::IndexColumn::f64 ? &c->i : nullptr;
  }
  size_t rows() const { return t ? t->rows : 0; }
};

int64_t at(const std::vector<int64_t>* v, size_t r, int64_t fallback) {
  return v ? (*v)[r] : fallback;
}

struct Pending {
  double t0, t1;
  uint32_t row;
  uint8_t source;
  int32_t name;
};

Lane make_lane(std::string group, std::string label, std::vector<Pending> items) {
  std::sort(items.begin(), items.end(), [](const Pending& a, const Pending& b) {
    return a.t0 != b.t0 ? a.t0 < b.t0 : a.t1 > b.t1;
  });
  Lane lane;
  lane.group = std::move(group);
  lane.label = std::move(label);
  lane.t0.reserve(items.size());
  lane.t1.reserve(items.size());
  lane.row.reserve(items.size());
  lane.source.reserve(items.size());
  lane.name.reserve(items.size());
  for (const Pending& p : items) {
    lane.t0.push_back(p.t0);
    // A lane never overlaps itself: clip an item that starts inside the
    // previous one (clock-conversion jitter) so ends stay sorted.
    lane.t1.push_back(std::max(p.t1, lane.t1.empty() ? p.t1 : lane.t1.back()));
    lane.row.push_back(p.row);
    lane.source.push_back(p.source);
    lane.name.push_back(p.name);
  }
  return lane;
}

std::string thread_name(const RunData& run, int64_t pid, int64_t tid, const std::string& fallback) {
  Cols tracks{run.index.find("tracks")};
  auto pids = tracks.i("pid"), tids = tracks.i("tid"), kinds = tracks.i("kind"), names = tracks.i("name");
  for (size_t r = 0; pids && tids && kinds && names && r < tracks.rows(); ++r)
    if ((*pids)[r] == pid && (*tids)[r] == tid && run.str((*kinds)[r]) == "thread_name")
      return run.str((*names)[r]);
  return fallback;
}

void add_host_lanes(const RunData& run, TimelineModel& m,
                    std::map<std::pair<int64_t, int64_t>, std::vector<Pending>>& gpu) {
  Cols ranges{run.index.find("ranges")};
  auto pid = ranges.i("pid"), tid = ranges.i("tid"), name = ranges.i("name"), cat = ranges.i("cat"),
       step = ranges.i("step"), args = ranges.i("args");
  auto ts = ranges.f("ts_us"), dur = ranges.f("dur_us");
  if (!ts || !dur) return;
  const char* kLevels[] = {"step", "phase", "layer", "op"};
  std::vector<Pending> levels[5];
  std::map<int64_t, std::vector<Pending>> api;  // tid -> calls
  // Overlapped decode steps: from the end of the step's range (its launches)
  // to the collection of its tokens (args.collected_us). Up to two steps are
  // in flight at once, so even and odd steps get a lane each.
  std::vector<Pending> in_flight[2];
  for (size_t r = 0; r < ranges.rows(); ++r) {
    Pending p{(*ts)[r], (*ts)[r] + (*dur)[r], static_cast<uint32_t>(r), Lane::range,
              static_cast<int32_t>(at(name, r, -1))};
    int64_t process = at(pid, r, 1), thread = at(tid, r, 1);
    if (process == runfmt::track::kGpuPid) {
      gpu[{0, thread}].push_back(p);  // memcpy / memset on stream `thread`
      continue;
    }
    if (process != runfmt::track::kHostPid) continue;
    if (thread >= runfmt::track::kCudaApiTid0) {
      api[thread].push_back(p);
      continue;
    }
    const std::string& c = run.str(at(cat, r, -1));
    int level = 4;
    for (int l = 0; l < 4; ++l)
      if (c == kLevels[l]) level = l;
    levels[level].push_back(p);
    if (level == 0) {
      StepSpan s;
      s.step = at(step, r, -1);
      s.t0 = p.t0;
      s.t1 = p.t1;
      s.range_row = p.row;
      m.steps.push_back(s);
      const std::string& a = run.str(at(args, r, -1));
      if (a.find("collected_us") != std::string::npos) {
        const nlohmann::json j = nlohmann::json::parse(a, nullptr, false);
        const auto it = j.is_object() ? j.find("collected_us") : j.end();
        const double collected = it != j.end() && it->is_number() ? it->get<double>() : p.t1;
        if (collected > p.t1 + 1e-3) {
          m.steps.back().collected = collected;
          in_flight[s.step & 1].push_back({p.t1, collected, p.row, Lane::range, p.name});
        }
      }
    }
  }
  for (int l = 0; l < 5; ++l)
    if (!levels[l].empty()) m.lanes.push_back(make_lane("host", l < 4 ? kLevels[l] : "other", std::move(levels[l])));
  for (int parity = 0; parity < 2; ++parity)
    if (!in_flight[parity].empty())
      m.lanes.push_back(make_lane("host", parity ? "in flight (odd steps)" : "in flight (even steps)",
                                  std::move(in_flight[parity])));
  for (auto& [thread, calls] : api)
    m.lanes.push_back(make_lane("CUDA API", thread_name(run, 1, thread, "thread " + std::to_string(thread)),
                                std::move(calls)));
  // Phase names onto the steps.
  std::sort(m.steps.begin(), m.steps.end(), [](const StepSpan& a, const StepSpan& b) { return a.t0 < b.t0; });
  if (int p = m.lane_index("phase"); p >= 0) {
    const Lane& phases = m.lanes[p];
    for (StepSpan& s : m.steps) {
      auto it = std::lower_bound(phases.t0.begin(), phases.t0.end(), s.t0);
      if (it != phases.t0.end() && *it < s.t1) s.phase = run.str(phases.name[it - phases.t0.begin()]);
    }
  }
}

void add_kernel_lanes(const RunData& run, TimelineModel& m,
                      std::map<std::pair<int64_t, int64_t>, std::vector<Pending>>& gpu) {
  Cols k{run.index.find("kernels")};
  auto start = k.f("start_us"), dur = k.f("dur_us");
  auto device = k.i("device"), stream = k.i("stream"), kernel = k.i("kernel"), source = k.i("source");
  if (!start || !dur) return;
  const bool have_op_lane = m.lane_index("op") >= 0;
  std::vector<Pending> host_timed;
  for (size_t r = 0; r < k.rows(); ++r) {
    Pending p{(*start)[r], (*start)[r] + (*dur)[r], static_cast<uint32_t>(r), Lane::kernel,
              static_cast<int32_t>(at(kernel, r, -1))};
    if (run.str(at(source, r, -1)) == "host") {
      // CPU backend: these rows are the op ranges again; a lane of their own
      // only when the trace had no op lane.
      if (!have_op_lane) host_timed.push_back(p);
      continue;
    }
    gpu[{at(device, r, 0), at(stream, r, 0)}].push_back(p);
  }
  if (!host_timed.empty()) m.lanes.push_back(make_lane("host", "ops (host-timed)", std::move(host_timed)));
  for (auto& [key, items] : gpu)
    m.lanes.push_back(make_lane("GPU " + std::to_string(key.first), "stream " + std::to_string(key.second),
                                std::move(items)));
}

void add_counters(const RunData& run, TimelineModel& m) {
  Cols c{run.index.find("counters")};
  auto ts = c.f("ts_us"), value = c.f("value");
  auto name = c.i("name"), key = c.i("key");
  if (!ts || !value || !name || !key) return;
  std::map<std::pair<int64_t, int64_t>, size_t> series;
  for (size_t r = 0; r < c.rows(); ++r) {
    auto [it, inserted] = series.try_emplace({(*name)[r], (*key)[r]}, m.counters.size());
    if (inserted) {
      CounterSeries s;
      s.name = run.str((*name)[r]) + ": " + run.str((*key)[r]);
      m.counters.push_back(std::move(s));
    }
    CounterSeries& s = m.counters[it->second];
    s.t.push_back((*ts)[r]);
    s.v.push_back((*value)[r]);
  }
  for (CounterSeries& s : m.counters) {
    std::vector<size_t> order(s.t.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.t[a] < s.t[b]; });
    std::vector<double> t, v;
    for (size_t o : order) t.push_back(s.t[o]), v.push_back(s.v[o]);
    s.t = std::move(t);
    s.v = std::move(v);
    auto [lo, hi] = std::minmax_element(s.v.begin(), s.v.end());
    s.vmin = s.v.empty() ? 0 : *lo;
    s.vmax = s.v.empty() ? 0 : *hi;
  }
}

void add_marks(const RunData& run, TimelineModel& m) {
  Cols c{run.index.find("marks")};
  auto ts = c.f("ts_us");
  auto name = c.i("name");
  if (!ts) return;
  for (size_t r = 0; r < c.rows(); ++r) {
    Mark mk;
    mk.t = (*ts)[r];
    mk.name = static_cast<int32_t>(at(name, r, -1));
    mk.step = m.step_at(mk.t);
    m.marks.push_back(mk);
  }
}

}  // namespace

int64_t TimelineModel::step_at(double t_us) const {
  auto it = std::upper_bound(steps.begin(), steps.end(), t_us,
                             [](double t, const StepSpan& s) { return t < s.t0; });
  if (it == steps.begin()) return steps.empty() ? -1 : steps.front().step;
  return std::prev(it)->step;
}

const StepSpan* TimelineModel::step(int64_t s) const {
  for (const StepSpan& span : steps)
    if (span.step == s) return &span;
  return nullptr;
}

int TimelineModel::lane_index(const std::string& label) const {
  for (size_t i = 0; i < lanes.size(); ++i)
    if (lanes[i].label == label) return static_cast<int>(i);
  return -1;
}

TimelineModel build_timeline(const RunData& run) {
  TimelineModel m;
  std::map<std::pair<int64_t, int64_t>, std::vector<Pending>> gpu;  // (device, stream)
  add_host_lanes(run, m, gpu);
  add_kernel_lanes(run, m, gpu);
  add_counters(run, m);
  add_marks(run, m);
  m.t_begin = std::numeric_limits<double>::max();
  m.t_end = std::numeric_limits<double>::lowest();
  for (const Lane& l : m.lanes)
    if (l.size()) {
      m.t_begin = std::min(m.t_begin, l.t0.front());
      m.t_end = std::max(m.t_end, l.t1.back());
    }
  for (const CounterSeries& s : m.counters)
    if (!s.t.empty()) {
      m.t_begin = std::min(m.t_begin, s.t.front());
      m.t_end = std::max(m.t_end, s.t.back());
    }
  if (m.t_begin > m.t_end) m.t_begin = m.t_end = 0;
  return m;
}

void cull_and_merge(const double* t0, const double* t1, size_t n, double view_t0, double view_t1,
                    double us_per_px, double min_px, std::vector<DrawItem>& out) {
  out.clear();
  if (n == 0 || !(view_t1 > view_t0) || !(us_per_px > 0)) return;
  const double min_us = min_px * us_per_px;
  // First item that ends after view_t0 (ends are sorted in a lane).
  size_t i = std::upper_bound(t1, t1 + n, view_t0) - t1;
  while (i < n && t0[i] < view_t1) {
    if (t1[i] - t0[i] >= min_us) {
      out.push_back({t0[i], t1[i], static_cast<uint32_t>(i), 1});
      ++i;
      continue;
    }
    // A run of tiny items: swallow, a pixel at a time, every item that starts
    // within min_us of the run's end, stopping before a wide one.
    DrawItem run{t0[i], t1[i], static_cast<uint32_t>(i), 1};
    size_t j = i + 1;
    while (j < n) {
      size_t k = std::upper_bound(t0 + j, t0 + n, run.t1 + min_us) - t0;
      if (k == j) break;  // a visible gap follows
      if (t1[k - 1] - t0[k - 1] >= min_us) {
        if (k - 1 > j) run.t1 = std::max(run.t1, t1[k - 2]);
        j = k - 1;
        break;
      }
      run.t1 = std::max(run.t1, t1[k - 1]);
      j = k;
    }
    run.count = static_cast<uint32_t>(j - i);
    out.push_back(run);
    i = j;
  }
}

Envelope decimate(const CounterSeries& s, double view_t0, double view_t1, int pixels) {
  Envelope e;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  e.lo.assign(std::max(pixels, 0), nan);
  e.hi.assign(std::max(pixels, 0), nan);
  if (pixels <= 0 || s.t.empty() || !(view_t1 > view_t0)) return e;
  const double us_per_px = (view_t1 - view_t0) / pixels;
  // The value holding at view_t0 (counters are step functions).
  size_t i = std::upper_bound(s.t.begin(), s.t.end(), view_t0) - s.t.begin();
  double current = i > 0 ? s.v[i - 1] : nan;
  for (int px = 0; px < pixels; ++px) {
    const double end = view_t0 + (px + 1) * us_per_px;
    double lo = current, hi = current;
    while (i < s.t.size() && s.t[i] < end) {
      current = s.v[i++];
      lo = std::isnan(lo) ? current : std::min(lo, current);
      hi = std::isnan(hi) ? current : std::max(hi, current);
    }
    e.lo[px] = lo;
    e.hi[px] = hi;
  }
  return e;
}

}  // namespace lantern::view
