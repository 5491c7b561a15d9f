#include "harness/runfmt/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "kernels/base/errors.h"
#include "harness/runfmt/json_util.h"

namespace lantern::runfmt {

namespace {

constexpr double kNestSlackUs = 5e-4;  // half a nanosecond: timestamps carry 3 decimals

void put_string(std::string& out, const std::string& s) {
  out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void put_time(std::string& out, double us) { out += detail::shortest(us); }

}  // namespace

void write_trace(const std::filesystem::path& path, const std::vector<TraceEvent>& events,
                 const nlohmann::json& other_data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  LANTERN_CHECK(out.good(), "cannot write %s (%s)", path.c_str(), std::strerror(errno));
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":"
      << other_data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
      << ",\n\"traceEvents\":[\n";
  std::string line;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    line.clear();
    line += "{\"ph\":\"";
    line += e.ph;
    line += "\",\"name\":";
    put_string(line, e.name);
    if (!e.cat.empty()) {
      line += ",\"cat\":";
      put_string(line, e.cat);
    }
    line += ",\"pid\":";
    line += std::to_string(e.pid);
    line += ",\"tid\":";
    line += std::to_string(e.tid);
    if (e.ph != 'M') {
      line += ",\"ts\":";
      put_time(line, e.ts_us);
    }
    if (e.ph == 'X') {
      line += ",\"dur\":";
      put_time(line, e.dur_us);
    }
    if (e.ph == 'i') line += ",\"s\":\"t\"";
    if (!e.args.is_null()) {
      line += ",\"args\":";
      line += e.args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    line += i + 1 < events.size() ? "},\n" : "}\n";
    out << line;
  }
  out << "]}\n";
  out.close();
  LANTERN_CHECK(out.good(), "writing %s failed (%s)", path.c_str(), std::strerror(errno));
}

std::vector<TraceEvent> parse_trace(const nlohmann::json& doc, const std::string& file) {
  const nlohmann::json* list = &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    LANTERN_CHECK(it != doc.end(), "%s: missing key 'traceEvents'", file.c_str());
    list = &*it;
  }
  LANTERN_CHECK(list->is_array(), "%s: traceEvents should be an array, got %s", file.c_str(),
                list->type_name());
  std::vector<TraceEvent> events;
  events.reserve(list->size());
  size_t index = 0;
  for (const nlohmann::json& j : *list) {
    auto fail = [&](const std::string& what) {
      LANTERN_FAIL("%s: event %zu: %s", file.c_str(), index, what.c_str());
    };
    if (!j.is_object()) fail("not an object");
    TraceEvent e;
    auto ph = j.find("ph");
    if (ph == j.end() || !ph->is_string() || ph->get_ref<const std::string&>().size() != 1)
      fail("missing or bad 'ph'");
    e.ph = ph->get_ref<const std::string&>()[0];
    auto str = [&](const char* key, std::string& dst, bool required) {
      auto it = j.find(key);
      if (it == j.end()) {
        if (required) fail(std::string("missing '") + key + "'");
        return;
      }
      if (!it->is_string()) fail(std::string("'") + key + "' should be a string");
      dst = it->get<std::string>();
    };
    auto num = [&](const char* key, double& dst, bool required) {
      auto it = j.find(key);
      if (it == j.end()) {
        if (required) fail(std::string("missing '") + key + "'");
        return;
      }
      if (!it->is_number()) fail(std::string("'") + key + "' should be a number");
      dst = it->get<double>();
    };
    auto integer = [&](const char* key, int& dst) {
      auto it = j.find(key);
      if (it == j.end()) return;
      if (!it->is_number_integer()) fail(std::string("'") + key + "' should be an integer");
      dst = it->get<int>();
    };
    str("name", e.name, e.ph != 'E');
    str("cat", e.cat, false);
    num("ts", e.ts_us, e.ph != 'M');
    num("dur", e.dur_us, e.ph == 'X');
    integer("pid", e.pid);
    integer("tid", e.tid);
    if (auto it = j.find("args"); it != j.end()) e.args = *it;
    events.push_back(std::move(e));
    ++index;
  }
  return events;
}

namespace {

// Collects at most 50 problems (a broken trace would repeat one per event).
struct Problems {
  std::vector<std::string> list;
  void add(std::string s) {
    if (list.size() < 50) list.push_back(std::move(s));
  }
};

using Track = std::pair<int, int>;  // pid, tid

// The checks that need only the event itself.
void check_event(const TraceEvent& e, Problems& p) {
  switch (e.ph) {
    case 'X':
      if (!(e.dur_us >= 0)) p.add(strformat("'%s' has negative duration", e.name.c_str()));
      break;
    case 'C': {
      bool ok = e.args.is_object() && !e.args.empty();
      if (ok)
        for (const auto& [k, v] : e.args.items()) ok = ok && v.is_number();
      if (!ok) p.add(strformat("counter '%s' needs numeric args", e.name.c_str()));
      break;
    }
    case 'M':
      if (!e.args.is_object() || !e.args.contains("name") || !e.args["name"].is_string())
        p.add(strformat("metadata '%s' needs args.name", e.name.c_str()));
      break;
    case 'B':
    case 'E':
    case 'i':
    case 'I':
      break;
    default:
      p.add(strformat("event '%s' has unsupported phase '%c'", e.name.c_str(), e.ph));
  }
  if (e.ph != 'M' && !(e.ts_us >= 0))
    p.add(strformat("'%s' has a negative or missing timestamp", e.name.c_str()));
}

// Complete events on one thread must nest (or follow each other).
void check_nesting(const Track& track, std::vector<const TraceEvent*>& list, Problems& p) {
  // Parents first: earlier start, then longer; file order breaks exact ties.
  std::stable_sort(list.begin(), list.end(), [](const TraceEvent* a, const TraceEvent* b) {
    if (a->ts_us != b->ts_us) return a->ts_us < b->ts_us;
    return a->dur_us > b->dur_us;
  });
  std::vector<const TraceEvent*> stack;
  for (const TraceEvent* e : list) {
    while (!stack.empty() && stack.back()->ts_us + stack.back()->dur_us <= e->ts_us + kNestSlackUs)
      stack.pop_back();
    if (!stack.empty()) {
      const TraceEvent* parent = stack.back();
      if (e->ts_us + e->dur_us > parent->ts_us + parent->dur_us + kNestSlackUs)
        p.add(strformat("pid %d tid %d: '%s' [%.3f, %.3f] overlaps '%s' [%.3f, %.3f] "
                        "without nesting",
                        track.first, track.second, e->name.c_str(), e->ts_us,
                        e->ts_us + e->dur_us, parent->name.c_str(), parent->ts_us,
                        parent->ts_us + parent->dur_us));
    }
    stack.push_back(e);
  }
}

// Begin/end events on one thread must pair up, innermost first.
void check_begin_end(const Track& track, std::vector<const TraceEvent*>& list, Problems& p) {
  std::stable_sort(list.begin(), list.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return a->ts_us < b->ts_us;
  });
  std::vector<const TraceEvent*> stack;
  for (const TraceEvent* e : list) {
    if (e->ph == 'B') {
      stack.push_back(e);
    } else if (stack.empty()) {
      p.add(strformat("pid %d tid %d: end '%s' at %.3f without a begin", track.first,
                      track.second, e->name.c_str(), e->ts_us));
    } else {
      if (!e->name.empty() && e->name != stack.back()->name)
        p.add(strformat("pid %d tid %d: end '%s' closes '%s'", track.first, track.second,
                        e->name.c_str(), stack.back()->name.c_str()));
      stack.pop_back();
    }
  }
  for (const TraceEvent* e : stack)
    p.add(strformat("pid %d tid %d: begin '%s' at %.3f is never ended", track.first,
                    track.second, e->name.c_str(), e->ts_us));
}

}  // namespace

std::vector<std::string> check_trace(const std::vector<TraceEvent>& events) {
  Problems problems;
  // Per-thread lists of complete events and begin/end events, in file order.
  std::map<Track, std::vector<const TraceEvent*>> complete, begin_end;
  for (const TraceEvent& e : events) {
    check_event(e, problems);
    if (e.ph == 'X') complete[{e.pid, e.tid}].push_back(&e);
    if (e.ph == 'B' || e.ph == 'E') begin_end[{e.pid, e.tid}].push_back(&e);
  }
  for (auto& [track, list] : complete) check_nesting(track, list, problems);
  for (auto& [track, list] : begin_end) check_begin_end(track, list, problems);
  return problems.list;
}

TraceEvent process_name_event(int pid, const std::string& name) {
  TraceEvent e;
  e.ph = 'M';
  e.name = "process_name";
  e.pid = pid;
  e.args = {{"name", name}};
  return e;
}

TraceEvent thread_name_event(int pid, int tid, const std::string& name) {
  TraceEvent e;
  e.ph = 'M';
  e.name = "thread_name";
  e.pid = pid;
  e.tid = tid;
  e.args = {{"name", name}};
  return e;
}

}  // namespace lantern::runfmt
