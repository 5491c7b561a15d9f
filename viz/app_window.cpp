#include "viz/app_window.h"

#define GL_GLEXT_PROTOTYPES
#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <png.h>

#include <cerrno>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/base/errors.h"
#include "viz/ui.h"

namespace lantern::view {

namespace {

std::string g_glfw_error;
void on_glfw_error(int code, const char* text) { g_glfw_error = strformat("GLFW error %d: %s", code, text); }

// DejaVu Sans (Debian fonts-dejavu-core) when installed: legible at small
// sizes and it has µ; else ImGui's built-in font.
void load_font() {
  ImGuiIO& io = ImGui::GetIO();
  for (const char* path : {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                           "/usr/share/fonts/dejavu/DejaVuSans.ttf"}) {
    if (!std::filesystem::exists(path)) continue;
    if (io.Fonts->AddFontFromFileTTF(path, 15.0f)) {
      ui::set_micro_glyph(true);
      return;
    }
  }
  io.Fonts->AddFontDefault();
}

}  // namespace

AppWindow::AppWindow(const WindowOptions& o) {
  glfwSetErrorCallback(on_glfw_error);
  LANTERN_CHECK(glfwInit(), "cannot open a window (%s): run under a display, or headless with "
                            "xvfb-run -a lantern-view ...",
                g_glfw_error.empty() ? "glfwInit failed" : g_glfw_error.c_str());
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  window_ = glfwCreateWindow(o.width, o.height, o.title.c_str(), nullptr, nullptr);
  if (!window_) {
    glfwTerminate();
    LANTERN_FAIL("cannot create an OpenGL 3.3 window (%s): install Mesa (libgl1-mesa-dri) or a GPU driver",
                 g_glfw_error.c_str());
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(o.vsync ? 1 : 0);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = o.ini_path;
  ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 3;
  style.FrameRounding = 2;
  style.ItemSpacing = ImVec2(8, 5);
  load_font();
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");
}

AppWindow::~AppWindow() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window_);
  glfwTerminate();
}

bool AppWindow::should_close() const { return glfwWindowShouldClose(window_); }

void AppWindow::begin_frame(bool no_mouse) {
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  if (no_mouse) ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  ImGui::NewFrame();
}

void AppWindow::render() {
  ImGui::Render();
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  // The clear colour is the windows' background: panels drawn full-window
  // skip their background quad (View::draw_single).
  const ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  glClearColor(bg.x, bg.y, bg.z, 1.f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void AppWindow::swap() { glfwSwapBuffers(window_); }

std::vector<uint8_t> AppWindow::read_pixels(int* width, int* height) const {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  std::vector<uint8_t> bottom_up(static_cast<size_t>(w) * h * 4), rgba(bottom_up.size());
  glFinish();
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, bottom_up.data());
  const size_t row = static_cast<size_t>(w) * 4;
  for (int y = 0; y < h; ++y)
    std::memcpy(rgba.data() + y * row, bottom_up.data() + (h - 1 - y) * row, row);
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = 255;  // opaque, whatever GL left in alpha
  *width = w;
  *height = h;
  return rgba;
}

void write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  LANTERN_CHECK(f, "cannot write %s (%s)", path.c_str(), std::strerror(errno));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    LANTERN_FAIL("writing %s failed (libpng error)", path.c_str());
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y)
    png_write_row(png, const_cast<png_bytep>(rgba.data() + static_cast<size_t>(y) * width * 4));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  LANTERN_CHECK(std::fclose(f) == 0, "writing %s failed (%s)", path.c_str(), std::strerror(errno));
}

}  // namespace lantern::view
