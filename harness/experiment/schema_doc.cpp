#include "kernels/base/errors.h"
#include "harness/experiment/schema.h"
#include "harness/experiment/table.h"

namespace lantern::experiment {

std::string schema_markdown() {
  Table t;
  t.header = {"field", "type", "default", "range", "meaning"};
  for (const Field& f : schema()) {
    std::string range;
    for (const auto& c : f.choices) range += (range.empty() ? "" : ", ") + c;
    if (f.choices.empty() && (f.min || f.max))
      range = strformat("%g .. %g", f.min.value_or(0), f.max.value_or(0));
    const std::string def = f.kind == Kind::object ? "" : "`" + f.def.dump() + "`";
    t.rows.push_back({"`" + f.path + "`", kind_name(f.kind), def, range, f.doc});
  }
  return render(t, TableFormat::markdown);
}

}  // namespace lantern::experiment
