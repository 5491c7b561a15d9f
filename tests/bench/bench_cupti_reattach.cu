// Probe for windowed CUPTI collection (docs/harness.md § Overhead): can the
// harness detach CUPTI (cuptiFinalize) between windows of traced steps and
// re-attach later, and still label replayed CUDA-graph kernels?
//
// Questions, each answered by a printed line:
//   1. What does one attach (callbacks, subscriber, kinds) and one detach
//      (flush, disable, unsubscribe, cuptiFinalize) cost on the host?
//   2. Do kernel records of a graph replayed after a detach/re-attach carry
//      the same graphNodeId values as before the detach?
//   3. For a graph captured and instantiated while CUPTI was detached, do its
//      replays' graphNodeIds match cuptiGetGraphNodeId of the captured nodes
//      (no node-creation callbacks seen)?
//
//   build/<preset>/bench/bench_cupti_reattach          (needs a GPU; prints, exits 0)
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "harness/cupti_check.h"
#include "kernels/base/cuda_check.h"

namespace {

__global__ void tick(float* p, int i) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p[i] += 1.f;
}


std::mutex g_mutex;
std::vector<uint64_t> g_kernel_nodes;       // graphNodeId of every kernel record
std::map<uint64_t, uint64_t> g_clone_of;    // cloned node id -> original node id
std::set<uint64_t> g_created;               // node ids seen created
CUpti_SubscriberHandle g_subscriber = nullptr;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 20;
  *buffer = static_cast<uint8_t*>(std::calloc(1, *size));
  *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      g_kernel_nodes.push_back(reinterpret_cast<CUpti_ActivityKernel10*>(record)->graphNodeId);
  std::free(buffer);
}

void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  const auto* g = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
  uint64_t id = 0, original = 0;
  if (cuptiGetGraphNodeId(g->node, &id) != CUPTI_SUCCESS) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) g_created.insert(id);
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED &&
      cuptiGetGraphNodeId(g->originalNode, &original) == CUPTI_SUCCESS)
    g_clone_of[id] = original;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double attach() {
  auto t0 = std::chrono::steady_clock::now();
  LANTERN_CUPTI(cuptiActivityRegisterCallbacks(requested, completed));
  LANTERN_CUPTI(cuptiSubscribe(&g_subscriber, on_resource, nullptr));
  LANTERN_CUPTI(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
  LANTERN_CUPTI(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
    LANTERN_CUPTI(cuptiActivityEnable(k));
  return ms_since(t0);
}

double detach() {
  auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaDeviceSynchronize());
  LANTERN_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
    LANTERN_CUPTI(cuptiActivityDisable(k));
  LANTERN_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  LANTERN_CUPTI(cuptiUnsubscribe(g_subscriber));
  LANTERN_CUPTI(cuptiFinalize());
  return ms_since(t0);
}

cudaGraphExec_t capture(cudaStream_t s, float* p, std::vector<cudaGraphNode_t>* nodes, cudaGraph_t* graph) {
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 3; ++i) tick<<<1, 32, 0, s>>>(p, i);
  CUDA_CHECK(cudaStreamEndCapture(s, graph));
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(*graph, nullptr, &n));
  nodes->resize(n);
  CUDA_CHECK(cudaGraphGetNodes(*graph, nodes->data(), &n));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, *graph, 0));
  return exec;
}

std::set<uint64_t> replay_ids(cudaGraphExec_t exec, cudaStream_t s, int times) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_kernel_nodes.clear();
  }
  for (int i = 0; i < times; ++i) CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  LANTERN_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  std::lock_guard<std::mutex> lock(g_mutex);
  return std::set<uint64_t>(g_kernel_nodes.begin(), g_kernel_nodes.end());
}

void print_ids(const char* what, const std::set<uint64_t>& ids) {
  std::printf("%s:", what);
  for (uint64_t id : ids) std::printf(" %llu", static_cast<unsigned long long>(id));
  std::printf("\n");
}

int run_probe() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cupti_reattach: no usable CUDA GPU; nothing to probe\n");
    return 0;
  }
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  float* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, 64 * sizeof(float)));
  CUDA_CHECK(cudaMemset(p, 0, 64 * sizeof(float)));

  // 1 + 2: graph captured while attached, replayed before and after a detach.
  std::printf("attach: %.3f ms (first)\n", attach());
  std::vector<cudaGraphNode_t> nodes_a;
  cudaGraph_t graph_a;
  cudaGraphExec_t exec_a = capture(s, p, &nodes_a, &graph_a);
  std::set<uint64_t> before = replay_ids(exec_a, s, 2);
  print_ids("graph A replay kernel node ids, attached since capture", before);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::printf("graph A: %zu nodes created seen, %zu clones seen\n", g_created.size(), g_clone_of.size());
  }
  std::printf("detach: %.3f ms\n", detach());
  for (int i = 0; i < 3; ++i) {
    double a = attach();
    double d = detach();
    std::printf("cycle %d: attach %.3f ms, detach %.3f ms\n", i, a, d);
  }
  std::printf("attach: %.3f ms\n", attach());
  std::set<uint64_t> after = replay_ids(exec_a, s, 2);
  print_ids("graph A replay kernel node ids, after detach + re-attach", after);
  std::printf("ANSWER 2: node ids %s across detach/re-attach\n", before == after ? "STABLE" : "CHANGE");
  std::printf("detach: %.3f ms\n", detach());

  // 3: graph captured and instantiated while detached.
  std::vector<cudaGraphNode_t> nodes_b;
  cudaGraph_t graph_b;
  cudaGraphExec_t exec_b = capture(s, p, &nodes_b, &graph_b);
  std::printf("attach: %.3f ms\n", attach());
  std::set<uint64_t> captured_ids;
  for (cudaGraphNode_t n : nodes_b) {
    uint64_t id = 0;
    LANTERN_CUPTI(cuptiGetGraphNodeId(n, &id));
    captured_ids.insert(id);
  }
  print_ids("graph B captured node ids (cuptiGetGraphNodeId after attach)", captured_ids);
  std::set<uint64_t> b_ids = replay_ids(exec_b, s, 2);
  print_ids("graph B replay kernel node ids", b_ids);
  std::printf("ANSWER 3: replay ids %s the captured nodes' ids\n",
              b_ids == captured_ids ? "EQUAL" : "DIFFER FROM");
  std::printf("detach: %.3f ms\n", detach());

  CUDA_CHECK(cudaGraphExecDestroy(exec_a));
  CUDA_CHECK(cudaGraphExecDestroy(exec_b));
  CUDA_CHECK(cudaGraphDestroy(graph_a));
  CUDA_CHECK(cudaGraphDestroy(graph_b));
  CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}

}  // namespace

int main() {
  try {
    return run_probe();
  } catch (const lantern::Error& e) {
    std::fprintf(stderr, "bench_cupti_reattach: %s\n", e.what());
    return 1;
  }
}
