// `lantern generate`: run requests through the engine and stream the output.
// Prompts come as text (--prompt, optionally through the chat template with
// --chat/--system), as token ids (--prompt-ids) or as a JSONL batch
// (--requests). With --record DIR the harness writes a run directory.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/base/errors.h"
#include "kernels/base/json_parse.h"
#include "engine/tokenizer/tokenizer.h"
#include "harness/cli/command.h"
#include "harness/cli/engine_args.h"
#include "harness/cli/harness_args.h"
#include "harness/session.h"

namespace lantern::cli {
namespace {

std::vector<Request> read_requests(const std::string& file, const Tokenizer* tok) {
  // One JSON object per line: {"prompt_ids": [...]} or {"prompt": "text"},
  // plus optional max_new_tokens, temperature, top_k, top_p, seed,
  // ignore_eos, tag.
  std::ifstream in(file);
  LANTERN_CHECK(in, "cannot open --requests %s", file.c_str());
  std::vector<Request> out;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      nlohmann::json j = parse_json_text(line, strformat("--requests %s line %d", file.c_str(), lineno));
      Request r;
      if (j.contains("prompt_ids")) {
        for (const auto& id : j.at("prompt_ids")) {
          LANTERN_CHECK(id.is_number_integer() && !(id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX) &&
                            id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX,
                        "--requests %s line %d: prompt_ids must hold token ids in [0, 2^31), got %s",
                        file.c_str(), lineno, cut_for_message(id.dump()).c_str());
          r.prompt.push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
      } else {
        LANTERN_CHECK(tok, "--requests %s line %d has a text prompt but the model has no tokenizer.json",
                      file.c_str(), lineno);
        r.prompt = tok->encode(j.at("prompt").get<std::string>());
        if (auto bos = tok->bos_id()) r.prompt.insert(r.prompt.begin(), *bos);
      }
      // Every field range-checked in full (a 4294967297 must not wrap to 1).
      const std::string where = strformat("--requests %s line %d", file.c_str(), lineno);
      auto int_field = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
        if (!j.contains(key)) return fallback;
        const auto& v = j[key];
        LANTERN_CHECK(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) &&
                          v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
                      "%s: %s must be an integer in [%lld, %lld], got %s", where.c_str(), key,
                      static_cast<long long>(lo), static_cast<long long>(hi), cut_for_message(v.dump()).c_str());
        return v.get<int64_t>();
      };
      auto real_field = [&](const char* key, double fallback, double lo, double hi) {
        if (!j.contains(key)) return fallback;
        const auto& v = j[key];
        LANTERN_CHECK(v.is_number() && v.get<double>() >= lo && v.get<double>() <= hi,
                      "%s: %s must be a number in [%g, %g], got %s", where.c_str(), key, lo, hi,
                      cut_for_message(v.dump()).c_str());
        return v.get<double>();
      };
      r.max_new_tokens = static_cast<int>(int_field("max_new_tokens", 32, 1, INT32_MAX));
      r.sampling.temperature = static_cast<float>(real_field("temperature", 0.0, 0.0, 1e6));
      r.sampling.top_k = static_cast<int>(int_field("top_k", 0, 0, INT32_MAX));
      r.sampling.top_p = static_cast<float>(real_field("top_p", 1.0, 1e-9, 1.0));
      r.sampling.seed = static_cast<uint64_t>(int_field("seed", 0, 0, INT64_MAX));
      r.stop_at_eos = !j.value("ignore_eos", false);
      r.tag = j.value("tag", std::string());
      out.push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      LANTERN_FAIL("--requests %s line %d: %s (expected {\"prompt_ids\": [...]} or {\"prompt\": \"...\"})",
                   file.c_str(), lineno, json_error_reason(e).c_str());
    }
  }
  LANTERN_CHECK(!out.empty(), "--requests %s holds no requests", file.c_str());
  return out;
}

Args generate_args(const std::vector<std::string>& argv) {
  auto values = engine_value_options();
  for (const char* o : {"--prompt-ids", "--prompt", "--system", "--chat-form", "--date", "--max-new-tokens",
                        "--temperature", "--top-k", "--top-p", "--seed", "--repeat", "--requests", "--out",
                        "--gemm-plans"})
    values.push_back(o);
  auto flags = engine_flag_options();
  for (const char* f : {"--ignore-eos", "--chat", "--ids"}) flags.push_back(f);
  add_harness_options(values, flags);
  return Args(argv, values, flags);
}

// Length and sampling settings of the single-prompt forms (not --requests).
Request request_settings(const Args& args) {
  Request req;
  req.max_new_tokens = static_cast<int>(args.get_int("--max-new-tokens", 32, 1));
  req.sampling.temperature = static_cast<float>(args.get_double("--temperature", 0.0, 0.0, 1e6));
  req.sampling.top_k = static_cast<int>(args.get_int("--top-k", 0, 0));
  req.sampling.top_p = static_cast<float>(args.get_double("--top-p", 1.0, 1e-9, 1.0));
  req.sampling.seed = static_cast<uint64_t>(args.get_int("--seed", 0, 0, LONG_MAX));
  req.stop_at_eos = !args.flag("--ignore-eos");
  return req;
}

// --prompt (plain or through the chat template) or --prompt-ids; `text`
// receives the prompt as rendered (empty for ids).
std::vector<int32_t> prompt_from_args(const Args& args, const Tokenizer* tok, const std::string& model_dir,
                                      std::string& text) {
  auto prompt = args.get("--prompt");
  if (!prompt) return parse_ids(args.require("--prompt-ids"));
  LANTERN_CHECK(tok, "--prompt needs %s/tokenizer.json (or give --prompt-ids)", model_dir.c_str());
  if (!args.flag("--chat") && !args.get("--system")) {
    text = *prompt;
    std::vector<int32_t> ids = tok->encode(text);
    if (auto bos = tok->bos_id()) ids.insert(ids.begin(), *bos);
    return ids;
  }
  std::vector<ChatMessage> msgs;
  if (auto sys = args.get("--system")) msgs.push_back({"system", *sys});
  msgs.push_back({"user", *prompt});
  ChatOptions co;
  if (auto d = args.get("--date")) co.date = *d;
  if (auto f = args.get("--chat-form")) {
    co.form = parse_chat_form(*f);
    LANTERN_CHECK(co.form.has_value(), "unknown --chat-form '%s': use llama3 or llama31", f->c_str());
  }
  text = tok->render_chat(msgs, co);
  return tok->encode(text);  // the template starts with <|begin_of_text|>
}

// Streams one request's tokens to stdout as text (whole UTF-8 characters
// only) or ids; finish() flushes and ends the line so that the summary lines
// that follow on stderr start on a fresh line.
class TokenStream {
 public:
  TokenStream(const Tokenizer* tok, bool ids) : ids_(ids || !tok) {
    if (tok) dec_.emplace(*tok, /*skip_special=*/true);
  }
  void push(int32_t t) {
    if (ids_) std::printf("%d ", t);
    else std::fputs(dec_->push(t).c_str(), stdout);
    std::fflush(stdout);
  }
  void finish() {
    if (dec_ && !ids_) std::fputs(dec_->flush().c_str(), stdout);
    std::printf("\n");
    std::fflush(stdout);
  }

 private:
  bool ids_;
  std::optional<StreamDecoder> dec_;
};

nlohmann::json result_line(const RequestResult& r, const std::string& text) {
  return {{"id", r.id}, {"tag", r.tag}, {"prompt_ids", r.prompt}, {"tokens", r.tokens}, {"text", text},
          {"finish_reason", r.finish_reason}, {"ttft_ms", (r.first_token_s - r.submit_s) * 1e3},
          {"latency_ms", (r.finish_s - r.submit_s) * 1e3}, {"preemptions", r.preemptions}};
}

void print_result(const RequestResult& r, const std::string& text, bool ids) {
  std::printf("request %lld:", static_cast<long long>(r.id));
  if (ids)
    for (int32_t t : r.tokens) std::printf(" %d", t);
  else
    std::printf(" %s", text.c_str());
  std::printf("\n");
}

nlohmann::json request_settings_json(const Request& req, size_t count) {
  return {{"requests", count}, {"max_new_tokens", req.max_new_tokens},
          {"temperature", req.sampling.temperature}, {"top_k", req.sampling.top_k},
          {"top_p", req.sampling.top_p}, {"seed", req.sampling.seed}};
}

int cmd_generate(const std::vector<std::string>& argv) {
  const Args args = generate_args(argv);
  const std::string model_dir = args.require("--model");
  std::optional<Tokenizer> tok;
  if (std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) tok = Tokenizer::load(model_dir);
  const Tokenizer* t = tok ? &*tok : nullptr;
  const bool quiet = args.flag("--quiet"), print_ids = args.flag("--ids") || !tok;

  Request req = request_settings(args);
  std::string prompt_text;
  std::vector<Request> batch;
  if (auto file = args.get("--requests")) batch = read_requests(*file, t);
  else req.prompt = prompt_from_args(args, t, model_dir, prompt_text);

  harness::Session session(parse_harness_options(args));
  session.set_command(argv);
  if (auto plans = args.get("--gemm-plans")) pin_gemm_plans_from(*plans);
  LoadedEngine le = build_engine(args, nullptr, nullptr, [&](EngineOptions& o) { session.apply(o); });
  Engine& engine = *le.engine;

  const int repeat = static_cast<int>(args.get_int("--repeat", 1, 1, 1000000));
  const bool stream = repeat == 1 && batch.empty();
  TokenStream out_stream(t, print_ids);
  if (stream) req.on_token = [&](int64_t, int32_t tk) { out_stream.push(tk); };
  if (batch.empty()) batch.assign(repeat, req);
  nlohmann::json resolved = engine.describe();
  resolved["request"] = request_settings_json(req, batch.size());
  session.set_config(resolved);

  for (auto& r : batch) engine.submit(r);
  const double t0 = engine.now_s();
  engine.run_until_idle();
  const double t1 = engine.now_s();
  if (stream) out_stream.finish();

  auto results = engine.take_finished();
  std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::ofstream out_file;
  if (auto out = args.get("--out")) {
    out_file.open(*out);
    LANTERN_CHECK(out_file, "cannot write --out %s", out->c_str());
  }
  int64_t generated = 0;
  for (const RequestResult& r : results) {
    generated += static_cast<int64_t>(r.tokens.size());
    const std::string text = tok ? tok->decode(r.tokens, /*skip_special=*/true) : std::string();
    session.on_result(r, text, r.id == results.front().id ? prompt_text : std::string());
    if (out_file.is_open()) out_file << result_line(r, text).dump() << "\n";
    else if (!stream) print_result(r, text, print_ids);
  }
  std::fflush(stdout);  // summary lines (stderr) come after the text
  if (!quiet) {
    for (const RequestResult& r : results)
      std::fprintf(stderr, "request %lld: %zu tokens, finish=%s, ttft %.1f ms\n", static_cast<long long>(r.id),
                   r.tokens.size(), r.finish_reason.c_str(), (r.first_token_s - r.submit_s) * 1e3);
    std::fprintf(stderr, "lantern: %lld tokens in %.3f s (%.1f tokens/s), %lld steps\n",
                 static_cast<long long>(generated), t1 - t0, generated / std::max(1e-9, t1 - t0),
                 static_cast<long long>(engine.steps_run()));
  }
  session.finish(engine);
  return 0;
}

}  // namespace
LANTERN_COMMAND("generate", "generate text or tokens from a prompt (streams as it goes)", cmd_generate);
}  // namespace lantern::cli
