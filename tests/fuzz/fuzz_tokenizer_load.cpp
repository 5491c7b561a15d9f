// libFuzzer target: tokenizer.json and tokenizer_config.json bytes (split at
// the first "\n--8<--\n") -> Tokenizer::load; a tokenizer that loads then
// encodes and decodes a fixed text.
#include <cstddef>
#include <cstdint>

#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lantern;
  const auto parts = fuzz::split({reinterpret_cast<const char*>(data), size}, "\n--8<--\n", 2);
  const auto dir = fuzz::scratch() / "tok";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "tokenizer.json", parts[0]);
  std::filesystem::remove(dir / "tokenizer_config.json");
  if (parts.size() > 1) fuzz::write_file(dir / "tokenizer_config.json", parts[1]);
  fuzz::expect_clean([&] {
    Tokenizer t = Tokenizer::load(dir);
    std::vector<int32_t> ids = t.encode("Hello, world! 123 <|eot_id|> \xF0\x9F\x98\x80");
    t.decode(ids);
    std::vector<ChatMessage> msgs = {{"user", "hi"}};
    if (t.chat_template()) t.render_chat(msgs);
  });
  return 0;
}
