#pragma once
// NvtxObserver: NVTX ranges for Nsight Systems (and any NVTX tool) in the
// `lantern` domain, nested step -> phase -> layer -> op.
//
//   step     payload: the step number (int64)
//   phase    "prefill" / "decode" / "mixed"; payload (NVTX payload extension,
//            schema "lantern_batch"): step, prefill_seqs, decode_seqs, tokens
//   layer    "layer N"; payload: N
//   op       the op name ("q_proj", ...); category: its kernel family;
//            payload: the layer (-1 outside layers)
//
// Every string is registered once (nvtxDomainRegisterStringA) the first time
// it is seen; the hot path pushes and pops with registered handles only. With
// LANTERN_INSTRUMENTATION=0 every method is empty.
//
// CUDA graphs: ops captured into a graph get ranges (host time of the
// capture); the accounting hooks of a replay (OpInfo::kReplay) get none, and
// a layer range is pushed only once a non-replayed op runs inside it.
#include <cstdint>
#include <utility>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "engine/observer.h"

namespace lantern::harness {

// The phase range's payload (schema registered once per domain).
struct NvtxBatchPayload {
  int64_t step;
  int32_t prefill_seqs;
  int32_t decode_seqs;
  int32_t tokens;
  int32_t reserved;
};
static_assert(sizeof(NvtxBatchPayload) == 24);
static_assert(std::is_standard_layout_v<NvtxBatchPayload>);

constexpr const char* kNvtxDomain = "lantern";
constexpr uint64_t kNvtxBatchSchemaId = (1u << 24) + 1;  // static schema id in our domain

// NVTX categories: 1 + kernel family for ops, then these.
enum NvtxCategory : uint32_t {
  kNvtxCategoryStep = 1 + kernels::kNumFamilies,
  kNvtxCategoryPhase,
  kNvtxCategoryLayer,
};

class NvtxObserver : public Observer {
 public:
  NvtxObserver();
  ~NvtxObserver() override;
  NvtxObserver(const NvtxObserver&) = delete;
  NvtxObserver& operator=(const NvtxObserver&) = delete;

  void on_step_begin(const StepInfo& s) override;
  void on_step_end(const StepInfo& s) override;
  void on_layer_begin(int layer) override;
  void on_layer_end(int layer) override;
  void on_op_begin(const OpInfo& op) override;
  void on_op_end(const OpInfo& op) override;
  // Replays launch nothing: the graph launch is the range nsys shows.
  void on_graph_replay(const GraphReplay&) override {}

 private:
  nvtxDomainHandle_t domain_ = nullptr;
  nvtxStringHandle_t step_name_ = nullptr;
  std::vector<std::pair<const char*, nvtxStringHandle_t>> names_;  // op and phase names
  std::vector<nvtxStringHandle_t> layer_names_;
  int pending_layer_ = -1;     // layer begun, range not pushed yet
  bool layer_pushed_ = false;
  nvtxStringHandle_t name(const char* s);
  nvtxStringHandle_t layer_name(int layer);
};

}  // namespace lantern::harness
