#include "engine/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kernels/base/errors.h"
#include "engine/tokenizer/utf8.h"

namespace lantern::tok {
namespace {

// Oniguruma's \s (= Unicode White_Space) and \w, as class members.
constexpr std::string_view kSpaceMembers =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
constexpr std::string_view kWordMembers = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";

// Per-thread PCRE2 state: matching is const and may run on many threads at once.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
  pcre2_match_context* context = [this] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    if (stack) pcre2_jit_stack_assign(c, nullptr, stack);
    return c;
  }();
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct RegexSplitter::Code {
  pcre2_code* re = nullptr;
  ~Code() { pcre2_code_free(re); }
};

std::string expand_class_escapes(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      std::string_view members = (d == 's' || d == 'S') ? kSpaceMembers : kWordMembers;
      if (d == 's' || d == 'w') {
        out += in_class ? std::string(members) : "[" + std::string(members) + "]";
      } else if (d == 'S' || d == 'W') {
        LANTERN_CHECK(!in_class,
                      "tokenizer regex uses \\%c inside a character class, which Lantern cannot "
                      "translate to explicit Unicode classes: %.*s",
                      d, static_cast<int>(p.size()), p.data());
        out += "[^" + std::string(members) + "]";
      } else if (d == 'Q') {  // \Q...\E is literal text: copy it untouched
        size_t end = p.find("\\E", i + 1);
        end = end == std::string_view::npos ? p.size() : end + 2;
        out += "\\Q";
        out.append(p.substr(i + 1, end - i - 1));
        i = end - 1;
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (c == '[' && in_class && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(const std::string& pattern)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  const std::string expanded = expand_class_escapes(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(),
                            PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  LANTERN_CHECK(code_->re, "tokenizer regex %s does not compile: PCRE2 says '%s' at offset %zu",
                pattern.c_str(), pcre2_message(err).c_str(), static_cast<size_t>(offset));
  // Without a JIT (a PCRE2 built without it) matching still works, only slower.
  jit_ = pcre2_jit_compile(code_->re, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local MatchState ms;
  LANTERN_CHECK(ms.data && ms.context, "PCRE2 could not allocate match data (out of memory)");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0, last = 0;
  while (pos < n) {
    int rc = jit_
                 ? pcre2_jit_match(code_->re, subject, n, pos, 0, ms.data, ms.context)
                 : pcre2_match(code_->re, subject, n, pos, PCRE2_NO_UTF_CHECK, ms.data, ms.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    LANTERN_CHECK(rc >= 0, "tokenizer regex failed on a %zu-byte input: PCRE2 says '%s'", n,
                  pcre2_message(rc).c_str());
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
    const size_t start = ov[0], end = ov[1];
    if (start > last) out.push_back(text.substr(last, start - last));
    if (end > start) out.push_back(text.substr(start, end - start));
    last = end;
    // An empty match must not stall: step one character, as JS matchAll does.
    if (end == start && start >= n) break;
    pos = end > start ? end : start + utf8::next(text.substr(start)).len;
  }
  if (last < n) out.push_back(text.substr(last));
}

}  // namespace lantern::tok
