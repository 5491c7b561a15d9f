#include "harness/manifest.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <fstream>
#include <string>
#include <thread>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"
#include "harness/cupti_check.h"
#include "lantern/build_info.h"

extern char** environ;  // POSIX: the process environment

namespace lantern::harness {

namespace {

// Runs a read-only command and returns its stdout (trailing newline removed);
// false when it could not run or exited non-zero.
bool run_capture(const std::string& command, std::string* out) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return false;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  int status = pclose(pipe);
  if (status != 0) return false;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  *out = text;
  return true;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

std::string version_string(int v) {  // CUDA's 1000 * major + 10 * minor
  return strformat("%d.%d", v / 1000, (v % 1000) / 10);
}

}  // namespace

nlohmann::json git_info() {
  const std::string dir = shell_quote(LANTERN_SOURCE_DIR);
  std::string commit, status;
  if (run_capture("git -C " + dir + " rev-parse HEAD 2>/dev/null", &commit) && commit.size() == 40 &&
      run_capture("git --no-optional-locks -C " + dir +
                      " status --porcelain --untracked-files=no 2>/dev/null",
                  &status)) {
    return {{"commit", commit}, {"dirty", !status.empty()}, {"source", "git"},
            {"commit_at_configure", LANTERN_GIT_COMMIT_AT_CONFIGURE}};
  }
  return {{"commit", LANTERN_GIT_COMMIT_AT_CONFIGURE}, {"dirty", nullptr}, {"source", "configure"},
          {"commit_at_configure", LANTERN_GIT_COMMIT_AT_CONFIGURE}};
}

nlohmann::json build_info() {
  return {{"version", LANTERN_VERSION},
          {"type", LANTERN_BUILD_TYPE},
          {"flags", LANTERN_BUILD_FLAGS},
          {"instrumentation", LANTERN_INSTRUMENTATION != 0}};
}

nlohmann::json host_info() {
  nlohmann::json j;
  char host[256] = {};
  j["hostname"] = gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string();
  utsname u;
  if (uname(&u) == 0) {
    j["os"] = std::string(u.sysname) + " " + u.release;
    j["kernel"] = u.version;
    j["arch"] = u.machine;
  }
  std::ifstream release("/etc/os-release");
  for (std::string line; std::getline(release, line);) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      j["distribution"] = v;
    }
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) j["cpu"] = line.substr(colon + 2);
      break;
    }
  }
  j["cpu_cores"] = std::thread::hardware_concurrency();
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  j["memory_bytes"] = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
  return j;
}

nlohmann::json gpu_info(int device) {
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  auto attr = [&](cudaDeviceAttr a) {
    int v = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
    return v;
  };
  std::string uuid = "GPU-";
  const auto* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  for (int i = 0; i < 16; ++i) {
    uuid += strformat("%02x", u[i]);
    if (i == 3 || i == 5 || i == 7 || i == 9) uuid += '-';
  }
  return {{"index", device},
          {"name", p.name},
          {"uuid", uuid},
          {"compute_capability", strformat("%d.%d", p.major, p.minor)},
          {"sm_count", p.multiProcessorCount},
          {"memory_bytes", static_cast<uint64_t>(p.totalGlobalMem)},
          {"sm_clock_khz", attr(cudaDevAttrClockRate)},
          {"memory_clock_khz", attr(cudaDevAttrMemoryClockRate)},
          {"memory_bus_bits", attr(cudaDevAttrGlobalMemoryBusWidth)},
          {"l2_bytes", attr(cudaDevAttrL2CacheSize)},
          {"pci_bus_id", strformat("%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID)}};
}

nlohmann::json library_versions(bool query_cupti) {
  nlohmann::json j;
  int v = 0;
  j["cuda_runtime"] = cudaRuntimeGetVersion(&v) == cudaSuccess ? nlohmann::json(version_string(v))
                                                                 : nlohmann::json(nullptr);
  v = 0;
  j["cuda_driver"] = cudaDriverGetVersion(&v) == cudaSuccess && v > 0
                         ? nlohmann::json(version_string(v))
                         : nlohmann::json(nullptr);
  (void)cudaGetLastError();  // a failed version query is not a later call's error
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    j["cublas"] = strformat("%d.%d.%d", major, minor, patch);
  else
    j["cublas"] = nullptr;
  j["cupti_api_compiled"] = CUPTI_API_VERSION;
  j["cupti_api"] = nullptr;
  if (query_cupti) {
    uint32_t api = 0;
    if (cuptiGetVersion(&api) == CUPTI_SUCCESS) j["cupti_api"] = api;
  }
  return j;
}

nlohmann::json lantern_environment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && kv.rfind("LANTERN_", 0) == 0) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : vars) j[name] = value;
  return j;
}

std::vector<std::string> apply_recorded_environment(const nlohmann::json& recorded) {
  std::vector<std::string> notes;
  if (!recorded.is_object()) return notes;
  const nlohmann::json now = lantern_environment();
  for (const auto& [name, value] : recorded.items()) {
    if (!value.is_string()) continue;
    const std::string want = value.get<std::string>();
    if (now.contains(name) && now[name] != want)
      notes.push_back(name + "=" + want + " (recorded) vs " + now[name].get<std::string>() +
                      " (here): the recorded value is used");
    setenv(name.c_str(), want.c_str(), 1);
  }
  for (const auto& [name, value] : now.items())
    if (!recorded.contains(name))
      notes.push_back(name + "=" + value.get<std::string>() + " is set here but was not recorded: kept");
  return notes;
}

}  // namespace lantern::harness
