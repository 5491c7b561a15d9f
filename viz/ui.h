#pragma once
// Drawing helpers shared by the panels: colours, number formatting with
// units, nice axis ticks, tooltips. ImGui only; no run data.
#include <cstdint>
#include <string>

#include <imgui.h>

namespace lantern::view::ui {

// Stable, distinguishable colour for a key (sequence id, op name hash...).
ImU32 color_for(uint64_t key, float alpha = 1.f);
ImU32 color_for_name(const std::string& name, float alpha = 1.f);
// Colour of a memory-map category ("weights", "arena", "kv_pool", ...).
ImU32 category_color(const std::string& category, float alpha = 1.f);
ImU32 with_alpha(ImU32 c, float alpha);
ImU32 darker(ImU32 c, float f = 0.6f);

constexpr ImU32 kRed = IM_COL32(235, 64, 52, 255);
constexpr ImU32 kOrange = IM_COL32(255, 160, 40, 255);
constexpr ImU32 kYellow = IM_COL32(240, 220, 60, 255);
constexpr ImU32 kGreen = IM_COL32(80, 200, 100, 255);
constexpr ImU32 kGrey = IM_COL32(140, 140, 140, 255);
constexpr ImU32 kText = IM_COL32(230, 230, 230, 255);
constexpr ImU32 kDimText = IM_COL32(160, 160, 160, 255);
constexpr ImU32 kCursor = IM_COL32(255, 230, 80, 255);
constexpr ImU32 kGridLine = IM_COL32(255, 255, 255, 28);

// "1.5 GiB", "512 B".
std::string bytes(double b);
// Microseconds as "850 ns", "12.3 µs", "4.56 ms", "1.23 s".
std::string duration(double us);
// A time since the run's origin with the precision the zoom asks for.
std::string time_label(double us, double tick_us);
std::string number(double x, int significant = 4);  // "1.23e+09" -> "1.23 G"
std::string hex(uint64_t address);
const char* micro();  // "µ" when the font has it, else "u"
void set_micro_glyph(bool available);

// Tick spacing (1, 2, 5 x 10^k) for about `target` ticks over `range`.
double nice_step(double range, int target);

// A horizontal time axis across [x0, x1] at y for [t0, t1] (µs): ticks, labels.
void time_axis(ImDrawList* dl, float x0, float x1, float y, double t0, double t1);
// A vertical value axis with ticks, [v0, v1] mapped to [y1, y0].
void value_axis(ImDrawList* dl, float x, float y0, float y1, double v0, double v1, const char* unit);

// Text clipped to a rectangle (nothing when it does not fit at all).
void clipped_text(ImDrawList* dl, ImVec2 p0, ImVec2 p1, const std::string& text, ImU32 color = kText);

// A line of "key: value" in a tooltip or details box (value dimmed key bold-ish).
void kv_line(const char* key, const std::string& value);

// A coloured square and a label (legends).
void legend_chip(ImU32 color, const std::string& label);

}  // namespace lantern::view::ui
