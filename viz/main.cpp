// lantern-view: the Dear ImGui viewer of Lantern run directories.
//   lantern-view RUN_DIR [RUN_DIR2]
//   lantern-view --screenshot OUT.png --panel NAME [--step S] [--size WxH] RUN_DIR [RUN_DIR2]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <imgui.h>

#include "kernels/base/errors.h"
#include "harness/runfmt/run_dir.h"
#include "viz/app_window.h"
#include "viz/model/run_data.h"
#include "viz/view.h"

namespace {

namespace fs = std::filesystem;
using namespace lantern;
using namespace lantern::view;

constexpr const char* kUsage =
    "usage: lantern-view [RUN_DIR [RUN_DIR2]]\n"
    "       lantern-view --screenshot OUT.png --panel NAME [--step S] [--size WxH] RUN_DIR [RUN_DIR2]\n"
    "\n"
    "Opens Lantern run directories (lantern run EXP.json, lantern generate --record DIR):\n"
    "memory map, alias lifetimes, KV occupancy, timeline, kernel statistics and experiment\n"
    "panels sharing one step/time cursor. A second run is compared with the first\n"
    "(Experiment panel); a directory whose sub-directories are runs opens as a sweep; a\n"
    "run of `lantern run` can be edited into a new experiment file (Experiment > Run).\n"
    "\n"
    "options:\n"
    "  --screenshot OUT.png  render one panel to a PNG and exit (headless: xvfb-run -a ...)\n"
    "  --panel NAME          memory | lifetimes | kv | timeline | kernels | experiment\n"
    "  --step S              cursor step (default: the first step)\n"
    "  --size WxH            window size in pixels (default 1600x900)\n"
    "  --frames N            quit after N frames (smoke tests)\n"
    "  --ini FILE            layout file (default $XDG_CONFIG_HOME/lantern-view.ini,\n"
    "                        else ~/.config/lantern-view.ini)\n"
    "  -h, --help            this help\n"
    "\n"
    "keys: Left/Right previous/next step, Home/End first/last step, F fit the timeline to\n"
    "the step, Shift+F to the run, Ctrl+O open, Ctrl+Q quit; in the timeline, wheel zooms,\n"
    "drag pans, click selects.\n"
    "\n"
    "example:\n"
    "  lantern-view runs/first runs/second\n"
    "  xvfb-run -a lantern-view --screenshot kv.png --panel kv --step 40 runs/first\n";

struct Args {
  std::vector<std::string> dirs;
  std::string screenshot, panel = "timeline", ini;
  long long step = -1;
  long long frames = -1;  // --frames N: quit after N frames (smoke tests)
  int width = 1600, height = 900;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      LANTERN_CHECK(i + 1 < argc, "option %s needs a value (see --help)", s.c_str());
      return argv[++i];
    };
    if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (s == "--screenshot") {
      a.screenshot = value();
    } else if (s == "--panel") {
      a.panel = value();
      LANTERN_CHECK(panel_from_name(a.panel), "unknown --panel %s: use memory, lifetimes, kv, "
                                              "timeline, kernels or experiment", a.panel.c_str());
    } else if (s == "--step") {
      std::string v = value();
      char* end = nullptr;
      a.step = std::strtoll(v.c_str(), &end, 10);
      LANTERN_CHECK(!v.empty() && *end == '\0' && a.step >= 0, "--step %s: expected a step number >= 0", v.c_str());
    } else if (s == "--size") {
      std::string v = value();
      LANTERN_CHECK(std::sscanf(v.c_str(), "%dx%d", &a.width, &a.height) == 2 && a.width >= 320 &&
                        a.height >= 200 && a.width <= 8192 && a.height <= 8192,
                    "--size %s: expected WxH, e.g. 1600x900 (320x200 to 8192x8192)", v.c_str());
    } else if (s == "--frames") {
      std::string v = value();
      char* end = nullptr;
      a.frames = std::strtoll(v.c_str(), &end, 10);
      LANTERN_CHECK(!v.empty() && *end == '\0' && a.frames > 0, "--frames %s: expected a count > 0", v.c_str());
    } else if (s == "--ini") {
      a.ini = value();
    } else if (s.rfind("-", 0) == 0) {
      LANTERN_FAIL("unknown option %s (see --help)", s.c_str());
    } else {
      a.dirs.push_back(s);
    }
  }
  LANTERN_CHECK(a.dirs.size() <= 2, "at most two run directories (got %zu): lantern-view RUN_DIR [RUN_DIR2]",
                a.dirs.size());
  for (const auto& d : a.dirs)
    LANTERN_CHECK(fs::is_directory(d), "%s: not a directory (expected a run directory written by "
                                       "lantern ... --record DIR)", d.c_str());
  if (!a.screenshot.empty())
    LANTERN_CHECK(!a.dirs.empty(), "--screenshot needs a RUN_DIR to draw");
  return a;
}

std::string default_ini() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir = xdg && *xdg ? fs::path(xdg) : home ? fs::path(home) / ".config" : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  return (dir / "lantern-view.ini").string();
}

void open_all(View& view, const Args& a) {
  for (size_t i = 0; i < a.dirs.size(); ++i) {
    const fs::path dir = a.dirs[i];
    if (!runfmt::RunReader::is_run_dir(dir) && !sweep_runs(dir).empty()) view.open_sweep(dir);
    else view.open(dir, static_cast<int>(i));
  }
  if (a.step >= 0) {
    view.set_step(a.step);
    view.fit_timeline_to_step();
  }
}

int screenshot(const Args& a) {
  WindowOptions wo;
  wo.width = a.width;
  wo.height = a.height;
  wo.vsync = false;
  AppWindow window(wo);
  View view;
  open_all(view, a);
  const Panel panel = *panel_from_name(a.panel);
  if (panel == Panel::timeline) view.select_longest_in_step();  // show a details box
  // A few frames: tables and auto-sized windows settle on the second.
  for (int frame = 0; frame < 4; ++frame) {
    window.begin_frame(/*no_mouse=*/true);
    view.draw_single(panel);
    window.render();
    if (frame == 3) {
      int w = 0, h = 0;
      std::vector<uint8_t> rgba = window.read_pixels(&w, &h);
      write_png(a.screenshot, rgba, w, h);
      std::fprintf(stderr, "lantern-view: wrote %s (%dx%d, panel %s)\n", a.screenshot.c_str(), w, h,
                   a.panel.c_str());
    }
    window.swap();
  }
  return 0;
}

int interactive(const Args& a) {
  static std::string ini;  // ImGui keeps the pointer
  ini = a.ini.empty() ? default_ini() : a.ini;
  WindowOptions wo;
  wo.width = a.width;
  wo.height = a.height;
  wo.ini_path = ini.c_str();
  AppWindow window(wo);
  View view;
  view.register_settings();
  open_all(view, a);
  for (long long frame = 0; !window.should_close() && frame != a.frames; ++frame) {
    window.begin_frame();
    view.frame();
    window.render();
    window.swap();
  }
  ImGui::SaveIniSettingsToDisk(ini.c_str());  // layout and open panels, also when --frames ends it
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse(argc, argv);
    return a.screenshot.empty() ? interactive(a) : screenshot(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lantern-view: error: %s\n", e.what());
    return 1;
  }
}
