// The weight loader's file reading (weights_read.h).
#include "engine/weights_read.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "kernels/base/errors.h"

namespace lantern::weights_io {

Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t count_nonfinite_bf16(const char* p, size_t bytes) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    uint16_t v;
    std::memcpy(&v, p + i, 2);
    n += (v & 0x7F80) == 0x7F80;
  }
  return n;
}

void tally_nonfinite(const Chunk& c, const char* host, bool staged, const std::vector<WeightView>& views,
                     std::vector<size_t>& counts) {
  for (const auto& p : c.pieces) {
    size_t n = count_nonfinite_bf16(host + (staged ? p.stage_offset : p.dst_offset), p.bytes);
    if (!n) continue;
    auto it = std::upper_bound(views.begin(), views.end(), p.dst_offset,
                               [](size_t off, const WeightView& v) { return off < v.offset; });
    counts[static_cast<size_t>(it - views.begin()) - 1] += n;
  }
}

void warn_nonfinite(const fs::path& model_dir, const std::vector<WeightView>& views,
                    const std::vector<size_t>& counts) {
  size_t total = 0, tensors = 0;
  std::string names;
  for (size_t i = 0; i < views.size(); ++i) {
    if (!counts[i]) continue;
    total += counts[i];
    if (tensors++ < 4) names += strformat("%s%s (%zu)", names.empty() ? "" : ", ", views[i].name.c_str(), counts[i]);
  }
  if (!total) return;
  if (tensors > 4) names += strformat(", ... (%zu more tensors)", tensors - 4);
  std::fprintf(stderr, "warning: %s: %zu NaN/Inf values in the weights: %s; outputs will be garbage\n",
               model_dir.c_str(), total, names.c_str());
}

std::vector<Chunk> plan_chunks(const std::vector<Piece>& tensors) {
  std::vector<Chunk> chunks(1);
  for (Piece p : tensors) {
    while (p.bytes > 0) {
      if (chunks.back().bytes == kChunkBytes) chunks.emplace_back();
      Chunk& c = chunks.back();
      Piece part = p;
      part.bytes = std::min(p.bytes, kChunkBytes - c.bytes);
      part.stage_offset = c.bytes;
      c.pieces.push_back(part);
      c.bytes += part.bytes;
      p.file_offset += part.bytes;
      p.dst_offset += part.bytes;
      p.bytes -= part.bytes;
    }
  }
  if (chunks.back().bytes == 0) chunks.pop_back();
  return chunks;
}

namespace {

void pread_exact(int fd, char* dst, size_t n, uint64_t offset, const fs::path& file) {
  while (n > 0) {
    ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    LANTERN_CHECK(
        r > 0, "%s: read of %zu bytes at offset %llu failed: %s", file.c_str(), n,
        static_cast<unsigned long long>(offset),
        r < 0 ? std::strerror(errno) : "unexpected end of file (truncated while loading?)");
    dst += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

void read_chunk(const Chunk& chunk, char* base, bool staged, const std::vector<Fd>& fds,
                const std::vector<fs::path>& paths, int threads) {
  struct Job {
    const Piece* piece;
    size_t skip, bytes;
  };
  std::vector<Job> jobs;
  for (const auto& p : chunk.pieces)
    for (size_t s = 0; s < p.bytes; s += kReadJobBytes)
      jobs.push_back({&p, s, std::min(kReadJobBytes, p.bytes - s)});
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < jobs.size();) {
      const Job& j = jobs[i];
      char* dst = base + (staged ? j.piece->stage_offset : j.piece->dst_offset) + j.skip;
      try {
        pread_exact(fds[j.piece->file].fd, dst, j.bytes, j.piece->file_offset + j.skip,
                    paths[j.piece->file]);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::function<void(size_t, size_t)> stderr_progress(kernels::Backend backend) {
  const bool tty = ::isatty(STDERR_FILENO);
  auto last = std::make_shared<double>(-1.0);
  auto t0 = std::chrono::steady_clock::now();
  return [=](size_t done, size_t total) {
    double pct = 100.0 * double(done) / double(total);
    double now = seconds_since(t0);
    // A terminal gets a line redrawn every 0.2 s; a log one line per quarter.
    bool show = tty ? (now - *last >= 0.2 || done == total)
                    : (std::floor(pct / 25) > std::floor(*last / 25) || done == total);
    if (!show) return;
    *last = tty ? now : pct;
    std::fprintf(stderr, "%sloading weights to %s: %.2f / %.2f GB (%3.0f%%)%s", tty ? "\r" : "",
                 kernels::backend_name(backend), done / 1e9, total / 1e9, pct,
                 tty && done != total ? "" : "\n");
    std::fflush(stderr);
  };
}

}  // namespace lantern::weights_io
