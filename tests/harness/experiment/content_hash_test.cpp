// Content hashes of the manifest: a file hashes like its bytes in one piece
// (whatever the read chunks), every byte and the length count, and a model
// directory's shards hash in name order.
#include "kernels/base/errors.h"
#include "harness/experiment/content_hash.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace lantern::experiment {
namespace {

TEST(ContentHash, FileEqualsBytesAcrossReadChunksAndEveryByteCounts) {
  auto dir = test::scratch_dir("content-hash");
  std::vector<unsigned char> bytes(20 * 1024 * 1024 +
                                   13);  // crosses two 8 MiB read chunks, odd tail
  for (auto& b : bytes) b = static_cast<unsigned char>(test::rng()());
  auto write = [&](const std::filesystem::path& p, const std::vector<unsigned char>& v) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()), static_cast<long>(v.size()));
  };
  write(dir / "a.bin", bytes);
  const std::string h = hash_file(dir / "a.bin");
  EXPECT_EQ(h.size(), 16u);
  EXPECT_EQ(h, hash_bytes(bytes.data(), bytes.size()));
  for (size_t at : {size_t{0}, size_t{8 * 1024 * 1024 - 1}, bytes.size() - 1}) {
    auto changed = bytes;
    changed[at] ^= 1;
    EXPECT_NE(hash_bytes(changed.data(), changed.size()), h) << at;
  }
  std::vector<unsigned char> zeros(7, 0), more_zeros(8, 0);
  EXPECT_NE(hash_bytes(zeros.data(), zeros.size()),
            hash_bytes(more_zeros.data(), more_zeros.size()));
  EXPECT_THROW(hash_file(dir / "missing.bin"), Error);
}

TEST(ContentHash, WeightsAreEveryShardInNameOrder) {
  auto dir = test::scratch_dir("content-hash-shards");
  std::ofstream(dir / "model-00001-of-00002.safetensors") << "first shard";
  std::ofstream(dir / "model-00002-of-00002.safetensors") << "second shard";
  std::ofstream(dir / "config.json") << "{}";
  const std::string both = hash_weights(dir);
  std::ofstream(dir / "config.json") << "{\"changed\": 1}";
  EXPECT_EQ(hash_weights(dir), both);  // only weights count
  std::ofstream(dir / "model-00002-of-00002.safetensors") << "second shard!";
  EXPECT_NE(hash_weights(dir), both);
  EXPECT_THROW(hash_weights(test::scratch_dir("content-hash-empty")), Error);
}

}  // namespace
}  // namespace lantern::experiment
