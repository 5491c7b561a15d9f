#include "engine/arena.h"

#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include "kernels/base/cuda_check.h"
#include "kernels/base/errors.h"

namespace lantern {

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
}  // namespace

int Arena::add_buffer(const std::string& name, size_t bytes, const std::string& shape) {
  LANTERN_ASSERT(!allocated(), "buffer %s declared after allocation", name.c_str());
  for (const auto& b : buffers_) LANTERN_ASSERT(b.name != name, "duplicate buffer %s", name.c_str());
  buffers_.push_back(ArenaBuffer{name, bytes, total_bytes_, shape});
  total_bytes_ = align_up(total_bytes_ + bytes);
  return static_cast<int>(buffers_.size()) - 1;
}

ViewId Arena::add_view(const std::string& name, int buffer, size_t offset, size_t bytes) {
  LANTERN_ASSERT(buffer >= 0 && buffer < static_cast<int>(buffers_.size()), "bad buffer %d", buffer);
  for (const auto& v : views_) LANTERN_ASSERT(v.name != name, "duplicate view %s", name.c_str());
  const ArenaBuffer& b = buffers_[buffer];
  if (bytes == 0) bytes = b.bytes - offset;
  LANTERN_ASSERT(offset + bytes <= b.bytes, "view %s [%zu, %zu) outside buffer %s (%zu bytes)",
                 name.c_str(), offset, offset + bytes, b.name.c_str(), b.bytes);
  views_.push_back(ArenaView{name, buffer, offset, bytes});
  return static_cast<ViewId>(views_.size()) - 1;
}

ViewId Arena::add_buffer_view(const std::string& name, size_t bytes, const std::string& shape) {
  return add_view(name, add_buffer(name, bytes, shape));
}

void Arena::allocate(kernels::Backend backend) {
  LANTERN_ASSERT(!allocated(), "arena allocated twice");
  backend_ = backend;
  size_t bytes = total_bytes_ ? total_bytes_ : kAlign;
  if (backend == kernels::Backend::cpu) {
    base_ = std::aligned_alloc(kAlign, align_up(bytes));
    LANTERN_CHECK(base_, "out of host memory allocating the %zu-byte activation arena", bytes);
    std::memset(base_, 0, bytes);
  } else {
    void* p = nullptr;  // base_ stays null on failure
    CUDA_CHECK_HINT(cudaMalloc(&p, bytes),
                    "the %zu-byte activation arena does not fit: lower the batch limits "
                    "(max_batch_tokens, max_seqs)",
                    bytes);
    base_ = p;
  }
}

void Arena::release() {
  if (!base_) return;
  if (backend_ == kernels::Backend::cpu)
    std::free(base_);
  else
    CUDA_CHECK_LOG(cudaFree(base_));
  base_ = nullptr;
}

void* Arena::ptr(ViewId v) const {
  LANTERN_ASSERT(allocated(), "arena not allocated");
  const ArenaView& view = views_.at(v);
  return static_cast<char*>(base_) + buffers_[view.buffer].offset + view.offset;
}

ViewId Arena::find(const std::string& view_name) const {
  for (size_t i = 0; i < views_.size(); ++i)
    if (views_[i].name == view_name) return static_cast<ViewId>(i);
  LANTERN_FAIL("no arena view named '%s'", view_name.c_str());
}

}  // namespace lantern
