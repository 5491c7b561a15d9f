// libFuzzer target: config.json bytes -> ModelConfig (and, when it parses,
// its rope frequencies and JSON round trip).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "engine/config.h"
#include "kernels/base/json_parse.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lantern;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean([&] {
    nlohmann::json j = parse_json_text(text, "config.json");
    fuzz::expect_clean([&] {
      ModelConfig c = ModelConfig::from_json(j);
      // Accepted configs round-trip and give finite rotary frequencies.
      ModelConfig again = ModelConfig::from_json(c.to_json());
      if (again.hidden_size != c.hidden_size || again.eos_token_ids != c.eos_token_ids)
        __builtin_trap();
      if (c.head_dim <= 4096)
        for (float f : rope_inv_freq(c))
          if (!std::isfinite(f)) __builtin_trap();
    });
  });
  return 0;
}
