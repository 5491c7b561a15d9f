// libFuzzer target: arbitrary messages through both Llama 3 chat forms. The
// input is split at "\x1e" into role, content, role, content, ...; the first
// byte picks the form and add_generation_prompt. Checks: rendering never
// fails for llama3 and for a non-empty llama31 list, every content appears
// (trimmed) in the output, and detect_chat_template never throws.
#include <cstddef>
#include <cstdint>

#include "engine/tokenizer/chat.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lantern;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto parts = fuzz::split(rest, "\x1e", 64);
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i + 1 < parts.size(); i += 2)
    msgs.push_back({std::string(parts[i]), std::string(parts[i + 1])});
  ChatTemplateInfo tmpl{(mode & 1) ? ChatForm::llama31 : ChatForm::llama3, (mode & 4) != 0};
  ChatOptions opts;
  opts.add_generation_prompt = (mode & 2) != 0;
  fuzz::expect_clean([&] {
    std::string out = render_chat(tmpl, "<|begin_of_text|>", msgs, opts);
    for (const auto& m : msgs)
      if (m.role != "tool" && m.role != "ipython" &&
          out.find(python_strip(m.content)) == std::string::npos)
        __builtin_trap();
  });
  detect_chat_template(rest);
  json_quote(rest);
  return 0;
}
