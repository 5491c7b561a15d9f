// Model: start-up (arena, workspace, KV pool, budget, graphs) and one step
// (table updates, metadata upload, forward or graph replay, results). The
// forward pass is in model_forward.cpp, CUDA graphs in model_graphs.cpp.
#include "engine/model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kernels/base/cuda_check.h"
#include "kernels/base/env_knob.h"
#include "kernels/base/errors.h"
#include "engine/device_kernels.h"

namespace lantern {

using kernels::Family;

Model::Model(const ModelConfig& cfg, const Weights& weights, Device& device,
             const EngineLimits& limits, const kernels::KernelSet& kernels, Observer* observer,
             bool use_cuda_graphs, bool fused, Communicator* comm, bool prefill_graphs, TpLmHead lm_head,
             bool prune_last_layer, int fold_max_context, bool fuse_final)
    : cfg_(cfg), w_(weights), dev_(device), limits_(limits), kernels_(kernels), obs_(observer),
      comm_(comm), lm_head_(lm_head), prefill_requested_(prefill_graphs), prune_last_(prune_last_layer),
      fold_max_context_(fold_max_context), fuse_final_(fuse_final) {
  LANTERN_CHECK(lm_head != TpLmHead::split || comm, "a split LM head needs a tensor-parallel group");
  fuse_ = fused && weights.fusable();
  // Graphs replay decode steps; the seed's host argmax (argmax variant 1)
  // synchronises with the host inside the step and cannot be captured.
  graphs_enabled_ = use_cuda_graphs && dev_.is_cuda() &&
                    kernels_.entry(Family::argmax).variant != 1;
  act_bytes_ = dev_.is_cuda() ? 2 : 4;
  pad_slot_ = limits.max_seqs;
  declare_arena();
  allocate_workspace();
  allocate_kv();
  fill_budget();
  prepare_kernels();
  if (graphs_enabled_) {
    capture_graphs();
    if (prefill_requested_ && can_capture_prefill()) capture_prefill_graphs();
  }
  dev_.synchronize();
}

Model::~Model() {
  dev_.synchronize();
  destroy_graphs();
  dev_.free(kv_pool_, "kv_pool", "KV blocks");
  dev_.free(block_tables_, "kv_pool", "block tables");
  dev_.free(workspace_, "workspace", "kernel workspace");
  dev_.free(cublas_ws_, "cublas_workspace", "cuBLAS workspace");
  for (int b = 0; b < 2; ++b) {
    dev_.free_pinned(meta_host_bufs_[b]);
    dev_.free_pinned(tokens_host_[b]);
    if (tokens_ready_[b]) cudaEventDestroy(tokens_ready_[b]);
    if (step_t0_[b]) cudaEventDestroy(step_t0_[b]);
    if (step_t1_[b]) cudaEventDestroy(step_t1_[b]);
  }
}

// ---- activation arena (the seed's buffers, sized from the limits; op_table.h)
void Model::declare_arena() {
  const int T = limits_.max_batch_tokens, R = limits_.logits_rows;
  max_table_updates_ = (T / limits_.kv_block_size + 2 * limits_.max_seqs) * cfg_.num_layers;
  meta_ = MetaLayout(T, R, max_table_updates_);
  const int lm_head_parts = lm_head_ == TpLmHead::split ? comm_->world() : 0;
  v_ = declare_activations(arena_, activation_layout(cfg_, T, R, act_bytes_, meta_.bytes, fuse_, lm_head_parts));
  // A proj_residual_norm variant that defers the norm (proj_residual_norm.4)
  // gets the deferred-norm table: the GEMMs after it normalise x themselves.
  const bool defer_norm = v_.fused() && comm_ == nullptr &&
                          kernels_.entry(Family::proj_residual_norm).defers_norm;
  op_table_ = std::make_unique<OpTable>(cfg_.num_layers, v_, comm_ != nullptr, defer_norm);
  prune_last_ = prune_last_ && op_table_->can_prune();
  if (!op_table_->can_fold()) fold_max_context_ = 0, fuse_final_ = false;  // the same conditions
  arena_.allocate(dev_.backend());
  AllocEvent e{"arena", "activation arena", reinterpret_cast<uint64_t>(arena_.base()),
               arena_.total_bytes(), dev_.backend(), false};
  LANTERN_OBSERVE(obs_, on_alloc(e));
  LANTERN_OBSERVE(obs_, on_arena(arena_));
  std::vector<float> inv_freq = rope_inv_freq(cfg_);
  dev_.copy_h2d(arena_.ptr(v_.inv_freq), inv_freq.data(), inv_freq.size() * 4);
  for (int b = 0; b < 2; ++b) {
    meta_host_bufs_[b] = dev_.alloc_pinned(meta_.bytes);
    std::memset(meta_host_bufs_[b], 0, meta_.bytes);
    tokens_host_[b] = static_cast<int32_t*>(dev_.alloc_pinned(4 * std::max(1, R)));
    if (dev_.is_cuda()) CUDA_CHECK(cudaEventCreateWithFlags(&tokens_ready_[b], cudaEventDisableTiming));
  }
  step_gpu_log_ = dev_.is_cuda() && kernels::env_int("LANTERN_STEP_GPU_LOG") != 0;
  for (int b = 0; b < 2 && step_gpu_log_; ++b) {
    CUDA_CHECK(cudaEventCreate(&step_t0_[b]));
    CUDA_CHECK(cudaEventCreate(&step_t1_[b]));
  }
  meta_host_ = meta_host_bufs_[0];
  dev_.synchronize();  // inv_freq is a local
}

// ---- shared workspace: the largest any chosen variant asks for
void Model::allocate_workspace() {
  kernels::WorkspaceShape ws;
  ws.max_batch_tokens = limits_.max_batch_tokens;
  ws.max_seqs = limits_.max_seqs;
  ws.max_seq_len = limits_.max_batch_tokens;
  ws.max_context = limits_.max_context;
  ws.n_q_heads = cfg_.num_q_heads;
  ws.n_kv_heads = cfg_.num_kv_heads;
  ws.head_dim = cfg_.head_dim;
  ws.vocab = cfg_.vocab_size;
  for (int f = 0; f < kernels::kNumFamilies; ++f) {
    const auto& e = kernels_.entry(static_cast<Family>(f));
    if (e.workspace_bytes) workspace_bytes_ = std::max(workspace_bytes_, e.workspace_bytes(ws));
  }
  if (workspace_bytes_) workspace_ = dev_.alloc(workspace_bytes_, "workspace", "kernel workspace");
  if (dev_.is_cuda()) {
    const size_t bytes = 32u << 20;  // fixed, so cuBLAS never allocates (graph capture)
    cublas_ws_ = dev_.alloc(bytes, "cublas_workspace", "cuBLAS workspace");
    dev_.set_cublas_workspace(cublas_ws_, bytes);
    budget_.workspace = bytes;
  }
  budget_.workspace += workspace_bytes_;
}

size_t Model::block_bytes() const {
  return 2ull * limits_.kv_block_size * cfg_.num_kv_heads * cfg_.head_dim * act_bytes_;
}

// [layers][max_seqs + 1][max_blocks_per_seq]: one row per slot plus the scratch slot.
size_t Model::table_entries() const {
  return static_cast<size_t>(cfg_.num_layers) * (limits_.max_seqs + 1) * max_blocks_per_seq_;
}

// ---- KV pool and block tables
void Model::allocate_kv() {
  max_blocks_per_seq_ = (limits_.max_context + limits_.kv_block_size - 1) / limits_.kv_block_size;
  const int min_blocks = cfg_.num_layers * max_blocks_per_seq_;
  if (limits_.kv_num_blocks > 0) {
    kv_num_blocks_ = limits_.kv_num_blocks;
  } else if (dev_.is_cuda()) {
    double avail = static_cast<double>(dev_.free_memory()) * limits_.kv_memory_fraction;
    kv_num_blocks_ = static_cast<int>(std::min<double>(avail / block_bytes(), 1 << 30));
  } else {
    // CPU: room for every slot at full context, capped at 2 GiB of host memory.
    size_t want = static_cast<size_t>(limits_.max_seqs) * min_blocks;
    size_t cap = std::max<size_t>(min_blocks, (2ull << 30) / block_bytes());
    kv_num_blocks_ = static_cast<int>(std::min(want, cap));
  }
  LANTERN_CHECK(kv_num_blocks_ >= min_blocks,
                "the KV pool has %d blocks but one sequence of max_context=%d tokens needs %d "
                "(%d layers x %d blocks of %d tokens): raise kv_num_blocks / kv_memory_fraction or "
                "lower max_context",
                kv_num_blocks_, limits_.max_context, min_blocks, cfg_.num_layers, max_blocks_per_seq_,
                limits_.kv_block_size);
  // Graph pad rows write their K/V into one scratch block past the pool's
  // usable blocks (block id kv_num_blocks_), mapped as the scratch slot's
  // first block in every layer; every other entry starts unmapped (-1).
  budget_.kv_scratch_blocks = graphs_enabled_ ? 1 : 0;
  kv_pool_ = dev_.alloc(block_bytes() * (kv_num_blocks_ + budget_.kv_scratch_blocks), "kv_pool", "KV blocks");
  std::vector<int32_t> tables(table_entries(), -1);
  if (graphs_enabled_)
    for (int l = 0; l < cfg_.num_layers; ++l)
      tables[(static_cast<size_t>(l) * (limits_.max_seqs + 1) + pad_slot_) * max_blocks_per_seq_] = kv_num_blocks_;
  block_tables_ = static_cast<int32_t*>(dev_.alloc(tables.size() * 4, "kv_pool", "block tables"));
  dev_.copy_h2d(block_tables_, tables.data(), tables.size() * 4);
  dev_.synchronize();  // tables is a local
}

void Model::fill_budget() {
  budget_.weights = w_.bytes();
  budget_.arena = arena_.total_bytes();
  budget_.kv_pool = block_bytes() * (kv_num_blocks_ + budget_.kv_scratch_blocks);
  budget_.kv_blocks = kv_num_blocks_;
  budget_.block_tables = table_entries() * 4;
}

// ---- one step
Model::ForwardShape Model::shape_of(const StepInput& in) {
  ForwardShape s;
  s.n = in.num_rows();
  s.r = static_cast<int>(in.logit_rows.size());
  s.nf = in.num_fresh_rows();
  s.num_fresh = static_cast<int>(in.fresh_starts.size()) - 1;
  s.max_fresh_len = in.max_fresh_len;
  s.host_fresh_starts = in.fresh_starts.data();
  s.kind.attention = s.nf == 0 ? StepKind::decode : (s.nf == s.n ? StepKind::prefill : StepKind::mixed);
  auto distinct = [](std::vector<int32_t> slots) {
    std::sort(slots.begin(), slots.end());
    return std::adjacent_find(slots.begin(), slots.end()) == slots.end();
  };
  s.one_row_per_seq =
      distinct(std::vector<int32_t>(in.slots.begin() + std::min<size_t>(s.nf, in.slots.size()), in.slots.end()));
  if (s.r < s.n) {  // only a step that may prune (choose_pruning) runs attention_head
    std::vector<int32_t> heads;
    for (int32_t t : in.logit_rows)
      if (t >= 0 && t < s.n && static_cast<size_t>(t) < in.slots.size()) heads.push_back(in.slots[t]);
    s.head_one_row_per_seq = distinct(std::move(heads));
  }
  for (size_t i = std::min<size_t>(s.nf, in.positions.size()); i < in.positions.size(); ++i)
    s.max_context = std::max(s.max_context, in.positions[i] + 1);
  s.logits_in_order = s.r == s.n && s.r > 0;
  for (int i = 0; i < s.r && s.logits_in_order; ++i) s.logits_in_order = in.logit_rows[i] == i;
  const bool sampling =
      std::any_of(in.temperature.begin(), in.temperature.end(), [](float t) { return t > 0; });
  s.kind.head = s.r == 0 ? StepKind::none : (sampling ? StepKind::sample : StepKind::argmax);
  return s;
}

void Model::choose_pruning(ForwardShape& s) const {
  s.kind.prune = prune_last_ && s.r < s.n;
}

void Model::choose_final(ForwardShape& s) const {
  s.kind.fuse_final = fuse_final_ && !s.kind.prune && s.logits_in_order;
}

void Model::choose_folding(ForwardShape& s) const {
  s.kind.fold = s.kind.attention == StepKind::decode && s.max_context > 0 && s.max_context <= fold_max_context_;
}

StepOutput Model::run(const StepInput& in) {
  launch(in);
  return wait();
}

void Model::launch(const StepInput& in) {
  ForwardShape s = shape_of(in);
  choose_pruning(s);
  choose_folding(s);
  choose_final(s);
  LANTERN_ASSERT(s.n > 0 && s.n <= limits_.max_batch_tokens, "step rows %d outside (0, %d]", s.n,
                 limits_.max_batch_tokens);
  LANTERN_ASSERT(s.r <= limits_.logits_rows, "logit rows %d > %d", s.r, limits_.logits_rows);
  LANTERN_ASSERT(inflight_.size() < 2, "Model::launch with two steps in flight: wait for one first");
  LANTERN_ASSERT(!in.copy_logits || inflight_.empty(), "a step that copies logits must be the only one in flight");
  LANTERN_ASSERT(in.token_src.empty() || static_cast<int>(in.token_src.size()) == s.n,
                 "token_src has %zu entries for %d rows", in.token_src.size(), s.n);
  // The other buffer may still feed the step in flight; this one's last user has been waited for.
  const int buf = next_buf_;
  next_buf_ ^= 1;
  meta_host_ = meta_host_bufs_[buf];
  if (step_gpu_log_) CUDA_CHECK(cudaEventRecord(step_t0_[buf], dev_.stream()));
  apply_table_updates(in.table_updates);
  int graph = graph_index(s);
  if (graph < 0) graph = prefill_graph_index(s);
  upload_meta(in, graph >= 0 ? graphs_[graph].shape : MetaPad{s.n, s.r, s.num_fresh});
  if (!in.token_src.empty()) gather_tokens(s.n);
  if (graph >= 0)
    replay(graph);
  else
    forward(s);
  // Tokens of the real logit rows back to the (pinned) host buffer.
  if (s.r > 0) dev_.copy_d2h(tokens_host_[buf], static_cast<char*>(arena_.ptr(v_.meta)) + meta_.out_tokens, 4 * s.r);
  if (dev_.is_cuda()) CUDA_CHECK(cudaEventRecord(tokens_ready_[buf], dev_.stream()));
  if (step_gpu_log_) CUDA_CHECK(cudaEventRecord(step_t1_[buf], dev_.stream()));
  inflight_.push_back(InFlight{buf, s.r, s.n, in.copy_logits});
}

StepOutput Model::wait() {
  LANTERN_ASSERT(!inflight_.empty(), "Model::wait with no step in flight");
  const InFlight f = inflight_.front();
  inflight_.pop_front();
  StepOutput out;
  if (f.copy_logits && f.r > 0) {  // the only step in flight (launch): the stream is this step's
    out.logits.resize(static_cast<size_t>(f.r) * cfg_.vocab_size);
    dev_.copy_d2h(out.logits.data(), arena_.ptr(v_.logits), out.logits.size() * 4);
  }
  if (dev_.is_cuda()) {
    if (f.copy_logits)
      dev_.synchronize();
    else
      CUDA_CHECK(cudaEventSynchronize(tokens_ready_[f.buf]));
  }
  if (step_gpu_log_) {
    float ms = 0;
    CUDA_CHECK(cudaEventSynchronize(step_t1_[f.buf]));
    CUDA_CHECK(cudaEventElapsedTime(&ms, step_t0_[f.buf], step_t1_[f.buf]));
    const double unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::fprintf(stderr, "step gpu: %d rows, %d logit rows, %.3f ms from the first enqueued work to the tokens (at %.3f)\n",
                 f.n, f.r, ms, unix_s);
  }
  out.tokens.assign(tokens_host_[f.buf], tokens_host_[f.buf] + f.r);
  return out;
}

// Step metadata: fill the pinned mirror, one copy to the device (the
// out_tokens section in between is the kernels' to write).
void Model::upload_meta(const StepInput& in, const MetaPad& pad) {
  char* host = static_cast<char*>(meta_host_);
  char* devm = static_cast<char*>(arena_.ptr(v_.meta));
  fill_step_meta(meta_, host, in, pad, pad_slot_);
  if (dev_.is_cuda()) {
    dev_.copy_h2d(devm, host, meta_.out_tokens);  // ids .. gen_index
    dev_.copy_h2d(devm + meta_.temperature, host + meta_.temperature, meta_.updates - meta_.temperature);
  } else {
    // out_tokens stays: the previous step's tokens feed gather_tokens.
    std::memcpy(devm, host, meta_.out_tokens);
    std::memcpy(devm + meta_.temperature, host + meta_.temperature, meta_.updates - meta_.temperature);
  }
}

// Overlapped decode: each row's token is the previous step's token of its
// logit row, still on the device. On cuda an op like any other launch
// ("token_gather", as kv_table_update); on the cpu host bookkeeping.
void Model::gather_tokens(int n) {
  char* devm = static_cast<char*>(arena_.ptr(v_.meta));
  auto* ids = reinterpret_cast<int32_t*>(devm + meta_.ids);
  const auto* prev = reinterpret_cast<const int32_t*>(devm + meta_.out_tokens);
  const auto* src = reinterpret_cast<const int32_t*>(devm + meta_.token_src);
  if (!dev_.is_cuda()) {
    for (int i = 0; i < n; ++i)
      if (src[i] >= 0) ids[i] = prev[src[i]];
    return;
  }
  OpInfo info;
  info.op = "token_gather";
  info.cost = kernels::Cost{static_cast<double>(n * 3 * sizeof(int32_t)), 0};
  LANTERN_OBSERVE(obs_, on_op_begin(info));
  launch_gather_i32(ids, prev, src, n, dev_.stream());
  LANTERN_OBSERVE(obs_, on_op_end(info));
}

// New block-table entries, scattered on the device. The KV manager numbers
// entries [layers][max_seqs][blocks]; the device table has the scratch slot
// after each layer's max_seqs slots, so indices move by one row per layer.
void Model::apply_table_updates(const std::vector<KvTableUpdate>& updates) {
  if (updates.empty()) return;
  const int32_t layer_entries = limits_.max_seqs * max_blocks_per_seq_;
  auto device_index = [&](int32_t i) { return i + i / layer_entries * max_blocks_per_seq_; };
  if (!dev_.is_cuda()) {
    for (const auto& u : updates) block_tables_[device_index(u.index)] = u.block;
    return;
  }
  size_t done = 0;
  char* host = static_cast<char*>(meta_host_);
  char* devm = static_cast<char*>(arena_.ptr(v_.meta));
  auto* staged = reinterpret_cast<KvTableUpdate*>(host + meta_.updates);
  while (done < updates.size()) {
    size_t n = std::min<size_t>(updates.size() - done, max_table_updates_);
    for (size_t k = 0; k < n; ++k)
      staged[k] = KvTableUpdate{device_index(updates[done + k].index), updates[done + k].block};
    dev_.copy_h2d(devm + meta_.updates, staged, n * sizeof(KvTableUpdate));
    // Not a registry kernel, but an op all the same: its kernel is attributed
    // (step, op "kv_table_update") like every other launch.
    OpInfo info;
    info.op = "kv_table_update";
    info.cost = kernels::Cost{static_cast<double>(n * (sizeof(KvTableUpdate) + sizeof(int32_t))), 0};
    LANTERN_OBSERVE(obs_, on_op_begin(info));
    launch_scatter_i32(block_tables_, reinterpret_cast<const int32_t*>(devm + meta_.updates),
                       static_cast<int>(n), dev_.stream());
    LANTERN_OBSERVE(obs_, on_op_end(info));
    done += n;
    if (done < updates.size()) dev_.synchronize();  // the staging area is reused
  }
}

}  // namespace lantern
