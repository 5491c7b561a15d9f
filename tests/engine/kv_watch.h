#pragma once
// An engine observer that keeps the KV pool's stats after the last step and
// the most blocks ever used: what "every block is back in the pool" and "the
// pool was full at some point" are checked against (engine_stress_test.cpp,
// tests/soak/lantern_soak.cpp). on_kv_step runs on the stepping thread; the
// mutex lets another thread read while it steps.
#include <algorithm>
#include <mutex>

#include "engine/engine.h"

namespace lantern::test {

struct KvWatch : Observer {
  std::mutex mu;
  KvStepStats last;
  int max_used = 0;
  void on_kv_step(const KvStepStats& s) override {
    std::lock_guard<std::mutex> lock(mu);
    last = s;
    max_used = std::max(max_used, s.used_blocks);
  }
};

}  // namespace lantern::test
