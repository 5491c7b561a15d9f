// NVTX ranges as a tool sees them, without a GPU: this test binary links a
// static NVTX injection (the InitializeInjectionNvtx2_fnptr hook of nvtx3)
// that records every push/pop in the `lantern` domain. The GPU test
// (nvtx_cupti_gpu_test.cpp) checks the same through CUPTI's injection.
#include <cstdint>

// This file provides the injection: declare the pointer nvtx3 checks, and
// tell its headers not to add their weak (null) definition here.
extern "C" int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(uint32_t));
#define NVTX_STATIC_INJECTION_IMPL
#include <nvtx3/nvToolsExt.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/nvtx_observer.h"
#include "harness/observer_set.h"
#include "tests/harness/seed_plan.h"

namespace {

// nvToolsExtPayload.h's NVTX_PAYLOAD_TYPE_EXT and nvtxPayloadData_t (that
// header would pull in the extension's own static-injection hooks).
constexpr int32_t kPayloadTypeExt = static_cast<int32_t>(0xDFBD0009);
struct PayloadData {
  uint64_t schemaId;
  size_t size;
  const void* payload;
};

struct Range {
  int depth;
  std::string name;
  uint32_t category;
  int32_t payload_type;
  int64_t payload;                         // int payloads
  lantern::harness::NvtxBatchPayload ext;  // extended payload, when present
  uint64_t ext_schema;
};

struct Recorder {
  std::mutex mutex;
  bool on = false;
  std::deque<std::string> domains;  // handles point into these
  std::deque<std::string> strings;
  std::vector<Range> ranges;
  std::vector<int> pops;  // depth after each pop
  int depth = 0;
  void* lantern_domain = nullptr;
  // Start recording ranges afresh / stop recording.
  void start() {
    std::lock_guard<std::mutex> lock(mutex);
    on = true;
    ranges.clear();
    pops.clear();
    depth = 0;
  }
  void stop() {
    std::lock_guard<std::mutex> lock(mutex);
    on = false;
  }
};
Recorder& rec() {
  static Recorder r;
  return r;
}

nvtxDomainHandle_t NVTX_API create_domain(const char* name) {
  std::lock_guard<std::mutex> lock(rec().mutex);
  rec().domains.emplace_back(name);
  auto* h = reinterpret_cast<nvtxDomainHandle_t>(&rec().domains.back());
  if (rec().domains.back() == lantern::harness::kNvtxDomain) rec().lantern_domain = h;
  return h;
}
void NVTX_API destroy_domain(nvtxDomainHandle_t) {}
nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t, const char* s) {
  std::lock_guard<std::mutex> lock(rec().mutex);
  rec().strings.emplace_back(s);
  return reinterpret_cast<nvtxStringHandle_t>(&rec().strings.back());
}
void NVTX_API name_category(nvtxDomainHandle_t, uint32_t, const char*) {}
int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(rec().mutex);
  if (!rec().on || d != rec().lantern_domain) return 0;
  Range r{};
  r.depth = rec().depth++;
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
    r.name = *reinterpret_cast<const std::string*>(a->message.registered);
  else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
    r.name = a->message.ascii;
  r.category = a->category;
  r.payload_type = a->payloadType;
  if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64) r.payload = a->payload.llValue;
  if (a->payloadType == NVTX_PAYLOAD_TYPE_INT32) r.payload = a->payload.iValue;
  if (a->payloadType == kPayloadTypeExt) {
    const auto* data = reinterpret_cast<const PayloadData*>(a->payload.ullValue);
    r.ext_schema = data->schemaId;
    if (data->size == sizeof r.ext) std::memcpy(&r.ext, data->payload, sizeof r.ext);
  }
  rec().ranges.push_back(r);
  return r.depth;
}
int NVTX_API pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(rec().mutex);
  if (!rec().on || d != rec().lantern_domain) return 0;
  rec().pops.push_back(--rec().depth);
  return rec().depth;
}

int NVTX_API initialize_injection(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size))
    return 0;
  auto set = [&](unsigned id, NvtxFunctionPointer f) {
    if (id < size) *table[id] = f;
  };
  set(NVTX_CBID_CORE2_DomainCreateA, reinterpret_cast<NvtxFunctionPointer>(create_domain));
  set(NVTX_CBID_CORE2_DomainDestroy, reinterpret_cast<NvtxFunctionPointer>(destroy_domain));
  set(NVTX_CBID_CORE2_DomainRegisterStringA, reinterpret_cast<NvtxFunctionPointer>(register_string));
  set(NVTX_CBID_CORE2_DomainNameCategoryA, reinterpret_cast<NvtxFunctionPointer>(name_category));
  set(NVTX_CBID_CORE2_DomainRangePushEx, reinterpret_cast<NvtxFunctionPointer>(push));
  set(NVTX_CBID_CORE2_DomainRangePop, reinterpret_cast<NvtxFunctionPointer>(pop));
  return 1;
}

}  // namespace

// The strong definition nvtx3 looks for (its weak one stays null without us).
extern "C" {
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = initialize_injection;
}

namespace lantern::harness {
namespace {

TEST(NvtxObserver, RangesReachAToolWithNamesNestingCategoriesAndPayloads) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "instrumentation compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  NvtxObserver nvtx;
  ASSERT_NE(rec().lantern_domain, nullptr) << "the observer must create the 'lantern' domain";
  auto a = testing::make_seed_arena();
  rec().start();
  testing::run_seed_step(nvtx, *a, 41, "decode", 2);
  rec().stop();
  const auto& r = rec().ranges;
  const size_t ops = testing::seed_ops_per_step(2);
  ASSERT_EQ(r.size(), 2 + 2 + ops);  // step, phase, 2 layers, ops
  EXPECT_EQ(rec().pops.size(), r.size());
  EXPECT_EQ(rec().depth, 0) << "every push popped";

  EXPECT_EQ(r[0].name, "step");
  EXPECT_EQ(r[0].depth, 0);
  EXPECT_EQ(r[0].category, static_cast<uint32_t>(kNvtxCategoryStep));
  EXPECT_EQ(r[0].payload_type, NVTX_PAYLOAD_TYPE_INT64);
  EXPECT_EQ(r[0].payload, 41);

  EXPECT_EQ(r[1].name, "decode");
  EXPECT_EQ(r[1].depth, 1);
  EXPECT_EQ(r[1].payload_type, kPayloadTypeExt);
  EXPECT_EQ(r[1].ext_schema, kNvtxBatchSchemaId);
  EXPECT_EQ(r[1].ext.step, 41);
  EXPECT_EQ(r[1].ext.decode_seqs, 2);
  EXPECT_EQ(r[1].ext.prefill_seqs, 0);
  EXPECT_EQ(r[1].ext.tokens, 2);

  EXPECT_EQ(r[2].name, "embed");
  EXPECT_EQ(r[2].depth, 2);
  EXPECT_EQ(r[2].category, 1u + static_cast<uint32_t>(kernels::Family::embedding));
  EXPECT_EQ(r[2].payload, -1);

  EXPECT_EQ(r[3].name, "layer 0");
  EXPECT_EQ(r[3].depth, 2);
  EXPECT_EQ(r[3].payload, 0);
  EXPECT_EQ(r[4].name, "attn_norm");
  EXPECT_EQ(r[4].depth, 3);
  EXPECT_EQ(r[4].category, 1u + static_cast<uint32_t>(kernels::Family::rmsnorm));
  EXPECT_EQ(r[5].name, "q_proj");
  EXPECT_EQ(r[5].category, 1u + static_cast<uint32_t>(kernels::Family::gemm));
  EXPECT_EQ(r[5].payload, 0);
  EXPECT_EQ(r[3 + 16].name, "layer 1");
  EXPECT_EQ(r[3 + 16].payload, 1);
  EXPECT_EQ(r[3 + 16 + 2].name, "q_proj");
  EXPECT_EQ(r[3 + 16 + 2].payload, 1);
  EXPECT_EQ(r.back().name, "argmax");
  EXPECT_EQ(r.back().depth, 2);

  // Names are registered once: a second step registers nothing new.
  const size_t strings = rec().strings.size();
  testing::run_seed_step(nvtx, *a, 42, "decode", 2);
  EXPECT_EQ(rec().strings.size(), strings);
}

TEST(NvtxObserver, GraphReplayHooksPushNoRanges) {
#if !LANTERN_INSTRUMENTATION
  GTEST_SKIP() << "instrumentation compiled out (LANTERN_INSTRUMENTATION=0)";
#endif
  NvtxObserver nvtx;
  auto a = testing::make_seed_arena();
  rec().start();
  const testing::RecordedGraph graph = testing::record_seed_graph(*a, 2);
  testing::capture_seed_graph(nvtx, *a, 2, graph);
  const size_t capture = rec().ranges.size();
  rec().ranges.clear();
  testing::run_graph_step(nvtx, 8, graph);
  rec().stop();
  // Capture (start-up, no step): 2 layers and every op (host time of the capture).
  EXPECT_EQ(capture, 2 + static_cast<size_t>(testing::seed_ops_per_step(2)));
  // Replay: step and phase only; no empty layer or op ranges after the launch.
  ASSERT_EQ(rec().ranges.size(), 2u);
  EXPECT_EQ(rec().ranges[0].name, "step");
  EXPECT_EQ(rec().ranges[1].name, "decode");
  EXPECT_EQ(rec().depth, 0);
}

}  // namespace
}  // namespace lantern::harness
