// The weight loader's file reading (engine/weights.cpp's pipeline): the
// chunk plan over the safetensors files, the parallel pread of one chunk, the
// NaN/Inf tally of what was read and the stderr progress line.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "engine/weights.h"
#include "kernels/registry.h"

namespace lantern::weights_io {

namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 64ull << 20;   // one staging buffer
constexpr size_t kReadJobBytes = 8ull << 20;  // one pread job inside a chunk

// An open file descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd(const Fd&) = delete;
  ~Fd();
};

// One contiguous file range and where its bytes go.
struct Piece {
  int file = 0;  // index into the open files
  uint64_t file_offset = 0;
  size_t bytes = 0;
  size_t dst_offset = 0;    // inside the weight block
  size_t stage_offset = 0;  // inside the chunk's staging buffer
};

// What one staging buffer holds: pieces of one or more tensors.
struct Chunk {
  std::vector<Piece> pieces;
  size_t bytes = 0;
};

// Seconds from t0 to now.
double seconds_since(std::chrono::steady_clock::time_point t0);

// bf16 values whose exponent is all ones (NaN or Inf). A corrupt or badly
// converted checkpoint otherwise shows up only as NaN logits much later.
size_t count_nonfinite_bf16(const char* p, size_t bytes);
// Counts per weight view (views sorted by offset), from pieces read into host
// memory at `host` + piece.stage_offset (staged) or + piece.dst_offset (in place).
void tally_nonfinite(const Chunk& c, const char* host, bool staged, const std::vector<WeightView>& views,
                     std::vector<size_t>& counts);
// One warning line on stderr naming the first tensors with NaN/Inf values, if any.
void warn_nonfinite(const fs::path& model_dir, const std::vector<WeightView>& views,
                    const std::vector<size_t>& counts);
// Splits the tensors (already in file order) into chunks of at most
// kChunkBytes; a tensor larger than the space left spans chunks.
std::vector<Chunk> plan_chunks(const std::vector<Piece>& tensors);
// Reads one chunk's pieces into `base` (+ stage_offset when `staged`, else +
// dst_offset) with up to `threads` threads. Rethrows the first read error.
void read_chunk(const Chunk& chunk, char* base, bool staged, const std::vector<Fd>& fds,
                const std::vector<fs::path>& paths, int threads);
// The loading progress on stderr: a line redrawn on a terminal, one per quarter in a log.
std::function<void(size_t, size_t)> stderr_progress(kernels::Backend backend);

}  // namespace lantern::weights_io
