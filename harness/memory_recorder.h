#pragma once
// MemoryRecorder: the memory map. Every allocation the engine reports
// (weights block, arena, KV pool, cuBLAS workspace, sampling buffers, ...)
// with address, size, owner and lifetime, and the arena's buffers and views
// inside its allocation. Overlapping live allocations and frees of unknown
// addresses are reported as errors.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/observer.h"
#include "harness/runfmt/records.h"

namespace lantern::harness {

class MemoryRecorder : public Observer {
 public:
  explicit MemoryRecorder(uint64_t (*clock)());

  void on_alloc(const AllocEvent& e) override;
  void on_arena(const Arena& arena) override;
  void on_graph_replay(const GraphReplay&) override {}  // no op hooks needed

  struct Sample {
    uint64_t t_ns;
    uint64_t device_bytes;  // live cuda allocations
    uint64_t host_bytes;    // live cpu allocations
  };
  uint64_t live_device_bytes() const { return live_[1]; }
  uint64_t peak_device_bytes() const { return peak_device_bytes_; }
  // Counter samples for the trace, one per allocation or free.
  const std::vector<Sample>& samples() const { return samples_; }
  // Allocations, arena layout and errors (times relative to `origin_ns`).
  void fill(runfmt::MemoryMap& map, uint64_t origin_ns) const;

 private:
  struct Entry {
    runfmt::Allocation a;
    uint64_t alloc_ns = 0, free_ns = 0;
    bool live = true;
  };
  uint64_t (*clock_)();
  std::vector<Entry> entries_;
  std::vector<runfmt::BufferRecord> buffers_;
  std::vector<runfmt::ViewRecord> views_;
  uint64_t arena_address_ = 0, arena_bytes_ = 0;
  std::string arena_backend_;
  uint64_t live_[2] = {0, 0};  // by backend: cpu, cuda
  uint64_t peak_device_bytes_ = 0;
  std::vector<Sample> samples_;
  std::vector<std::string> errors_;
};

}  // namespace lantern::harness
