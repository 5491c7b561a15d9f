// Weights: the tensor table derived from the config, and the loader that
// moves every weight byte into ONE allocation.
//
// Loader pipeline (CUDA): the tensors are read in file order in chunks of
// kChunkBytes; each chunk is read by a few threads in parallel (pread) into
// one of kStagingBuffers pinned host buffers, then copied with
// cudaMemcpyAsync on one stream to the tensors' places in the device block.
// While the copy of chunk i runs, chunk i+1 is being read into the next
// buffer; a buffer is reused only after the event recorded behind its copies
// has fired. Host memory stays at kStagingBuffers x kChunkBytes.
// CPU: the same chunks, read straight into the host block.
#include "engine/weights.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "engine/device.h"
#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "engine/safetensors.h"

namespace lantern {

namespace {

namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 64ull << 20;   // one staging buffer
constexpr size_t kReadJobBytes = 8ull << 20;  // one pread job inside a chunk
constexpr int kStagingBuffers = 3;
constexpr int kMaxReadThreads = 8;
constexpr size_t kProgressThreshold = 1'000'000'000;  // print progress for models over 1 GB

size_t align_up(size_t x) {
  return (x + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// HF names, one place. Layer tensors are "model.layers.<i>." + suffix.
struct RoleName {
  TensorRole role;
  const char* name;
};
constexpr RoleName kLayerTensors[] = {
    {TensorRole::attn_norm, "input_layernorm.weight"},
    {TensorRole::wq, "self_attn.q_proj.weight"},
    {TensorRole::wk, "self_attn.k_proj.weight"},
    {TensorRole::wv, "self_attn.v_proj.weight"},
    {TensorRole::wo, "self_attn.o_proj.weight"},
    {TensorRole::mlp_norm, "post_attention_layernorm.weight"},
    {TensorRole::w_gate, "mlp.gate_proj.weight"},
    {TensorRole::w_up, "mlp.up_proj.weight"},
    {TensorRole::w_down, "mlp.down_proj.weight"},
};

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// One contiguous file range and where its bytes go.
struct Piece {
  int file = 0;  // index into the open files
  uint64_t file_offset = 0;
  size_t bytes = 0;
  size_t dst_offset = 0;    // inside the weight block
  size_t stage_offset = 0;  // inside the chunk's staging buffer
};

struct Chunk {
  std::vector<Piece> pieces;
  size_t bytes = 0;
};

// bf16 values whose exponent is all ones (NaN or Inf). A corrupt or badly
// converted checkpoint otherwise shows up only as NaN logits much later.
size_t count_nonfinite_bf16(const char* p, size_t bytes) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    uint16_t v;
    std::memcpy(&v, p + i, 2);
    n += (v & 0x7F80) == 0x7F80;
  }
  return n;
}

// Counts per weight view, from pieces read into host memory at `host` +
// piece.stage_offset (staged) or + piece.dst_offset (in place).
void tally_nonfinite(const Chunk& c, const char* host, bool staged, const std::vector<WeightView>& views,
                     std::vector<size_t>& counts) {
  for (const auto& p : c.pieces) {
    size_t n = count_nonfinite_bf16(host + (staged ? p.stage_offset : p.dst_offset), p.bytes);
    if (!n) continue;
    auto it = std::upper_bound(views.begin(), views.end(), p.dst_offset,
                               [](size_t off, const WeightView& v) { return off < v.offset; });
    counts[static_cast<size_t>(it - views.begin()) - 1] += n;
  }
}

void warn_nonfinite(const fs::path& model_dir, const std::vector<WeightView>& views,
                    const std::vector<size_t>& counts) {
  size_t total = 0, tensors = 0;
  std::string names;
  for (size_t i = 0; i < views.size(); ++i) {
    if (!counts[i]) continue;
    total += counts[i];
    if (tensors++ < 4) names += strformat("%s%s (%zu)", names.empty() ? "" : ", ", views[i].name.c_str(), counts[i]);
  }
  if (!total) return;
  if (tensors > 4) names += strformat(", ... (%zu more tensors)", tensors - 4);
  std::fprintf(stderr, "warning: %s: %zu NaN/Inf values in the weights: %s; outputs will be garbage\n",
               model_dir.c_str(), total, names.c_str());
}

// Splits the tensors (already in file order) into chunks of at most
// kChunkBytes; a tensor larger than the space left spans chunks.
std::vector<Chunk> plan_chunks(const std::vector<Piece>& tensors) {
  std::vector<Chunk> chunks(1);
  for (Piece p : tensors) {
    while (p.bytes > 0) {
      if (chunks.back().bytes == kChunkBytes) chunks.emplace_back();
      Chunk& c = chunks.back();
      Piece part = p;
      part.bytes = std::min(p.bytes, kChunkBytes - c.bytes);
      part.stage_offset = c.bytes;
      c.pieces.push_back(part);
      c.bytes += part.bytes;
      p.file_offset += part.bytes;
      p.dst_offset += part.bytes;
      p.bytes -= part.bytes;
    }
  }
  if (chunks.back().bytes == 0) chunks.pop_back();
  return chunks;
}

void pread_exact(int fd, char* dst, size_t n, uint64_t offset, const fs::path& file) {
  while (n > 0) {
    ssize_t r = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    LANTERN_CHECK(
        r > 0, "%s: read of %zu bytes at offset %llu failed: %s", file.c_str(), n,
        static_cast<unsigned long long>(offset),
        r < 0 ? std::strerror(errno) : "unexpected end of file (truncated while loading?)");
    dst += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// Reads one chunk's pieces into `base` (+ stage_offset when `staged`, else +
// dst_offset) with up to `threads` threads. Rethrows the first read error.
void read_chunk(const Chunk& chunk, char* base, bool staged, const std::vector<Fd>& fds,
                const std::vector<fs::path>& paths, int threads) {
  struct Job {
    const Piece* piece;
    size_t skip, bytes;
  };
  std::vector<Job> jobs;
  for (const auto& p : chunk.pieces)
    for (size_t s = 0; s < p.bytes; s += kReadJobBytes)
      jobs.push_back({&p, s, std::min(kReadJobBytes, p.bytes - s)});
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < jobs.size();) {
      const Job& j = jobs[i];
      char* dst = base + (staged ? j.piece->stage_offset : j.piece->dst_offset) + j.skip;
      try {
        pread_exact(fds[j.piece->file].fd, dst, j.bytes, j.piece->file_offset + j.skip,
                    paths[j.piece->file]);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Pinned staging buffers, their events and the copy stream; the destructor
// waits for copies in flight before freeing what they read from.
struct CudaStaging {
  cudaStream_t stream = nullptr;
  cudaEvent_t done[kStagingBuffers] = {};
  void* host[kStagingBuffers] = {};
  ~CudaStaging() {
    if (stream) CUDA_CHECK_LOG(cudaStreamSynchronize(stream));
    for (int i = 0; i < kStagingBuffers; ++i) {
      if (done[i]) CUDA_CHECK_LOG(cudaEventDestroy(done[i]));
      if (host[i]) CUDA_CHECK_LOG(cudaFreeHost(host[i]));
    }
    if (stream) CUDA_CHECK_LOG(cudaStreamDestroy(stream));
  }
};

std::function<void(size_t, size_t)> stderr_progress(kernels::Backend backend) {
  const bool tty = ::isatty(STDERR_FILENO);
  auto last = std::make_shared<double>(-1.0);
  auto t0 = std::chrono::steady_clock::now();
  return [=](size_t done, size_t total) {
    double pct = 100.0 * double(done) / double(total);
    double now = seconds_since(t0);
    // A terminal gets a line redrawn every 0.2 s; a log one line per quarter.
    bool show = tty ? (now - *last >= 0.2 || done == total)
                    : (std::floor(pct / 25) > std::floor(*last / 25) || done == total);
    if (!show) return;
    *last = tty ? now : pct;
    std::fprintf(stderr, "%sloading weights to %s: %.2f / %.2f GB (%3.0f%%)%s", tty ? "\r" : "",
                 kernels::backend_name(backend), done / 1e9, total / 1e9, pct,
                 tty && done != total ? "" : "\n");
    std::fflush(stderr);
  };
}

}  // namespace

size_t TensorSpec::bytes() const {
  size_t n = safetensors_dtype_bytes(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg) {
  const int64_t hidden = cfg.hidden_size, inter = cfg.intermediate_size;
  const int64_t q_dim = cfg.q_dim(), kv_dim = cfg.kv_dim(), vocab = cfg.vocab_size;
  auto layer_shape = [&](TensorRole r) -> std::vector<int64_t> {
    switch (r) {
      case TensorRole::attn_norm:
      case TensorRole::mlp_norm:
        return {hidden};
      case TensorRole::wq:
        return {q_dim, hidden};
      case TensorRole::wk:
      case TensorRole::wv:
        return {kv_dim, hidden};
      case TensorRole::wo:
        return {hidden, q_dim};
      case TensorRole::w_gate:
      case TensorRole::w_up:
        return {inter, hidden};
      case TensorRole::w_down:
        return {hidden, inter};
      default:
        LANTERN_ASSERT(false, "not a layer tensor role %d", static_cast<int>(r));
    }
  };
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {vocab, hidden}, "BF16", TensorRole::embed, -1});
  for (int l = 0; l < cfg.num_layers; ++l)
    for (const auto& rn : kLayerTensors)
      t.push_back({"model.layers." + std::to_string(l) + "." + rn.name, layer_shape(rn.role),
                   "BF16", rn.role, l});
  t.push_back({"model.norm.weight", {hidden}, "BF16", TensorRole::final_norm, -1});
  if (!cfg.tie_word_embeddings)
    t.push_back({"lm_head.weight", {vocab, hidden}, "BF16", TensorRole::lm_head, -1});
  return t;
}

// Friend of Weights: fills its private members. load() reads as its steps:
// check the tensor table, lay the views out in one block, plan the reads,
// then fill the block on the host or through pinned staging on the GPU.
struct WeightsLoader {
  // What the two fill paths share.
  struct Reads {
    std::vector<fs::path> paths;
    std::vector<Fd> fds;
    std::vector<Chunk> chunks;
    size_t payload = 0;
    int threads = 1;
    std::function<void(size_t, size_t)> progress;
    double read_seconds = 0;
    std::vector<size_t> nonfinite;
  };

  static Weights load(const ModelConfig& cfg, const fs::path& model_dir, kernels::Backend backend,
                      const std::function<void(size_t, size_t)>& progress_in, int gpu,
                      const ShardSpec& shard) {
    const auto t0 = std::chrono::steady_clock::now();
    cfg.validate();
    const SafetensorsModel model = open_safetensors_model(model_dir);
    const std::vector<TensorSpec> specs = expected_tensors(cfg);
    std::vector<std::string> extra;
    const std::vector<SafetensorsEntry> entries = match_tensor_table(model, specs, &extra);
    check_extra_tensors(cfg, model_dir, extra);

    Weights w;
    w.backend_ = backend;
    Reads r;
    if (shard.sharded()) check_shardable(cfg, shard.world, shard.lm_head);
    std::vector<TensorSlice> slices;
    for (const auto& spec : specs) slices.push_back(slice_of(spec, cfg, shard));
    r.payload = lay_out_views(specs, slices, w);
    plan_reads(model, entries, slices, w, r);
    const bool report = !progress_in && r.payload > kProgressThreshold;
    r.progress = report ? stderr_progress(backend) : progress_in;
    r.threads = std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxReadThreads);
    r.nonfinite.assign(w.views_.size(), 0);
    if (backend == kernels::Backend::cpu)
      fill_host(w, r);
    else
      fill_device(w, r, gpu);
    if (r.payload == 0 && r.progress) r.progress(0, 0);
    warn_nonfinite(model_dir, w.views_, r.nonfinite);

    w.stats_.bytes = r.payload;
    w.stats_.read_seconds = r.read_seconds;
    w.stats_.total_seconds = seconds_since(t0);
    if (report)
      std::fprintf(stderr,
                   "loaded %.2f GB of weights to %s in %.3f s (%.2f GB/s; reading %.3f s)\n",
                   r.payload / 1e9, kernels::backend_name(backend), w.stats_.total_seconds,
                   w.stats_.gb_per_s(), r.read_seconds);
    w.shard_ = shard;
    w.bind(cfg);
    return w;
  }

  // Tensors the config does not use: an error for layers beyond
  // num_hidden_layers (the config does not describe this checkpoint: a
  // truncated config, or the wrong one), a warning for anything else.
  static void check_extra_tensors(const ModelConfig& cfg, const fs::path& model_dir,
                                  const std::vector<std::string>& extra) {
    for (const auto& name : extra) {
      int layer = -1;
      if (std::sscanf(name.c_str(), "model.layers.%d.", &layer) == 1)
        LANTERN_CHECK(layer < cfg.num_layers,
                      "%s: tensor %s belongs to layer %d but config.json has num_hidden_layers=%d: "
                      "the config does not match the checkpoint",
                      model_dir.c_str(), cut_for_message(name).c_str(), layer, cfg.num_layers);
    }
    if (extra.empty()) return;
    std::string names;
    for (size_t i = 0; i < extra.size() && i < 8; ++i) names += (i ? ", " : "") + extra[i];
    if (extra.size() > 8) names += strformat(", ... (%zu more)", extra.size() - 8);
    std::fprintf(stderr, "warning: %s: %zu tensor%s not used by the model: %s\n", model_dir.c_str(),
                 extra.size(), extra.size() == 1 ? "" : "s", names.c_str());
  }

  // One view per tensor in config order, each aligned and holding the
  // rank's slice (the whole tensor unless sharded); returns the payload bytes.
  static size_t lay_out_views(const std::vector<TensorSpec>& specs, const std::vector<TensorSlice>& slices,
                              Weights& w) {
    size_t offset = 0, payload = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      TensorSpec held = specs[i];
      held.shape = sliced_shape(specs[i].shape, slices[i]);
      w.views_.push_back(WeightView{held.name, offset, held.bytes(), held.shape});
      offset = align_up(offset + held.bytes());
      payload += held.bytes();
    }
    w.bytes_ = std::max(offset, kWeightAlign);
    return payload;
  }

  // The file ranges of one tensor's slice: a row slice is one range, a
  // column slice one range per row (rows of the rank's columns packed
  // densely in the view).
  static void slice_pieces(int file, const SafetensorsEntry& e, const TensorSlice& s, const WeightView& v,
                           std::vector<Piece>& pieces) {
    if (s.kind == TensorSlice::whole) {
      pieces.push_back({file, e.begin, e.bytes(), v.offset, 0});
      return;
    }
    const size_t elem = safetensors_dtype_bytes(e.dtype);
    const size_t rows = static_cast<size_t>(e.shape[0]), row_bytes = e.bytes() / rows;
    if (s.kind == TensorSlice::rows) {
      pieces.push_back({file, e.begin + s.begin * row_bytes, s.count * row_bytes, v.offset, 0});
      return;
    }
    const size_t part = s.count * elem;
    for (size_t row = 0; row < rows; ++row)
      pieces.push_back({file, e.begin + row * row_bytes + s.begin * elem, part, v.offset + row * part, 0});
  }

  // Tensors in file order so every file is read front to back.
  static void plan_reads(const SafetensorsModel& model, const std::vector<SafetensorsEntry>& entries,
                         const std::vector<TensorSlice>& slices, const Weights& w, Reads& r) {
    for (const auto& f : model.files) {
      Fd fd;
      fd.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
      LANTERN_CHECK(fd.fd >= 0, "cannot open %s: %s", f.path.c_str(), std::strerror(errno));
      r.paths.push_back(f.path);
      r.fds.push_back(std::move(fd));
    }
    std::vector<Piece> pieces;
    for (size_t i = 0; i < entries.size(); ++i) {
      int file = static_cast<int>(std::find(r.paths.begin(), r.paths.end(), entries[i].file) -
                                  r.paths.begin());
      slice_pieces(file, entries[i], slices[i], w.views_[i], pieces);
    }
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return a.file != b.file ? a.file < b.file : a.file_offset < b.file_offset;
    });
    r.chunks = plan_chunks(pieces);
  }

  static void fill_host(Weights& w, Reads& r) {
    w.block_ = std::aligned_alloc(kWeightAlign, w.bytes_);
    LANTERN_CHECK(w.block_, "out of host memory allocating the %zu-byte weight block", w.bytes_);
    // Zero only the alignment gaps; every other byte is read from the files.
    char* base = static_cast<char*>(w.block_);
    size_t end = 0;
    for (const auto& v : w.views_) {
      std::memset(base + end, 0, v.offset - end);
      end = v.offset + v.bytes;
    }
    std::memset(base + end, 0, w.bytes_ - end);
    size_t done = 0;
    for (const auto& c : r.chunks) {
      auto tr = std::chrono::steady_clock::now();
      read_chunk(c, base, /*staged=*/false, r.fds, r.paths, r.threads);
      r.read_seconds += seconds_since(tr);
      tally_nonfinite(c, base, /*staged=*/false, w.views_, r.nonfinite);
      done += c.bytes;
      if (r.progress) r.progress(done, r.payload);
    }
  }

  // Reads into pinned staging buffers, copied to the device while the next
  // chunk is read; a buffer is reused only once the copies out of it finished.
  static void fill_device(Weights& w, Reads& r, int gpu) {
    Device::select_gpu(gpu);
    w.gpu_ = gpu;
    void* block = nullptr;  // w.block_ stays null on failure
    CUDA_CHECK_HINT(cudaMalloc(&block, w.bytes_),
                    "the %zu-byte weight block does not fit in GPU %d's memory", w.bytes_, gpu);
    w.block_ = block;
    CudaStaging st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
    // Alignment gaps read as zeros, as on the CPU.
    CUDA_CHECK(cudaMemsetAsync(w.block_, 0, w.bytes_, st.stream));
    const size_t stage_bytes = std::min(kChunkBytes, std::max<size_t>(r.payload, 1));
    for (int i = 0; i < kStagingBuffers; ++i) {
      CUDA_CHECK(cudaHostAlloc(&st.host[i], stage_bytes, cudaHostAllocDefault));
      CUDA_CHECK(cudaEventCreateWithFlags(&st.done[i], cudaEventDisableTiming));
    }
    char* dev = static_cast<char*>(w.block_);
    size_t done = 0;
    for (size_t ci = 0; ci < r.chunks.size(); ++ci) {
      const int b = static_cast<int>(ci % kStagingBuffers);
      char* stage = static_cast<char*>(st.host[b]);
      if (ci >= static_cast<size_t>(kStagingBuffers)) CUDA_CHECK(cudaEventSynchronize(st.done[b]));
      auto tr = std::chrono::steady_clock::now();
      read_chunk(r.chunks[ci], stage, /*staged=*/true, r.fds, r.paths, r.threads);
      r.read_seconds += seconds_since(tr);
      tally_nonfinite(r.chunks[ci], stage, /*staged=*/true, w.views_, r.nonfinite);
      for (const auto& p : r.chunks[ci].pieces)
        CUDA_CHECK(cudaMemcpyAsync(dev + p.dst_offset, stage + p.stage_offset, p.bytes,
                                   cudaMemcpyHostToDevice, st.stream));
      CUDA_CHECK(cudaEventRecord(st.done[b], st.stream));
      done += r.chunks[ci].bytes;
      if (r.progress) r.progress(done, r.payload);
    }
    CUDA_CHECK(cudaStreamSynchronize(st.stream));
  }
};

Weights Weights::load(const ModelConfig& cfg, const fs::path& model_dir, kernels::Backend backend,
                      const std::function<void(size_t, size_t)>& progress, int gpu,
                      const ShardSpec& shard) {
  return WeightsLoader::load(cfg, model_dir, backend, progress, gpu, shard);
}

Weights::Weights(Weights&& o) noexcept {
  *this = std::move(o);
}

Weights& Weights::operator=(Weights&& o) noexcept {
  if (this == &o) return *this;
  release();
  embed = o.embed;
  final_norm = o.final_norm;
  lm_head = o.lm_head;
  layers = std::move(o.layers);
  backend_ = o.backend_;
  gpu_ = o.gpu_;
  block_ = o.block_;
  bytes_ = o.bytes_;
  views_ = std::move(o.views_);
  fused_views_ = std::move(o.fused_views_);
  stats_ = o.stats_;
  shard_ = o.shard_;
  o.block_ = nullptr;
  o.bytes_ = 0;
  o.embed = o.final_norm = o.lm_head = nullptr;
  o.layers.clear();
  o.views_.clear();
  o.fused_views_.clear();
  return *this;
}

Weights::~Weights() {
  release();
}

void Weights::release() {
  if (!block_) return;
  if (backend_ == kernels::Backend::cpu)
    std::free(block_);
  else
    CUDA_CHECK_LOG(cudaFree(block_));
  block_ = nullptr;
  bytes_ = 0;
  embed = final_norm = lm_head = nullptr;
  layers.clear();
  views_.clear();
  fused_views_.clear();
}

void Weights::bind(const ModelConfig& cfg) {
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  LANTERN_ASSERT(specs.size() == views_.size(), "%zu views for %zu tensors", views_.size(),
                 specs.size());
  layers.assign(cfg.num_layers, LayerWeights{});
  const char* base = static_cast<const char*>(block_);
  for (size_t i = 0; i < specs.size(); ++i) {
    const void* p = base + views_[i].offset;
    const TensorSpec& s = specs[i];
    LayerWeights* lw = s.layer >= 0 ? &layers[s.layer] : nullptr;
    switch (s.role) {
      case TensorRole::embed:
        embed = p;
        break;
      case TensorRole::final_norm:
        final_norm = p;
        break;
      case TensorRole::lm_head:
        lm_head = p;
        break;
      case TensorRole::attn_norm:
        lw->attn_norm = p;
        break;
      case TensorRole::wq:
        lw->wq = p;
        break;
      case TensorRole::wk:
        lw->wk = p;
        break;
      case TensorRole::wv:
        lw->wv = p;
        break;
      case TensorRole::wo:
        lw->wo = p;
        break;
      case TensorRole::mlp_norm:
        lw->mlp_norm = p;
        break;
      case TensorRole::w_gate:
        lw->w_gate = p;
        break;
      case TensorRole::w_up:
        lw->w_up = p;
        break;
      case TensorRole::w_down:
        lw->w_down = p;
        break;
    }
  }
  // Tied: the LM head is the embedding matrix; split, this rank's vocabulary
  // rows of it (a view, no copy: the embedding itself stays replicated).
  if (cfg.tie_word_embeddings)
    lm_head = static_cast<const char*>(embed) +
              (shard_.split_lm_head() ? static_cast<size_t>(shard_.rank) * (cfg.vocab_size / shard_.world) *
                                            cfg.hidden_size * 2
                                      : 0);
  bind_fused();
}

void Weights::bind_fused() {
  // Views of one layer's tensors, by role; a fused view exists when its parts
  // follow each other with no gap (same bytes, no copy).
  const char* base = static_cast<const char*>(block_);
  auto fuse = [&](const std::vector<const WeightView*>& parts, const std::string& name) -> const void* {
    for (size_t i = 1; i < parts.size(); ++i)
      if (parts[i]->offset != parts[i - 1]->offset + parts[i - 1]->bytes) return nullptr;
    WeightView f{name, parts[0]->offset, 0, {0, parts[0]->shape.back()}};
    for (const WeightView* p : parts) {
      f.bytes += p->bytes;
      f.shape[0] += p->shape[0];
    }
    fused_views_.push_back(f);
    return base + f.offset;
  };
  std::vector<std::array<const WeightView*, 5>> by_layer(layers.size());  // wq wk wv gate up
  for (const WeightView& v : views_) {
    int layer = -1;
    char role[64] = {};
    if (std::sscanf(v.name.c_str(), "model.layers.%d.%63s", &layer, role) != 2 || layer < 0 ||
        layer >= static_cast<int>(layers.size()))
      continue;
    const std::string r = role;
    const int slot = r == "self_attn.q_proj.weight"   ? 0
                     : r == "self_attn.k_proj.weight" ? 1
                     : r == "self_attn.v_proj.weight" ? 2
                     : r == "mlp.gate_proj.weight"    ? 3
                     : r == "mlp.up_proj.weight"      ? 4
                                                      : -1;
    if (slot >= 0) by_layer[layer][slot] = &v;
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& t = by_layer[l];
    if (!t[0] || !t[1] || !t[2] || !t[3] || !t[4]) continue;
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    layers[l].wqkv = fuse({t[0], t[1], t[2]}, prefix + "self_attn.qkv_proj.weight (fused view)");
    layers[l].w_gate_up = fuse({t[3], t[4]}, prefix + "mlp.gate_up_proj.weight (fused view)");
  }
}

bool Weights::fusable() const {
  if (layers.empty()) return false;
  for (const LayerWeights& l : layers)
    if (!l.wqkv || !l.w_gate_up) return false;
  return true;
}

const void* Weights::find(const std::string& name) const {
  for (const auto& v : views_)
    if (v.name == name) return static_cast<const char*>(block_) + v.offset;
  LANTERN_FAIL("no weight tensor named %s", name.c_str());
}

}  // namespace lantern
