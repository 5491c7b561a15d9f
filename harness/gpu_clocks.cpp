// NVML through dlopen (gpu_clocks.h). The few entry points are declared here
// by their documented C signatures, so the build needs neither nvml.h nor the
// library: both come with the driver, which a build machine need not have.
#include "harness/gpu_clocks.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/base/errors.h"

namespace lantern::harness {
namespace {

using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS is 0
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kClockSm = 1, kClockMem = 2;                // nvmlClockType_t
constexpr int kPolicyPower = 0, kPolicyThermal = 1;       // nvmlPerfPolicyType_t
struct NvmlViolationTime {                                // nvmlViolationTime_t
  unsigned long long reference_time;  // us, CPU timestamp of the reading
  unsigned long long violation_time;  // ns the policy held the clocks down
};

// The clocks-event reason bits (nvmlClocksEventReason*), in display order.
struct ReasonName {
  uint64_t bit;
  const char* name;
};
constexpr ReasonName kReasons[] = {
    {0x1, "gpu_idle"},          {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},       {0x10, "sync_boost"},         {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"}, {0x80, "hw_power_brake"},  {0x100, "display_clock"},
};
constexpr uint64_t kIdleBits = 0x1;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct GpuClocks::Api {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*energy)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*violation)(NvmlDevice, int, NvmlViolationTime*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  bool initialised = false;

  ~Api() {
    if (initialised && shutdown) shutdown();
    if (lib) dlclose(lib);
  }
  template <class F>
  bool sym(F& f, const char* n) {
    f = reinterpret_cast<F>(dlsym(lib, n));
    return f != nullptr;
  }
};

std::unique_ptr<GpuClocks> GpuClocks::open(int cuda_device, std::string* why) {
  auto fail = [&](std::string msg) -> std::unique_ptr<GpuClocks> {
    if (why) *why = std::move(msg);
    return nullptr;
  };
  char bus[32] = {};
  const cudaError_t err = cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: this probe must not leave an error behind
    return fail(strformat("no PCI bus id for CUDA device %d (%s)", cuda_device, cudaGetErrorString(err)));
  }
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) return fail("libnvidia-ml.so.1 (NVML, installed with the NVIDIA driver) could not be opened");
  if (!api->sym(api->init, "nvmlInit_v2") || !api->sym(api->shutdown, "nvmlShutdown") ||
      !api->sym(api->by_pci, "nvmlDeviceGetHandleByPciBusId_v2") || !api->sym(api->clock, "nvmlDeviceGetClockInfo"))
    return fail("libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByPciBusId_v2 / nvmlDeviceGetClockInfo");
  // Optional: a driver without one of these reports less.
  api->sym(api->name, "nvmlDeviceGetName");
  api->sym(api->max_clock, "nvmlDeviceGetMaxClockInfo");
  api->sym(api->power, "nvmlDeviceGetPowerUsage");
  api->sym(api->energy, "nvmlDeviceGetTotalEnergyConsumption");
  api->sym(api->violation, "nvmlDeviceGetViolationStatus");
  if (!api->sym(api->reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
    api->sym(api->reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");  // drivers before 535
  if (NvmlReturn r = api->init(); r != kNvmlSuccess) return fail(strformat("nvmlInit_v2 failed (NVML error %d)", r));
  api->initialised = true;
  std::unique_ptr<GpuClocks> c(new GpuClocks());
  if (NvmlReturn r = api->by_pci(bus, &c->device_); r != kNvmlSuccess)
    return fail(strformat("NVML has no device at PCI bus id %s (NVML error %d)", bus, r));
  char name[96] = {};
  if (api->name && api->name(c->device_, name, sizeof(name)) == kNvmlSuccess) c->name_ = name;
  c->api_ = std::move(api);
  return c;
}

GpuClocks::~GpuClocks() = default;

GpuClockReading GpuClocks::read() const {
  GpuClockReading r;
  r.host_s = now_s();
  const Api& a = *api_;
  a.clock(device_, kClockSm, &r.sm_mhz);
  a.clock(device_, kClockMem, &r.mem_mhz);
  if (a.max_clock) a.max_clock(device_, kClockSm, &r.sm_max_mhz);
  unsigned mw = 0;
  if (a.power && a.power(device_, &mw) == kNvmlSuccess) r.power_w = mw / 1000.0;
  unsigned long long mj = 0;
  if (a.energy && a.energy(device_, &mj) == kNvmlSuccess) {
    r.energy_mj = mj;
    r.has_energy = true;
  }
  NvmlViolationTime v{};
  if (a.violation && a.violation(device_, kPolicyPower, &v) == kNvmlSuccess) {
    r.power_cap_ns = v.violation_time;
    r.has_power_cap = true;
  }
  if (a.violation && a.violation(device_, kPolicyThermal, &v) == kNvmlSuccess) {
    r.thermal_ns = v.violation_time;
    r.has_thermal = true;
  }
  unsigned long long reasons = 0;
  if (a.reasons && a.reasons(device_, &reasons) == kNvmlSuccess) {
    r.reasons = reasons;
    r.has_reasons = true;
  }
  return r;
}

unsigned GpuClocks::sm_mhz() const {
  unsigned mhz = 0;
  api_->clock(device_, kClockSm, &mhz);
  return mhz;
}

GpuClockSampler::GpuClockSampler(const GpuClocks& clocks, double period_ms)
    : clocks_(clocks), period_ms_(period_ms) {}

GpuClockSampler::~GpuClockSampler() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
}

void GpuClockSampler::start() {
  if (running_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mhz_.clear();
  }
  running_ = true;
  thread_ = std::thread([this] {
    const auto period = std::chrono::duration<double, std::milli>(period_ms_);
    auto next = std::chrono::steady_clock::now();
    while (running_) {
      const unsigned m = clocks_.sm_mhz();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (m > 0) mhz_.push_back(m);
      }
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
      std::this_thread::sleep_until(next);
    }
  });
}

void GpuClockSampler::stop(GpuClockDelta& d) {
  running_ = false;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  d.sm_samples = static_cast<int>(mhz_.size());
  if (mhz_.empty()) return;
  double sum = 0;
  unsigned lo = mhz_.front();
  for (unsigned m : mhz_) sum += m, lo = std::min(lo, m);
  d.sm_mean_mhz = sum / mhz_.size();
  d.sm_min_mhz = lo;
}

GpuClockDelta clock_delta(const GpuClockReading& a, const GpuClockReading& b) {
  GpuClockDelta d;
  d.seconds = b.host_s - a.host_s;
  d.sm_mhz_start = a.sm_mhz;
  d.sm_mhz_end = b.sm_mhz;
  d.sm_max_mhz = b.sm_max_mhz;
  d.reasons_end = b.reasons;
  auto ms = [](uint64_t x, uint64_t y) { return y >= x ? (y - x) / 1e6 : 0.0; };
  if (a.has_power_cap && b.has_power_cap) d.power_cap_ms = ms(a.power_cap_ns, b.power_cap_ns);
  if (a.has_thermal && b.has_thermal) d.thermal_ms = ms(a.thermal_ns, b.thermal_ns);
  // The energy counter updates coarsely: an average over a short interval is noise (0 or kW).
  if (a.has_energy && b.has_energy && d.seconds >= 0.5 && b.energy_mj >= a.energy_mj)
    d.avg_power_w = (b.energy_mj - a.energy_mj) / 1e3 / d.seconds;
  return d;
}

bool GpuClockDelta::throttled() const {
  if (power_cap_ms > 0 || thermal_ms > 0) return true;
  if (sm_samples > 0 && sm_max_mhz > 0 && sm_min_mhz < sm_max_mhz) return true;
  return sm_max_mhz > 0 && sm_mhz_end > 0 && sm_mhz_end < sm_max_mhz && (reasons_end & ~kIdleBits) != 0;
}

std::string GpuClockDelta::summary() const {
  std::string s = sm_samples > 0 ? strformat("SM %.0f MHz mean, %u min over %d samples", sm_mean_mhz, sm_min_mhz,
                                             sm_samples)
                                 : strformat("SM %u -> %u MHz", sm_mhz_start, sm_mhz_end);
  if (sm_max_mhz) s += strformat(" (max %u)", sm_max_mhz);
  if (power_cap_ms >= 0) s += strformat("; power cap %.1f ms", power_cap_ms);
  if (thermal_ms > 0) s += strformat(", thermal %.1f ms", thermal_ms);
  s += strformat(" of %.0f ms", seconds * 1e3);
  if (avg_power_w >= 0) s += strformat("; %.0f W", avg_power_w);
  if ((reasons_end & ~kIdleBits) != 0) s += "; now: " + clock_reason_names(reasons_end & ~kIdleBits);
  return s;
}

nlohmann::json GpuClockDelta::to_json() const {
  nlohmann::json j = {{"seconds", seconds},         {"sm_mhz_start", sm_mhz_start},
                      {"sm_mhz_end", sm_mhz_end},   {"sm_max_mhz", sm_max_mhz},
                      {"throttled", throttled()},   {"reasons_end", clock_reason_names(reasons_end)}};
  j["power_cap_ms"] = power_cap_ms >= 0 ? nlohmann::json(power_cap_ms) : nlohmann::json(nullptr);
  j["thermal_ms"] = thermal_ms >= 0 ? nlohmann::json(thermal_ms) : nlohmann::json(nullptr);
  j["avg_power_w"] = avg_power_w >= 0 ? nlohmann::json(avg_power_w) : nlohmann::json(nullptr);
  if (sm_samples > 0) {
    j["sm_samples"] = sm_samples;
    j["sm_mean_mhz"] = sm_mean_mhz;
    j["sm_min_mhz"] = sm_min_mhz;
  }
  return j;
}

std::string clock_reason_names(uint64_t reasons) {
  std::string s;
  for (const ReasonName& r : kReasons)
    if (reasons & r.bit) s += (s.empty() ? "" : ", ") + std::string(r.name);
  const uint64_t known = 0x1ff;
  if (reasons & ~known) s += (s.empty() ? "" : ", ") + strformat("0x%llx", (unsigned long long)(reasons & ~known));
  return s.empty() ? "none" : s;
}

}  // namespace lantern::harness
