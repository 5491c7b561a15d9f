#include "viz/model/lifetimes.h"

#include <algorithm>
#include <map>
#include <set>

namespace lantern::view {

namespace {

bool bars_overlap(const GanttBar& a, const GanttBar& b) {
  return a.first < b.last && b.first < a.last;
}

}  // namespace

int pattern_of_step(const runfmt::MemoryMap& memory, int64_t step) {
  for (const auto& [s, p] : memory.step_patterns)
    if (s == step) return p;
  return -1;
}

Gantt build_gantt(const runfmt::MemoryMap& memory, int pattern_id) {
  Gantt g;
  const runfmt::AccessPattern* pattern = nullptr;
  for (const auto& p : memory.patterns)
    if (p.id == pattern_id) pattern = &p;
  if (!pattern) return g;
  g.pattern = pattern_id;
  g.ops = static_cast<int>(pattern->ops.size());
  const int last_op = std::max(0, g.ops - 1);

  std::set<std::string> flagged;  // views named by violations / warnings
  for (const auto* list : {&memory.violations, &memory.warnings})
    for (const runfmt::AliasIssue& issue : *list) {
      flagged.insert(issue.view);
      if (!issue.victim.empty()) flagged.insert(issue.victim);
    }

  std::map<int, size_t> row_of_view;  // view id -> row
  std::vector<size_t> order(memory.views.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return memory.views[a].buffer < memory.views[b].buffer;
  });
  for (size_t v : order) {
    const runfmt::ViewRecord& view = memory.views[v];
    GanttRow row;
    row.view = static_cast<int>(v);
    row.buffer = view.buffer;
    row.label = view.name;
    if (view.buffer >= 0 && view.buffer < static_cast<int>(memory.buffers.size()) &&
        memory.buffers[view.buffer].name != view.name)
      row.label += "  (" + memory.buffers[view.buffer].name + ")";
    row_of_view[view.id] = g.rows.size();
    g.rows.push_back(std::move(row));
  }
  for (const runfmt::LiveInterval& l : pattern->intervals) {
    auto it = row_of_view.find(l.view);
    if (it == row_of_view.end()) continue;
    GanttBar bar;
    bar.stale = l.first_write < 0;
    bar.unread = l.last_read < 0;
    bar.first = std::clamp(bar.stale ? 0 : l.first_write, 0, last_op);
    bar.last = std::clamp(bar.unread ? bar.first : l.last_read, bar.first, last_op);
    GanttRow& row = g.rows[it->second];
    bar.violation = flagged.count(memory.views[row.view].name) > 0;
    row.bars.push_back(bar);
  }
  for (size_t a = 0; a < g.rows.size(); ++a)
    for (size_t b = a + 1; b < g.rows.size(); ++b) {
      if (g.rows[a].buffer < 0 || g.rows[a].buffer != g.rows[b].buffer) continue;
      for (GanttBar& x : g.rows[a].bars)
        for (GanttBar& y : g.rows[b].bars)
          if (bars_overlap(x, y)) {
            x.overlaps = y.overlaps = true;
            ++g.overlapping_pairs;
          }
    }
  return g;
}

}  // namespace lantern::view
