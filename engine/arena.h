#pragma once
// Arena: every activation buffer allocated once at start-up, and the views
// (named uses of a buffer) that kernels read and write.
//
// Two views on one buffer are an alias. The seed engine declares two:
//   buffer "q_attn": views "q" (q_proj output) and "attn_out" (attention output)
//   buffer "o_down": views "o_out" (o_proj output) and "mlp_down" (MLP down output)
// Whether their lifetimes really never overlap is checked at run time by the
// harness's alias tracker from the reads/writes each launch declares.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace lantern {

using ViewId = int;

struct ArenaBuffer {
  std::string name;
  size_t bytes = 0;
  size_t offset = 0;  // inside the arena's single allocation (256-byte aligned)
  std::string shape;  // human-readable shape comment, e.g. "[512, 2048] bf16"
};

struct ArenaView {
  std::string name;
  int buffer = -1;
  size_t offset = 0;  // inside the buffer
  size_t bytes = 0;
};

class Arena {
 public:
  int add_buffer(const std::string& name, size_t bytes, const std::string& shape = "");
  // A view covering [offset, offset + bytes) of a buffer; bytes == 0 means "to the end".
  ViewId add_view(const std::string& name, int buffer, size_t offset = 0, size_t bytes = 0);
  // A buffer plus one view of the same name covering it.
  ViewId add_buffer_view(const std::string& name, size_t bytes, const std::string& shape = "");

  // One allocation for all buffers (host memory for cpu, cudaMalloc for cuda).
  void allocate(kernels::Backend backend);
  void release();
  ~Arena() { release(); }
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* ptr(ViewId v) const;
  template <class T>
  T* as(ViewId v) const { return static_cast<T*>(ptr(v)); }
  ViewId find(const std::string& view_name) const;  // throws if absent

  size_t total_bytes() const { return total_bytes_; }
  void* base() const { return base_; }
  kernels::Backend backend() const { return backend_; }
  const std::vector<ArenaBuffer>& buffers() const { return buffers_; }
  const std::vector<ArenaView>& views() const { return views_; }
  bool allocated() const { return base_ != nullptr; }

 private:
  std::vector<ArenaBuffer> buffers_;
  std::vector<ArenaView> views_;
  void* base_ = nullptr;
  size_t total_bytes_ = 0;
  kernels::Backend backend_ = kernels::Backend::cpu;
};

}  // namespace lantern
