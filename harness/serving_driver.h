#pragma once
// The serving driver: hands an experiment's requests to the Engine at their
// arrival times and steps it, stamping every request's submission and every
// token on the engine clock. The clock is injectable: `lantern run` uses the
// engine's own (steady) clock and sleeps between arrivals; tests use a fake
// clock that advances by a fixed cost per step and jumps to the next arrival
// when the engine is idle, so arrival timing is checked exactly.
//
//   DriverClock clock = engine_clock(engine);
//   DriveResult r = drive(engine, workload, clock, progress);
//   nlohmann::json m = experiment::serving_metrics(r.timings);
#include <functional>
#include <vector>

#include "engine/engine.h"
#include "harness/experiment/serving.h"
#include "harness/experiment/workload.h"

namespace lantern::harness {

struct DriverClock {
  std::function<double()> now;              // seconds, the engine's clock
  std::function<void(double)> sleep_until;  // block until now() >= t
  std::function<void()> after_step;         // called after every engine step (may be empty)
};

// The engine's clock (Engine::now_s) with a real sleep.
DriverClock engine_clock(const Engine& engine);

struct DriveProgress {
  size_t done = 0, total = 0;
  int64_t tokens = 0;
  double elapsed_s = 0;
};

struct DriveResult {
  std::vector<RequestResult> results;              // in workload order
  std::vector<experiment::RequestTiming> timings;  // in workload order
  int64_t first_step = 0, end_step = 0;            // engine steps [first, end) of this run
  double wall_s = 0;
};

// Submits item i once now() - start >= arrival_s (never earlier), steps the
// engine while it has work, sleeps until the next arrival while idle, and
// returns when every request finished. `progress` (may be empty) is called
// after every step.
DriveResult drive(Engine& engine, const std::vector<experiment::WorkItem>& items,
                  const DriverClock& clock,
                  const std::function<void(const DriveProgress&)>& progress = {});

Request to_request(const experiment::WorkItem& item);

}  // namespace lantern::harness
