// Timeline panel: host step/phase/layer/op ranges, CUDA API calls, kernels
// and copies per stream, counters; zoom (wheel) and pan (drag) from the whole
// run down to the microsecond; sub-pixel items merged (viz/model).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "viz/ui.h"
#include "viz/view.h"

namespace lantern::view {

namespace {

constexpr float kLabelWidth = 150;
constexpr float kLaneHeight = 20;
constexpr float kCounterHeight = 44;
constexpr float kAxisHeight = 26;

double fcell(const runfmt::IndexTable* t, const char* col, size_t row) {
  const runfmt::IndexColumn* c = t ? t->find(col) : nullptr;
  return c && c->type == runfmt::IndexColumn::f64 ? c->f[row] : std::nan("");
}
int64_t icell(const runfmt::IndexTable* t, const char* col, size_t row, int64_t fallback = -1) {
  const runfmt::IndexColumn* c = t ? t->find(col) : nullptr;
  return c && c->type != runfmt::IndexColumn::f64 ? c->i[row] : fallback;
}

void rate_lines(double bytes, double flops, double dur_us, double gbps, double tflops, double pct) {
  ui::kv_line("bytes", bytes > 0 ? ui::bytes(bytes) : "-");
  ui::kv_line("FLOPs", flops > 0 ? ui::number(flops) : "-");
  if (std::isnan(gbps) && bytes > 0 && dur_us > 0) gbps = bytes / (dur_us * 1e-6) / 1e9;
  if (std::isnan(tflops) && flops > 0 && dur_us > 0) tflops = flops / (dur_us * 1e-6) / 1e12;
  ui::kv_line("achieved", (std::isnan(gbps) ? std::string("-") : ui::number(gbps, 4) + " GB/s") + "   " +
                              (std::isnan(tflops) ? std::string("-") : ui::number(tflops, 3) + " TFLOP/s"));
  ui::kv_line("% of roofline", std::isnan(pct) ? "- (no roofline: cpu run)" : ui::number(pct, 3) + " %");
}

// Details of a kernel row, including columns this viewer does not know
// (later format versions: grid, block, registers, ...), shown generically.
void kernel_details(const RunData& run, size_t r) {
  const runfmt::IndexTable* k = run.index.find("kernels");
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", run.str(icell(k, "kernel", r)).c_str());
  const double dur = fcell(k, "dur_us", r);
  ui::kv_line("duration", ui::duration(dur));
  ui::kv_line("start", ui::duration(fcell(k, "start_us", r)));
  ui::kv_line("op / layer", run.str(icell(k, "op", r)) + "  layer " + std::to_string(icell(k, "layer", r)));
  ui::kv_line("step / phase", std::to_string(icell(k, "step", r)) + "  " + run.str(icell(k, "phase", r)));
  ui::kv_line("family.variant", run.str(icell(k, "family", r)) + "." + run.str(icell(k, "variant_name", r)) +
                                    "  (#" + std::to_string(icell(k, "variant", r)) + ")");
  ui::kv_line("device / stream", std::to_string(icell(k, "device", r, 0)) + " / " +
                                     std::to_string(icell(k, "stream", r, 0)));
  rate_lines(fcell(k, "bytes", r), fcell(k, "flops", r), dur, fcell(k, "gb_per_s", r),
             fcell(k, "tflop_per_s", r), fcell(k, "pct_roofline", r));
  const int64_t node = icell(k, "graph_node", r, 0);
  ui::kv_line("graph node", node ? std::to_string(node) + " (CUDA-graph replay)" : "- (eager launch)");
  ui::kv_line("correlation", std::to_string(icell(k, "correlation", r, 0)));
  static const char* known[] = {"launch", "step", "phase", "layer", "op", "family", "variant", "variant_name",
                                "kernel", "source", "device", "stream", "start_us", "dur_us", "bytes", "flops",
                                "gb_per_s", "tflop_per_s", "pct_roofline", "graph_node", "correlation"};
  for (const runfmt::IndexColumn& c : k->columns) {
    if (std::find_if(std::begin(known), std::end(known), [&](const char* n) { return c.name == n; }) !=
        std::end(known))
      continue;
    std::string v = c.type == runfmt::IndexColumn::f64   ? ui::number(c.f[r], 5)
                    : c.type == runfmt::IndexColumn::str ? run.str(c.i[r])
                                                         : std::to_string(c.i[r]);
    ui::kv_line(c.name.c_str(), v);
  }
}

void range_details(const RunData& run, size_t r) {
  const runfmt::IndexTable* t = run.index.find("ranges");
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s  (%s)", run.str(icell(t, "name", r)).c_str(),
                     run.str(icell(t, "cat", r)).c_str());
  const double dur = fcell(t, "dur_us", r);
  ui::kv_line("duration", ui::duration(dur));
  ui::kv_line("start", ui::duration(fcell(t, "ts_us", r)));
  nlohmann::json args = nlohmann::json::parse(run.str(icell(t, "args", r)), nullptr, false);
  if (!args.is_object()) return;
  if (args.contains("bytes") || args.contains("flops")) {
    ui::kv_line("op / layer", run.str(icell(t, "name", r)) + "  layer " + std::to_string(icell(t, "layer", r)));
    ui::kv_line("family.variant", json_text(args, {"family"}) + "." + json_text(args, {"variant"}));
    auto number = [&](const char* k) { return args[k].is_number() ? args[k].get<double>() : 0.0; };
    rate_lines(number("bytes"), number("flops"), dur, std::nan(""), std::nan(""), std::nan(""));
    ImGui::TextColored(ImVec4(0.6f, 0.6f, 0.6f, 1), "(host time of the op: on CUDA, its kernels are on the stream rows)");
  }
  for (const auto& [key, v] : args.items())
    if (key != "bytes" && key != "flops" && key != "family" && key != "variant")
      ui::kv_line(key.c_str(), v.is_string() ? v.get<std::string>() : v.dump());
}

// An item drawn in a lane (or a merged block); hover shows what it is.
void item_tooltip(const RunData& run, const Lane& lane, const DrawItem& d) {
  ImGui::BeginTooltip();
  if (d.count > 1) {
    ImGui::Text("%u items merged (each < 2 px): %s", d.count, ui::duration(d.t1 - d.t0).c_str());
    ImGui::TextColored(ImVec4(0.7f, 0.7f, 0.7f, 1), "click to zoom in");
  } else {
    ImGui::Text("%s", run.str(lane.name[d.first]).c_str());
    ImGui::Text("%s", ui::duration(d.t1 - d.t0).c_str());
  }
  ImGui::EndTooltip();
}

// Merged: a grey block with a zig-zag edge, the count when it fits; else
// the item in its name's colour, the name when it fits.
void draw_item(ImDrawList* dl, const RunData& run, const Lane& lane, const DrawItem& d, float a, float b, float ly0,
               float ly1) {
  if (d.count > 1) {
    dl->AddRectFilled(ImVec2(a, ly0), ImVec2(b, ly1), IM_COL32(120, 120, 130, 200));
    for (float zx = a; zx + 4 < b; zx += 8)
      dl->AddLine(ImVec2(zx, ly1 - 2), ImVec2(zx + 4, ly0 + 2), IM_COL32(80, 80, 90, 255));
    if (b - a > 40)
      ui::clipped_text(dl, ImVec2(a, ly0), ImVec2(b, ly1), std::to_string(d.count) + " items", IM_COL32(20, 20, 20, 255));
  } else {
    const std::string& name = run.str(lane.name[d.first]);
    dl->AddRectFilled(ImVec2(a, ly0), ImVec2(b, ly1), ui::color_for_name(name));
    if (b - a > 24) ui::clipped_text(dl, ImVec2(a, ly0), ImVec2(b, ly1), name, IM_COL32(15, 15, 15, 255));
  }
}

void group_header(ImDrawList* dl, const char* name, float x, float x1, float& y) {
  dl->AddLine(ImVec2(x, y), ImVec2(x1, y), IM_COL32(255, 255, 255, 40));
  dl->AddText(ImVec2(x + 4, y + 1), IM_COL32(150, 190, 255, 255), name);
  y += ImGui::GetFontSize() + 3;
}

// One counter's envelope per pixel column over [t0, t1].
void counter_track(ImDrawList* dl, const CounterSeries& s, const TimelineFrame& f, float y) {
  const float cy0 = y + 3, cy1 = y + kCounterHeight - 4;
  dl->AddText(ImVec2(f.origin.x + 14, y + 2), ui::kText, s.name.c_str());
  dl->AddText(ImVec2(f.origin.x + 14, y + 2 + ImGui::GetFontSize()), ui::kDimText, ("max " + ui::number(s.vmax)).c_str());
  const int px = static_cast<int>(f.plot_w);
  Envelope e = decimate(s, f.t0, f.t1, px);
  const double lo = std::min(0.0, s.vmin), hi = s.vmax > lo ? s.vmax : lo + 1;
  auto Y = [&](double v) { return cy1 - static_cast<float>((v - lo) / (hi - lo)) * (cy1 - cy0); };
  const ImU32 c = ui::color_for_name(s.name);
  for (int p = 0; p < px; ++p) {
    if (std::isnan(e.lo[p])) continue;
    dl->AddRectFilled(ImVec2(f.x0 + p, Y(e.hi[p])), ImVec2(f.x0 + p + 1, cy1), ui::with_alpha(c, 0.35f));
    dl->AddLine(ImVec2(f.x0 + p, Y(e.hi[p])), ImVec2(f.x0 + p + 1, Y(e.hi[p])), c);
  }
}

// The cursor step: a band under the axis and its two edges (a shaded
// full-height rectangle would cost software GL a full-canvas blend).
void cursor_step_band(ImDrawList* dl, const StepSpan* s, const TimelineFrame& f) {
  if (!s) return;
  const float a = std::max(f.x0, f.X(s->t0)), b = std::min(f.x1, f.X(s->t1));
  if (b <= a) return;
  dl->AddRectFilled(ImVec2(a, f.origin.y + kAxisHeight - 1), ImVec2(b, f.origin.y + kAxisHeight + 3),
                    ui::with_alpha(ui::kCursor, 0.7f));
  for (float x : {f.X(s->t0), f.X(s->t1)})
    if (x >= f.x0 && x <= f.x1)
      dl->AddLine(ImVec2(x, f.origin.y + kAxisHeight), ImVec2(x, f.origin.y + f.canvas_h), IM_COL32(255, 230, 80, 70));
}

// Graph-replay marks on the phase lane's level, and the cursor time.
void marks_and_cursor(ImDrawList* dl, const TimelineModel& tm, double cursor_us, const TimelineFrame& f) {
  const float top = f.origin.y + kAxisHeight;
  for (const Mark& m : tm.marks)
    if (m.t >= f.t0 && m.t <= f.t1)
      dl->AddTriangleFilled(ImVec2(f.X(m.t) - 4, top), ImVec2(f.X(m.t) + 4, top), ImVec2(f.X(m.t), top + 7),
                            IM_COL32(120, 220, 255, 255));
  if (cursor_us >= f.t0 && cursor_us <= f.t1)
    dl->AddLine(ImVec2(f.X(cursor_us), top - 4), ImVec2(f.X(cursor_us), f.origin.y + f.canvas_h), ui::kCursor, 1.5f);
}

}  // namespace

void View::timeline_toolbar() {
  if (ImGui::Button("Fit run")) fit_timeline_to_run();
  ImGui::SameLine();
  if (ImGui::Button("Fit step")) fit_timeline_to_step();
  ImGui::SameLine();
  ImGui::Text("window %s  (%s .. %s)   %zu lanes", ui::duration(tl_.t1 - tl_.t0).c_str(), ui::duration(tl_.t0).c_str(),
              ui::duration(tl_.t1).c_str(), runs_[0]->timeline.lanes.size());
}

// Zoom around the mouse, pan by dragging; 10 ns per pixel at most.
void View::timeline_zoom_pan(TimelineFrame& f) {
  const TimelineModel& tm = runs_[0]->timeline;
  ImGuiIO& io = ImGui::GetIO();
  double us_per_px = (tl_.t1 - tl_.t0) / f.plot_w;
  if (f.hovered && io.MouseWheel != 0) {
    const double at = tl_.t0 + (io.MousePos.x - f.x0) * us_per_px;
    const double zoom = std::pow(0.8, io.MouseWheel);
    double span = std::clamp((tl_.t1 - tl_.t0) * zoom, f.plot_w * 0.01, (tm.t_end - tm.t_begin) * 4 + 1);
    tl_.t0 = at - (at - tl_.t0) / (tl_.t1 - tl_.t0) * span;
    tl_.t1 = tl_.t0 + span;
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2)) {
    const double d = io.MouseDelta.x * us_per_px;
    tl_.t0 -= d;
    tl_.t1 -= d;
    tl_.dragging = true;
  }
  f.t0 = tl_.t0;
  f.t1 = tl_.t1;
  f.us_per_px = (tl_.t1 - tl_.t0) / f.plot_w;
}

// One lane's items, culled to the window and merged below 2 px; a click on
// one is recorded in `click`.
void View::draw_lane(ImDrawList* dl, size_t li, const TimelineFrame& f, float y, LaneClick& click) {
  const RunData& run = runs_[0]->data;
  const Lane& lane = runs_[0]->timeline.lanes[li];
  ImGuiIO& io = ImGui::GetIO();
  dl->AddText(ImVec2(f.origin.x + 14, y + 2), ui::kText, lane.label.c_str());
  const float ly0 = y + 1, ly1 = y + kLaneHeight - 2;
  cull_and_merge(lane.t0.data(), lane.t1.data(), lane.size(), f.t0, f.t1, f.us_per_px, 2.0, tl_.scratch);
  for (const DrawItem& d : tl_.scratch) {
    float a = std::max(f.X(d.t0), f.x0 - 2), b = std::min(f.X(d.t1), f.x1 + 2);
    if (b - a < 1.f) b = a + 1.f;
    const bool selected =
        static_cast<int>(li) == tl_.sel_lane && tl_.sel_item >= d.first && tl_.sel_item < d.first + d.count;
    draw_item(dl, run, lane, d, a, b, ly0, ly1);
    if (selected) dl->AddRect(ImVec2(a - 1, ly0 - 1), ImVec2(b + 1, ly1 + 1), ui::kCursor, 0, 0, 2.f);
    if (f.hovered && io.MousePos.y >= ly0 && io.MousePos.y < ly1 && io.MousePos.x >= a - 1 && io.MousePos.x <= b + 1) {
      item_tooltip(run, lane, d);
      if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && !tl_.dragging)
        click = LaneClick{static_cast<int>(li), d.first, d.count > 1, d};
    }
  }
}

// Every lane under its group's header, then the counter tracks.
View::LaneClick View::draw_lanes(ImDrawList* dl, const TimelineFrame& f) {
  const TimelineModel& tm = runs_[0]->timeline;
  float y = f.origin.y + kAxisHeight + 4;
  std::string group;
  LaneClick click;
  for (size_t li = 0; li < tm.lanes.size(); ++li) {
    if (tm.lanes[li].group != group) {
      group = tm.lanes[li].group;
      group_header(dl, group.c_str(), f.origin.x, f.x1, y);
    }
    draw_lane(dl, li, f, y, click);
    y += kLaneHeight;
  }
  if (!tm.counters.empty()) group_header(dl, "counters", f.origin.x, f.x1, y);
  for (const CounterSeries& s : tm.counters) {
    if (s.vmin == 0 && s.vmax == 0) continue;  // e.g. device memory on a CPU run
    counter_track(dl, s, f, y);
    y += kCounterHeight;
  }
  return click;
}

// A click selects an item (or zooms into a merged block), or moves the
// cursor on empty space; a double click zooms to the selection.
void View::timeline_clicks(const LaneClick& click, const TimelineFrame& f) {
  const TimelineModel& tm = runs_[0]->timeline;
  ImGuiIO& io = ImGui::GetIO();
  if (click.lane >= 0) {
    if (click.merged) {
      focus_time(click.draw.t0, click.draw.t1);
    } else {
      tl_.sel_lane = click.lane;
      tl_.sel_item = click.item;
      set_time(tm.lanes[click.lane].t0[click.item]);
    }
  } else if (f.hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) && !tl_.dragging && io.MousePos.x >= f.x0) {
    set_time(tl_.t0 + (io.MousePos.x - f.x0) * f.us_per_px);  // click on empty space: move the cursor
  }
  if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) tl_.dragging = false;
  if (f.hovered && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left) && tl_.sel_lane >= 0) {
    const Lane& l = tm.lanes[tl_.sel_lane];
    focus_time(l.t0[tl_.sel_item], l.t1[tl_.sel_item]);
  }
}

// Details of the selected item.
void View::timeline_details() {
  const TimelineModel& tm = runs_[0]->timeline;
  if (tl_.sel_lane < 0 || tl_.sel_lane >= static_cast<int>(tm.lanes.size())) return;
  const Lane& l = tm.lanes[tl_.sel_lane];
  if (tl_.sel_item >= l.size()) return;
  ImGui::BeginChild("##details", ImVec2(0, 0), true);
  if (l.source[tl_.sel_item] == Lane::kernel) kernel_details(runs_[0]->data, l.row[tl_.sel_item]);
  else range_details(runs_[0]->data, l.row[tl_.sel_item]);
  ImGui::EndChild();
}

void View::draw_timeline() {
  const TimelineModel& tm = runs_[0]->timeline;
  if (tm.lanes.empty() && tm.counters.empty()) {
    no_data("No timeline: trace.json and kernels.csv hold no events (harness timeline off?)");
    return;
  }
  timeline_toolbar();
  const float details_h = tl_.sel_lane >= 0 ? 190.f : 0.f;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  TimelineFrame f;
  f.origin = ImGui::GetCursorScreenPos();
  f.canvas_h = std::max(80.f, avail.y - details_h);
  ImGui::InvisibleButton("##timeline", ImVec2(avail.x, f.canvas_h));
  f.hovered = ImGui::IsItemHovered();
  f.x0 = f.origin.x + kLabelWidth, f.x1 = f.origin.x + avail.x - 4;
  f.plot_w = std::max(10.f, f.x1 - f.x0);
  if (!(tl_.t1 > tl_.t0)) fit_timeline_to_run();
  timeline_zoom_pan(f);

  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(f.origin, ImVec2(f.origin.x + avail.x, f.origin.y + f.canvas_h), true);
  ui::time_axis(dl, f.x0, f.x1, f.origin.y + kAxisHeight - 2, tl_.t0, tl_.t1);
  dl->AddText(ImVec2(f.origin.x + 6, f.origin.y + 4), ui::kDimText, "time since run start");
  cursor_step_band(dl, tm.step(cursor_.step), f);
  const LaneClick click = draw_lanes(dl, f);
  marks_and_cursor(dl, tm, cursor_.t_us, f);
  dl->PopClipRect();
  timeline_clicks(click, f);
  timeline_details();
}

}  // namespace lantern::view
