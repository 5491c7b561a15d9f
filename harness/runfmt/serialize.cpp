#include "harness/runfmt/serialize.h"

#include "harness/runfmt/json_util.h"
#include "harness/runfmt/schema.h"

namespace lantern::runfmt {

using nlohmann::json;
using detail::get_or;
using detail::need;
using detail::need_as;

namespace {

json op_ref(const OpRef& r) { return json::array({r.op, r.layer}); }

OpRef op_ref_from(const json& j, const std::string& file, const std::string& where) {
  LANTERN_CHECK(j.is_array() && j.size() == 2 && j[0].is_string() && j[1].is_number_integer(),
                "%s: '%s' should be [op, layer]", file.c_str(), where.c_str());
  return OpRef{j[0].get<std::string>(), j[1].get<int>()};
}

json issue_to_json(const AliasIssue& a) {
  return json{{"kind", a.kind},
              {"step", a.step},
              {"op_index", a.op_index},
              {"op", op_ref(a.op)},
              {"view", a.view},
              {"victim", a.victim},
              {"victim_write_index", a.victim_write_index},
              {"victim_write", op_ref(a.victim_write)},
              {"victim_read_index", a.victim_read_index},
              {"victim_read", op_ref(a.victim_read)},
              {"overlap", json::array({a.overlap_begin, a.overlap_end})},
              {"occurrences", a.occurrences},
              {"message", a.message}};
}

AliasIssue issue_from_json(const json& j, const std::string& file, const std::string& where) {
  AliasIssue a;
  a.kind = need_as<std::string>(j, "kind", file, where);
  a.step = need_as<int64_t>(j, "step", file, where);
  a.op_index = need_as<int>(j, "op_index", file, where);
  a.op = op_ref_from(need(j, "op", file, where), file, where + "op");
  a.view = need_as<std::string>(j, "view", file, where);
  a.victim = get_or<std::string>(j, "victim", "", file, where);
  a.victim_write_index = get_or<int>(j, "victim_write_index", -1, file, where);
  a.victim_write = op_ref_from(need(j, "victim_write", file, where), file, where + "victim_write");
  a.victim_read_index = get_or<int>(j, "victim_read_index", -1, file, where);
  a.victim_read = op_ref_from(need(j, "victim_read", file, where), file, where + "victim_read");
  const json& overlap = need(j, "overlap", file, where);
  LANTERN_CHECK(overlap.is_array() && overlap.size() == 2 && overlap[0].is_number_unsigned() &&
                    overlap[1].is_number_unsigned(),
                "%s: '%soverlap' should be [begin, end]", file.c_str(), where.c_str());
  a.overlap_begin = overlap[0].get<uint64_t>();
  a.overlap_end = overlap[1].get<uint64_t>();
  a.occurrences = need_as<int64_t>(j, "occurrences", file, where);
  a.message = need_as<std::string>(j, "message", file, where);
  return a;
}

std::string at(const char* list, size_t i) { return strformat("%s[%zu].", list, i); }

const json& need_array(const json& j, const char* key, const std::string& file,
                       const std::string& where = "") {
  const json& v = need(j, key, file, where);
  LANTERN_CHECK(v.is_array(), "%s: '%s%s' should be an array, got %s", file.c_str(), where.c_str(),
                key, v.type_name());
  return v;
}

}  // namespace

// ------------------------------------------------------------------ memory.json
json memory_to_json(const MemoryMap& m) {
  json allocations = json::array();
  for (const Allocation& a : m.allocations) {
    json j{{"id", a.id},           {"owner", a.owner},
           {"name", a.name},       {"address", detail::hex_address(a.address)},
           {"bytes", a.bytes},     {"backend", a.backend},
           {"alloc_us", a.alloc_us}};
    j["free_us"] = a.free_us ? json(*a.free_us) : json(nullptr);
    allocations.push_back(std::move(j));
  }
  json buffers = json::array();
  for (const BufferRecord& b : m.buffers)
    buffers.push_back({{"name", b.name}, {"offset", b.offset}, {"bytes", b.bytes}, {"shape", b.shape}});
  json views = json::array();
  for (const ViewRecord& v : m.views)
    views.push_back({{"id", v.id}, {"name", v.name}, {"buffer", v.buffer}, {"offset", v.offset},
                     {"bytes", v.bytes}});
  json patterns = json::array();
  for (const AccessPattern& p : m.patterns) {
    json ops = json::array(), intervals = json::array();
    for (const OpRef& o : p.ops) ops.push_back(op_ref(o));
    for (const LiveInterval& l : p.intervals)
      intervals.push_back(json::array({l.view, l.first_write, l.last_read}));
    patterns.push_back({{"id", p.id}, {"ops", ops}, {"intervals", intervals}});
  }
  json steps = json::array();
  for (const auto& [step, pattern] : m.step_patterns) steps.push_back(json::array({step, pattern}));
  json violations = json::array(), warnings = json::array();
  for (const AliasIssue& a : m.violations) violations.push_back(issue_to_json(a));
  for (const AliasIssue& a : m.warnings) warnings.push_back(issue_to_json(a));
  return json{{"format_version", run_format_version()},
              {"allocations", allocations},
              {"peak_device_bytes", m.peak_device_bytes},
              {"arena",
               {{"address", detail::hex_address(m.arena_address)},
                {"bytes", m.arena_bytes},
                {"backend", m.arena_backend},
                {"buffers", buffers},
                {"views", views}}},
              {"alias",
               {{"patterns", patterns},
                {"step_patterns", steps},
                {"violation_count", m.violation_count},
                {"warning_count", m.warning_count},
                {"violations", violations},
                {"warnings", warnings}}},
              {"errors", m.errors}};
}

MemoryMap memory_from_json(const json& j, const std::string& file) {
  check_format_version(need_as<std::string>(j, "format_version", file), file);
  MemoryMap m;
  const json& allocations = need_array(j, "allocations", file);
  for (size_t i = 0; i < allocations.size(); ++i) {
    const json& a = allocations[i];
    std::string w = at("allocations", i);
    Allocation x;
    x.id = need_as<int>(a, "id", file, w);
    x.owner = need_as<std::string>(a, "owner", file, w);
    x.name = need_as<std::string>(a, "name", file, w);
    x.address = detail::parse_hex_address(need(a, "address", file, w), file, w + "address");
    x.bytes = need_as<uint64_t>(a, "bytes", file, w);
    x.backend = need_as<std::string>(a, "backend", file, w);
    x.alloc_us = need_as<double>(a, "alloc_us", file, w);
    if (a.contains("free_us") && !a["free_us"].is_null())
      x.free_us = need_as<double>(a, "free_us", file, w);
    m.allocations.push_back(std::move(x));
  }
  m.peak_device_bytes = get_or<uint64_t>(j, "peak_device_bytes", 0, file);
  const json& arena = need(j, "arena", file);
  m.arena_address = detail::parse_hex_address(need(arena, "address", file, "arena."), file,
                                              "arena.address");
  m.arena_bytes = need_as<uint64_t>(arena, "bytes", file, "arena.");
  m.arena_backend = get_or<std::string>(arena, "backend", "", file, "arena.");
  const json& buffers = need_array(arena, "buffers", file, "arena.");
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::string w = at("arena.buffers", i);
    m.buffers.push_back(BufferRecord{need_as<std::string>(buffers[i], "name", file, w),
                                     need_as<uint64_t>(buffers[i], "offset", file, w),
                                     need_as<uint64_t>(buffers[i], "bytes", file, w),
                                     get_or<std::string>(buffers[i], "shape", "", file, w)});
  }
  const json& views = need_array(arena, "views", file, "arena.");
  for (size_t i = 0; i < views.size(); ++i) {
    std::string w = at("arena.views", i);
    ViewRecord v{need_as<int>(views[i], "id", file, w), need_as<std::string>(views[i], "name", file, w),
                 need_as<int>(views[i], "buffer", file, w),
                 need_as<uint64_t>(views[i], "offset", file, w),
                 need_as<uint64_t>(views[i], "bytes", file, w)};
    LANTERN_CHECK(v.buffer >= -1 && v.buffer < static_cast<int>(m.buffers.size()),
                  "%s: '%sbuffer' = %d names no buffer", file.c_str(), w.c_str(), v.buffer);
    m.views.push_back(std::move(v));
  }
  const json& alias = need(j, "alias", file);
  const json& patterns = need_array(alias, "patterns", file, "alias.");
  for (size_t i = 0; i < patterns.size(); ++i) {
    std::string w = at("alias.patterns", i);
    AccessPattern p;
    p.id = need_as<int>(patterns[i], "id", file, w);
    const json& ops = need_array(patterns[i], "ops", file, w);
    for (size_t k = 0; k < ops.size(); ++k) p.ops.push_back(op_ref_from(ops[k], file, w + "ops"));
    const json& intervals = need_array(patterns[i], "intervals", file, w);
    for (const json& l : intervals) {
      LANTERN_CHECK(l.is_array() && l.size() == 3 && l[0].is_number_integer() &&
                        l[1].is_number_integer() && l[2].is_number_integer(),
                    "%s: '%sintervals' entries should be [view, first_write, last_read]",
                    file.c_str(), w.c_str());
      p.intervals.push_back(LiveInterval{l[0].get<int>(), l[1].get<int>(), l[2].get<int>()});
    }
    m.patterns.push_back(std::move(p));
  }
  for (const json& s : need_array(alias, "step_patterns", file, "alias.")) {
    LANTERN_CHECK(s.is_array() && s.size() == 2 && s[0].is_number_integer() &&
                      s[1].is_number_integer(),
                  "%s: 'alias.step_patterns' entries should be [step, pattern]", file.c_str());
    m.step_patterns.emplace_back(s[0].get<int64_t>(), s[1].get<int>());
  }
  m.violation_count = need_as<int64_t>(alias, "violation_count", file, "alias.");
  m.warning_count = need_as<int64_t>(alias, "warning_count", file, "alias.");
  const json& violations = need_array(alias, "violations", file, "alias.");
  for (size_t i = 0; i < violations.size(); ++i)
    m.violations.push_back(issue_from_json(violations[i], file, at("alias.violations", i)));
  const json& warnings = need_array(alias, "warnings", file, "alias.");
  for (size_t i = 0; i < warnings.size(); ++i)
    m.warnings.push_back(issue_from_json(warnings[i], file, at("alias.warnings", i)));
  m.errors = get_or<std::vector<std::string>>(j, "errors", {}, file);
  return m;
}

// ------------------------------------------------------------------ kv.json
json kv_to_json(const KvData& kv) {
  json events = json::array();
  for (const KvEventRecord& e : kv.events)
    events.push_back(json::array({e.kind, e.step, e.block, e.seq, e.layer}));
  json steps = json::array();
  for (const KvStepRecord& s : kv.steps) {
    json per_seq = json::array();
    for (const auto& [seq, blocks] : s.blocks_per_seq) per_seq.push_back(json::array({seq, blocks}));
    steps.push_back({{"step", s.step},
                     {"t_us", s.t_us},
                     {"used_blocks", s.used_blocks},
                     {"free_blocks", s.free_blocks},
                     {"total_blocks", s.total_blocks},
                     {"used_token_slots", s.used_token_slots},
                     {"wasted_token_slots", s.wasted_token_slots},
                     {"fragmentation", s.fragmentation},
                     {"num_seqs", s.num_seqs},
                     {"blocks_per_seq", per_seq}});
  }
  return json{{"format_version", run_format_version()},
              {"block_size", kv.block_size},
              {"total_blocks", kv.total_blocks},
              {"peak_used_blocks", kv.peak_used_blocks},
              {"peak_step", kv.peak_step},
              {"event_columns", json::array({"kind", "step", "block", "seq", "layer"})},
              {"events", events},
              {"steps", steps},
              {"leaked_blocks", kv.leaked_blocks},
              {"errors", kv.errors}};
}

KvData kv_from_json(const json& j, const std::string& file) {
  check_format_version(need_as<std::string>(j, "format_version", file), file);
  KvData kv;
  kv.block_size = need_as<int>(j, "block_size", file);
  kv.total_blocks = need_as<int>(j, "total_blocks", file);
  kv.peak_used_blocks = need_as<int>(j, "peak_used_blocks", file);
  kv.peak_step = get_or<int64_t>(j, "peak_step", -1, file);
  const json& events = need_array(j, "events", file);
  kv.events.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    bool ok = e.is_array() && e.size() == 5;
    for (size_t k = 0; ok && k < 5; ++k) ok = e[k].is_number_integer();
    LANTERN_CHECK(ok, "%s: events[%zu] should be [kind, step, block, seq, layer] integers",
                  file.c_str(), i);
    int kind = e[0].get<int>();
    LANTERN_CHECK(kind == 0 || kind == 1, "%s: events[%zu]: kind %d is neither 0 (alloc) nor 1 (free)",
                  file.c_str(), i, kind);
    kv.events.push_back(KvEventRecord{e[1].get<int64_t>(), e[3].get<int64_t>(), e[2].get<int32_t>(),
                                      e[4].get<int16_t>(), static_cast<uint8_t>(kind), 0});
  }
  const json& steps = need_array(j, "steps", file);
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string w = at("steps", i);
    const json& s = steps[i];
    KvStepRecord r;
    r.step = need_as<int64_t>(s, "step", file, w);
    r.t_us = need_as<double>(s, "t_us", file, w);
    r.used_blocks = need_as<int>(s, "used_blocks", file, w);
    r.free_blocks = need_as<int>(s, "free_blocks", file, w);
    r.total_blocks = need_as<int>(s, "total_blocks", file, w);
    r.used_token_slots = need_as<int64_t>(s, "used_token_slots", file, w);
    r.wasted_token_slots = need_as<int64_t>(s, "wasted_token_slots", file, w);
    r.fragmentation = need_as<double>(s, "fragmentation", file, w);
    r.num_seqs = need_as<int>(s, "num_seqs", file, w);
    for (const json& p : need_array(s, "blocks_per_seq", file, w)) {
      LANTERN_CHECK(p.is_array() && p.size() == 2 && p[0].is_number_integer() &&
                        p[1].is_number_integer(),
                    "%s: '%sblocks_per_seq' entries should be [seq, blocks]", file.c_str(),
                    w.c_str());
      r.blocks_per_seq.emplace_back(p[0].get<int64_t>(), p[1].get<int>());
    }
    kv.steps.push_back(std::move(r));
  }
  kv.leaked_blocks = get_or<std::vector<int>>(j, "leaked_blocks", {}, file);
  kv.errors = get_or<std::vector<std::string>>(j, "errors", {}, file);
  return kv;
}

// ------------------------------------------------------------------ outputs.jsonl
json output_to_json(const OutputRow& o) {
  return json{{"id", o.id},
              {"tag", o.tag},
              {"prompt_text", o.prompt_text},
              {"prompt", o.prompt},
              {"tokens", o.tokens},
              {"text", o.text},
              {"finish_reason", o.finish_reason},
              {"error", o.error},
              {"submit_s", o.submit_s},
              {"first_token_s", o.first_token_s},
              {"finish_s", o.finish_s},
              {"ttft_s", o.ttft_s},
              {"tpot_s", o.tpot_s},
              {"preemptions", o.preemptions}};
}

OutputRow output_from_json(const json& j, const std::string& file) {
  OutputRow o;
  o.id = need_as<int64_t>(j, "id", file);
  o.tag = get_or<std::string>(j, "tag", "", file);
  o.prompt_text = get_or<std::string>(j, "prompt_text", "", file);
  o.prompt = need_as<std::vector<int32_t>>(j, "prompt", file);
  o.tokens = need_as<std::vector<int32_t>>(j, "tokens", file);
  o.text = get_or<std::string>(j, "text", "", file);
  o.finish_reason = need_as<std::string>(j, "finish_reason", file);
  o.error = get_or<std::string>(j, "error", "", file);
  o.submit_s = need_as<double>(j, "submit_s", file);
  o.first_token_s = need_as<double>(j, "first_token_s", file);
  o.finish_s = need_as<double>(j, "finish_s", file);
  o.ttft_s = need_as<double>(j, "ttft_s", file);
  o.tpot_s = need_as<double>(j, "tpot_s", file);
  o.preemptions = get_or<int>(j, "preemptions", 0, file);
  return o;
}

// ------------------------------------------------------------------ manifest.json
Manifest manifest_from_json(json j, const std::string& file) {
  Manifest m;
  FormatVersion v = check_format_version(need_as<std::string>(j, "format_version", file), file);
  LANTERN_CHECK(get_or<std::string>(j, "format", "", file) == "lantern-run",
                "%s: 'format' should be \"lantern-run\"", file.c_str());
  m.format_major = v.major;
  m.format_minor = v.minor;
  m.name = need_as<std::string>(j, "name", file);
  m.backend = get_or<std::string>(j, "backend", "", file);
  m.complete = get_or<bool>(j, "complete", true, file);
  if (j.contains("roofline") && j["roofline"].is_object()) {
    const json& r = j["roofline"];
    if (r.contains("copy_gb_per_s") && !r["copy_gb_per_s"].is_null())
      m.copy_gb_per_s = need_as<double>(r, "copy_gb_per_s", file, "roofline.");
    if (r.contains("gemm_tflop_per_s") && !r["gemm_tflop_per_s"].is_null())
      m.gemm_tflop_per_s = need_as<double>(r, "gemm_tflop_per_s", file, "roofline.");
  }
  m.json = std::move(j);
  return m;
}

}  // namespace lantern::runfmt
