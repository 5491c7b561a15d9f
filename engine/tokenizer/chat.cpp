#include "engine/tokenizer/chat.h"

#include "kernels/base/errors.h"
#include "engine/tokenizer/utf8.h"

namespace lantern {
namespace {

constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kHeaderEnd = "<|end_header_id|>\n\n";
constexpr std::string_view kEot = "<|eot_id|>";

// Python's str.isspace(): bidi classes WS/B/S plus Zs.
bool python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void append_turn(std::string& out, std::string_view role, std::string_view content) {
  out.append(kHeaderStart).append(role).append(kHeaderEnd).append(content).append(kEot);
}

}  // namespace

const char* chat_form_name(ChatForm form) {
  return form == ChatForm::llama3 ? "llama3" : "llama31";
}

std::optional<ChatForm> parse_chat_form(std::string_view name) {
  if (name == "llama3") return ChatForm::llama3;
  if (name == "llama31") return ChatForm::llama31;
  return std::nullopt;
}

std::optional<ChatTemplateInfo> detect_chat_template(std::string_view jinja) {
  const bool reads_flag = jinja.find("add_generation_prompt") != std::string_view::npos;
  if (jinja.find("Cutting Knowledge Date") != std::string_view::npos)
    return ChatTemplateInfo{ChatForm::llama31, !reads_flag};
  if (jinja.find(kHeaderStart) != std::string_view::npos &&
      jinja.find(kEot) != std::string_view::npos)
    return ChatTemplateInfo{ChatForm::llama3, !reads_flag};
  return std::nullopt;
}

std::string_view python_strip(std::string_view s) {
  return utf8::trim_right(utf8::trim_left(s, python_space), python_space);
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20)
          out += strformat("\\u%04x", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

std::string render_chat(const ChatTemplateInfo& tmpl, std::string_view bos_token,
                        std::span<const ChatMessage> messages, const ChatOptions& opts) {
  std::string out;
  if (tmpl.form == ChatForm::llama3) {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out.append(bos_token);
      append_turn(out, messages[i].role, python_strip(messages[i].content));
    }
  } else {
    // The 3.1 template reads messages[0]['role'] before anything else, which
    // fails on an empty list in HF; say so instead of guessing.
    LANTERN_CHECK(!messages.empty(),
                  "the Llama 3.1 chat format needs at least one message (got none)");
    size_t first = 0;
    std::string_view system;
    if (messages[0].role == "system") system = python_strip(messages[0].content), first = 1;
    out.append(bos_token).append(kHeaderStart).append("system").append(kHeaderEnd);
    out.append("Cutting Knowledge Date: December 2023\nToday Date: ").append(opts.date);
    out.append("\n\n").append(system).append(kEot);
    for (size_t i = first; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (m.role == "tool" || m.role == "ipython")
        append_turn(out, "ipython", json_quote(m.content));
      else
        append_turn(out, m.role, python_strip(m.content));
    }
  }
  if (opts.add_generation_prompt || tmpl.always_adds_generation_prompt)
    out.append(kHeaderStart).append("assistant").append(kHeaderEnd);
  return out;
}

}  // namespace lantern
