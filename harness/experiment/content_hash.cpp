#include "harness/experiment/content_hash.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "engine/common.h"

namespace lantern::experiment {

namespace {

constexpr uint64_t kMul = 0x9fb21c651e98df25ull;

struct Hasher {
  uint64_t h;
  uint64_t length = 0;
  explicit Hasher(uint64_t seed) : h(seed ^ 0x243f6a8885a308d3ull) {}

  void words(const unsigned char* p, size_t n) {  // n % 8 == 0
    for (size_t i = 0; i < n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      w *= kMul;
      w ^= w >> 29;
      h = (h ^ w) * kMul;
      h ^= h >> 32;
    }
  }
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
    uint64_t x = (h ^ length) * kMul;
    x ^= x >> 31;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
    return buf;
  }
};

void hash_into(Hasher& hs, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  LANTERN_CHECK(in, "cannot read %s to hash it (fix: check the model directory)", file.c_str());
  std::vector<unsigned char> buf(8 << 20);  // multiple of 8: chunks hash like one stream
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
