// lantern-view end to end, headless: a run recorded on the CPU backend (the
// tiny synthetic model through `lantern run`), every panel
// rendered with --screenshot under xvfb-run (Mesa llvmpipe), each PNG checked:
// the requested size, not blank, and different from every other panel.
// Damaged runs still render (with their messages); bad arguments exit 1.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "tests/viz/recorded_run.h"
#include "tests/viz/synthetic_run.h"

#if LANTERN_VIEWER_BUILT
#include <png.h>
#endif

namespace lantern::view {
namespace {

#if LANTERN_VIEWER_BUILT
namespace fs = std::filesystem;

const char* kPanels[] = {"memory", "lifetimes", "kv", "timeline", "kernels", "experiment"};
constexpr int kWidth = 960, kHeight = 560;

using Result = test::CommandResult;
Result run(const std::string& command) { return test::run_command(command); }
fs::path bin(const char* name) { return test::built_binary(name); }

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;
};

Image read_png(const fs::path& path) {
  Image img;
  png_image p{};
  p.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&p, path.c_str())) return img;
  p.format = PNG_FORMAT_RGBA;
  img.rgba.resize(PNG_IMAGE_SIZE(p));
  if (!png_image_finish_read(&p, nullptr, img.rgba.data(), 0, nullptr)) return {};
  img.width = static_cast<int>(p.width);
  img.height = static_cast<int>(p.height);
  return img;
}

// Fraction of pixels that differ from the most common colour (the background).
double ink(const Image& img) {
  std::map<uint32_t, size_t> counts;
  for (size_t i = 0; i < img.rgba.size(); i += 4)
    ++counts[img.rgba[i] | img.rgba[i + 1] << 8 | img.rgba[i + 2] << 16];
  size_t top = 0;
  for (auto& [c, n] : counts) top = std::max(top, n);
  return 1.0 - static_cast<double>(top) / (img.rgba.size() / 4);
}

double differing(const Image& a, const Image& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.rgba.size(); i += 4)
    n += a.rgba[i] != b.rgba[i] || a.rgba[i + 1] != b.rgba[i + 1] || a.rgba[i + 2] != b.rgba[i + 2];
  return static_cast<double>(n) / (a.rgba.size() / 4);
}

// One CPU run per test process (tests/viz/recorded_run.h), recorded by
// `lantern run`, so the experiment panel shows its editing section too.
const fs::path& recorded_run() { return test::recorded_cpu_run().dir; }

// xvfb-run -a starts at display :99 and takes the first free one; several
// processes starting at once (ctest -j, other jobs on a shared machine) can
// pick the same one and lose it mid-test. Start each process elsewhere.
// -noreset: an X server resets when its last client disconnects, and a
// client connecting during the reset fails ("Failed to open display"); each
// command below runs several lantern-views one after another.
std::string xvfb_run() {
  return "xvfb-run -a -n " + std::to_string(100 + getpid() % 5000) + " -s '-screen 0 1280x1024x24 -noreset' ";
}

std::string view_command(const fs::path& out_dir, const fs::path& run_dir, const char* extra = "") {
  std::string cmd = xvfb_run() + "sh -c '";
  for (const char* p : kPanels)
    cmd += bin("lantern-view").string() + " --screenshot " + (out_dir / (std::string(p) + ".png")).string() +
           " --panel " + p + " --size " + std::to_string(kWidth) + "x" + std::to_string(kHeight) + " " + extra +
           " " + run_dir.string() + " || exit 1; ";
  return cmd + "'";
}
#endif

TEST(ViewerScreenshots, EveryPanelOfARecordedCpuRunRendersDistinctNonBlankPngs) {
#if !LANTERN_VIEWER_BUILT
  GTEST_SKIP() << "lantern-view is not built (LANTERN_BUILD_VIEWER=OFF)";
#else
  ASSERT_EQ(run("command -v xvfb-run").status, 0) << "xvfb-run missing: run scripts/setup.sh (Debian xvfb, xauth)";
  const fs::path out = test::scratch_dir("viewer-screenshots-out");
  Result r = run(view_command(out, recorded_run(), "--step 3"));
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<Image> images;
  for (const char* p : kPanels) {
    Image img = read_png(out / (std::string(p) + ".png"));
    ASSERT_EQ(img.width, kWidth) << p;
    ASSERT_EQ(img.height, kHeight) << p;
    EXPECT_GT(ink(img), 0.03) << p << ": the panel is (nearly) blank";
    images.push_back(std::move(img));
  }
  for (size_t a = 0; a < images.size(); ++a)
    for (size_t b = a + 1; b < images.size(); ++b)
      EXPECT_GT(differing(images[a], images[b]), 0.05) << kPanels[a] << " and " << kPanels[b] << " look alike";
#endif
}

TEST(ViewerScreenshots, DamagedRunsRenderWithTheirMessageAndBadArgumentsExit1) {
#if !LANTERN_VIEWER_BUILT
  GTEST_SKIP() << "lantern-view is not built (LANTERN_BUILD_VIEWER=OFF)";
#else
  ASSERT_EQ(run("command -v xvfb-run").status, 0) << "xvfb-run missing: run scripts/setup.sh (Debian xvfb, xauth)";
  const fs::path damaged = test::scratch_dir("viewer-damaged") / "run";
  test::SyntheticRunOptions o;
  o.kernels = 2000;
  o.layers = 4;
  test::write_synthetic_run(damaged, o);
  std::ofstream(damaged / "kv.json") << "{\"format_version\": \"1.0\", \"block_si";  // cut short
  fs::remove(damaged / "timeline.bin");
  fs::remove(damaged / "manifest.json");
  const fs::path out = test::scratch_dir("viewer-damaged-out");
  Result r = run(view_command(out, damaged));
  ASSERT_EQ(r.status, 0) << "a damaged run must open, not crash: " << r.output;
  for (const char* p : kPanels) EXPECT_EQ(read_png(out / (std::string(p) + ".png")).width, kWidth) << p;

  Result bad_panel = run(bin("lantern-view").string() + " --screenshot x.png --panel bogus " + damaged.string());
  EXPECT_EQ(bad_panel.status, 1);
  EXPECT_NE(bad_panel.output.find("unknown --panel bogus"), std::string::npos) << bad_panel.output;
  Result missing = run(bin("lantern-view").string() + " --screenshot x.png --panel kv /nonexistent/run");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("not a directory"), std::string::npos) << missing.output;
  // The interactive app: a few frames of every panel tiled, then its layout
  // and open panels written to the ini file.
  const fs::path ini = out / "layout.ini";
  Result app = run(xvfb_run() + bin("lantern-view").string() + " --frames 5 --ini " + ini.string() + " " +
                   damaged.string() + " " + damaged.string());
  ASSERT_EQ(app.status, 0) << app.output;
  std::ifstream in(ini);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("[LanternView][Panels]"), std::string::npos) << text;
  EXPECT_NE(text.find("timeline=1"), std::string::npos) << text;
  EXPECT_NE(text.find("[Window][Memory map]"), std::string::npos) << text;

  Result help = run(bin("lantern-view").string() + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("example:"), std::string::npos);
#endif
}

}  // namespace
}  // namespace lantern::view
