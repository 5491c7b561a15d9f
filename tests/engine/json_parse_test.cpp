// Hostile JSON (issue 15's probe): nesting that crashed nlohmann, duplicate
// keys it kept silently, exceptions that surfaced raw, inputs echoed in full.
#include "kernels/base/json_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/base/errors.h"

namespace lantern {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string error_of(std::string_view text) {
  try {
    parse_json_text(text, "in.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JsonParse, BoundsNestingDepthBeforeParsing) {
  // 60,000 '[' crashed `lantern detokenize` with SIGSEGV and nothing on stderr.
  EXPECT_THAT(error_of(std::string(60000, '[')),
              HasSubstr("in.json: JSON nested deeper than 256 levels at byte 256"));
  EXPECT_THAT(error_of(std::string(100000, '{')), HasSubstr("nested deeper than 256 levels"));
  // Brackets inside strings do not count; exactly the bound is fine.
  std::string in_string = "[\"";
  in_string.append(5000, '[');
  in_string.append("\"]");
  EXPECT_EQ(error_of(in_string), "(no error)");
  EXPECT_EQ(error_of(std::string(256, '[') + std::string(256, ']')), "(no error)");
  EXPECT_THAT(error_of(std::string(257, '[') + std::string(257, ']')), HasSubstr("nested deeper"));
}

TEST(JsonParse, RejectsDuplicateKeysInOneObjectOnly) {
  EXPECT_THAT(error_of(R"({"a": 1, "b": 2, "a": 3})"),
              HasSubstr("in.json: key \"a\" appears twice in one object: remove one"));
  EXPECT_THAT(error_of(R"({"x": {"k": 1, "k": 2}})"), HasSubstr("key \"k\" appears twice"));
  // The same spelling decoded from an escape is the same key.
  EXPECT_THAT(error_of(R"({"a": 1, "\u0061": 2})"), HasSubstr("key \"a\" appears twice"));
  // Same key in sibling objects, and a value equal to a key, are fine.
  EXPECT_EQ(error_of(R"({"x": {"k": 1}, "y": {"k": 2}, "z": "x", "w": ["x", "y"]})"), "(no error)");
  EXPECT_EQ(parse_json_text(R"({"a": {"b": [1, {"a": 2}]}})", "t")["a"]["b"][1]["a"], 2);
}

TEST(JsonParse, SyntaxAndRangeErrorsAreOneCleanLine) {
  std::string e = error_of(R"({"a": })");
  EXPECT_THAT(e, HasSubstr("in.json is not valid JSON (line 1, column 7: syntax error"));
  EXPECT_THAT(e, Not(HasSubstr("[json.exception")));
  // out_of_range.406 surfaced raw before.
  e = error_of(R"({"rope_theta": 1e999})");
  EXPECT_THAT(e, HasSubstr("in.json is not valid JSON (number overflow parsing '1e999')"));
  EXPECT_THAT(e, Not(HasSubstr("[json.exception")));
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(JsonParse, CutsLongInputsInMessages) {
  std::string doc = "{\"";
  doc.append(20000, 'k');
  doc.append("\": 1, \"");
  doc.append(20000, 'k');
  doc.append("\": 2}");
  std::string e = error_of(doc);
  EXPECT_THAT(e, HasSubstr("... (20000 bytes)"));
  EXPECT_LT(e.size(), 300u);
  EXPECT_EQ(cut_for_message("short"), "short");
  // Never cuts inside a UTF-8 character.
  std::string s = "a";
  for (int i = 0; i < 50; ++i) s += "\xC3\xA9";  // é
  std::string cut = cut_for_message(s, 10);
  EXPECT_NE(static_cast<unsigned char>(cut[cut.find("...") - 1]) & 0xC0, 0xC0);
}

TEST(JsonParse, FileErrorsNameThePath) {
  EXPECT_THAT(
      [] {
        try {
          parse_json_file("/nonexistent/x.json");
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("cannot read /nonexistent/x.json: No such file or directory"));
}

}  // namespace
}  // namespace lantern
