#pragma once
// The GLFW window, OpenGL 3 context and Dear ImGui context lantern-view draws
// in (interactive, screenshots and benchmarks alike), and reading back the
// rendered frame.
#include <cstdint>
#include <string>
#include <vector>

struct GLFWwindow;

namespace lantern::view {

struct WindowOptions {
  int width = 1600, height = 900;
  std::string title = "lantern-view";
  const char* ini_path = nullptr;  // nullptr: no ini file (screenshots, benchmarks)
  bool vsync = true;
};

class AppWindow {
 public:
  // Throws lantern::Error with a one-line reason (no display, no OpenGL 3).
  explicit AppWindow(const WindowOptions& options);
  ~AppWindow();
  AppWindow(const AppWindow&) = delete;
  AppWindow& operator=(const AppWindow&) = delete;

  bool should_close() const;
  // Poll events, new ImGui frame; `no_mouse`: the mouse is away (screenshots).
  void begin_frame(bool no_mouse = false);
  void render();           // ImGui render into the back buffer (no swap)
  void swap();
  // The back buffer as top-down RGBA rows (call after render(), before swap()).
  std::vector<uint8_t> read_pixels(int* width, int* height) const;
  GLFWwindow* handle() const { return window_; }

 private:
  GLFWwindow* window_ = nullptr;
};

// Writes RGBA rows as a PNG (libpng); throws lantern::Error naming the file.
void write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height);

}  // namespace lantern::view
