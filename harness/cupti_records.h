#pragma once
// CuptiRecordParser: turns what CUPTI hands the collector -- completed
// activity buffers and CUDA-graph node callbacks -- into GpuRecords (plain
// data, gpu_records.h). Kernel records keep their launch configuration (grid,
// block, registers, shared memory) for the occupancy calculation.
//
// Parsing stays cheap (a detach flushes on the engine's thread): kernel names
// are demangled once per mangled name, API names looked up once per cbid.
// Not thread-safe: the collector calls it under its mutex. Included only by
// the collector's sources (it pulls in cupti.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include <cupti.h>

#include "harness/gpu_records.h"

namespace lantern::harness {

class CuptiRecordParser {
 public:
  // Every record in a buffer CUPTI completed, then CUPTI's count of records
  // it dropped for (context, stream).
  void parse_buffer(uint8_t* buffer, size_t valid_bytes, CUcontext context, uint32_t stream);
  // A resource callback (graph node created or cloned); `current_launch` is
  // the op-log index of the op being captured, -1 outside ops.
  void graph_node_event(uint32_t cbid, const void* resource_data, int64_t current_launch);

  // Records carry the harness clock unless CUPTI could not use it: then the
  // measured offset (harness clock - CUPTI clock) is added.
  void set_clock_offset(int64_t harness_minus_cupti_ns);
  // CUPTI numbers correlation ids from 1 again after cuptiFinalize: the next
  // attachment's ids are shifted past every id seen so far.
  void new_attachment() { correlation_base_ = max_correlation_; }
  void add_error(std::string message) { records_.errors.push_back(std::move(message)); }
  GpuRecords& records() { return records_; }
  // Everything parsed so far; leaves the parser empty.
  GpuRecords take();

 private:
  GpuRecords records_;
  bool clock_offset_needed_ = false;
  int64_t clock_offset_ns_ = 0;
  uint32_t correlation_base_ = 0, max_correlation_ = 0;
  std::unordered_map<std::string, uint32_t> name_index_;
  std::unordered_map<uint32_t, uint32_t> thread_index_;          // CUPTI thread id -> index
  std::unordered_map<std::string, uint32_t> kernel_name_index_;  // mangled -> names index
  std::unordered_map<uint64_t, uint32_t> api_name_index_;        // kind << 32 | cbid -> index

  void parse_record(const CUpti_Activity& record);
  void add_kernel(const CUpti_ActivityKernel10& k);
  void add_memcpy(const CUpti_ActivityMemcpy6& m);
  void add_memset(const CUpti_ActivityMemset4& m);
  void add_api_call(CUpti_ActivityKind kind, const CUpti_ActivityAPI& api);
  void add_external_correlation(const CUpti_ActivityExternalCorrelation& x);
  void add_marker(const CUpti_ActivityMarker2& m);
  // The fields kernel, memcpy and memset records share.
  template <class Record>
  GpuActivity gpu_activity(GpuActivityKind kind, const Record& r);

  uint32_t correlation(uint32_t id);
  uint32_t intern(const std::string& name);
  uint32_t kernel_name(const char* mangled);
  uint32_t api_name(uint32_t kind, uint32_t cbid);
  uint64_t to_harness_clock(uint64_t cupti_ns) const;
};

}  // namespace lantern::harness
