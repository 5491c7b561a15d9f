#pragma once
// Open-addressing hash maps for the tokenizer's hot paths (vocab lookup, BPE
// merge ranks, the piece cache). std::unordered_map allocates a node per entry
// and hashes std::string slowly; these keep keys in one arena and probe
// linearly in a flat slot array, so a lookup touches one or two cache lines.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lantern::tok {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0x87C37B91114253D5ull;
    h ^= h >> 29;
    p += 8, n -= 8;
  }
  uint64_t tail = 0;
  if (n) std::memcpy(&tail, p, n);
  return mix64(h ^ tail);
}

// string -> V. Keys are copied into an arena; V should be small and trivially copyable.
template <typename V>
class FlatStringMap {
 public:
  explicit FlatStringMap(size_t initial_slots = 64) { reset(initial_slots); }

  const V* find(std::string_view key) const { return find_hashed(key, hash_bytes(key)); }
  const V* find_hashed(std::string_view key, uint64_t h) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.len == kEmpty) return nullptr;
      if (s.hash == h && s.len == key.size() &&
          std::memcmp(arena_.data() + s.off, key.data(), key.size()) == 0)
        return &s.value;
    }
  }

  // Inserts when absent; returns false (and keeps the old value) when present.
  bool insert(std::string_view key, V value) { return insert_hashed(key, hash_bytes(key), value); }
  bool insert_hashed(std::string_view key, uint64_t h, V value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.len == kEmpty) {
        s = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), value};
        arena_.append(key);
        ++size_;
        return true;
      }
      if (s.hash == h && s.len == key.size() &&
          std::memcmp(arena_.data() + s.off, key.data(), key.size()) == 0)
        return false;
    }
  }

  size_t size() const { return size_; }
  size_t arena_bytes() const { return arena_.size(); }
  void reset(size_t slots) {
    size_t cap = 16;
    while (cap < slots) cap *= 2;
    slots_.assign(cap, Slot{0, 0, kEmpty, V{}});
    mask_ = cap - 1;
    size_ = 0;
    arena_.clear();
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t hash;
    uint32_t off, len;
    V value;
  };
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{0, 0, kEmpty, V{}});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.len == kEmpty) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].len != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0, size_ = 0;
};

// (left id, right id) -> V, for BPE merges.
template <typename V>
class FlatPairMap {
 public:
  // Sized for a load factor of 0.375..0.75: linear probing stays short, and
  // Llama 3's 280k merges fit in 8 MB instead of 16.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap * 3 < n * 4) cap *= 2;
    slots_.assign(cap, Slot{kEmpty, V{}});
    mask_ = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const V* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t i = mix64(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }
  // Inserts or overwrites (a later duplicate merge wins, as in HF and the JS port).
  void put(int32_t a, int32_t b, V value) {
    const uint64_t k = key(a, b);
    for (size_t i = mix64(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == k || s.key == kEmpty) {
        s = Slot{k, value};
        return;
      }
    }
  }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;  // ids are non-negative: never a real key
  struct Slot {
    uint64_t key;
    V value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace lantern::tok
