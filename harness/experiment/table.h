#pragma once
// A small table printed as aligned text, CSV (RFC 4180) or GitHub Markdown:
// `lantern compare` and `lantern sweep` print through it.
#include <string>
#include <vector>

namespace lantern::experiment {

enum class TableFormat { text, csv, markdown };

struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;  // printed under the table (not in CSV)
};

std::string render(const Table& t, TableFormat format);

}  // namespace lantern::experiment
