#include "harness/experiment/content_hash.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "kernels/base/errors.h"

namespace lantern::experiment {

namespace {

constexpr uint64_t kMul = 0x9fb21c651e98df25ull;

// Four independent lanes over consecutive 8-byte words (the multiply chain
// of one lane is latency-bound), folded together at the end.
struct Hasher {
  uint64_t lane[4];
  uint64_t length = 0;
  explicit Hasher(uint64_t seed) {
    for (int l = 0; l < 4; ++l)
      lane[l] = (seed + static_cast<uint64_t>(l)) * kMul ^ 0x243f6a8885a308d3ull;
  }

  static void mix(uint64_t& h, const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w *= kMul;
    w ^= w >> 29;
    h = (h ^ w) * kMul;
    h ^= h >> 32;
  }
  void words(const unsigned char* p, size_t n) {  // n % 8 == 0
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
      for (int l = 0; l < 4; ++l) mix(lane[l], p + i + 8 * l);
    for (; i < n; i += 8) mix(lane[0], p + i);
  }
  // Every update but the last must be a multiple of 32 bytes (hash_into's
  // chunks are) so the lanes see the same words however the stream is cut.
  void update(const unsigned char* p, size_t n) {
    length += n;
    const size_t whole = n & ~size_t{7};
    words(p, whole);
    if (whole < n) {
      unsigned char tail[8] = {};
      std::memcpy(tail, p + whole, n - whole);
      tail[7] ^= static_cast<unsigned char>(n - whole);
      words(tail, 8);
    }
  }
  std::string hex() const {
    uint64_t x = length * kMul;
    for (int l = 0; l < 4; ++l) {
      x = (x ^ lane[l]) * kMul;
      x ^= x >> 31;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
    return buf;
  }
};

void hash_into(Hasher& hs, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  LANTERN_CHECK(in, "cannot read %s to hash it (fix: check the model directory)", file.c_str());
  std::vector<unsigned char> buf(8 << 20);  // a multiple of 32: chunks hash like one stream
  while (in) {
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    hs.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
}

}  // namespace

std::string hash_bytes(const void* data, size_t n, uint64_t seed) {
  Hasher hs(seed);
  hs.update(static_cast<const unsigned char*>(data), n);
  return hs.hex();
}

std::string hash_file(const std::filesystem::path& file) {
  Hasher hs(0);
  hash_into(hs, file);
  return hs.hex();
}

std::string hash_weights(const std::filesystem::path& model_dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(model_dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  LANTERN_CHECK(!files.empty(),
                "%s holds no .safetensors file (fix: point model.path at an HF model directory)",
                model_dir.c_str());
  std::sort(files.begin(), files.end());
  Hasher hs(1);
  for (const auto& f : files) hash_into(hs, f);
  return hs.hex();
}

}  // namespace lantern::experiment
