#include "harness/serving_driver.h"

#include <chrono>
#include <map>
#include <thread>

#include "kernels/base/errors.h"

namespace lantern::harness {

DriverClock engine_clock(const Engine& engine) {
  DriverClock c;
  c.now = [&engine] { return engine.now_s(); };
  c.sleep_until = [&engine](double t) {
    double left = t - engine.now_s();
    if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
  };
  return c;
}

Request to_request(const experiment::WorkItem& item) {
  Request r;
  r.prompt = item.prompt;
  r.max_new_tokens = item.max_new_tokens;
  r.sampling.temperature = item.temperature;
  r.sampling.top_k = item.top_k;
  r.sampling.top_p = item.top_p;
  r.sampling.seed = item.seed;
  r.stop_at_eos = !item.ignore_eos;
  r.tag = item.tag;
  return r;
}

DriveResult drive(Engine& engine, const std::vector<experiment::WorkItem>& items,
                  const DriverClock& clock,
                  const std::function<void(const DriveProgress&)>& progress) {
  DriveResult out;
  out.timings.resize(items.size());
  out.results.resize(items.size());
  out.first_step = engine.steps_run();
  std::map<int64_t, size_t> index_of;  // engine request id -> workload index
  DriveProgress p;
  p.total = items.size();
  const double start = clock.now();
  size_t next = 0;
  while (p.done < items.size()) {
    const double t = clock.now() - start;
    for (; next < items.size() && items[next].arrival_s <= t; ++next) {
      Request r = to_request(items[next]);
      experiment::RequestTiming& timing = out.timings[next];
      r.on_token = [&timing, &clock, &p](int64_t, int32_t) {
        timing.token_s.push_back(clock.now());
        ++p.tokens;
      };
      timing.arrival_s = items[next].arrival_s;
      timing.prompt_tokens = static_cast<int>(items[next].prompt.size());
      timing.submit_s = clock.now();
      index_of[engine.submit(std::move(r))] = next;
    }
    if (engine.idle()) {
      LANTERN_ASSERT(next < items.size(), "engine idle with %zu of %zu requests unfinished", p.done,
                     items.size());
      clock.sleep_until(start + items[next].arrival_s);
      continue;
    }
    engine.step();
    if (clock.after_step) clock.after_step();
    for (RequestResult& r : engine.take_finished()) {
      const size_t i = index_of.at(r.id);
      out.timings[i].admit_s = r.admit_s;
      out.timings[i].finish_s = r.finish_s;
      out.results[i] = std::move(r);
      ++p.done;
    }
    p.elapsed_s = clock.now() - start;
    if (progress) progress(p);
  }
  out.end_step = engine.steps_run();
  out.wall_s = clock.now() - start;
  return out;
}

}  // namespace lantern::harness
