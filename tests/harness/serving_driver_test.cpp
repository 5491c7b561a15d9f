// The serving driver on the CPU engine with a fake clock: requests reach the
// engine exactly at their arrival times (never before), the driver sleeps to
// the next arrival when idle, and TTFT / ITL / E2E / admission wait come out
// exactly as a hand simulation of the schedule says.
#include "harness/serving_driver.h"

#include <gtest/gtest.h>

#include "harness/experiment/serving.h"
#include "tests/engine/engine_test_util.h"

namespace lantern::harness {
namespace {

using experiment::WorkItem;

// Time passes only when the driver sleeps or a step has run (step_cost_s).
struct FakeClock {
  double t = 0;
  double step_cost_s = 0.010;
  std::vector<double> sleeps;  // targets the driver slept to
  DriverClock driver() {
    DriverClock c;
    c.now = [this] { return t; };
    c.sleep_until = [this](double x) {
      sleeps.push_back(x);
      t = std::max(t, x);
    };
    c.after_step = [this] { t += step_cost_s; };
    return c;
  }
};

class ServingDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::filesystem::path(test::synth_tiny("driver-tiny", 3));
  }
  static void TearDownTestSuite() { delete model_dir_; }

  std::unique_ptr<Engine> engine(FakeClock* clock, int max_seqs) {
    ModelConfig cfg = ModelConfig::load(*model_dir_);
    EngineOptions o;
    o.backend = kernels::Backend::cpu;
    o.limits.max_seqs = max_seqs;
    o.limits.max_context = 64;
    o.limits.max_batch_tokens = 64;
    if (clock) o.clock = [clock] { return clock->t; };
    return std::make_unique<Engine>(cfg, Weights::load(cfg, *model_dir_, o.backend), o);
  }

  static std::vector<WorkItem> items(const std::vector<double>& arrivals, int new_tokens) {
    std::vector<WorkItem> out;
    for (size_t i = 0; i < arrivals.size(); ++i) {
      WorkItem w;
      w.prompt = {128000, static_cast<int32_t>(100 + i), 200, 300};
      w.max_new_tokens = new_tokens;
      w.ignore_eos = true;
      w.arrival_s = arrivals[i];
      w.tag = std::to_string(i);
      out.push_back(w);
    }
    return out;
  }

  static std::filesystem::path* model_dir_;
};
std::filesystem::path* ServingDriver::model_dir_ = nullptr;

TEST_F(ServingDriver, AllAtOnceWithOneSlotQueuesForAdmission) {
  FakeClock clock;
  auto e = engine(&clock, /*max_seqs=*/1);
  DriveResult r = drive(*e, items({0, 0, 0}, 3), clock.driver());
  ASSERT_EQ(r.timings.size(), 3u);
  // One slot: request k is admitted when k-1 finished, 3 steps (30 ms) later.
  for (int k = 0; k < 3; ++k) {
    const auto& t = r.timings[k];
    EXPECT_DOUBLE_EQ(t.submit_s, 0.0);
    EXPECT_NEAR(t.admit_s, 0.030 * k, 1e-12) << k;
    ASSERT_EQ(t.token_s.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(t.token_s[i], 0.030 * k + 0.010 * i, 1e-12);
    EXPECT_NEAR(t.finish_s, 0.030 * k + 0.020, 1e-12);
    EXPECT_EQ(r.results[k].tokens.size(), 3u);
    EXPECT_EQ(r.results[k].tag, std::to_string(k));
  }
  EXPECT_TRUE(clock.sleeps.empty());
  EXPECT_EQ(r.end_step - r.first_step, 9);
  auto m = experiment::serving_metrics(r.timings);
  EXPECT_NEAR(m["admission_wait_ms"]["max"].get<double>(), 60, 1e-9);
  EXPECT_NEAR(m["ttft_ms"]["p50"].get<double>(), 30, 1e-9);
  EXPECT_NEAR(m["itl_ms"]["p99"].get<double>(), 10, 1e-9);
  EXPECT_NEAR(m["tpot_ms"]["mean"].get<double>(), 10, 1e-9);
  EXPECT_NEAR(m["e2e_ms"]["max"].get<double>(), 80, 1e-9);
  EXPECT_NEAR(m["duration_s"].get<double>(), 0.080, 1e-12);
}

TEST_F(ServingDriver, IdleEngineSleepsExactlyToTheNextArrival) {
  FakeClock clock;
  auto e = engine(&clock, 4);
  DriveResult r = drive(*e, items({0, 0.5, 1.25}, 2), clock.driver());
  // Each request takes 2 steps (20 ms), far less than the gaps.
  EXPECT_EQ(clock.sleeps, (std::vector<double>{0.5, 1.25}));
  for (int k = 0; k < 3; ++k) {
    EXPECT_DOUBLE_EQ(r.timings[k].submit_s, r.timings[k].arrival_s);
    EXPECT_DOUBLE_EQ(r.timings[k].admit_s, r.timings[k].arrival_s);  // a free slot at once
    EXPECT_DOUBLE_EQ(r.results[k].submit_s,
                     r.timings[k].submit_s);  // the engine used the same clock
  }
}

TEST_F(ServingDriver, PoissonArrivalsAreNeverEarlyAndNeverLateByMoreThanAStep) {
  FakeClock clock;
  auto e = engine(&clock, 2);
  auto arrivals = experiment::arrival_times(
      nlohmann::json{{"kind", "poisson"}, {"rate", 40.0}, {"seed", 1}}, 12);
  DriveResult r = drive(*e, items(arrivals, 3), clock.driver());
  for (size_t k = 0; k < arrivals.size(); ++k) {
    EXPECT_GE(r.timings[k].submit_s, arrivals[k]) << k;
    EXPECT_LT(r.timings[k].submit_s - arrivals[k], clock.step_cost_s + 1e-12) << k;
    EXPECT_GE(r.timings[k].admit_s, r.timings[k].submit_s);
    EXPECT_EQ(r.results[k].tokens.size(), 3u);
  }
}

TEST_F(ServingDriver, RealClockNeverSubmitsEarly) {
  auto e = engine(nullptr, 2);
  DriveResult r = drive(*e, items({0, 0.05}, 1), engine_clock(*e));
  const double start = r.timings[0].submit_s;
  EXPECT_GE(r.timings[1].submit_s - start, 0.05);
  EXPECT_GE(r.wall_s, 0.05);
}

}  // namespace
}  // namespace lantern::harness
