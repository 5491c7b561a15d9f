// Session::finish(const Engine&) lives apart from session.cpp so that code
// using a Session without an Engine (tests, tools) does not link the engine.
#include <nlohmann/json.hpp>

#include "harness/session.h"

namespace lantern::harness {

void Session::finish(const Engine& engine) {
  EngineSummary s;
  s.backend = engine.kernel_set().entry(kernels::Family::gemm).backend;
  s.memory_budget = engine.memory_budget().to_json();
  s.kv_blocks = engine.memory_budget().kv_blocks;
  s.kv_block_size = engine.limits().kv_block_size;
  s.steps = engine.steps_run();
  s.describe = engine.describe();
  const OverlapStats o = engine.overlap_stats();
  s.overlap = {{"mode", s.describe.value("overlap", "off")},
               {"continuations", o.continuations},
               {"discarded_rows", o.discarded_rows}};
  finish(s);
}

}  // namespace lantern::harness
