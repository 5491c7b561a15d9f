#pragma once
// The Split pre-tokenizer: cut text into pieces with the tokenizer.json regex
// ("Isolated" behaviour: every match is a piece and so is every gap between
// matches). Matching uses PCRE2 in UTF mode with the JIT.
//
// HF compiles these patterns with Oniguruma, whose \s is the Unicode
// White_Space property and whose \w is Letter|Mark|Decimal_Number|
// Connector_Punctuation. PCRE2 draws both classes differently (its \s adds
// U+180E; before 10.43 its \w lacks marks), so \s, \S, \w and \W are spelled
// out as explicit classes before compiling: the split then no longer depends
// on which engine or version runs it.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lantern::tok {

// Rewrites \s \S \w \W into Oniguruma's explicit Unicode classes (exposed for tests).
std::string expand_class_escapes(std::string_view pattern);

class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern);  // throws naming the pattern on error
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` (valid UTF-8) to `out`; they tile `text` exactly.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
  bool jit_ = false;
};

}  // namespace lantern::tok
