#include "harness/cupti_records.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/base/errors.h"
#include "harness/cupti_check.h"

namespace lantern::harness {

namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string s(out);
  std::free(out);
  return s;
}

runfmt::LaunchConfig launch_config(const CUpti_ActivityKernel10& k) {
  runfmt::LaunchConfig c;
  c.grid_x = k.gridX;
  c.grid_y = k.gridY;
  c.grid_z = k.gridZ;
  c.block_x = k.blockX;
  c.block_y = k.blockY;
  c.block_z = k.blockZ;
  c.static_smem = k.staticSharedMemory;
  c.dynamic_smem = k.dynamicSharedMemory;
  c.smem_config = k.sharedMemoryExecuted;
  c.regs_per_thread = k.registersPerThread;
  return c;
}

}  // namespace

void CuptiRecordParser::parse_buffer(uint8_t* buffer, size_t valid_bytes, CUcontext context,
                                     uint32_t stream) {
  CUpti_Activity* record = nullptr;
  while (valid_bytes > 0) {
    CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_bytes, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (r != CUPTI_SUCCESS) {
      add_error(strformat("cuptiActivityGetNextRecord failed: %s", cupti_error_string(r)));
      break;
    }
    ++records_.records;
    parse_record(*record);
  }
  size_t dropped = 0;
  CUptiResult r = cuptiActivityGetNumDroppedRecords(context, stream, &dropped);
  if (r == CUPTI_SUCCESS)
    records_.dropped_records += dropped;
  else
    add_error(strformat("cuptiActivityGetNumDroppedRecords failed: %s", cupti_error_string(r)));
}

void CuptiRecordParser::parse_record(const CUpti_Activity& record) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      add_kernel(reinterpret_cast<const CUpti_ActivityKernel10&>(record));
      break;
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
      ++records_.graph_launches;
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      add_memcpy(reinterpret_cast<const CUpti_ActivityMemcpy6&>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      add_memset(reinterpret_cast<const CUpti_ActivityMemset4&>(record));
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      add_api_call(record.kind, reinterpret_cast<const CUpti_ActivityAPI&>(record));
      break;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      add_external_correlation(reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MARKER:
      add_marker(reinterpret_cast<const CUpti_ActivityMarker2&>(record));
      break;
    default:
      break;
  }
}

template <class Record>
GpuActivity CuptiRecordParser::gpu_activity(GpuActivityKind kind, const Record& r) {
  GpuActivity a;
  a.kind = kind;
  a.start_ns = to_harness_clock(r.start);
  a.end_ns = to_harness_clock(r.end);
  a.graph_node = r.graphNodeId;
  a.graph_id = r.graphId;
  a.correlation = correlation(r.correlationId);
  a.stream = r.streamId;
  a.device = r.deviceId;
  return a;
}

void CuptiRecordParser::add_kernel(const CUpti_ActivityKernel10& k) {
  GpuActivity a = gpu_activity(GpuActivityKind::kernel, k);
  a.name = kernel_name(k.name);
  a.launch = launch_config(k);
  records_.activities.push_back(a);
}

void CuptiRecordParser::add_memcpy(const CUpti_ActivityMemcpy6& m) {
  static const char* const kCopyNames[] = {
      "memcpy",      "memcpy HtoD", "memcpy DtoH", "memcpy HtoA", "memcpy AtoH", "memcpy AtoA",
      "memcpy AtoD", "memcpy DtoA", "memcpy DtoD", "memcpy HtoH", "memcpy PtoP"};
  GpuActivity a = gpu_activity(GpuActivityKind::memcpy, m);
  a.bytes = m.bytes;
  a.copy_kind = m.copyKind;
  a.name = intern(m.copyKind < std::size(kCopyNames) ? kCopyNames[m.copyKind] : "memcpy");
  records_.activities.push_back(a);
}

void CuptiRecordParser::add_memset(const CUpti_ActivityMemset4& m) {
  GpuActivity a = gpu_activity(GpuActivityKind::memset, m);
  a.bytes = m.bytes;
  a.name = intern("memset");
  records_.activities.push_back(a);
}

void CuptiRecordParser::add_api_call(CUpti_ActivityKind kind, const CUpti_ActivityAPI& api) {
  ApiCall c;
  c.start_ns = to_harness_clock(api.start);
  c.end_ns = to_harness_clock(api.end);
  c.correlation = correlation(api.correlationId);
  auto [t, added] =
      thread_index_.emplace(api.threadId, static_cast<uint32_t>(thread_index_.size()));
  c.thread = t->second;
  c.name = api_name(kind, api.cbid);
  records_.api_calls.push_back(c);
}

// Ids pushed by the collector are op-log index + 1 (CUSTOM0) and step + 1
// (CUSTOM1): 0 would be indistinguishable from "none".
void CuptiRecordParser::add_external_correlation(const CUpti_ActivityExternalCorrelation& x) {
  if (x.externalId == 0) return;
  const int64_t id = static_cast<int64_t>(x.externalId) - 1;
  if (x.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
    records_.launch_of_correlation[correlation(x.correlationId)] = id;
  else if (x.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1)
    records_.step_of_correlation[correlation(x.correlationId)] = id;
}

void CuptiRecordParser::add_marker(const CUpti_ActivityMarker2& m) {
  MarkerRecord mk;
  mk.t_ns = to_harness_clock(m.timestamp);
  mk.id = m.id;
  mk.start = (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) != 0 ||
             (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) != 0;
  mk.name = m.name ? m.name : "";
  mk.domain = m.domain ? m.domain : "";
  records_.markers.push_back(std::move(mk));
}

void CuptiRecordParser::graph_node_event(uint32_t cbid, const void* resource_data,
                                         int64_t current_launch) {
  const auto* rd = static_cast<const CUpti_ResourceData*>(resource_data);
  const auto* graph = static_cast<const CUpti_GraphData*>(rd ? rd->resourceDescriptor : nullptr);
  if (!graph) return;
  uint64_t node = 0;
  CUptiResult r = cuptiGetGraphNodeId(graph->node, &node);
  if (r != CUPTI_SUCCESS) {
    add_error(strformat("cuptiGetGraphNodeId failed: %s", cupti_error_string(r)));
    return;
  }
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    // Node created while an op is being captured: the op owns it.
    if (current_launch >= 0) records_.launch_of_graph_node[node] = current_launch;
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
    uint64_t original = 0;
    r = cuptiGetGraphNodeId(graph->originalNode, &original);
    if (r != CUPTI_SUCCESS) {
      add_error(strformat("cuptiGetGraphNodeId failed: %s", cupti_error_string(r)));
      return;
    }
    auto it = records_.launch_of_graph_node.find(original);
    if (it != records_.launch_of_graph_node.end()) records_.launch_of_graph_node[node] = it->second;
  }
}

void CuptiRecordParser::set_clock_offset(int64_t harness_minus_cupti_ns) {
  clock_offset_ns_ = harness_minus_cupti_ns;
  clock_offset_needed_ = true;
}

GpuRecords CuptiRecordParser::take() {
  GpuRecords out = std::move(records_);
  records_ = GpuRecords{};
  name_index_.clear();
  thread_index_.clear();
  kernel_name_index_.clear();
  api_name_index_.clear();
  return out;
}

uint32_t CuptiRecordParser::correlation(uint32_t id) {
  const uint32_t c = id == 0 ? 0 : correlation_base_ + id;
  max_correlation_ = std::max(max_correlation_, c);
  return c;
}

uint32_t CuptiRecordParser::intern(const std::string& name) {
  auto [it, inserted] = name_index_.emplace(name, static_cast<uint32_t>(records_.names.size()));
  if (inserted) records_.names.push_back(name);
  return it->second;
}

uint64_t CuptiRecordParser::to_harness_clock(uint64_t cupti_ns) const {
  if (!clock_offset_needed_) return cupti_ns;
  return static_cast<uint64_t>(static_cast<int64_t>(cupti_ns) + clock_offset_ns_);
}

uint32_t CuptiRecordParser::kernel_name(const char* mangled) {
  if (!mangled) return intern("?");
  auto it = kernel_name_index_.find(mangled);
  if (it != kernel_name_index_.end()) return it->second;
  const uint32_t index = intern(demangle(mangled));
  kernel_name_index_.emplace(mangled, index);
  return index;
}

uint32_t CuptiRecordParser::api_name(uint32_t kind, uint32_t cbid) {
  const uint64_t key = static_cast<uint64_t>(kind) << 32 | cbid;
  auto it = api_name_index_.find(key);
  if (it != api_name_index_.end()) return it->second;
  const char* name = nullptr;
  CUpti_CallbackDomain domain = kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                    : CUPTI_CB_DOMAIN_DRIVER_API;
  if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
  const uint32_t index = intern(name);
  api_name_index_.emplace(key, index);
  return index;
}

}  // namespace lantern::harness
