#pragma once
// The GPU's clocks, power and the time it ran throttled, from NVML (the
// library behind nvidia-smi), so a benchmark can say whether the card ran at
// its full clock while it measured.
//
// Why: on the H200 a 512-token prefill takes 1.98-1.99 ms of stream time in
// one stretch of a process and 2.11-2.15 ms in the next, the host's share
// unchanged (docs/performance.md, session 28); nvidia-smi then shows the SM
// clock at 1860 MHz instead of 1980 with the "SW power cap" reason set. A
// GEMM-bound step slows with the clock, a bandwidth-bound one hardly at all.
// NVML's violation counters (nanoseconds a policy held the clocks down,
// cumulative) read before and after a measurement say how long it ran
// throttled; the clock at the end says how far.
//
// NVML is opened at run time (dlopen of libnvidia-ml.so.1, which the driver
// installs): a machine without the driver builds and runs everything else,
// and GpuClocks::open says why it has no reading. Reads only: nothing here
// changes a clock, a limit or a mode.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace lantern::harness {

struct GpuClockReading {
  double host_s = 0;             // steady clock, seconds
  unsigned sm_mhz = 0;           // current SM clock
  unsigned mem_mhz = 0;          // current memory clock
  unsigned sm_max_mhz = 0;       // the SM clock's maximum (the boost clock)
  double power_w = 0;            // power draw now (0: not reported)
  uint64_t energy_mj = 0;        // energy since the driver loaded (0: not reported)
  uint64_t power_cap_ns = 0;     // cumulative time the power policy held the clocks down
  uint64_t thermal_ns = 0;       // cumulative time the thermal policy did
  uint64_t reasons = 0;          // the clocks-event reasons active now (NVML bitmask)
  bool has_power_cap = false, has_thermal = false, has_energy = false, has_reasons = false;
};

// What happened between two readings of one GPU.
struct GpuClockDelta {
  double seconds = 0;
  unsigned sm_mhz_start = 0, sm_mhz_end = 0, sm_max_mhz = 0;
  // NVML's violation counters advance in steps of several milliseconds, so over
  // a short interval they can exceed it: read them as a fraction of a long one.
  double power_cap_ms = -1;  // -1: the counter is not reported
  double thermal_ms = -1;
  double avg_power_w = -1;   // from the energy counter, over >= 0.5 s only; -1 otherwise
  uint64_t reasons_end = 0;
  // The SM clock sampled during the interval (GpuClockSampler); 0 samples: not sampled.
  int sm_samples = 0;
  double sm_mean_mhz = 0;
  unsigned sm_min_mhz = 0;

  // True when a policy held the clocks down for part of the interval or the
  // SM clock ended below its maximum for a reason other than idling.
  bool throttled() const;
  // e.g. "SM 1980 -> 1860 MHz (max 1980); power cap 12.3 ms of 140 ms; 215 W"
  std::string summary() const;
  nlohmann::json to_json() const;
};

GpuClockDelta clock_delta(const GpuClockReading& a, const GpuClockReading& b);

class GpuClocks;

// Samples the SM clock every `period_ms` on a thread of its own between start()
// and stop(): the clock a short measurement actually ran at (the reading after
// it is often back at the maximum). NVML reads take ~10 us of a spare core.
class GpuClockSampler {
 public:
  explicit GpuClockSampler(const GpuClocks& clocks, double period_ms = 1.0);
  ~GpuClockSampler();
  void start();
  // Stops and fills d's sm_samples, sm_mean_mhz and sm_min_mhz.
  void stop(GpuClockDelta& d);

 private:
  const GpuClocks& clocks_;
  double period_ms_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::vector<unsigned> mhz_;
};

// Names of the set bits of an NVML clocks-event-reasons mask, comma-separated
// ("sw_power_cap, hw_slowdown"); "none" for 0.
std::string clock_reason_names(uint64_t reasons);

class GpuClocks {
 public:
  // The GPU that CUDA calls `cuda_device`, matched by PCI bus id. nullptr when
  // NVML or the device cannot be opened; `why` (if given) then says why.
  static std::unique_ptr<GpuClocks> open(int cuda_device, std::string* why = nullptr);
  ~GpuClocks();
  GpuClocks(const GpuClocks&) = delete;
  GpuClocks& operator=(const GpuClocks&) = delete;

  GpuClockReading read() const;
  unsigned sm_mhz() const;  // the SM clock alone (the sampler's read)
  const std::string& name() const { return name_; }

  struct Api;  // the NVML entry points (gpu_clocks.cpp)

 private:
  GpuClocks() = default;
  std::unique_ptr<Api> api_;
  void* device_ = nullptr;
  std::string name_;
};

}  // namespace lantern::harness
