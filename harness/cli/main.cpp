// `lantern`: entry point; dispatches to the subcommands registered in cli/*.cpp.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "harness/cli/command.h"
#include "harness/cli/tp_launch.h"

namespace lantern::cli {

std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> table;
  return table;
}

Registrar::Registrar(const char* name, const char* summary, CommandFn fn) {
  commands()[name] = Command{name, summary, std::move(fn)};
}

Args::Args(std::vector<std::string> argv, std::vector<std::string> value_options,
           std::vector<std::string> flag_options) {
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string key = a, value;
      bool inline_value = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        key = a.substr(0, eq);
        value = a.substr(eq + 1);
        inline_value = true;
      }
      if (has(flag_options, key) && !inline_value) {
        flags_.push_back(key);
      } else if (has(value_options, key)) {
        if (!inline_value) {
          LANTERN_CHECK(i + 1 < argv.size(), "option %s needs a value", key.c_str());
          value = argv[++i];
        }
        values_[key] = value;
        all_values_[key].push_back(value);
      } else {
        std::string valid;
        for (const auto& o : value_options) valid += " " + o;
        for (const auto& o : flag_options) valid += " " + o;
        LANTERN_FAIL("unknown option %s: valid options are%s", key.c_str(), valid.c_str());
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::optional<std::string> Args::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}
std::vector<std::string> Args::get_all(const std::string& key) const {
  auto it = all_values_.find(key);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}
std::string Args::require(const std::string& key) const {
  auto v = get(key);
  LANTERN_CHECK(v.has_value(), "missing required option %s", key.c_str());
  return *v;
}
std::string Args::get_or(const std::string& key, const std::string& fallback) const {
  return get(key).value_or(fallback);
}
long Args::get_int(const std::string& key, long fallback, long lo, long hi) const {
  auto v = get(key);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v->c_str(), &end, 10);
  LANTERN_CHECK(end && *end == '\0' && !v->empty() && errno != ERANGE && x >= lo && x <= hi,
                "option %s expects an integer in [%ld, %ld], got '%s'", key.c_str(), lo, hi,
                lantern::cut_for_message(*v).c_str());
  return x;
}
double Args::get_double(const std::string& key, double fallback, double lo, double hi) const {
  auto v = get(key);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  LANTERN_CHECK(end && *end == '\0' && !v->empty() && std::isfinite(x) && x >= lo && x <= hi,
                "option %s expects a number in [%g, %g], got '%s'", key.c_str(), lo, hi,
                lantern::cut_for_message(*v).c_str());
  return x;
}
bool Args::flag(const std::string& key) const {
  for (const auto& f : flags_)
    if (f == key) return true;
  return false;
}

}  // namespace lantern::cli

static void usage() {
  std::fprintf(stderr, "usage: lantern <command> [options]\n\ncommands:\n");
  for (const auto& [name, c] : lantern::cli::commands())
    std::fprintf(stderr, "  %-12s %s\n", name.c_str(), c.summary.c_str());
}

// One line per problem (experiment validation reports them all).
static void print_error(const std::string& who, const std::string& what) {
  size_t start = 0;
  do {
    size_t end = what.find('\n', start);
    std::fprintf(stderr, "lantern %s: error: %s\n", who.c_str(), what.substr(start, end - start).c_str());
    start = end == std::string::npos ? end : end + 1;
  } while (start != std::string::npos && start < what.size());
}

// A tensor-parallel rank > 0 (started by rank 0 with --tp-rank).
static int follower(const std::vector<std::string>& rest) {
  try {
    return lantern::cli::tp_follower_main(rest);
  } catch (const std::exception& e) {
    std::string rank = "rank ?";
    for (size_t i = 0; i + 1 < rest.size(); ++i)
      if (rest[i] == "--tp-rank") rank = "rank " + rest[i + 1];
    print_error(rank, e.what());
    return 1;
  }
}

// Rank 0 of a --tp run: the followers must end too; a failed one fails the run.
static int finish_tensor_parallel(const std::string& command, int code) {
  auto& group = lantern::cli::current_tp_group();
  if (!group) return code;
  const std::string failure = group->finish(code != 0);
  group.reset();
  if (!failure.empty() && code == 0) {
    print_error(command, failure);
    return 1;
  }
  return code;
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (lantern::cli::is_tp_follower(rest)) return follower(rest);
  auto& table = lantern::cli::commands();
  auto it = table.find(argv[1]);
  if (it == table.end()) {
    std::fprintf(stderr, "lantern: unknown command '%s'\n", argv[1]);
    usage();
    return 2;
  }
  for (const std::string& a : rest)
    if (a == "--help" || a == "-h") {
      std::fputs(lantern::cli::help_text(argv[1]).c_str(), stdout);
      return 0;
    }
  int code = 1;
  try {
    code = it->second.fn(rest);
  } catch (const std::exception& e) {
    print_error(argv[1], e.what());
  }
  return finish_tensor_parallel(argv[1], code);
}
