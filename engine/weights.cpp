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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "engine/device.h"
#include "engine/weights_read.h"
#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "engine/safetensors.h"

namespace lantern {

namespace {

namespace fs = std::filesystem;
using namespace weights_io;

constexpr int kStagingBuffers = 3;
constexpr int kMaxReadThreads = 8;
constexpr size_t kProgressThreshold = 1'000'000'000;  // print progress for models over 1 GB

size_t align_up(size_t x) {
  return (x + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
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

}  // namespace

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

}  // namespace lantern
