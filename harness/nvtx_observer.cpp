#include "harness/nvtx_observer.h"

#include <cstring>
#include <string>

#include <nvtx3/nvToolsExtPayload.h>

namespace lantern::harness {

#if LANTERN_INSTRUMENTATION

namespace {

// One colour per kernel family (ARGB), then step / phase / layer.
constexpr uint32_t kFamilyColors[kernels::kNumFamilies] = {
    0xff4e79a7, 0xfff28e2b, 0xffe15759, 0xff76b7b2, 0xff59a14f, 0xffedc948,
    0xffb07aa1, 0xffff9da7, 0xff9c755f, 0xffbab0ac, 0xff86bcb6, 0xffd37295, 0xff8cd17d,
    0xffb6992d, 0xff499894};
constexpr uint32_t kStepColor = 0xff606060, kPhaseColor = 0xff909090, kLayerColor = 0xffc0c0c0;

nvtxEventAttributes_t attributes(nvtxStringHandle_t message, uint32_t category, uint32_t color) {
  nvtxEventAttributes_t a;
  std::memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = color;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = message;
  return a;
}

}  // namespace

NvtxObserver::NvtxObserver() {
  domain_ = nvtxDomainCreateA(kNvtxDomain);
  for (int f = 0; f < kernels::kNumFamilies; ++f)
    nvtxDomainNameCategoryA(domain_, 1 + f, kernels::family_name(static_cast<kernels::Family>(f)));
  nvtxDomainNameCategoryA(domain_, kNvtxCategoryStep, "step");
  nvtxDomainNameCategoryA(domain_, kNvtxCategoryPhase, "phase");
  nvtxDomainNameCategoryA(domain_, kNvtxCategoryLayer, "layer");
  step_name_ = nvtxDomainRegisterStringA(domain_, "step");
  names_.reserve(64);

  static const nvtxPayloadSchemaEntry_t entries[] = {
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT64, "step", "engine step", 0,
       offsetof(NvtxBatchPayload, step), nullptr, nullptr},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT32, "prefill_seqs", "sequences prefilling", 0,
       offsetof(NvtxBatchPayload, prefill_seqs), nullptr, nullptr},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT32, "decode_seqs", "sequences decoding", 0,
       offsetof(NvtxBatchPayload, decode_seqs), nullptr, nullptr},
      {0, NVTX_PAYLOAD_ENTRY_TYPE_INT32, "tokens", "rows in the batch", 0,
       offsetof(NvtxBatchPayload, tokens), nullptr, nullptr},
  };
  nvtxPayloadSchemaAttr_t schema;
  std::memset(&schema, 0, sizeof schema);
  schema.fieldMask = NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NAME | NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_TYPE |
                     NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_ENTRIES |
                     NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NUM_ENTRIES |
                     NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_STATIC_SIZE |
                     NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_SCHEMA_ID;
  schema.name = "lantern_batch";
  schema.type = NVTX_PAYLOAD_SCHEMA_TYPE_STATIC;
  schema.entries = entries;
  schema.numEntries = sizeof entries / sizeof entries[0];
  schema.payloadStaticSize = sizeof(NvtxBatchPayload);
  schema.schemaId = kNvtxBatchSchemaId;
  nvtxPayloadSchemaRegister(domain_, &schema);
}

NvtxObserver::~NvtxObserver() {
  if (domain_) nvtxDomainDestroy(domain_);
}

nvtxStringHandle_t NvtxObserver::name(const char* s) {
  for (const auto& [key, handle] : names_)
    if (key == s) return handle;
  nvtxStringHandle_t handle = nvtxDomainRegisterStringA(domain_, s ? s : "");
  names_.emplace_back(s, handle);
  return handle;
}

nvtxStringHandle_t NvtxObserver::layer_name(int layer) {
  if (layer < 0) layer = 0;
  while (static_cast<int>(layer_names_.size()) <= layer) {
    std::string text = "layer ";
    text += std::to_string(layer_names_.size());
    layer_names_.push_back(nvtxDomainRegisterStringA(domain_, text.c_str()));
  }
  return layer_names_[layer];
}

void NvtxObserver::on_step_begin(const StepInfo& s) {
  nvtxEventAttributes_t step = attributes(step_name_, kNvtxCategoryStep, kStepColor);
  step.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  step.payload.llValue = s.step;
  nvtxDomainRangePushEx(domain_, &step);

  nvtxEventAttributes_t phase = attributes(name(s.phase), kNvtxCategoryPhase, kPhaseColor);
  NvtxBatchPayload batch{s.step, s.num_prefill_seqs, s.num_decode_seqs, s.num_tokens, 0};
  nvtxPayloadData_t data{kNvtxBatchSchemaId, sizeof batch, &batch};
  phase.payloadType = NVTX_PAYLOAD_TYPE_EXT;
  phase.payload.ullValue = NVTX_POINTER_AS_PAYLOAD_ULLVALUE(&data);
  phase.reserved0 = 1;  // one payload entry
  nvtxDomainRangePushEx(domain_, &phase);
}

void NvtxObserver::on_step_end(const StepInfo&) {
  nvtxDomainRangePop(domain_);  // phase
  nvtxDomainRangePop(domain_);  // step
}

void NvtxObserver::on_layer_begin(int layer) {
  pending_layer_ = layer;
  layer_pushed_ = false;
}

void NvtxObserver::on_layer_end(int) {
  if (layer_pushed_) nvtxDomainRangePop(domain_);
  pending_layer_ = -1;
  layer_pushed_ = false;
}

void NvtxObserver::on_op_begin(const OpInfo& op) {
  if (op.graph == OpInfo::kReplay) return;
  if (pending_layer_ >= 0 && !layer_pushed_) {
    nvtxEventAttributes_t l = attributes(layer_name(pending_layer_), kNvtxCategoryLayer, kLayerColor);
    l.payloadType = NVTX_PAYLOAD_TYPE_INT32;
    l.payload.iValue = pending_layer_;
    nvtxDomainRangePushEx(domain_, &l);
    layer_pushed_ = true;
  }
  const int family = op.kernel ? static_cast<int>(op.kernel->family) : -1;
  nvtxEventAttributes_t a =
      attributes(name(op.op), family >= 0 ? 1 + family : 0, family >= 0 ? kFamilyColors[family] : kLayerColor);
  a.payloadType = NVTX_PAYLOAD_TYPE_INT32;
  a.payload.iValue = op.layer;
  nvtxDomainRangePushEx(domain_, &a);
}

void NvtxObserver::on_op_end(const OpInfo& op) {
  if (op.graph != OpInfo::kReplay) nvtxDomainRangePop(domain_);
}

#else  // LANTERN_INSTRUMENTATION == 0: no NVTX call is compiled in.

NvtxObserver::NvtxObserver() {}
NvtxObserver::~NvtxObserver() {}
nvtxStringHandle_t NvtxObserver::name(const char*) { return nullptr; }
nvtxStringHandle_t NvtxObserver::layer_name(int) { return nullptr; }
void NvtxObserver::on_step_begin(const StepInfo&) {}
void NvtxObserver::on_step_end(const StepInfo&) {}
void NvtxObserver::on_layer_begin(int) {}
void NvtxObserver::on_layer_end(int) {}
void NvtxObserver::on_op_begin(const OpInfo&) {}
void NvtxObserver::on_op_end(const OpInfo&) {}

#endif

}  // namespace lantern::harness
