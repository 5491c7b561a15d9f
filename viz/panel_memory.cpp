// Memory map panel: the device (or host, on CPU runs) address space as one
// horizontal map to scale (holes collapsed), zoomable; the arena's buffers
// with their views inside; the KV pool's blocks coloured by owning sequence
// at the cursor step; totals per category; hover for details.
#include <algorithm>
#include <cmath>

#include "viz/model/address_map.h"
#include "viz/model/lifetimes.h"
#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {

// Maps the map axis [0, width] to pixels through zoom (visible fraction) and pan.
struct Axis {
  float x0, x1;
  double a0, a1;  // visible axis range
  float X(double a) const { return x0 + static_cast<float>((a - a0) / (a1 - a0)) * (x1 - x0); }
};

bool hover_rect(ImVec2 a, ImVec2 b) {
  ImVec2 m = ImGui::GetIO().MousePos;
  return ImGui::IsWindowHovered() && m.x >= a.x && m.x < b.x && m.y >= a.y && m.y < b.y;
}

// Totals per category (the legend) and what is live at the cursor.
void category_legend(const runfmt::MemoryMap& mem, double t, int64_t step) {
  double total = 0;
  for (const CategoryTotal& c : category_totals(mem.allocations, t)) {
    ui::legend_chip(ui::category_color(c.category), c.category + " " + ui::bytes(static_cast<double>(c.bytes)));
    ImGui::SameLine(0, 18);
    total += static_cast<double>(c.bytes);
  }
  ImGui::Text("| live %s at step %lld", ui::bytes(total).c_str(), static_cast<long long>(step));
  if (mem.peak_device_bytes) {
    ImGui::SameLine();
    ImGui::Text("(device peak %s)", ui::bytes(static_cast<double>(mem.peak_device_bytes)).c_str());
  }
}

// Zoom with the wheel around the mouse; drag to pan (the map's invisible button).
void zoom_and_pan(ImVec2 p, float width, double& zoom, double& pan) {
  ImGuiIO& io = ImGui::GetIO();
  if (ImGui::IsItemHovered() && io.MouseWheel != 0) {
    const double at = pan + (io.MousePos.x - p.x) / width / zoom;
    zoom = std::clamp(zoom * std::pow(1.25, io.MouseWheel), 1.0, 1e7);
    pan = at - (io.MousePos.x - p.x) / width / zoom;
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 1)) pan -= io.MouseDelta.x / width / zoom;
  pan = std::clamp(pan, 0.0, 1.0 - 1.0 / zoom);
}

void allocation_tooltip(const runfmt::Allocation& a, const std::string& cat, const MapSegment& s) {
  ImGui::BeginTooltip();
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", a.name.c_str());
  ui::kv_line("owner", a.owner + "  (" + cat + ")");
  ui::kv_line("address", ui::hex(a.address) + " .. " + ui::hex(a.address + a.bytes));
  ui::kv_line("size", ui::bytes(static_cast<double>(a.bytes)) + "  (" + std::to_string(a.bytes) + " B)");
  ui::kv_line("backend", a.backend);
  ui::kv_line("allocated",
              "at " + ui::duration(a.alloc_us) + (a.free_us ? ", freed at " + ui::duration(*a.free_us) : ", never freed"));
  if (s.hole_before) ui::kv_line("hole before", ui::bytes(static_cast<double>(s.hole_before)) + " (collapsed)");
  ImGui::EndTooltip();
}

// One allocation per segment, to scale; "//" where a hole was collapsed.
void map_segments(ImDrawList* dl, const runfmt::MemoryMap& mem, const MapLayout& layout, const Axis& ax, ImVec2 p,
                  float width, float map_h) {
  for (const MapSegment& s : layout.segments) {
    const runfmt::Allocation& a = mem.allocations[s.allocation];
    const std::string cat = map_category(a);
    ImVec2 a0(ax.X(s.x0), p.y + 2), a1(std::max(ax.X(s.x1), ax.X(s.x0) + 1), p.y + map_h - 2);
    dl->AddRectFilled(a0, a1, ui::category_color(cat, 0.85f));
    dl->AddRect(a0, a1, IM_COL32(0, 0, 0, 180));
    ui::clipped_text(dl, ImVec2(a0.x, a0.y), ImVec2(a1.x, a0.y + 24), a.name, IM_COL32(10, 10, 10, 255));
    ui::clipped_text(dl, ImVec2(a0.x, a0.y + 22), ImVec2(a1.x, a1.y), ui::bytes(static_cast<double>(a.bytes)),
                     IM_COL32(20, 20, 20, 255));
    if (s.hole_before > 0 && static_cast<double>(s.hole_before) > layout.gap) {
      const float gx = ax.X(s.x0) - static_cast<float>((layout.gap / (ax.a1 - ax.a0)) * width) / 2;
      dl->AddText(ImVec2(gx - 6, p.y + map_h / 2 - 8), ui::kDimText, "//");
    }
    if (hover_rect(a0, a1)) allocation_tooltip(a, cat, s);
  }
}

// Address ticks (offsets from the first mapped byte, on the collapsed axis).
void map_ticks(ImDrawList* dl, const MapLayout& layout, ImVec2 p, float width, float map_h, double zoom) {
  if (layout.segments.empty()) return;
  dl->AddText(ImVec2(p.x + 2, p.y + map_h + 3), ui::kDimText, ui::hex(layout.segments.front().address).c_str());
  const std::string last = ui::hex(layout.segments.back().address + layout.segments.back().bytes);
  dl->AddText(ImVec2(p.x + width - ImGui::CalcTextSize(last.c_str()).x - 2, p.y + map_h + 3), ui::kDimText,
              last.c_str());
  const std::string z = "zoom x" + ui::number(zoom, 3) + "  (wheel: zoom, drag: pan; // = collapsed hole)";
  dl->AddText(ImVec2(p.x + width / 2 - ImGui::CalcTextSize(z.c_str()).x / 2, p.y + map_h + 3), ui::kDimText,
              z.c_str());
}

// The address space as one horizontal map, zoomable and pannable.
void address_map(const runfmt::MemoryMap& mem, double t, float width, double& zoom, double& pan) {
  MapLayout layout = layout_address_map(mem.allocations, t);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float map_h = 54;
  ImGui::InvisibleButton("##map", ImVec2(width, map_h + 22));
  zoom_and_pan(p, width, zoom, pan);
  Axis ax{p.x, p.x + width, pan * layout.width, (pan + 1.0 / zoom) * layout.width};
  dl->PushClipRect(p, ImVec2(p.x + width, p.y + map_h + 22), true);
  dl->AddRectFilled(p, ImVec2(p.x + width, p.y + map_h), IM_COL32(30, 30, 34, 255));
  map_segments(dl, mem, layout, ax, p, width, map_h);
  map_ticks(dl, layout, p, width, map_h, zoom);
  dl->PopClipRect();
}

void view_tooltip(const runfmt::MemoryMap& mem, const runfmt::BufferRecord& buf, const runfmt::ViewRecord& view,
                  bool live) {
  ImGui::BeginTooltip();
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "view %s (id %d)", view.name.c_str(), view.id);
  ui::kv_line("buffer", buf.name + "  [" + buf.shape + "]");
  ui::kv_line("offset", "arena +" + std::to_string(buf.offset + view.offset) + " B  (" +
                            ui::hex(mem.arena_address + buf.offset + view.offset) + ")");
  ui::kv_line("size", ui::bytes(static_cast<double>(view.bytes)));
  ui::kv_line("owner", "arena");
  ui::kv_line("dtype/shape", buf.shape);
  ui::kv_line("live at step", live ? "yes" : "no");
  ImGui::EndTooltip();
}

// The most views any one buffer has (rows inside a buffer box).
int max_views_per_buffer(const runfmt::MemoryMap& mem) {
  int max_views = 1;
  for (size_t b = 0; b < mem.buffers.size(); ++b) {
    int n = 0;
    for (const auto& v : mem.views) n += v.buffer == static_cast<int>(b);
    max_views = std::max(max_views, n);
  }
  return max_views;
}

// One buffer box at its arena offset, its views stacked inside.
void arena_buffer(ImDrawList* dl, const runfmt::MemoryMap& mem, size_t b, const std::vector<bool>& view_live,
                  ImVec2 q, double scale, float buf_h) {
  const float row_h = 18;
  const runfmt::BufferRecord& buf = mem.buffers[b];
  ImVec2 b0(q.x + static_cast<float>(buf.offset * scale), q.y);
  ImVec2 b1(std::max(b0.x + 2, q.x + static_cast<float>((buf.offset + buf.bytes) * scale)), q.y + buf_h);
  dl->AddRectFilled(b0, b1, ui::category_color("arena", 0.25f));
  dl->AddRect(b0, b1, ui::category_color("arena", 0.9f));
  ui::clipped_text(dl, b0, ImVec2(b1.x, b0.y + 18), buf.name, ui::kText);
  int lane = 0;
  for (size_t v = 0; v < mem.views.size(); ++v) {
    const runfmt::ViewRecord& view = mem.views[v];
    if (view.buffer != static_cast<int>(b)) continue;
    const float vy = q.y + 19 + lane++ * row_h;
    ImVec2 v0(b0.x + static_cast<float>(view.offset * scale) + 1, vy);
    ImVec2 v1(std::max(v0.x + 2, b0.x + static_cast<float>((view.offset + view.bytes) * scale) - 1), vy + row_h - 2);
    dl->AddRectFilled(v0, v1, ui::color_for_name(view.name, view_live[v] ? 0.95f : 0.35f));
    ui::clipped_text(dl, v0, v1, view.name, IM_COL32(10, 10, 10, 255));
    if (hover_rect(v0, v1)) view_tooltip(mem, buf, view, view_live[v]);
  }
}

// The arena: buffers to scale, their views (aliases stack) inside.
void arena_map(const runfmt::MemoryMap& mem, int64_t step, float width) {
  const int pattern = pattern_of_step(mem, step);
  Gantt gantt = build_gantt(mem, pattern);
  std::vector<bool> view_live(mem.views.size(), false);
  for (const GanttRow& r : gantt.rows) view_live[r.view] = !r.bars.empty();
  ImGui::Text("Activation arena  %s at %s, %zu buffers, %zu views (views of one buffer are aliases; "
              "bright = live in step %lld)",
              ui::bytes(static_cast<double>(mem.arena_bytes)).c_str(), ui::hex(mem.arena_address).c_str(),
              mem.buffers.size(), mem.views.size(), static_cast<long long>(step));
  ImVec2 q = ImGui::GetCursorScreenPos();
  const float row_h = 18, buf_h = 20 + row_h * max_views_per_buffer(mem);
  ImGui::Dummy(ImVec2(width, buf_h + 4));
  const double scale = width / static_cast<double>(mem.arena_bytes);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (size_t b = 0; b < mem.buffers.size(); ++b) arena_buffer(dl, mem, b, view_live, q, scale, buf_h);
}

void kv_block_tooltip(const runfmt::MemoryMap& mem, const runfmt::KvData& kv, int alloc,
                      const std::vector<int64_t>& owners, int b) {
  ImGui::BeginTooltip();
  ImGui::Text("KV block %d", b);
  ui::kv_line("owner", owners[b] >= 0 ? "sequence " + std::to_string(owners[b]) : "free");
  if (alloc >= 0) {
    const double bytes = static_cast<double>(mem.allocations[alloc].bytes) / kv.total_blocks;
    ui::kv_line("address", ui::hex(mem.allocations[alloc].address + static_cast<uint64_t>(b * bytes)));
    ui::kv_line("size", ui::bytes(bytes) + "  (" + std::to_string(kv.block_size) + " tokens, K and V)");
  }
  ImGui::EndTooltip();
}

// One pixel column per group of blocks, coloured by the last owner in it,
// brighter the fuller it is.
void kv_block_strip(ImDrawList* dl, const runfmt::KvData& kv, const std::vector<int64_t>& owners, ImVec2 q,
                    float width, float h) {
  dl->AddRectFilled(q, ImVec2(q.x + width, q.y + h), IM_COL32(40, 40, 44, 255));
  const int cols = std::max(1, static_cast<int>(width));
  const double per_px = static_cast<double>(kv.total_blocks) / cols;
  for (int x = 0; x < cols; ++x) {
    const int b0 = static_cast<int>(x * per_px), b1 = std::max(b0 + 1, static_cast<int>((x + 1) * per_px));
    int n = 0;
    int64_t owner = -1;
    for (int b = b0; b < std::min(b1, kv.total_blocks); ++b)
      if (owners[b] >= 0) ++n, owner = owners[b];
    if (n)
      dl->AddRectFilled(ImVec2(q.x + x, q.y), ImVec2(q.x + x + 1, q.y + h),
                        ui::color_for(static_cast<uint64_t>(owner), 0.4f + 0.6f * n / float(b1 - b0)));
  }
  if (per_px < 0.25)  // block boundaries when blocks are wide
    for (int b = 0; b <= kv.total_blocks; ++b)
      dl->AddLine(ImVec2(q.x + b / per_px / 1.0f * 1.0f, q.y), ImVec2(q.x + b / per_px, q.y + h),
                  IM_COL32(0, 0, 0, 120));
}

// The KV pool: blocks coloured by owning sequence at the cursor step.
void kv_pool(const runfmt::MemoryMap& mem, const runfmt::KvData& kv, int64_t step, float width) {
  const int alloc = kv_pool_allocation(mem.allocations);
  std::vector<int64_t> owners = owners_at(kv, step);
  int used = 0;
  for (int64_t o : owners) used += o >= 0;
  ImGui::Text("KV pool  %d blocks of %d tokens%s, %d used at step %lld (colour = owning sequence)", kv.total_blocks,
              kv.block_size,
              alloc >= 0
                  ? (", " + ui::bytes(static_cast<double>(mem.allocations[alloc].bytes) / kv.total_blocks) + " each")
                        .c_str()
                  : "",
              used, static_cast<long long>(step));
  ImVec2 q = ImGui::GetCursorScreenPos();
  const float h = 26;
  ImGui::Dummy(ImVec2(width, h + 4));
  kv_block_strip(ImGui::GetWindowDrawList(), kv, owners, q, width, h);
  if (hover_rect(q, ImVec2(q.x + width, q.y + h))) {
    const double per_px = static_cast<double>(kv.total_blocks) / std::max(1, static_cast<int>(width));
    const int b = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - q.x) * per_px), 0, kv.total_blocks - 1);
    kv_block_tooltip(mem, kv, alloc, owners, b);
  }
}

// Every allocation.
void allocation_table(const runfmt::MemoryMap& mem) {
  if (!ImGui::BeginTable("##allocs", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY |
                                            ImGuiTableFlags_SizingFixedFit))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* h : {"name", "owner", "address", "size", "allocated", "freed"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (const runfmt::Allocation& a : mem.allocations) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ui::legend_chip(ui::category_color(map_category(a)), a.name);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(a.owner.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(ui::hex(a.address).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(ui::bytes(static_cast<double>(a.bytes)).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(ui::duration(a.alloc_us).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(a.free_us ? ui::duration(*a.free_us).c_str() : "-");
  }
  ImGui::EndTable();
}

}  // namespace

void View::draw_memory() {
  const LoadedRun& run = *runs_[0];
  const runfmt::MemoryMap& mem = run.data.memory;
  if (mem.allocations.empty()) {
    no_data("No allocations (memory.json empty or unreadable; harness memory map off?)");
    return;
  }
  category_legend(mem, cursor_.t_us, cursor_.step);
  const float width = ImGui::GetContentRegionAvail().x;
  address_map(mem, cursor_.t_us, width, mem_.zoom, mem_.pan);
  ImGui::Spacing();
  if (mem.arena_bytes > 0) arena_map(mem, cursor_.step, width);
  if (run.data.kv.total_blocks > 0) kv_pool(mem, run.data.kv, cursor_.step, width);
  allocation_table(mem);
  for (const std::string& e : mem.errors) ImGui::TextColored(ImVec4(1, 0.35f, 0.3f, 1), "memory error: %s", e.c_str());
}

}  // namespace lantern::view
