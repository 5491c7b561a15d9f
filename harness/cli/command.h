#pragma once
// `lantern` subcommands: each lives in its own file and registers itself with
// LANTERN_COMMAND(name, summary, function).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lantern::cli {

// Parsed "--key value" / "--flag" options plus positional arguments. Every
// option a command reads must be declared; unknown ones are an error.
class Args {
 public:
  Args(std::vector<std::string> argv, std::vector<std::string> value_options,
       std::vector<std::string> flag_options);
  std::optional<std::string> get(const std::string& key) const;  // the last one given
  std::vector<std::string> get_all(const std::string& key) const;  // every one, in order (--set)
  std::string require(const std::string& key) const;  // throws naming the missing option
  std::string get_or(const std::string& key, const std::string& fallback) const;
  // Whole-string numbers in full range, checked against [lo, hi] (the default
  // is what an int holds): "--repeat 4294967296" is an error, not 0.
  long get_int(const std::string& key, long fallback, long lo = -2147483647L - 1,
               long hi = 2147483647L) const;
  // Finite numbers only, checked against [lo, hi].
  double get_double(const std::string& key, double fallback, double lo = -1.79e308,
                    double hi = 1.79e308) const;
  bool flag(const std::string& key) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  std::vector<std::string> flags_;
  std::vector<std::string> positional_;
};

using CommandFn = std::function<int(const std::vector<std::string>& argv)>;
struct Command {
  std::string name, summary;
  CommandFn fn;
};
std::map<std::string, Command>& commands();
// `lantern CMD --help` and `lantern help CMD`: usage, every option with its
// default, one example (help.cpp).
std::string help_text(const std::string& command);
struct Registrar {
  Registrar(const char* name, const char* summary, CommandFn fn);
};

}  // namespace lantern::cli

#define LANTERN_COMMAND(name, summary, fn) \
  static ::lantern::cli::Registrar lantern_command_registrar_##fn(name, summary, fn)
