#include "harness/experiment/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>

namespace lantern::experiment {

namespace {

using nlohmann::json;

struct Context {
  const Experiment& e;
  const TextEncoder& enc;
  int max_context;
  std::vector<std::string> issues;

  void fail(const std::string& where, const std::string& problem, const std::string& fix) {
    issues.push_back(e.file + ": " + where + ": " + problem + " (fix: " + fix + ")");
  }
};

WorkItem defaults_from(const Experiment& e) {
  WorkItem w;
  const json& s = e.resolved["sampling"];
  w.max_new_tokens = e.resolved["workload"]["max_new_tokens"];
  w.ignore_eos = e.resolved["workload"]["ignore_eos"];
  w.temperature = s["temperature"].get<float>();
  w.top_k = s["top_k"];
  w.top_p = s["top_p"].get<float>();
  w.seed = s["seed"];
  return w;
}

std::vector<std::pair<std::string, std::string>> messages(const json& chat) {
  std::vector<std::pair<std::string, std::string>> m;
  for (const json& x : chat) m.emplace_back(x["role"], x["content"]);
  return m;
}

void check_fits(Context& c, const std::string& where, const WorkItem& w) {
  if (static_cast<int>(w.prompt.size()) >= c.max_context)
    c.fail(where,
           "prompt of " + std::to_string(w.prompt.size()) +
               " tokens does not fit limits.max_context = " + std::to_string(c.max_context),
           "shorten the prompt or raise limits.max_context");
}

std::vector<WorkItem> from_prompts(Context& c) {
  std::vector<WorkItem> out;
  const json& list = c.e.resolved["workload"]["prompts"];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "$.workload.prompts[" + std::to_string(i) + "]";
    const json p = list[i].is_string() ? json{{"text", list[i]}} : list[i];
    WorkItem w = defaults_from(c.e);
    w.seed += i;
    w.tag = p.value("tag", "p" + std::to_string(i));
    w.max_new_tokens = p.value("max_new_tokens", w.max_new_tokens);
    if (p.contains("ids")) {
      w.prompt = p["ids"].get<std::vector<int32_t>>();
    } else if (!c.enc.encode) {
      c.fail(where, "a text prompt needs the model's tokenizer.json",
             "give token ids ({\"ids\": [...]})");
      continue;
    } else if (p.contains("chat")) {
      w.prompt_text = c.enc.render_chat(messages(p["chat"]));
      w.prompt = c.enc.encode_chat(messages(p["chat"]));
    } else {
      w.prompt_text = p["text"];
      w.prompt = c.enc.encode(w.prompt_text);
    }
    check_fits(c, where, w);
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<WorkItem> from_requests_file(Context& c) {
  std::string file = c.e.resolved["workload"]["requests_file"];
  std::filesystem::path path = c.e.base_dir / file;
  if (!std::filesystem::exists(path)) path = file;
  std::ifstream in(path);
  std::vector<WorkItem> out;
  if (!in) {
    c.fail("$.workload.requests_file", "cannot open " + path.string(), "check the path");
    return out;
  }
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + " line " + std::to_string(lineno);
    json j = json::parse(line, nullptr, false);
    if (!j.is_object() || (!j.contains("prompt") && !j.contains("prompt_ids"))) {
      c.fail(where, "not a JSON object with \"prompt\" or \"prompt_ids\"",
             "write {\"prompt\": \"...\"} or {\"prompt_ids\": [...]}");
      continue;
    }
    WorkItem w = defaults_from(c.e);
    try {
      if (j.contains("prompt_ids")) {
        w.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
      } else if (!c.enc.encode) {
        c.fail(where, "a text prompt needs the model's tokenizer.json", "use prompt_ids");
        continue;
      } else {
        w.prompt_text = j["prompt"].get<std::string>();
        w.prompt = c.enc.encode(w.prompt_text);
      }
      w.max_new_tokens = j.value("max_new_tokens", w.max_new_tokens);
      w.temperature = j.value("temperature", w.temperature);
      w.top_k = j.value("top_k", w.top_k);
      w.top_p = j.value("top_p", w.top_p);
      w.seed = j.value("seed", w.seed + out.size());
      w.ignore_eos = j.value("ignore_eos", w.ignore_eos);
      w.tag = j.value("tag", "r" + std::to_string(out.size()));
    } catch (const json::exception& e) {
      c.fail(where, std::string("a field has the wrong type (") + e.what() + ")",
             "see docs/experiments.md");
      continue;
    }
    check_fits(c, where, w);
    out.push_back(std::move(w));
  }
  if (out.empty() && c.issues.empty())
    c.fail("$.workload.requests_file", path.string() + " holds no requests", "add lines");
  return out;
}

std::vector<WorkItem> synthetic(Context& c, const VocabFacts& vocab) {
  const json& w = c.e.resolved["workload"];
  const int count = w["count"];
  Rng lengths(w["seed"].get<uint64_t>() * 2 + 1), tokens(w["seed"].get<uint64_t>() * 2 + 2);
  const int id_limit = vocab.first_special > 0 ? vocab.first_special : vocab.vocab_size;
  std::vector<WorkItem> out;
  for (int i = 0; i < count; ++i) {
    WorkItem item = defaults_from(c.e);
    item.seed += i;
    item.ignore_eos = true;  // synthetic requests run to their drawn length
    item.tag = "s" + std::to_string(i);
    const int plen = draw_length(w["prompt_len"], lengths, 1, c.max_context - 1);
    item.max_new_tokens = draw_length(w["output_len"], lengths, 1, c.max_context - plen);
    if (vocab.bos_id >= 0) item.prompt.push_back(vocab.bos_id);
    while (static_cast<int>(item.prompt.size()) < plen)
      item.prompt.push_back(static_cast<int32_t>(tokens.uniform_int(0, id_limit - 1)));
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace

nlohmann::json WorkItem::to_json() const {
  return {{"prompt_ids", prompt},
          {"max_new_tokens", max_new_tokens},
          {"temperature", temperature},
          {"top_k", top_k},
          {"top_p", top_p},
          {"seed", seed},
          {"ignore_eos", ignore_eos},
          {"tag", tag},
          {"arrival_s", arrival_s}};
}

int draw_length(const json& dist, Rng& rng, int lo, int hi) {
  const std::string kind = dist.value("dist", "fixed");
  double x = 0;
  if (kind == "fixed")
    x = dist.value("value", 1.0);
  else if (kind == "uniform") {
    // validate() keeps min <= max <= 2^24; an empty range would divide by zero.
    const auto lo_d = static_cast<int64_t>(dist.value("min", 1.0));
    const auto hi_d = static_cast<int64_t>(dist.value("max", 1.0));
    x = static_cast<double>(rng.uniform_int(lo_d, std::max(lo_d, hi_d)));
  }
  else if (kind == "normal")
    x = dist.value("mean", 1.0) + dist.value("stddev", 0.0) * rng.normal();
  else
    x = dist.value("median", 1.0) * std::exp(dist.value("sigma", 0.0) * rng.normal());
  double dlo = dist.value("min", 0.0), dhi = dist.value("max", 0.0);
  if (dhi > 0) x = std::min(x, dhi);
  x = std::max(x, dlo);
  long n = std::lround(x);
  return static_cast<int>(std::clamp<long>(n, lo, std::max(lo, hi)));
}

std::vector<double> arrival_times(const json& arrival, size_t n) {
  const std::string kind = arrival.value("kind", "all_at_once");
  std::vector<double> t(n, 0.0);
  if (kind == "interval") {
    const double dt = arrival.value("interval_s", 0.1);
    for (size_t i = 0; i < n; ++i) t[i] = dt * static_cast<double>(i);
  } else if (kind == "poisson") {
    Rng rng(arrival.value("seed", uint64_t{0}) + 0x5eed);
    const double rate = arrival.value("rate", 1.0);
    for (size_t i = 1; i < n; ++i) t[i] = t[i - 1] + rng.exponential(rate);
  }
  return t;
}

std::vector<WorkItem> build_workload(const Experiment& e, const TextEncoder& enc,
                                     const VocabFacts& vocab) {
  Context c{e, enc, e.resolved["limits"]["max_context"].get<int>(), {}};
  const std::string kind = e.resolved["workload"]["kind"];
  std::vector<WorkItem> items = kind == "prompts"    ? from_prompts(c)
                                : kind == "requests" ? from_requests_file(c)
                                                     : synthetic(c, vocab);
  for (size_t i = 0; i < items.size() && vocab.vocab_size > 0; ++i)
    for (int32_t id : items[i].prompt)
      if (id >= vocab.vocab_size) {
        c.fail("request " + items[i].tag,
               "token id " + std::to_string(id) + " is outside the vocabulary of " +
                   std::to_string(vocab.vocab_size),
               "use ids below the vocabulary size");
        break;
      }
  if (!c.issues.empty()) throw ExperimentError(c.issues);
  std::vector<double> t = arrival_times(e.resolved["workload"]["arrival"], items.size());
  for (size_t i = 0; i < items.size(); ++i) items[i].arrival_s = t[i];
  return items;
}

}  // namespace lantern::experiment
