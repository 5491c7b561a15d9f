// Arena: buffer layout (256-byte aligned offsets), views and aliases, the
// checks on declarations, and the one host allocation of the CPU backend.
#include "engine/arena.h"

#include <cstdint>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "kernels/base/errors.h"

namespace lantern {
namespace {

TEST(Arena, BuffersAreLaidOutBackToBackAt256ByteOffsets) {
  Arena a;
  const int x = a.add_buffer("x", 1000, "[250] f32");
  const int y = a.add_buffer("y", 256);
  const int z = a.add_buffer("z", 1);
  EXPECT_EQ(a.buffers()[x].offset, 0u);
  EXPECT_EQ(a.buffers()[y].offset, 1024u);  // 1000 rounded up to 4 x 256
  EXPECT_EQ(a.buffers()[z].offset, 1280u);
  EXPECT_EQ(a.total_bytes(), 1536u);
  EXPECT_EQ(a.buffers()[x].shape, "[250] f32");
}

TEST(Arena, ViewsCoverTheirBufferOrAPartOfIt) {
  Arena a;
  const int b = a.add_buffer("q_attn", 4096);
  const ViewId q = a.add_view("q", b);
  const ViewId out = a.add_view("attn_out", b);  // an alias: same bytes
  const ViewId tail = a.add_view("tail", b, 1024);
  const ViewId mid = a.add_view("mid", b, 512, 256);
  EXPECT_EQ(a.views()[q].bytes, 4096u);
  EXPECT_EQ(a.views()[tail].bytes, 3072u);
  EXPECT_EQ(a.views()[mid].offset, 512u);
  EXPECT_EQ(a.find("attn_out"), out);
  a.allocate(kernels::Backend::cpu);
  ASSERT_TRUE(a.allocated());
  char* base = static_cast<char*>(a.base());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 256, 0u);
  EXPECT_EQ(a.ptr(q), a.ptr(out));
  EXPECT_EQ(a.as<char>(tail), base + 1024);
  EXPECT_EQ(a.as<char>(mid), base + 512);
}

TEST(Arena, ViewPointersAddBufferAndViewOffsets) {
  Arena a;
  a.add_buffer_view("x", 300);
  const int b = a.add_buffer("o_down", 800);
  const ViewId v = a.add_view("o_out", b, 64);
  a.allocate(kernels::Backend::cpu);
  EXPECT_EQ(a.as<char>(v), static_cast<char*>(a.base()) + 512 + 64);
  EXPECT_EQ(a.ptr(a.find("x")), a.base());
}

TEST(Arena, CpuMemoryStartsZeroedAndIsWritable) {
  Arena a;
  const ViewId v = a.add_buffer_view("x", 4000);
  a.allocate(kernels::Backend::cpu);
  const char* p = a.as<char>(v);
  for (int i = 0; i < 4000; ++i) ASSERT_EQ(p[i], 0) << i;
  std::memset(a.ptr(v), 0x5a, 4000);  // ASan flags an allocation that is too small
  a.release();
  EXPECT_FALSE(a.allocated());
  a.release();  // twice is harmless
}

TEST(Arena, BadDeclarationsAreRefused) {
  Arena a;
  const int b = a.add_buffer("x", 256);
  EXPECT_THROW(a.add_buffer("x", 16), Error);                    // duplicate buffer
  a.add_view("v", b);
  EXPECT_THROW(a.add_view("v", b), Error);                        // duplicate view
  EXPECT_THROW(a.add_view("w", b, 200, 100), Error);              // past the buffer's end
  EXPECT_THROW(a.add_view("w", 7), Error);                        // no such buffer
  EXPECT_THROW(a.find("nope"), Error);
  EXPECT_THROW(a.ptr(0), Error);                                  // not allocated yet
  a.allocate(kernels::Backend::cpu);
  EXPECT_THROW(a.add_buffer("late", 16), Error);                  // after allocation
  EXPECT_THROW(a.allocate(kernels::Backend::cpu), Error);         // twice
}

TEST(Arena, AViewPastTheEndNamesTheViewAndTheBuffer) {
  Arena a;
  const int b = a.add_buffer("gate", 128);
  try {
    a.add_view("gate_tail", b, 100, 64);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gate_tail [100, 164) outside buffer gate (128 bytes)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace lantern
