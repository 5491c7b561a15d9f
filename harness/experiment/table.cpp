#include "harness/experiment/table.h"

#include <algorithm>

namespace lantern::experiment {

namespace {

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::string render(const Table& t, TableFormat format) {
  std::string out;
  if (format == TableFormat::csv) {
    auto line = [&](const std::vector<std::string>& cells) {
      for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + csv_cell(cells[i]);
      out += "\n";
    };
    line(t.header);
    for (const auto& r : t.rows) line(r);
    return out;
  }
  if (!t.title.empty())
    out += (format == TableFormat::markdown ? "**" + t.title + "**\n\n" : t.title + "\n");
  if (format == TableFormat::markdown) {
    auto line = [&](const std::vector<std::string>& cells) {
      out += "|";
      for (const auto& c : cells) out += " " + md_cell(c) + " |";
      out += "\n";
    };
    line(t.header);
    out += "|";
    for (size_t i = 0; i < t.header.size(); ++i) out += i == 0 ? " --- |" : " ---: |";
    out += "\n";
    for (const auto& r : t.rows) line(r);
  } else {
    std::vector<size_t> w(t.header.size(), 0);
    for (size_t i = 0; i < t.header.size(); ++i) w[i] = t.header[i].size();
    for (const auto& r : t.rows)
      for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    auto line = [&](const std::vector<std::string>& cells) {
      out += " ";
      for (size_t i = 0; i < cells.size() && i < w.size(); ++i) {
        std::string pad(w[i] - cells[i].size(), ' ');
        out += " " + (i == 0 ? cells[i] + pad : pad + cells[i]);
      }
      out += "\n";
    };
    line(t.header);
    for (const auto& r : t.rows) line(r);
  }
  for (const auto& n : t.notes) out += (format == TableFormat::markdown ? "\n" : "  ") + n + "\n";
  return out;
}

}  // namespace lantern::experiment
