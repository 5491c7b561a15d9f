#include "viz/model/address_map.h"

#include <algorithm>
#include <map>

namespace lantern::view {

namespace {
bool live_at(const runfmt::Allocation& a, double t) {
  return a.alloc_us <= t && (!a.free_us || t < *a.free_us);
}
}  // namespace

MapLayout layout_address_map(const std::vector<runfmt::Allocation>& allocations, double t_us,
                             double gap_fraction) {
  MapLayout m;
  uint64_t mapped = 0;
  for (size_t i = 0; i < allocations.size(); ++i) {
    const runfmt::Allocation& a = allocations[i];
    if (!live_at(a, t_us)) continue;
    MapSegment s;
    s.allocation = static_cast<int>(i);
    s.address = a.address;
    s.bytes = a.bytes;
    m.segments.push_back(s);
    mapped += a.bytes;
  }
  std::sort(m.segments.begin(), m.segments.end(),
            [](const MapSegment& a, const MapSegment& b) { return a.address < b.address; });
  m.gap = std::max(1.0, gap_fraction * static_cast<double>(mapped));
  double x = 0;
  uint64_t prev_end = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    MapSegment& s = m.segments[i];
    if (i > 0 && s.address > prev_end) {
      s.hole_before = s.address - prev_end;
      x += std::min(m.gap, static_cast<double>(s.hole_before));  // small holes stay to scale
    }
    s.x0 = x;
    s.x1 = x + static_cast<double>(s.bytes);
    x = s.x1;
    prev_end = std::max(prev_end, s.address + s.bytes);
  }
  m.width = x;
  return m;
}

std::string map_category(const runfmt::Allocation& a) {
  if (a.owner == "kv_pool") return a.name.find("table") != std::string::npos ? "block_tables" : "kv_pool";
  for (const char* known : {"weights", "arena", "workspace", "cublas_workspace", "block_tables"})
    if (a.owner == known) return a.owner;
  if (a.owner.find("cublas") != std::string::npos) return "cublas_workspace";
  if (a.owner.find("workspace") != std::string::npos) return "workspace";
  return "other";
}

std::vector<CategoryTotal> category_totals(const std::vector<runfmt::Allocation>& allocations,
                                           double t_us) {
  std::map<std::string, CategoryTotal> totals;
  for (const runfmt::Allocation& a : allocations) {
    if (!live_at(a, t_us)) continue;
    CategoryTotal& c = totals[map_category(a)];
    c.category = map_category(a);
    c.bytes += a.bytes;
    c.count += 1;
  }
  std::vector<CategoryTotal> out;
  for (auto& [k, v] : totals) out.push_back(v);
  std::sort(out.begin(), out.end(),
            [](const CategoryTotal& a, const CategoryTotal& b) { return a.bytes > b.bytes; });
  return out;
}

int kv_pool_allocation(const std::vector<runfmt::Allocation>& allocations) {
  int best = -1;
  for (size_t i = 0; i < allocations.size(); ++i)
    if (map_category(allocations[i]) == "kv_pool" &&
        (best < 0 || allocations[i].bytes > allocations[best].bytes))
      best = static_cast<int>(i);
  return best;
}

}  // namespace lantern::view
