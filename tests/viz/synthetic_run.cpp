#include "tests/viz/synthetic_run.h"

#include <random>
#include <string>
#include <vector>

#include "harness/runfmt/run_dir.h"
#include "harness/runfmt/trace.h"

namespace lantern::test {

namespace {

using runfmt::KernelRow;
using runfmt::TraceEvent;

struct OpSpec {
  const char* op;
  const char* family;
  const char* variant;
  const char* kernel;
  double bytes, flops, mean_us;
};

// One layer of a Llama-3.2-1B decode step at batch 8 (bytes and FLOPs of the
// bf16 weights each op reads; durations near what an H200 gives).
const OpSpec kLayerOps[] = {
    {"attn_norm", "rmsnorm", "warp", "rmsnorm_warp_kernel", 65536, 98304, 2.1},
    {"q_proj", "gemm", "cublas", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 8.4e6, 6.7e7, 4.8},
    {"k_proj", "gemm", "cublas", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 2.1e6, 1.7e7, 3.0},
    {"v_proj", "gemm", "cublas", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 2.1e6, 1.7e7, 3.0},
    {"rope", "rope", "fused", "rope_llama3_kernel", 98304, 65536, 1.9},
    {"kv_write", "kv_write", "paged", "kv_write_paged_kernel", 65536, 0, 1.7},
    {"attention", "attention_decode", "split_k", "paged_attention_split_k_kernel", 4.2e6, 8.4e6, 9.5},
    {"o_proj", "gemm", "cublas", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 8.4e6, 6.7e7, 4.7},
    {"mlp_norm", "rmsnorm", "warp", "rmsnorm_warp_kernel", 65536, 98304, 2.0},
    {"gate_up", "gemm", "cublas", "nvjet_tst_128x8_64x16_4x1_v_bz_TNT", 6.7e7, 5.4e8, 18.5},
    {"swiglu", "swiglu", "vec", "swiglu_vec_kernel", 393216, 196608, 2.2},
    {"down_proj", "gemm", "cublas", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 3.4e7, 2.7e8, 10.1},
};

TraceEvent range(const std::string& name, const char* cat, double ts, double dur, nlohmann::json args) {
  TraceEvent e;
  e.ph = 'X';
  e.name = name;
  e.cat = cat;
  e.ts_us = ts;
  e.dur_us = dur;
  e.pid = runfmt::track::kHostPid;
  e.tid = runfmt::track::kEngineTid;
  e.args = std::move(args);
  return e;
}

runfmt::MemoryMap memory_map() {
  runfmt::MemoryMap m;
  const uint64_t base = 0x7f0000000000ull;
  auto alloc = [&](int id, const char* owner, const char* name, uint64_t offset, uint64_t bytes) {
    runfmt::Allocation a;
    a.id = id;
    a.owner = owner;
    a.name = name;
    a.address = base + offset;
    a.bytes = bytes;
    a.backend = "cuda";
    m.allocations.push_back(a);
  };
  alloc(0, "weights", "weight block", 0, 2471628800ull);
  alloc(1, "arena", "activation arena", 2600000000ull, 48u << 20);
  alloc(2, "kv_pool", "KV blocks", 2700000000ull, 4096ull * 32768);
  alloc(3, "kv_pool", "block tables", 2700000000ull + 4096ull * 32768, 65536);
  alloc(4, "cublas_workspace", "cuBLAS workspace", 2900000000ull, 32u << 20);
  alloc(5, "workspace", "attention split-k workspace", 2950000000ull, 4u << 20);
  m.arena_address = base + 2600000000ull;
  m.arena_bytes = 48u << 20;
  m.arena_backend = "cuda";
  const char* buffers[] = {"x", "xn", "q_attn", "k", "v", "o_down", "gate", "up", "logits"};
  uint64_t offset = 0;
  for (int b = 0; b < 9; ++b) {
    const uint64_t bytes = (b == 8 ? 8u : 4u) << 20;
    m.buffers.push_back({buffers[b], offset, bytes, "[512, 2048] bf16"});
    offset += bytes;
  }
  const std::pair<const char*, int> views[] = {{"x", 0}, {"xn", 1}, {"q", 2},        {"attn_out", 2},
                                               {"k", 3}, {"v", 4},  {"o_out", 5},    {"mlp_down", 5},
                                               {"gate", 6}, {"up", 7}, {"logits", 8}};
  for (int v = 0; v < 11; ++v)
    m.views.push_back({v, views[v].first, views[v].second, 0, m.buffers[views[v].second].bytes});
  runfmt::AccessPattern p;
  p.id = 0;
  for (const OpSpec& op : kLayerOps) p.ops.push_back({op.op, 0});
  // x, xn, q, attn_out, k, v, o_out, mlp_down, gate, up: one layer's values.
  p.intervals = {{0, -1, 11}, {1, 0, 3},  {2, 1, 6},  {3, 6, 7},  {4, 2, 6},  {5, 3, 6},
                 {6, 7, 7},   {1, 8, 9},  {8, 9, 10}, {9, 9, 10}, {7, 11, 11}};
  m.patterns.push_back(p);
  return m;
}

}  // namespace

SyntheticRunInfo write_synthetic_run(const std::filesystem::path& dir, const SyntheticRunOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> jitter(1.0, 0.08);
  const int ops_per_layer = static_cast<int>(std::size(kLayerOps));
  const int64_t kernels_per_step = int64_t(o.layers) * ops_per_layer + 2;  // + embed, lm_head
  const int64_t steps = std::max<int64_t>(1, (o.kernels + kernels_per_step - 1) / kernels_per_step);

  std::vector<TraceEvent> trace;
  std::vector<KernelRow> rows;
  rows.reserve(o.kernels);
  trace.reserve((o.op_ranges ? o.kernels : 0) + steps * (o.layers + 4));
  trace.push_back(runfmt::process_name_event(1, "lantern host"));
  trace.push_back(runfmt::thread_name_event(1, 1, "engine"));
  trace.push_back(runfmt::process_name_event(2, "GPU: NVIDIA H200 (synthetic)"));
  trace.push_back(runfmt::process_name_event(3, "lantern counters"));
  runfmt::KvData kv;
  kv.block_size = 16;
  kv.total_blocks = 4096;
  runfmt::MemoryMap memory = memory_map();
  std::vector<int> held(o.sequences, 0);
  std::vector<int64_t> seq_id(o.sequences);
  for (int s = 0; s < o.sequences; ++s) seq_id[s] = s;
  int64_t next_seq = o.sequences, next_block = 0, launch = 0;
  std::vector<std::vector<int32_t>> blocks_of(o.sequences);
  std::vector<int32_t> free_blocks;
  for (int b = kv.total_blocks - 1; b >= 0; --b) free_blocks.push_back(b);

  double t = 1000;
  for (int64_t step = 0; step < steps && int64_t(rows.size()) < o.kernels; ++step) {
    const double step_t0 = t;
    auto kernel = [&](const OpSpec& op, int layer) {
      const double dur = op.mean_us * std::max(0.3, jitter(rng));
      KernelRow k;
      k.launch = launch++;
      k.step = step;
      k.phase = step == 0 ? "prefill" : "decode";
      k.layer = layer;
      k.op = op.op;
      k.family = op.family;
      k.variant = 2;
      k.variant_name = op.variant;
      k.kernel = op.kernel;
      k.source = "cupti";
      k.stream = 7 + static_cast<int>(k.launch % o.streams);
      k.start_us = t + 0.6;
      if (o.pdl_overlap > 0 && k.launch % 3 == 2 && !rows.empty() && rows.back().step == step)
        k.start_us = rows.back().start_us + rows.back().dur_us * (1 - o.pdl_overlap);
      k.dur_us = dur;
      k.bytes = op.bytes;
      k.flops = op.flops;
      k.gb_per_s = op.bytes / (dur * 1e-6) / 1e9;
      if (op.flops > 0) k.tflop_per_s = op.flops / (dur * 1e-6) / 1e12;
      k.pct_roofline = std::max(op.bytes / 4300e9, op.flops / 854e12) / (dur * 1e-6) * 100.0;
      k.correlation = static_cast<uint32_t>(k.launch + 1);
      if (o.op_ranges)
        trace.push_back(range(op.op, "op", t, dur + 1.2,
                              {{"launch", k.launch}, {"step", step}, {"layer", layer},
                               {"family", op.family}, {"variant", op.variant},
                               {"bytes", op.bytes}, {"flops", op.flops}}));
      rows.push_back(std::move(k));
      t += dur + 1.2;
    };
    kernel({"embed", "embedding", "gather", "embedding_gather_kernel", 32768, 0, 1.5}, -1);
    for (int layer = 0; layer < o.layers && int64_t(rows.size()) < o.kernels; ++layer) {
      const double layer_t0 = t;
      for (const OpSpec& op : kLayerOps)
        if (int64_t(rows.size()) < o.kernels) kernel(op, layer);
      trace.push_back(range("layer " + std::to_string(layer), "layer", layer_t0, t - layer_t0,
                            {{"layer", layer}, {"step", step}}));
    }
    if (int64_t(rows.size()) < o.kernels)
      kernel({"lm_head", "gemm", "cublas", "nvjet_tst_256x8_64x16_4x1_v_bz_TNT", 5.2e8, 4.2e9, 120}, -1);
    const char* phase = step == 0 ? "prefill" : "decode";
    trace.push_back(range("step " + std::to_string(step), "step", step_t0, t - step_t0,
                          {{"step", step}, {"phase", phase}}));
    trace.push_back(range(phase, "phase", step_t0, t - step_t0,
                          {{"step", step}, {"prefill_seqs", step == 0 ? o.sequences : 0},
                           {"decode_seqs", step == 0 ? 0 : o.sequences}, {"tokens", o.sequences}}));

    // KV: every sequence grows a block every 16 steps (per layer); sequence 0
    // is preempted at step 40 and comes back at step 44; a sequence finishes
    // every 64 steps and a new one takes its slot.
    for (int s = 0; s < o.sequences; ++s) {
      const bool preempted = s == 0 && step >= 40 && step < 44;
      const bool finish = step > 0 && (step + s * 8) % 64 == 0;
      if ((preempted || finish) && !blocks_of[s].empty()) {
        for (size_t i = 0; i < blocks_of[s].size(); ++i) {
          kv.events.push_back({step, seq_id[s], blocks_of[s][i], static_cast<int16_t>(i % o.layers), 1, 0});
          free_blocks.push_back(blocks_of[s][i]);
        }
        blocks_of[s].clear();
        if (finish) seq_id[s] = next_seq++;
      }
      if (!preempted && (step % 16 == 0 || blocks_of[s].empty()) &&
          free_blocks.size() >= static_cast<size_t>(o.layers))
        for (int layer = 0; layer < o.layers; ++layer) {
          int32_t b = free_blocks.back();
          free_blocks.pop_back();
          blocks_of[s].push_back(b);
          kv.events.push_back({step, seq_id[s], b, static_cast<int16_t>(layer), 0, 0});
        }
    }
    runfmt::KvStepRecord st;
    st.step = step;
    st.t_us = t;
    st.total_blocks = kv.total_blocks;
    st.free_blocks = static_cast<int>(free_blocks.size());
    st.used_blocks = kv.total_blocks - st.free_blocks;
    st.used_token_slots = int64_t(st.used_blocks) * 16 - 4 * o.sequences;
    st.wasted_token_slots = 4 * o.sequences;
    st.fragmentation = st.used_blocks ? double(st.wasted_token_slots) / (st.used_blocks * 16.0) : 0;
    for (int s = 0; s < o.sequences; ++s)
      if (!blocks_of[s].empty()) {
        st.blocks_per_seq.push_back({seq_id[s], static_cast<int>(blocks_of[s].size())});
        ++st.num_seqs;
      }
    kv.steps.push_back(st);
    TraceEvent c;
    c.ph = 'C';
    c.name = "kv blocks";
    c.cat = "counter";
    c.pid = runfmt::track::kCounterPid;
    c.ts_us = t;
    c.args = {{"used", st.used_blocks}, {"free", st.free_blocks}};
    trace.push_back(c);
    memory.step_patterns.push_back({step, 0});
    t += 8.0;  // host gap between steps
  }
  (void)next_block;
  for (int s = 0; s < o.sequences; ++s)  // the end: every block back
    for (size_t i = 0; i < blocks_of[s].size(); ++i)
      kv.events.push_back({steps - 1, seq_id[s], blocks_of[s][i], static_cast<int16_t>(i % o.layers), 1, 0});
  for (const KernelRow& k : rows) {
    TraceEvent e;
    e.ph = 'X';
    e.name = k.kernel;
    e.cat = "kernel";
    e.pid = runfmt::track::kGpuPid;
    e.tid = k.stream;
    e.ts_us = k.start_us;
    e.dur_us = k.dur_us;
    e.args = {{"op", k.op}, {"layer", k.layer}, {"step", k.step}, {"bytes", k.bytes}, {"flops", k.flops}};
    trace.push_back(std::move(e));
  }

  runfmt::RunWriter w(dir);
  w.write_trace(trace, {{"run", dir.filename().string()}, {"time_unit", "us"}});
  w.write_kernels(rows);
  if (o.timeline_index) w.write_timeline_index(trace, rows);
  w.write_memory(memory);
  w.write_kv(kv);
  std::vector<runfmt::OutputRow> outputs;
  for (int64_t s = 0; s < next_seq; ++s) {
    runfmt::OutputRow r;
    r.id = s;
    r.tokens = {1, 2, 3};
    r.finish_reason = "length";
    outputs.push_back(r);
  }
  w.write_outputs(outputs);
  w.write_metrics({{"requests", next_seq}, {"tokens_per_s", 8e6 / t}, {"steps", {{"count", steps}}}});
  nlohmann::json manifest = {
      {"name", dir.filename().string()}, {"complete", true}, {"backend", "cuda"},
      {"gpu", {{"name", "NVIDIA H200 (synthetic)"}, {"sm_count", 132}}},
      {"roofline", {{"copy_gb_per_s", 4300.0}, {"gemm_tflop_per_s", 854.0}}},
      {"config", {{"limits", {{"max_seqs", o.sequences}, {"kv_block_size", 16}}}}}};
  w.write_manifest(manifest);
  SyntheticRunInfo info;
  info.kernels = static_cast<int64_t>(rows.size());
  info.steps = steps;
  info.trace_events = static_cast<int64_t>(trace.size());
  info.duration_us = t;
  return info;
}

}  // namespace lantern::test
