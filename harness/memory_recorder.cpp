#include "harness/memory_recorder.h"

#include <cinttypes>

#include "engine/arena.h"
#include "kernels/base/errors.h"

namespace lantern::harness {

static_assert(static_cast<int>(kernels::Backend::cpu) == 0 &&
              static_cast<int>(kernels::Backend::cuda) == 1);

MemoryRecorder::MemoryRecorder(uint64_t (*clock)()) : clock_(clock) {}

void MemoryRecorder::on_alloc(const AllocEvent& e) {
  const uint64_t now = clock_();
  const char* backend = kernels::backend_name(e.backend);
  if (e.is_free) {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->live && it->a.address == e.address && it->a.backend == backend) {
        it->live = false;
        it->free_ns = now;
        live_[static_cast<int>(e.backend)] -= it->a.bytes;
        samples_.push_back(Sample{now, live_[1], live_[0]});
        return;
      }
    }
    if (errors_.size() < 100)
      errors_.push_back(strformat("free of %s %s (%s) at 0x%" PRIx64 ", which is not allocated",
                                  e.owner.c_str(), e.name.c_str(), backend, e.address));
    return;
  }
  for (const Entry& x : entries_) {
    if (!x.live || x.a.backend != backend || e.bytes == 0 || x.a.bytes == 0) continue;
    if (e.address < x.a.address + x.a.bytes && x.a.address < e.address + e.bytes &&
        errors_.size() < 100)
      errors_.push_back(strformat("%s %s [0x%" PRIx64 ", +%" PRIu64 ") overlaps live %s %s "
                                  "[0x%" PRIx64 ", +%" PRIu64 ")",
                                  e.owner.c_str(), e.name.c_str(), e.address, e.bytes,
                                  x.a.owner.c_str(), x.a.name.c_str(), x.a.address, x.a.bytes));
  }
  Entry entry;
  entry.a.id = static_cast<int>(entries_.size());
  entry.a.owner = e.owner;
  entry.a.name = e.name;
  entry.a.address = e.address;
  entry.a.bytes = e.bytes;
  entry.a.backend = backend;
  entry.alloc_ns = now;
  entries_.push_back(std::move(entry));
  live_[static_cast<int>(e.backend)] += e.bytes;
  if (live_[1] > peak_device_bytes_) peak_device_bytes_ = live_[1];
  samples_.push_back(Sample{now, live_[1], live_[0]});
}

void MemoryRecorder::on_arena(const Arena& arena) {
  arena_address_ = reinterpret_cast<uintptr_t>(arena.base());
  arena_bytes_ = arena.total_bytes();
  arena_backend_ = kernels::backend_name(arena.backend());
  buffers_.clear();
  views_.clear();
  for (const ArenaBuffer& b : arena.buffers())
    buffers_.push_back(runfmt::BufferRecord{b.name, b.offset, b.bytes, b.shape});
  for (size_t i = 0; i < arena.views().size(); ++i) {
    const ArenaView& v = arena.views()[i];
    views_.push_back(runfmt::ViewRecord{static_cast<int>(i), v.name, v.buffer, v.offset, v.bytes});
  }
}

void MemoryRecorder::fill(runfmt::MemoryMap& map, uint64_t origin_ns) const {
  auto us = [&](uint64_t ns) {
    return ns >= origin_ns ? static_cast<double>(ns - origin_ns) / 1000.0 : 0.0;
  };
  map.allocations.clear();
  for (const Entry& e : entries_) {
    runfmt::Allocation a = e.a;
    a.alloc_us = us(e.alloc_ns);
    if (!e.live) a.free_us = us(e.free_ns);
    map.allocations.push_back(std::move(a));
  }
  map.arena_address = arena_address_;
  map.arena_bytes = arena_bytes_;
  map.arena_backend = arena_backend_;
  map.buffers = buffers_;
  map.views = views_;
  map.peak_device_bytes = peak_device_bytes_;
  for (const std::string& e : errors_) map.errors.push_back("memory map: " + e);
}

}  // namespace lantern::harness
