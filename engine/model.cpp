#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "engine/device_kernels.h"

namespace lantern {

using kernels::Backend;
using kernels::Family;

namespace {

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// Byte offsets of each section of the step metadata buffer (device) and its
// pinned host mirror; one copy per step moves all of it.
struct MetaLayout {
  size_t ids, positions, slots, fresh_starts, ctx_lens, logit_rows, top_k, gen_index, out_tokens,
      temperature, top_p, seeds, updates, bytes;
  MetaLayout(int T, int R, int U) {
    size_t o = 0;
    auto take = [&o](size_t b) {
      size_t at = o;
      o = align256(o + b);
      return at;
    };
    ids = take(4 * T);
    positions = take(4 * T);
    slots = take(4 * T);
    fresh_starts = take(4 * (T + 1));
    ctx_lens = take(4 * T);
    logit_rows = take(4 * R);
    top_k = take(4 * R);
    gen_index = take(4 * R);
    out_tokens = take(4 * R);
    temperature = take(4 * R);
    top_p = take(4 * R);
    seeds = take(8 * R);
    updates = take(8 * static_cast<size_t>(U));
    bytes = o;
  }
};

}  // namespace

struct Model::Views {
  ViewId x, xn, q, attn_out, k, v, o_out, mlp_down, gate, up, mlp_act, logits_in, logits, meta,
      inv_freq;
};

Model::Model(const ModelConfig& cfg, const Weights& weights, Device& device,
             const EngineLimits& limits, const kernels::KernelSet& kernels, Observer* observer,
             bool use_cuda_graphs)
    : cfg_(cfg), w_(weights), dev_(device), limits_(limits), kernels_(kernels), obs_(observer),
      v_(std::make_unique<Views>()) {
  // Graphs replay decode steps; the seed's host argmax (argmax variant 1)
  // synchronises with the host inside the step and cannot be captured.
  graphs_enabled_ = use_cuda_graphs && dev_.is_cuda() &&
                    kernels_.entry(Family::argmax).variant != 1;
  graphs_.resize(2 * (limits.max_seqs + 1));
  const int T = limits.max_batch_tokens;
  const int R = limits.logits_rows;
  const int H = cfg.hidden_size, I = cfg.intermediate_size;
  act_bytes_ = dev_.is_cuda() ? 2 : 4;
  const size_t a = act_bytes_;
  const char* act = dev_.is_cuda() ? "bf16" : "f32";
  auto shape = [act](long r, long c) { return strformat("[%ld, %ld] %s", r, c, act); };

  // ---- activation arena (the seed's buffers, sized from the limits) ----
  v_->x = arena_.add_buffer_view("x", T * H * a, shape(T, H));
  v_->xn = arena_.add_buffer_view("xn", T * H * a, shape(T, H));
  int q_attn = arena_.add_buffer("q_attn", T * cfg.q_dim() * a, shape(T, cfg.q_dim()));
  v_->q = arena_.add_view("q", q_attn);
  v_->attn_out = arena_.add_view("attn_out", q_attn);  // seed alias 1
  v_->k = arena_.add_buffer_view("k", T * cfg.kv_dim() * a, shape(T, cfg.kv_dim()));
  v_->v = arena_.add_buffer_view("v", T * cfg.kv_dim() * a, shape(T, cfg.kv_dim()));
  int o_down = arena_.add_buffer("o_down", T * H * a, shape(T, H));
  v_->o_out = arena_.add_view("o_out", o_down);
  v_->mlp_down = arena_.add_view("mlp_down", o_down);  // seed alias 2
  v_->gate = arena_.add_buffer_view("gate", T * I * a, shape(T, I));
  v_->up = arena_.add_buffer_view("up", T * I * a, shape(T, I));
  v_->mlp_act = arena_.add_buffer_view("mlp_act", T * I * a, shape(T, I));
  v_->logits_in = arena_.add_buffer_view("logits_in", R * H * a, shape(R, H));
  v_->logits = arena_.add_buffer_view("logits", static_cast<size_t>(R) * cfg.vocab_size * 4,
                                      strformat("[%d, %d] f32", R, cfg.vocab_size));
  max_table_updates_ = (T / limits.kv_block_size + 2 * limits.max_seqs) * cfg.num_layers;
  MetaLayout meta(T, R, max_table_updates_);
  meta_bytes_ = meta.bytes;
  v_->meta = arena_.add_buffer_view("step_meta", meta.bytes, "ids, positions, slots, ... (int32)");
  v_->inv_freq = arena_.add_buffer_view("rope_inv_freq", cfg.head_dim / 2 * 4,
                                        strformat("[%d] f32", cfg.head_dim / 2));
  arena_.allocate(dev_.backend());
  {
    AllocEvent e{"arena", "activation arena", reinterpret_cast<uint64_t>(arena_.base()),
                 arena_.total_bytes(), dev_.backend(), false};
    LANTERN_OBSERVE(obs_, on_alloc(e));
    LANTERN_OBSERVE(obs_, on_arena(arena_));
  }
  std::vector<float> inv_freq = rope_inv_freq(cfg);
  dev_.copy_h2d(arena_.ptr(v_->inv_freq), inv_freq.data(), inv_freq.size() * 4);
  meta_host_ = dev_.alloc_pinned(meta_bytes_);
  std::memset(meta_host_, 0, meta_bytes_);

  // ---- shared workspace: the largest any chosen variant asks for ----
  kernels::WorkspaceShape ws;
  ws.max_batch_tokens = T;
  ws.max_seqs = limits.max_seqs;
  ws.max_seq_len = T;
  ws.max_context = limits.max_context;
  ws.n_q_heads = cfg.num_q_heads;
  ws.n_kv_heads = cfg.num_kv_heads;
  ws.head_dim = cfg.head_dim;
  ws.vocab = cfg.vocab_size;
  for (int f = 0; f < kernels::kNumFamilies; ++f) {
    const auto& e = kernels_.entry(static_cast<Family>(f));
    if (e.workspace_bytes) workspace_bytes_ = std::max(workspace_bytes_, e.workspace_bytes(ws));
  }
  if (workspace_bytes_) workspace_ = dev_.alloc(workspace_bytes_, "workspace", "kernel workspace");
  size_t cublas_ws_bytes = 0;
  if (dev_.is_cuda()) {
    cublas_ws_bytes = 32u << 20;  // fixed, so cuBLAS never allocates (graph capture)
    cublas_ws_ = dev_.alloc(cublas_ws_bytes, "cublas_workspace", "cuBLAS workspace");
    dev_.set_cublas_workspace(cublas_ws_, cublas_ws_bytes);
  }

  // ---- block tables and KV pool ----
  max_blocks_per_seq_ = (limits.max_context + limits.kv_block_size - 1) / limits.kv_block_size;
  size_t table_entries = static_cast<size_t>(cfg.num_layers) * limits.max_seqs * max_blocks_per_seq_;
  block_tables_ = static_cast<int32_t*>(dev_.alloc(table_entries * 4, "kv_pool", "block tables"));
  dev_.memset(block_tables_, 0xff, table_entries * 4);  // -1 everywhere: unmapped
  const size_t block_bytes = 2ull * limits.kv_block_size * cfg.num_kv_heads * cfg.head_dim * a;
  const int min_blocks = cfg.num_layers * max_blocks_per_seq_;
  if (limits.kv_num_blocks > 0) {
    kv_num_blocks_ = limits.kv_num_blocks;
  } else if (dev_.is_cuda()) {
    double avail = static_cast<double>(dev_.free_memory()) * limits.kv_memory_fraction;
    kv_num_blocks_ = static_cast<int>(std::min<double>(avail / block_bytes, 1 << 30));
  } else {
    // CPU: room for every slot at full context, capped at 2 GiB of host memory.
    size_t want = static_cast<size_t>(limits.max_seqs) * min_blocks;
    size_t cap = std::max<size_t>(min_blocks, (2ull << 30) / block_bytes);
    kv_num_blocks_ = static_cast<int>(std::min(want, cap));
  }
  LANTERN_CHECK(kv_num_blocks_ >= min_blocks,
                "the KV pool has %d blocks but one sequence of max_context=%d tokens needs %d "
                "(%d layers x %d blocks of %d tokens): raise kv_num_blocks / kv_memory_fraction or "
                "lower max_context",
                kv_num_blocks_, limits.max_context, min_blocks, cfg.num_layers, max_blocks_per_seq_,
                limits.kv_block_size);
  kv_pool_ = dev_.alloc(block_bytes * kv_num_blocks_, "kv_pool", "KV blocks");

  budget_.weights = w_.bytes();
  budget_.arena = arena_.total_bytes();
  budget_.kv_pool = block_bytes * kv_num_blocks_;
  budget_.kv_blocks = kv_num_blocks_;
  budget_.block_tables = table_entries * 4;
  budget_.workspace = workspace_bytes_ + cublas_ws_bytes;
  budget_.sampling = 0;  // sampling state lives in step_meta (arena)
  dev_.synchronize();
}

int Model::graphs_captured() const {
  int n = 0;
  for (const auto& g : graphs_) n += g.exec != nullptr;
  return n;
}

Model::~Model() {
  dev_.synchronize();
  for (auto& g : graphs_)
    if (g.exec) CUDA_CHECK_LOG(cudaGraphExecDestroy(g.exec));
  dev_.free(kv_pool_, "kv_pool", "KV blocks");
  dev_.free(block_tables_, "kv_pool", "block tables");
  dev_.free(workspace_, "workspace", "kernel workspace");
  dev_.free(cublas_ws_, "cublas_workspace", "cuBLAS workspace");
  dev_.free_pinned(meta_host_);
}

template <class Args>
void Model::op(const char* name, int layer, const Args& args, std::initializer_list<int> reads,
               std::initializer_list<int> writes) {
  constexpr Family f = kernels::FamilyOf<Args>::value;
  const kernels::KernelEntry& e = kernels_.entry(f);
  kernels::LaunchCtx ctx = dev_.ctx(workspace_, workspace_bytes_);
#if LANTERN_INSTRUMENTATION
  if (obs_ || recording_) {
    OpInfo info;
    info.graph = graph_mode_;
    info.op = name;
    info.layer = layer;
    info.kernel = &e;
    info.cost = e.cost(&args);
    info.reads = reads.begin();
    info.num_reads = static_cast<int>(reads.size());
    info.writes = writes.begin();
    info.num_writes = static_cast<int>(writes.size());
    if (recording_) {
      RecordedOp rec{info, std::vector<ViewId>(reads), std::vector<ViewId>(writes)};
      recording_->push_back(std::move(rec));
    }
    if (obs_) obs_->on_op_begin(info);
    kernels::launch(e, args, ctx);
    if (recording_ && obs_) recording_->back().leaf = capture_leaf();
    if (obs_) obs_->on_op_end(info);
    return;
  }
#endif
  kernels::launch(e, args, ctx);
}

void Model::attention_mixed(int layer, const kernels::AttentionPrefillArgs& prefill,
                            const kernels::AttentionDecodeArgs& decode, std::initializer_list<int> reads,
                            std::initializer_list<int> writes) {
  const kernels::KernelEntry& pe = kernels_.entry(Family::attention_prefill);
  const kernels::KernelEntry& de = kernels_.entry(Family::attention_decode);
  kernels::LaunchCtx ctx = dev_.ctx(workspace_, workspace_bytes_);
#if LANTERN_INSTRUMENTATION
  if (obs_) {
    OpInfo info;
    info.graph = graph_mode_;
    info.op = "attention";
    info.layer = layer;
    info.kernel = &pe;
    kernels::Cost cp = pe.cost(&prefill), cd = de.cost(&decode);
    info.cost = kernels::Cost{cp.bytes + cd.bytes, cp.flops + cd.flops};
    info.reads = reads.begin();
    info.num_reads = static_cast<int>(reads.size());
    info.writes = writes.begin();
    info.num_writes = static_cast<int>(writes.size());
    obs_->on_op_begin(info);
    kernels::launch(pe, prefill, ctx);
    kernels::launch(de, decode, ctx);
    obs_->on_op_end(info);
    return;
  }
#endif
  kernels::launch(pe, prefill, ctx);
  kernels::launch(de, decode, ctx);
}

cudaGraphNode_t Model::capture_leaf() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // without it: cudaErrorLossyQuery on
  size_t num_deps = 0;                        // programmatic edges (cuBLAS launches)
  if (cudaStreamGetCaptureInfo(dev_.stream(), &status, nullptr, nullptr, &deps, &edges, &num_deps) !=
      cudaSuccess) {
    (void)cudaGetLastError();  // not the engine's error: counts stay unknown
    return nullptr;
  }
  return status == cudaStreamCaptureStatusActive && num_deps == 1 ? deps[0] : nullptr;
}

void Model::count_graph_kernels(cudaGraph_t graph, std::vector<RecordedOp>& ops) {
  // One stream's capture is a chain: walk it from its root, then give each
  // op the kernel nodes after the previous op's last node, up to its own.
  // Any failure leaves the counts unknown (-1), and no CUDA error behind.
  auto give_up = [] { (void)cudaGetLastError(); };
  std::vector<cudaGraphNode_t> chain;
  cudaGraphNode_t next[2] = {nullptr, nullptr};
  cudaGraphEdgeData edges[2];  // programmatic edges (cuBLAS) need their data read
  size_t n = 2;
  if (cudaGraphGetRootNodes(graph, next, &n) != cudaSuccess || n != 1) return give_up();
  while (n == 1) {
    chain.push_back(next[0]);
    n = 2;
    if (cudaGraphNodeGetDependentNodes(chain.back(), next, edges, &n) != cudaSuccess || n > 1)
      return give_up();
  }
  std::unordered_map<cudaGraphNode_t, size_t> position;
  for (size_t i = 0; i < chain.size(); ++i) position[chain[i]] = i;
  std::vector<int> kernels_before(chain.size() + 1, 0);  // kernel nodes in chain[0, i)
  for (size_t i = 0; i < chain.size(); ++i) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(chain[i], &type) != cudaSuccess) return give_up();
    kernels_before[i + 1] = kernels_before[i] + (type == cudaGraphNodeTypeKernel);
  }
  size_t done = 0;  // chain nodes owned by the ops so far
  for (RecordedOp& op : ops) {
    // No single leaf after the op, or one outside the chain or before the
    // previous op's: the ops do not map onto the chain; no counts at all.
    auto it = op.leaf ? position.find(op.leaf) : position.end();
    if (it == position.end() || it->second + 1 < done) {
      for (RecordedOp& o : ops) o.info.graph_kernels = -1;
      return;
    }
    const size_t end = it->second + 1;
    op.info.graph_kernels = kernels_before[end] - kernels_before[done];
    done = end;
  }
}

void Model::apply_table_updates(const std::vector<KvTableUpdate>& updates) {
  if (updates.empty()) return;
  if (!dev_.is_cuda()) {
    for (const auto& u : updates) block_tables_[u.index] = u.block;
    return;
  }
  MetaLayout meta(limits_.max_batch_tokens, limits_.logits_rows, max_table_updates_);
  size_t done = 0;
  char* host = static_cast<char*>(meta_host_);
  char* devm = static_cast<char*>(arena_.ptr(v_->meta));
  while (done < updates.size()) {
    size_t n = std::min<size_t>(updates.size() - done, max_table_updates_);
    std::memcpy(host + meta.updates, updates.data() + done, n * sizeof(KvTableUpdate));
    dev_.copy_h2d(devm + meta.updates, host + meta.updates, n * sizeof(KvTableUpdate));
    // Not a registry kernel, but an op all the same: its kernel is attributed
    // (step, op "kv_table_update") like every other launch.
    OpInfo info;
    info.op = "kv_table_update";
    info.cost = kernels::Cost{static_cast<double>(n * (sizeof(KvTableUpdate) + sizeof(int32_t))), 0};
    LANTERN_OBSERVE(obs_, on_op_begin(info));
    launch_scatter_i32(block_tables_, reinterpret_cast<const int32_t*>(devm + meta.updates),
                       static_cast<int>(n), dev_.stream());
    LANTERN_OBSERVE(obs_, on_op_end(info));
    done += n;
    if (done < updates.size()) dev_.synchronize();  // the staging area is reused
  }
}

namespace {
bool samples(const StepInput& in) {
  return std::any_of(in.temperature.begin(), in.temperature.end(), [](float t) { return t > 0; });
}
}  // namespace

int Model::graph_slot(const StepInput& in, bool sampling) const {
  const int n = in.num_rows();
  bool graph = graphs_enabled_ && in.num_fresh_rows() == 0 &&
               static_cast<int>(in.logit_rows.size()) == n && !in.copy_logits &&
               2 * n + 1 < static_cast<int>(graphs_.size());
  return graph ? 2 * n + (sampling ? 1 : 0) : -1;
}

bool Model::will_capture(const StepInput& in) const {
  const int slot = graph_slot(in, samples(in));
  return slot >= 0 && !graphs_[slot].exec;
}

StepOutput Model::run(const StepInput& in, const StepInfo& info) {
  const int n = in.num_rows();
  const int r = static_cast<int>(in.logit_rows.size());
  const int nf = in.num_fresh_rows();
  const int num_fresh = static_cast<int>(in.fresh_starts.size()) - 1;
  LANTERN_ASSERT(n > 0 && n <= limits_.max_batch_tokens, "step rows %d outside (0, %d]", n,
                 limits_.max_batch_tokens);
  LANTERN_ASSERT(r <= limits_.logits_rows, "logit rows %d > %d", r, limits_.logits_rows);

  apply_table_updates(in.table_updates);

  // ---- step metadata: fill the pinned mirror, one copy to the device ----
  MetaLayout meta(limits_.max_batch_tokens, limits_.logits_rows, max_table_updates_);
  char* host = static_cast<char*>(meta_host_);
  char* devm = static_cast<char*>(arena_.ptr(v_->meta));
  auto put = [host](size_t off, const void* src, size_t bytes) { std::memcpy(host + off, src, bytes); };
  put(meta.ids, in.tokens.data(), 4 * n);
  put(meta.positions, in.positions.data(), 4 * n);
  put(meta.slots, in.slots.data(), 4 * n);
  put(meta.fresh_starts, in.fresh_starts.data(), 4 * in.fresh_starts.size());
  {
    int32_t* ctx = reinterpret_cast<int32_t*>(host + meta.ctx_lens);
    for (int i = 0; i < n; ++i) ctx[i] = in.positions[i] + 1;
  }
  put(meta.logit_rows, in.logit_rows.data(), 4 * r);
  put(meta.top_k, in.top_k.data(), 4 * r);
  put(meta.gen_index, in.gen_index.data(), 4 * r);
  put(meta.temperature, in.temperature.data(), 4 * r);
  put(meta.top_p, in.top_p.data(), 4 * r);
  put(meta.seeds, in.seeds.data(), 8 * r);
  if (dev_.is_cuda()) {
    dev_.copy_h2d(devm, host, meta.out_tokens);  // ids .. gen_index
    dev_.copy_h2d(devm + meta.temperature, host + meta.temperature, meta.updates - meta.temperature);
  } else {
    std::memcpy(devm, host, meta.updates);
  }
  ForwardShape shape;
  shape.n = n;
  shape.r = r;
  shape.nf = nf;
  shape.num_fresh = num_fresh;
  shape.max_fresh_len = in.max_fresh_len;
  shape.host_fresh_starts = in.fresh_starts.data();
  shape.sampling = samples(in);

  const int slot = graph_slot(in, shape.sampling);
  if (slot >= 0) {
    Graph& g = graphs_[slot];
    if (!g.exec) {
      // Capture this decode batch size once; kernels read everything that
      // changes per step (ids, positions, slots, lengths) from step_meta.
      cudaGraph_t captured = nullptr;
      g.ops.clear();  // a capture that failed before may have left ops behind
      recording_ = &g.ops;
      graph_mode_ = OpInfo::kCapture;
      CUDA_CHECK(cudaStreamBeginCapture(dev_.stream(), cudaStreamCaptureModeThreadLocal));
      try {
        forward(shape);
      } catch (...) {
        cudaStreamEndCapture(dev_.stream(), &captured);
        if (captured) CUDA_CHECK_LOG(cudaGraphDestroy(captured));
        recording_ = nullptr;
        graph_mode_ = OpInfo::kEager;
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(dev_.stream(), &captured));
      recording_ = nullptr;
      graph_mode_ = OpInfo::kEager;
      if (obs_) count_graph_kernels(captured, g.ops);
      CUDA_CHECK(cudaGraphInstantiate(&g.exec, captured, 0));
      CUDA_CHECK(cudaGraphDestroy(captured));
      // The ops as every replay reports them (kReplay, view lists in g.ops).
      g.replay.clear();
      for (const RecordedOp& op : g.ops) {
        OpInfo info = op.info;
        info.graph = OpInfo::kReplay;
        info.reads = op.reads.data();
        info.writes = op.writes.data();
        g.replay.push_back(info);
      }
    }
    CUDA_CHECK(cudaGraphLaunch(g.exec, dev_.stream()));
#if LANTERN_INSTRUMENTATION
    if (obs_) {
      obs_->on_graph_replay(GraphReplay{static_cast<int>(&g - graphs_.data()), g.replay.data(),
                                        static_cast<int>(g.replay.size())});
    }
#endif
  } else {
    forward(shape);
  }

  StepOutput out;
  if (r == 0) {
    dev_.synchronize();
    return out;
  }
  out.tokens.resize(r);
  dev_.copy_d2h(out.tokens.data(), devm + meta.out_tokens, 4 * r);
  if (in.copy_logits) {
    out.logits.resize(static_cast<size_t>(r) * cfg_.vocab_size);
    dev_.copy_d2h(out.logits.data(), arena_.ptr(v_->logits), out.logits.size() * 4);
  }
  dev_.synchronize();
  (void)info;
  return out;
}

void Model::forward(const ForwardShape& s) {
  const int n = s.n, r = s.r, nf = s.nf, num_fresh = s.num_fresh;
  const int H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const size_t a = act_bytes_;
  MetaLayout meta(limits_.max_batch_tokens, limits_.logits_rows, max_table_updates_);
  char* devm = static_cast<char*>(arena_.ptr(v_->meta));
  auto M = [devm](size_t off) { return reinterpret_cast<int32_t*>(devm + off); };
  const int32_t* d_ids = M(meta.ids);
  const int32_t* d_pos = M(meta.positions);
  const int32_t* d_slots = M(meta.slots);
  const int32_t* d_fresh = M(meta.fresh_starts);
  const int32_t* d_ctx = M(meta.ctx_lens);

  auto P = [this](ViewId v) { return arena_.ptr(v); };
  auto& V = *v_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
  const size_t block_table_layer = static_cast<size_t>(limits_.max_seqs) * max_blocks_per_seq_;

  op("embed", -1, kernels::EmbeddingArgs{d_ids, w_.embed, P(V.x), n, H, cfg_.vocab_size}, {}, {V.x});

  for (int l = 0; l < cfg_.num_layers; ++l) {
    const LayerWeights& lw = w_.layers[l];
    LANTERN_OBSERVE(obs_, on_layer_begin(l));
    op("attn_norm", l, kernels::RmsnormArgs{P(V.x), lw.attn_norm, P(V.xn), nullptr, n, H, cfg_.rms_norm_eps},
       {V.x}, {V.xn});
    op("q_proj", l, kernels::GemmArgs{P(V.xn), lw.wq, P(V.q), n, cfg_.q_dim(), H}, {V.xn}, {V.q});
    op("k_proj", l, kernels::GemmArgs{P(V.xn), lw.wk, P(V.k), n, cfg_.kv_dim(), H}, {V.xn}, {V.k});
    op("v_proj", l, kernels::GemmArgs{P(V.xn), lw.wv, P(V.v), n, cfg_.kv_dim(), H}, {V.xn}, {V.v});
    op("rope", l,
       kernels::RopeArgs{P(V.q), P(V.k), d_pos, static_cast<const float*>(P(V.inv_freq)), n,
                         cfg_.num_q_heads, cfg_.num_kv_heads, cfg_.head_dim, cfg_.q_dim(), cfg_.kv_dim()},
       {V.q, V.k}, {V.q, V.k});
    kernels::KvCacheRef cache{kv_pool_, block_tables_ + l * block_table_layer, limits_.kv_block_size,
                              max_blocks_per_seq_, cfg_.num_kv_heads, cfg_.head_dim};
    op("kv_write", l, kernels::KvWriteArgs{P(V.k), P(V.v), d_pos, d_slots, cache, n, cfg_.kv_dim()},
       {V.k, V.v}, {});
    kernels::AttentionPrefillArgs prefill_args{P(V.q), P(V.k), P(V.v), P(V.attn_out),
                                               dev_.is_cuda() ? d_fresh : s.host_fresh_starts,
                                               s.host_fresh_starts, num_fresh, s.max_fresh_len,
                                               cfg_.num_q_heads, cfg_.num_kv_heads, cfg_.head_dim,
                                               cfg_.q_dim(), cfg_.kv_dim(), scale};
    kernels::AttentionDecodeArgs decode_args{static_cast<char*>(P(V.q)) + nf * cfg_.q_dim() * a,
                                             static_cast<char*>(P(V.attn_out)) + nf * cfg_.q_dim() * a,
                                             d_slots + nf, d_ctx + nf, cache, n - nf,
                                             limits_.max_context, cfg_.num_q_heads, cfg_.q_dim(), scale};
    if (nf > 0 && nf < n) {
      // Mixed step: fresh rows and paged rows read disjoint rows of q and
      // write the same rows of attn_out, which aliases q. At view granularity
      // two ops would look like "prefill overwrote q that decode still reads",
      // so both launches form one "attention" op (reads q, k, v; writes attn_out).
      attention_mixed(l, prefill_args, decode_args, {V.q, V.k, V.v}, {V.attn_out});
    } else if (nf > 0) {
      op("attention_prefill", l, prefill_args, {V.q, V.k, V.v}, {V.attn_out});
    } else {
      op("attention_decode", l, decode_args, {V.q}, {V.attn_out});
    }
    op("o_proj", l, kernels::GemmArgs{P(V.attn_out), lw.wo, P(V.o_out), n, H, cfg_.q_dim()},
       {V.attn_out}, {V.o_out});
    op("attn_residual", l, kernels::ResidualArgs{P(V.x), P(V.o_out), static_cast<size_t>(n) * H},
       {V.x, V.o_out}, {V.x});
    op("mlp_norm", l, kernels::RmsnormArgs{P(V.x), lw.mlp_norm, P(V.xn), nullptr, n, H, cfg_.rms_norm_eps},
       {V.x}, {V.xn});
    op("gate_proj", l, kernels::GemmArgs{P(V.xn), lw.w_gate, P(V.gate), n, I, H}, {V.xn}, {V.gate});
    op("up_proj", l, kernels::GemmArgs{P(V.xn), lw.w_up, P(V.up), n, I, H}, {V.xn}, {V.up});
    op("swiglu", l, kernels::SwigluArgs{P(V.gate), P(V.up), P(V.mlp_act), n, I}, {V.gate, V.up},
       {V.mlp_act});
    op("down_proj", l, kernels::GemmArgs{P(V.mlp_act), lw.w_down, P(V.mlp_down), n, H, I},
       {V.mlp_act}, {V.mlp_down});
    op("mlp_residual", l, kernels::ResidualArgs{P(V.x), P(V.mlp_down), static_cast<size_t>(n) * H},
       {V.x, V.mlp_down}, {V.x});
    LANTERN_OBSERVE(obs_, on_layer_end(l));
  }

  if (r == 0) return;
  op("final_norm", -1,
     kernels::RmsnormArgs{P(V.x), w_.final_norm, P(V.logits_in), M(meta.logit_rows), r, H, cfg_.rms_norm_eps},
     {V.x}, {V.logits_in});
  kernels::GemmArgs head{P(V.logits_in), w_.lm_head, P(V.logits), r, cfg_.vocab_size, H};
  head.c_f32 = true;
  op("lm_head", -1, head, {V.logits_in}, {V.logits});
  int32_t* d_out = M(meta.out_tokens);
  const float* logits = static_cast<const float*>(P(V.logits));
  if (s.sampling) {
    op("sample", -1,
       kernels::SampleArgs{logits, reinterpret_cast<const float*>(devm + meta.temperature), M(meta.top_k),
                           reinterpret_cast<const float*>(devm + meta.top_p),
                           reinterpret_cast<const uint64_t*>(devm + meta.seeds), M(meta.gen_index), d_out,
                           r, cfg_.vocab_size},
       {V.logits}, {});
  } else {
    op("argmax", -1, kernels::ArgmaxArgs{logits, d_out, r, cfg_.vocab_size}, {V.logits}, {});
  }
}

}  // namespace lantern
