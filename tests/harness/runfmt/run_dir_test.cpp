// Run directory: writer -> reader round trip of every file, and the reader's
// one-line errors on malformed files and newer format majors.
#include "harness/runfmt/run_dir.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"

#include "harness/runfmt/kernels_csv.h"
#include "harness/runfmt/schema.h"
#include "harness/runfmt/summary.h"
#include "tests/test_util.h"

namespace lantern::runfmt {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

runfmt::Run sample_run() {
  runfmt::Run r;
  r.manifest.json = {{"name", "sample"}, {"backend", "cuda"}, {"complete", true},
                     {"roofline", {{"copy_gb_per_s", 4300.5}, {"gemm_tflop_per_s", 854.25}}},
                     {"config", {{"limits", {{"max_seqs", 4}}}}}};
  r.metrics = {{"tokens_per_s", 1234.5}, {"ttft_s", {{"p50", 0.012}}}};

  TraceEvent step{'X', "step 0", "step", 0.0, 120.125, track::kHostPid, track::kEngineTid,
                  {{"step", 0}}};
  TraceEvent op{'X', "q_proj", "op", 1.5, 10.25, track::kHostPid, track::kEngineTid,
                {{"layer", 0}, {"family", "gemm"}}};
  TraceEvent kernel{'X', "void gemm<128, 64>(float const*, int)", "kernel", 3.001, 7.5,
                    track::kGpuPid, 7, {{"op", "q_proj"}}};
  TraceEvent counter{'C', "kv blocks", "counter", 121.0, 0, track::kCounterPid, 0,
                     {{"used", 3}, {"free", 5}}};
  TraceEvent meta{'M', "thread_name", "", 0, 0, track::kHostPid, track::kEngineTid,
                  {{"name", "engine"}}};
  r.trace = {meta, step, op, kernel, counter};

  KernelRow k;
  k.launch = 4;
  k.step = 0;
  k.phase = "prefill";
  k.layer = 0;
  k.op = "q_proj";
  k.family = "gemm";
  k.variant = 2;
  k.variant_name = "cublas";
  k.kernel = "void gemm<128, 64>(float const*, int), \"quoted\"";
  k.source = "cupti";
  k.device = 0;
  k.stream = 7;
  k.start_us = 3.001;
  k.dur_us = 7.5;
  k.bytes = 1.5e6;
  k.flops = 3.25e9;
  k.gb_per_s = 200.0;
  k.tflop_per_s = 0.43333333333333335;
  k.pct_roofline = 4.651162790697675;
  k.graph_node = 1234567890123ull;
  k.correlation = 42;
  k.launch_config = {.grid_x = 132, .grid_y = 2, .grid_z = 1, .block_x = 256, .block_y = 1,
                     .block_z = 1, .static_smem = 1024, .dynamic_smem = 49152,
                     .smem_config = 102400, .regs_per_thread = 48};
  k.occupancy = Occupancy{2, 0.25, 0.5, "smem"};
  KernelRow host = k;
  host.launch = -1;
  host.op = "";
  host.source = "host";
  host.gb_per_s.reset();
  host.tflop_per_s.reset();
  host.pct_roofline.reset();
  host.graph_node = 0;
  host.launch_config = {};
  host.occupancy.reset();
  r.kernels = {k, host};

  MemoryMap& m = r.memory;
  m.allocations = {{0, "weights", "weight block", 0x7f0000000000ull, 2471628800ull, "cuda", 0.5, {}},
                   {1, "kv_pool", "KV blocks", 0x7f1000000000ull, 1ull << 30, "cuda", 1.0, 99.0}};
  m.arena_address = 0x7f2000000000ull;
  m.arena_bytes = 4096;
  m.arena_backend = "cuda";
  m.buffers = {{"q_attn", 0, 2048, "[4, 128] f32"}, {"x", 2048, 2048, ""}};
  m.views = {{0, "q", 0, 0, 2048}, {1, "attn_out", 0, 0, 2048}, {2, "x", 1, 0, 2048}};
  m.patterns = {{0, {{"embed", -1}, {"q_proj", 0}}, {{2, 0, 1}, {0, 1, -1}}}};
  m.step_patterns = {{0, 0}, {1, 0}};
  AliasIssue v;
  v.kind = "clobber";
  v.step = 3;
  v.op_index = 12;
  v.op = {"up_proj", 0};
  v.view = "up";
  v.victim = "gate";
  v.victim_write_index = 11;
  v.victim_write = {"gate_proj", 0};
  v.victim_read_index = 13;
  v.victim_read = {"swiglu", 0};
  v.overlap_begin = 100;
  v.overlap_end = 200;
  v.occurrences = 6;
  v.message = "step 3: ...";
  m.violations = {v};
  AliasIssue w = v;
  w.kind = "stale_read";
  w.victim.clear();
  m.warnings = {w};
  m.violation_count = 6;
  m.warning_count = 1;
  m.peak_device_bytes = 3ull << 30;
  m.errors = {"memory map: something"};

  r.kv.block_size = 16;
  r.kv.total_blocks = 64;
  r.kv.events = {{0, 1, 5, 0, 0, 0}, {2, 1, 5, 0, 1, 0}};
  KvStepRecord s;
  s.step = 0;
  s.t_us = 12.5;
  s.used_blocks = 1;
  s.free_blocks = 63;
  s.total_blocks = 64;
  s.used_token_slots = 9;
  s.wasted_token_slots = 7;
  s.fragmentation = 7.0 / 16.0;
  s.num_seqs = 1;
  s.blocks_per_seq = {{1, 1}};
  r.kv.steps = {s};
  r.kv.peak_used_blocks = 1;
  r.kv.peak_step = 0;
  r.kv.leaked_blocks = {};
  r.kv.errors = {};

  OutputRow o;
  o.id = 0;
  o.tag = "t";
  o.prompt_text = "Hello \"world\"\n";
  o.prompt = {128000, 9906};
  o.tokens = {1, 2, 3};
  o.text = "caf\xc3\xa9";
  o.finish_reason = "length";
  o.submit_s = 0.25;
  o.first_token_s = 0.5;
  o.finish_s = 0.75;
  o.ttft_s = 0.25;
  o.tpot_s = 0.125;
  r.outputs = {o, o};
  r.outputs[1].id = 1;
  return r;
}

void write_all(const std::filesystem::path& dir, const runfmt::Run& r) {
  RunWriter w(dir);
  w.write_trace(r.trace, {{"run", "sample"}});
  w.write_kernels(r.kernels);
  w.write_memory(r.memory);
  w.write_kv(r.kv);
  w.write_outputs(r.outputs);
  w.write_metrics(r.metrics);
  w.write_manifest(r.manifest.json);
}

TEST(RunDir, WriterReaderRoundTrip) {
  auto dir = test::scratch_dir("rundir-roundtrip");
  runfmt::Run r = sample_run();
  write_all(dir, r);
  ASSERT_TRUE(RunReader::is_run_dir(dir));
  runfmt::Run back = RunReader::open(dir);
  EXPECT_EQ(back.manifest.name, "sample");
  EXPECT_EQ(back.manifest.backend, "cuda");
  EXPECT_EQ(back.manifest.format_major, kRunFormatMajor);
  EXPECT_EQ(back.manifest.format_minor, kRunFormatMinor);
  EXPECT_TRUE(back.manifest.complete);
  EXPECT_EQ(back.manifest.copy_gb_per_s, 4300.5);
  EXPECT_EQ(back.manifest.gemm_tflop_per_s, 854.25);
  EXPECT_EQ(back.manifest.json["config"], r.manifest.json["config"]);
  EXPECT_EQ(back.metrics["tokens_per_s"], 1234.5);
  EXPECT_EQ(back.metrics["format_version"], run_format_version());
  EXPECT_EQ(back.trace, r.trace);
  EXPECT_EQ(back.kernels, r.kernels);
  EXPECT_EQ(back.memory, r.memory);
  EXPECT_EQ(back.kv, r.kv);
  EXPECT_EQ(back.outputs, r.outputs);

  runfmt::Run no_trace = RunReader::open(dir, ReadOptions{false});
  EXPECT_TRUE(no_trace.trace.empty());
  EXPECT_EQ(no_trace.kernels, r.kernels);
}

// Format 1.0 wrote no launch columns: its rows read with an unknown launch
// configuration and no occupancy; every other field as before.
TEST(RunDir, KernelsCsvOfFormat10ReadsWithoutLaunchColumns) {
  runfmt::Run r = sample_run();
  auto dir = test::scratch_dir("rundir-kernels-1.0");
  write_kernels_csv(dir / "kernels.csv", r.kernels);
  std::ifstream in(dir / "kernels.csv");
  std::string text, line;
  const size_t v10_columns = 21;  // launch .. correlation
  while (std::getline(in, line)) {
    size_t cut = 0;
    for (size_t commas = 0; cut < line.size(); ++cut) {
      if (line[cut] == '"') cut = line.find('"', cut + 1);  // quotes pair up, "" escapes too
      if (line[cut] == ',' && ++commas == v10_columns) break;
    }
    text += line.substr(0, cut) + "\n";
  }
  const std::string header = text.substr(0, text.find('\n'));
  ASSERT_EQ(header.substr(header.size() - 12), ",correlation") << header;
  auto rows = parse_kernels_csv(text);
  ASSERT_EQ(rows.size(), r.kernels.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    KernelRow expected = r.kernels[i];
    expected.launch_config = {};
    expected.occupancy.reset();
    EXPECT_EQ(rows[i], expected) << i;
    EXPECT_FALSE(rows[i].launch_config.known());
  }
}

TEST(RunDir, SummaryGroupsOpsWithRates) {
  runfmt::Run r = sample_run();
  KernelRow second = r.kernels[0];
  second.dur_us = 2.5;
  second.bytes = 0.5e6;
  second.pct_roofline = 10.0;
  r.kernels.push_back(second);
  auto ops = summarize(r.kernels, GroupBy::op);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].key, "q_proj");
  EXPECT_EQ(ops[0].rows, 2);
  EXPECT_DOUBLE_EQ(ops[0].total_us, 10.0);
  EXPECT_DOUBLE_EQ(*ops[0].gb_per_s, 2e6 / 10e-6 / 1e9);
  // Time-weighted roofline share: (4.65..% of 7.5 us + 10% of 2.5 us) / 10 us.
  EXPECT_NEAR(*ops[0].pct_roofline, (4.651162790697675 * 7.5 + 10.0 * 2.5) / 10.0, 1e-9);
  EXPECT_EQ(ops[1].key, "(unattributed)");
  EXPECT_DOUBLE_EQ(ops[0].share + ops[1].share, 1.0);
  auto prefill_only = summarize(r.kernels, GroupBy::kernel, "decode");
  EXPECT_TRUE(prefill_only.empty());
}

// A group shows the launch configuration with the most time, and says how
// many it had; host rows have none.
TEST(RunDir, SummaryShowsTheLaunchWithTheMostTime) {
  runfmt::Run r = sample_run();
  KernelRow other = r.kernels[0];
  other.launch_config.grid_x = 7;
  other.occupancy = Occupancy{1, 0.01, 0.05, "grid"};
  other.dur_us = 1.0;  // less than the first row's 7.5 us
  r.kernels.push_back(other);
  auto ops = summarize(r.kernels, GroupBy::op);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].launch_configs, 2);
  EXPECT_EQ(ops[0].launch_config, r.kernels[0].launch_config);
  EXPECT_EQ(ops[0].occupancy, r.kernels[0].occupancy);
  other.dur_us = 100.0;
  r.kernels.back() = other;
  ops = summarize(r.kernels, GroupBy::op);
  EXPECT_EQ(ops[0].launch_config.grid_x, 7);
  EXPECT_EQ(ops[0].occupancy->limit, "grid");
  EXPECT_EQ(ops[1].launch_configs, 0) << "host rows";
  EXPECT_FALSE(ops[1].launch_config.known());
}

class RunDirErrors : public ::testing::Test {
 protected:
  std::filesystem::path dir;
  void SetUp() override {
    dir = test::scratch_dir("rundir-errors");
    write_all(dir, sample_run());
  }
  void put(const char* file, const std::string& text) {
    std::ofstream(dir / file, std::ios::trunc) << text;
  }
  std::string error() {
    try {
      RunReader::open(dir);
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
      return what;
    }
    ADD_FAILURE() << "expected RunReader::open to fail";
    return "";
  }
};

TEST_F(RunDirErrors, MissingFile) {
  std::filesystem::remove(dir / "kv.json");
  EXPECT_THAT(error(), HasSubstr("kv.json: cannot open"));
}

TEST_F(RunDirErrors, InvalidJson) {
  put("metrics.json", "{\"tokens_per_s\": 12,");
  std::string e = error();
  EXPECT_THAT(e, StartsWith("run " + dir.string() + ": metrics.json is not valid JSON (line 1"));
}

// Hostile-input probe (issue 15): without parsing the trace, a missing or
// cut-off trace.json is still an error, not a silent success.
TEST_F(RunDirErrors, TraceMissingOrTruncatedWithoutParsingIt) {
  auto open_fast = [&] {
    try {
      RunReader::open(dir, ReadOptions{false});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(open_fast(), "(no error)");
  const std::string full = [&] {
    std::ifstream in(dir / "trace.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  put("trace.json", full.substr(0, full.size() / 2));
  EXPECT_THAT(open_fast(), HasSubstr("trace.json: truncated or not a trace"));
  put("trace.json", "");
  EXPECT_THAT(open_fast(), HasSubstr("trace.json: truncated or not a trace (0 bytes"));
  std::filesystem::remove(dir / "trace.json");
  EXPECT_THAT(open_fast(), HasSubstr("trace.json: cannot open"));
}

TEST_F(RunDirErrors, NewerMajorIsRefused) {
  nlohmann::json m = sample_run().manifest.json;
  m["format"] = "lantern-run";
  m["format_version"] = std::to_string(kRunFormatMajor + 1) + ".0";
  put("manifest.json", m.dump());
  std::string want = "manifest.json: run format ";
  want += std::to_string(kRunFormatMajor + 1);
  want += ".0 is newer than this lantern reads";
  EXPECT_THAT(error(), HasSubstr(want));
}

TEST_F(RunDirErrors, NewerMinorIsRead) {
  nlohmann::json m = sample_run().manifest.json;
  m["format"] = "lantern-run";
  m["format_version"] = std::to_string(kRunFormatMajor) + ".99";
  m["a_field_from_the_future"] = 1;
  put("manifest.json", m.dump());
  runfmt::Run r = RunReader::open(dir);
  EXPECT_EQ(r.manifest.format_minor, 99);
}

TEST_F(RunDirErrors, MissingKey) {
  nlohmann::json kv = nlohmann::json::parse(std::ifstream(dir / "kv.json"));
  kv.erase("events");
  put("kv.json", kv.dump());
  EXPECT_THAT(error(), HasSubstr("kv.json: missing key 'events'"));
}

TEST_F(RunDirErrors, WrongType) {
  nlohmann::json memory = nlohmann::json::parse(std::ifstream(dir / "memory.json"));
  memory["allocations"][0]["bytes"] = "lots";
  put("memory.json", memory.dump());
  EXPECT_THAT(error(), HasSubstr("memory.json: key 'allocations[0].bytes' has the wrong type"));
}

TEST_F(RunDirErrors, MalformedCsvRow) {
  std::ifstream in(dir / "kernels.csv");
  std::string header;
  std::getline(in, header);
  put("kernels.csv", header + "\n1,2,3\n");
  EXPECT_THAT(error(), HasSubstr("kernels.csv: row 1 has 3 fields"));
  const std::string commas(kernel_csv_columns().size() - 1, ',');
  put("kernels.csv", header + "\n" + "x" + commas + "\n");
  EXPECT_THAT(error(), HasSubstr("kernels.csv: row 1: column launch is not an integer: 'x'"));
}

TEST_F(RunDirErrors, MalformedOutputsLine) {
  put("outputs.jsonl", "{\"id\": 1}\n");
  EXPECT_THAT(error(), HasSubstr("outputs.jsonl line 1: missing key 'prompt'"));
}

TEST_F(RunDirErrors, NotARunManifest) {
  put("manifest.json", "{\"format\": \"other\", \"format_version\": \"1.0\", \"name\": \"x\"}");
  EXPECT_THAT(error(), HasSubstr("manifest.json: 'format' should be \"lantern-run\""));
}

}  // namespace
}  // namespace lantern::runfmt
