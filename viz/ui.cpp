#include "viz/ui.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <functional>

namespace lantern::view::ui {

namespace {
bool g_micro_glyph = false;

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: neighbouring ids get far-apart hues
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

ImU32 color_for(uint64_t key, float alpha) {
  const uint64_t h = mix(key);
  const float hue = static_cast<float>(h % 360) / 360.f;
  const float sat = 0.45f + 0.25f * static_cast<float>((h >> 12) % 100) / 100.f;
  const float val = 0.70f + 0.20f * static_cast<float>((h >> 24) % 100) / 100.f;
  float r, g, b;
  ImGui::ColorConvertHSVtoRGB(hue, sat, val, r, g, b);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(r, g, b, alpha));
}

ImU32 color_for_name(const std::string& name, float alpha) {
  return color_for(std::hash<std::string>{}(name), alpha);
}

ImU32 category_color(const std::string& c, float alpha) {
  ImU32 base = IM_COL32(150, 150, 150, 255);
  if (c == "weights") base = IM_COL32(86, 132, 214, 255);
  else if (c == "arena") base = IM_COL32(96, 190, 120, 255);
  else if (c == "kv_pool") base = IM_COL32(214, 136, 60, 255);
  else if (c == "block_tables") base = IM_COL32(200, 180, 80, 255);
  else if (c == "workspace") base = IM_COL32(170, 110, 200, 255);
  else if (c == "cublas_workspace") base = IM_COL32(200, 90, 150, 255);
  return with_alpha(base, alpha);
}

ImU32 with_alpha(ImU32 c, float alpha) {
  ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  v.w = alpha;
  return ImGui::ColorConvertFloat4ToU32(v);
}

ImU32 darker(ImU32 c, float f) {
  ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(v.x * f, v.y * f, v.z * f, v.w));
}

std::string bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return s;
}

const char* micro() { return g_micro_glyph ? "\xc2\xb5" : "u"; }
void set_micro_glyph(bool available) { g_micro_glyph = available; }

std::string duration(double us) {
  char s[48];
  const double a = std::fabs(us);
  if (a < 1) std::snprintf(s, sizeof s, "%.0f ns", us * 1e3);
  else if (a < 1e3) std::snprintf(s, sizeof s, "%.3g %ss", us, micro());
  else if (a < 1e6) std::snprintf(s, sizeof s, "%.4g ms", us / 1e3);
  else std::snprintf(s, sizeof s, "%.4g s", us / 1e6);
  return s;
}

std::string time_label(double us, double tick_us) {
  char s[48];
  if (tick_us >= 1e5) std::snprintf(s, sizeof s, "%.*f s", tick_us >= 1e6 ? 0 : 1, us / 1e6);
  else if (tick_us >= 100) std::snprintf(s, sizeof s, "%.*f ms", tick_us >= 1e3 ? 0 : 1, us / 1e3);
  else if (tick_us >= 0.1) std::snprintf(s, sizeof s, "%.*f ms", tick_us >= 1 ? 3 : 4, us / 1e3);
  else std::snprintf(s, sizeof s, "%.6f ms", us / 1e3);
  return s;
}

std::string number(double x, int significant) {
  if (std::isnan(x)) return "-";
  const char* suffix[] = {"", " k", " M", " G", " T", " P"};
  int u = 0;
  double a = std::fabs(x);
  while (a >= 1000 && u < 5) a /= 1000, x /= 1000, ++u;
  char s[48];
  std::snprintf(s, sizeof s, "%.*g%s", significant, x, suffix[u]);
  return s;
}

std::string hex(uint64_t address) {
  char s[32];
  std::snprintf(s, sizeof s, "0x%" PRIx64, address);
  return s;
}

double nice_step(double range, int target) {
  if (!(range > 0) || target <= 0) return 1;
  const double raw = range / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

void time_axis(ImDrawList* dl, float x0, float x1, float y, double t0, double t1) {
  if (!(t1 > t0) || x1 <= x0) return;
  const double step = nice_step(t1 - t0, std::max(2, static_cast<int>((x1 - x0) / 110)));
  const double scale = (x1 - x0) / (t1 - t0);
  dl->AddLine(ImVec2(x0, y), ImVec2(x1, y), kDimText);
  for (double t = std::ceil(t0 / step) * step; t <= t1; t += step) {
    const float x = x0 + static_cast<float>((t - t0) * scale);
    dl->AddLine(ImVec2(x, y - 5), ImVec2(x, y), kDimText);
    dl->AddText(ImVec2(x + 3, y - ImGui::GetFontSize() - 3), kDimText, time_label(t, step).c_str());
    for (int minor = 1; minor < 5; ++minor) {
      const float xm = x + static_cast<float>(step * minor / 5 * scale);
      if (xm < x1) dl->AddLine(ImVec2(xm, y - 2), ImVec2(xm, y), kDimText);
    }
  }
}

void value_axis(ImDrawList* dl, float x, float y0, float y1, double v0, double v1, const char* unit) {
  if (!(v1 > v0) || y1 <= y0) return;
  const double step = nice_step(v1 - v0, std::max(2, static_cast<int>((y1 - y0) / 40)));
  dl->AddLine(ImVec2(x, y0), ImVec2(x, y1), kDimText);
  for (double v = std::ceil(v0 / step) * step; v <= v1 + step * 1e-9; v += step) {
    const float y = y1 - static_cast<float>((v - v0) / (v1 - v0) * (y1 - y0));
    dl->AddLine(ImVec2(x - 4, y), ImVec2(x, y), kDimText);
    std::string label = number(v, 3);
    const float w = ImGui::CalcTextSize(label.c_str()).x;
    dl->AddText(ImVec2(x - 7 - w, y - ImGui::GetFontSize() / 2), kDimText, label.c_str());
  }
  if (unit && *unit) {
    const float w = ImGui::CalcTextSize(unit).x;
    dl->AddText(ImVec2(x - w / 2, y0 - ImGui::GetFontSize() - 4), kDimText, unit);
  }
}

void clipped_text(ImDrawList* dl, ImVec2 p0, ImVec2 p1, const std::string& text, ImU32 color) {
  const float width = p1.x - p0.x;
  if (width < 12) return;
  ImVec2 size = ImGui::CalcTextSize(text.c_str());
  const float y = p0.y + (p1.y - p0.y - size.y) / 2;
  // Clipped on the CPU: a clip rect per label would make one draw call each,
  // which software GL (llvmpipe) pays for dearly.
  const ImVec4 clip(p0.x, p0.y, p1.x, p1.y);
  dl->AddText(nullptr, 0.f, ImVec2(p0.x + std::max(2.f, (width - size.x) / 2), y), color, text.c_str(), nullptr, 0.f,
              &clip);
}

void kv_line(const char* key, const std::string& value) {
  ImGui::TextColored(ImVec4(0.65f, 0.65f, 0.65f, 1), "%s", key);
  ImGui::SameLine(150);
  ImGui::TextUnformatted(value.c_str());
}

void legend_chip(ImU32 color, const std::string& label) {
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetTextLineHeight();
  ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + h - 4, p.y + h - 2), color);
  ImGui::Dummy(ImVec2(h - 2, h));
  ImGui::SameLine();
  ImGui::TextUnformatted(label.c_str());
}

}  // namespace lantern::view::ui
