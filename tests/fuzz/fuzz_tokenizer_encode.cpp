// libFuzzer target: arbitrary bytes through encode / decode / pre_tokenize /
// StreamDecoder with the real Llama 3 tokenizer (third_party/npm/llama3, or
// LANTERN_FUZZ_TOKENIZER), checking decode(encode(x)) == x for valid UTF-8
// and that streaming decode equals decode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
const lantern::Tokenizer& tokenizer() {
  static const lantern::Tokenizer t = [] {
    const char* p = std::getenv("LANTERN_FUZZ_TOKENIZER");
    return lantern::Tokenizer::load(p ? p : LANTERN_SOURCE_DIR "/third_party/npm/llama3");
  }();
  return t;
}
}  // namespace

// Loading the 9 MB tokenizer.json under ASan takes seconds: done before the
// first input, so it never counts against libFuzzer's per-input -timeout
// (parallel jobs on a loaded machine reported it as a timeout).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lantern;
  const Tokenizer& t = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool allow_special = size > 0 && (data[0] & 1);
  std::vector<int32_t> ids = t.encode(text, allow_special);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  const std::string back = t.decode(ids);
  std::string repaired;
  utf8::append_repaired(text, repaired);
  if (back != repaired) __builtin_trap();  // lossless on (repaired) text
  StreamDecoder stream(t);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (streamed != back) __builtin_trap();
  t.pre_tokenize(text, allow_special);
  return 0;
}
