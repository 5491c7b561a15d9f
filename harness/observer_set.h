#pragma once
// ObserverSet: fans every engine hook out to several observers (NVTX, alias
// tracker, KV recorder, run recorder), in the order they were added.
#include <vector>

#include "engine/observer.h"

namespace lantern::harness {

class ObserverSet : public Observer {
 public:
  void add(Observer* o) { observers_.push_back(o); }
  bool empty() const { return observers_.empty(); }

  void on_alloc(const AllocEvent& e) override { for (auto* o : observers_) o->on_alloc(e); }
  void on_arena(const Arena& a) override { for (auto* o : observers_) o->on_arena(a); }
  void on_step_begin(const StepInfo& s) override { for (auto* o : observers_) o->on_step_begin(s); }
  void on_step_end(const StepInfo& s) override {
    for (auto it = observers_.rbegin(); it != observers_.rend(); ++it) (*it)->on_step_end(s);
  }
  void on_layer_begin(int l) override { for (auto* o : observers_) o->on_layer_begin(l); }
  void on_layer_end(int l) override {
    for (auto it = observers_.rbegin(); it != observers_.rend(); ++it) (*it)->on_layer_end(l);
  }
  void on_op_begin(const OpInfo& op) override { for (auto* o : observers_) o->on_op_begin(op); }
  void on_op_end(const OpInfo& op) override {
    for (auto it = observers_.rbegin(); it != observers_.rend(); ++it) (*it)->on_op_end(op);
  }
  void on_graph_captured(const GraphReplay& g) override {
    for (auto* o : observers_) o->on_graph_captured(g);
  }
  void on_graph_replay(const GraphReplay& g) override {
    for (auto* o : observers_) o->on_graph_replay(g);
  }
  void on_kv_event(const KvEvent& e) override { for (auto* o : observers_) o->on_kv_event(e); }
  void on_kv_step(const KvStepStats& s) override { for (auto* o : observers_) o->on_kv_step(s); }
  void on_step_collected(int64_t step) override { for (auto* o : observers_) o->on_step_collected(step); }

 private:
  std::vector<Observer*> observers_;
};

}  // namespace lantern::harness
