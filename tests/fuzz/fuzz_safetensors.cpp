// libFuzzer target: a whole safetensors file (length prefix, header JSON,
// offsets, data area) through the reader Lantern uses, then the tensor table
// matcher against a micro config.
#include <cstddef>
#include <cstdint>

#include "engine/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lantern;
  const auto dir = fuzz::scratch() / "st";
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir / "model.safetensors", {reinterpret_cast<const char*>(data), size});
  fuzz::expect_clean([&] {
    SafetensorsModel m = open_safetensors_model(dir);
    // Every tensor the reader accepted lies inside the file, in order.
    for (const SafetensorsEntry* e : m.all())
      if (e->begin > e->end || e->end > m.files[0].file_bytes || e->begin < m.files[0].data_start)
        __builtin_trap();
    ModelConfig cfg;
    cfg.hidden_size = 8, cfg.intermediate_size = 16, cfg.num_layers = 1, cfg.num_q_heads = 2,
    cfg.num_kv_heads = 1, cfg.head_dim = 4, cfg.vocab_size = 16, cfg.max_position_embeddings = 64,
    cfg.tie_word_embeddings = true;
    std::vector<std::string> extra;
    match_tensor_table(m, expected_tensors(cfg), &extra);
  });
  return 0;
}
