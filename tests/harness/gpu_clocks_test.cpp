// gpu_clocks: the arithmetic over two NVML readings (CPU; the readings are
// made up) and, without a GPU, open() saying why it has none.
#include <gtest/gtest.h>

#include "harness/gpu_clocks.h"
#include "tests/test_util.h"

namespace lantern::harness {
namespace {

GpuClockReading reading(double t, unsigned sm, uint64_t cap_ns, uint64_t energy_mj, uint64_t reasons) {
  GpuClockReading r;
  r.host_s = t;
  r.sm_mhz = sm;
  r.sm_max_mhz = 1980;
  r.power_cap_ns = cap_ns;
  r.energy_mj = energy_mj;
  r.reasons = reasons;
  r.has_power_cap = r.has_energy = r.has_reasons = true;
  return r;
}

TEST(GpuClocks, DeltaCountsThrottledTimeAndAveragePower) {
  // 0.5 s apart (long enough for an average power), 12.5 ms more under the power policy, 100 J: 200 W.
  const GpuClockDelta d = clock_delta(reading(10.0, 1980, 4'000'000'000ull, 50'000, 0),
                                      reading(10.5, 1860, 4'012'500'000ull, 150'000, 0x4));
  EXPECT_DOUBLE_EQ(d.seconds, 0.5);
  EXPECT_DOUBLE_EQ(d.power_cap_ms, 12.5);
  EXPECT_DOUBLE_EQ(d.avg_power_w, 200.0);
  EXPECT_EQ(d.sm_mhz_start, 1980u);
  EXPECT_EQ(d.sm_mhz_end, 1860u);
  EXPECT_LT(d.thermal_ms, 0) << "the thermal counter was not read: reported as absent, not as 0";
  EXPECT_TRUE(d.throttled());
  const std::string s = d.summary();
  EXPECT_NE(s.find("1980 -> 1860 MHz"), std::string::npos) << s;
  EXPECT_NE(s.find("power cap 12.5 ms of 500 ms"), std::string::npos) << s;
  EXPECT_NE(s.find("200 W"), std::string::npos) << s;
  EXPECT_NE(s.find("sw_power_cap"), std::string::npos) << s;
  const nlohmann::json j = d.to_json();
  EXPECT_EQ(j["power_cap_ms"], 12.5);
  EXPECT_TRUE(j["thermal_ms"].is_null());
  EXPECT_EQ(j["throttled"], true);
  EXPECT_EQ(j["reasons_end"], "sw_power_cap");
}

TEST(GpuClocks, FullClockWithoutViolationsIsNotThrottled) {
  const GpuClockDelta d =
      clock_delta(reading(1.0, 1980, 7'000, 10, 0), reading(1.2, 1980, 7'000, 30, 0));
  EXPECT_DOUBLE_EQ(d.power_cap_ms, 0.0);
  EXPECT_FALSE(d.throttled());
  // An idle GPU clocks down with the idle reason only: not throttling.
  EXPECT_FALSE(clock_delta(reading(1.0, 1980, 7'000, 10, 0), reading(1.2, 345, 7'000, 30, 0x1)).throttled());
  // Below the maximum for another reason (hardware slowdown) is.
  EXPECT_TRUE(clock_delta(reading(1.0, 1980, 7'000, 10, 0), reading(1.2, 1500, 7'000, 30, 0x8)).throttled());
}

TEST(GpuClocks, CountersThatGoBackwardsGiveZeroNotAHugeNumber) {
  // A driver reload between readings resets the cumulative counters.
  const GpuClockDelta d = clock_delta(reading(1.0, 1980, 9'000'000, 500, 0), reading(2.0, 1980, 1'000, 20, 0));
  EXPECT_DOUBLE_EQ(d.power_cap_ms, 0.0);
  EXPECT_LT(d.avg_power_w, 0) << "energy went backwards: no average";
}

TEST(GpuClocks, SampledClockIsWhatTheSummarySays) {
  GpuClockDelta d = clock_delta(reading(1.0, 1980, 0, 0, 0), reading(1.01, 1980, 0, 0, 0));
  EXPECT_LT(d.avg_power_w, 0) << "10 ms: too short for an average power";
  EXPECT_FALSE(d.throttled());
  d.sm_samples = 10;
  d.sm_mean_mhz = 1932;
  d.sm_min_mhz = 1860;
  EXPECT_TRUE(d.throttled()) << "a sample below the maximum clock";
  EXPECT_NE(d.summary().find("SM 1932 MHz mean, 1860 min over 10 samples (max 1980)"), std::string::npos)
      << d.summary();
  const nlohmann::json j = d.to_json();
  EXPECT_EQ(j["sm_samples"], 10);
  EXPECT_EQ(j["sm_min_mhz"], 1860);
}

TEST(GpuClocks, ReasonNames) {
  EXPECT_EQ(clock_reason_names(0), "none");
  EXPECT_EQ(clock_reason_names(0x4), "sw_power_cap");
  EXPECT_EQ(clock_reason_names(0x1 | 0x40), "gpu_idle, hw_thermal_slowdown");
  EXPECT_EQ(clock_reason_names(0x1000), "0x1000");
}

TEST(GpuClocks, OpenWithoutAGpuSaysWhy) {
  std::string reason;
  if (test::gpu_available(&reason)) GTEST_SKIP() << "a GPU is present: GpuClocksGpu.* covers open()";
  std::string why;
  EXPECT_EQ(GpuClocks::open(0, &why), nullptr);
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace lantern::harness
