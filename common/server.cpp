// server.cpp: an OpenAI-compatible HTTP server over one stage (build/NN_name/server, from
// kFirstBatchedStage on), with cpp-httplib and nlohmann::json (Debian's libcpp-httplib-dev and
// nlohmann-json3-dev).
//
//   GET  /                     the chat page (server_page.html, compiled in)
//   GET  /health, /v1/models
//   POST /v1/completions       {"prompt", "max_tokens", "temperature", "top_p", "top_k", "stop",
//   POST /v1/chat/completions   "seed", "stream", "n": 1} / {"messages": [...], ...}
//   POST /tokenize, /detokenize {"content": "..."} -> {"tokens": [...]} and back
//
// Each HTTP request runs on one of the server's threads; generation runs on the scheduler's
// (scheduler.h), --parallel requests decoded together. Errors are OpenAI's error objects.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat.h"
#include "cli.h"
#include "engine.h"
#include "error.h"
#include "model.h"
#include "scheduler.h"
#include "timing.h"
#include "tokenizer.h"

#ifndef STAGE_NAME
#define STAGE_NAME "unknown"
#endif

using json = nlohmann::json;

/// The chat page: common/server_page.html, made a C++ string by the Makefile (server_page.cpp).
extern const char kServerPage[];

namespace {

constexpr int kDefaultPort = 8080;
constexpr int kDefaultQueue = 64;          ///< requests waiting for a sequence before 503
constexpr size_t kMaxBodyBytes = 1 << 20;  ///< a request body past 1 MiB gets 413
constexpr int kMaxStopStrings = 4;         ///< as OpenAI's API
constexpr int kExtraHttpThreads = 16;      ///< beyond one per request that can run or wait

struct ServerOptions {
  std::string model_path;
  int n_ctx = 0;
  int n_threads = 0;
  int parallel = 1;
  std::string host = "127.0.0.1";
  int port = kDefaultPort;
  std::string api_key;
  int max_queue = kDefaultQueue;
};

const char kUsage[] =
    "usage: server -m FILE [-c N] [-t N] [--host 127.0.0.1] [--port 8080] [--parallel N]\n"
    "              [--api-key KEY] [--max-queue N]\n"
    "  -c N          context positions per request (default: min(training context, 4096))\n"
    "  --port N      0: any free port, named on stderr (default 8080)\n"
    "  --parallel N  requests decoded together, each with its own KV cache (default 1)\n"
    "  --max-queue N requests waiting beyond those before 503 (default 64)\n";

int int_flag(const std::string& flag, const char* value, int low, int high) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  check(end != value && *end == '\0' && errno == 0 && v >= low && v <= high, "invalid value '",
        value, "' for ", flag, ": expected an integer in [", low, ", ", high, "]");
  return static_cast<int>(v);
}

ServerOptions parse_flags(int argc, char** argv) {
  ServerOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    check(i + 1 < argc, "flag ", f, " needs a value (", kUsage, ")");
    const char* v = argv[++i];
    if (f == "-m" || f == "--model") {
      o.model_path = v;
    } else if (f == "-c" || f == "--ctx-size") {
      o.n_ctx = int_flag(f, v, 1, 1 << 24);
    } else if (f == "-t" || f == "--threads") {
      o.n_threads = int_flag(f, v, 1, 1024);
    } else if (f == "--parallel" || f == "-np") {
      o.parallel = int_flag(f, v, 1, 256);
    } else if (f == "--host") {
      o.host = v;
    } else if (f == "--port") {
      o.port = int_flag(f, v, 0, 65535);
    } else if (f == "--api-key") {
      o.api_key = v;
    } else if (f == "--max-queue") {
      o.max_queue = int_flag(f, v, 0, 1 << 16);
    } else {
      fail("unknown flag '", f, "' (", kUsage, ")");
    }
  }
  check(!o.model_path.empty(), "no model: give -m FILE");
  return o;
}

/// An OpenAI error object.
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type = "invalid_request_error", const std::string& param = "") {
  json e = {{"message", message}, {"type", type}, {"code", status}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  res.status = status;
  res.set_content(json{{"error", e}}.dump(), "application/json");
}

/// A request the handler refuses, with its status.
struct BadRequest {
  int status;
  std::string message;
  std::string param;
};

[[noreturn]] void bad(const std::string& message, const std::string& param = "", int status = 400) {
  throw BadRequest{status, message, param};
}

/// body[key] as T when present and not null, after a type check.
template <class T>
std::optional<T> field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) bad(std::string("'") + key + "' must be a boolean", key);
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) bad(std::string("'") + key + "' must be an integer", key);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) bad(std::string("'") + key + "' must be a number", key);
  } else {
    if (!it->is_string()) bad(std::string("'") + key + "' must be a string", key);
  }
  return it->get<T>();
}

struct Sampling {
  GenerationRequest request;
  std::vector<std::string> stops;
  bool stream = false;
};

/// The sampling fields common to both endpoints, checked as OpenAI checks them.
Sampling sampling_fields(const json& body, int default_max_tokens) {
  Sampling s;
  SamplerParams& p = s.request.sampler;
  p.temperature = static_cast<float>(field<double>(body, "temperature").value_or(1.0));
  if (!(p.temperature >= 0 && p.temperature <= 2))
    bad("'temperature' must be in [0, 2]", "temperature");
  p.top_p = static_cast<float>(field<double>(body, "top_p").value_or(1.0));
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("'top_p' must be in (0, 1]", "top_p");
  p.top_k = static_cast<int>(field<int64_t>(body, "top_k").value_or(0));
  const auto seed = field<int64_t>(body, "seed");
  p.seed = seed ? static_cast<uint64_t>(*seed) : static_cast<uint64_t>(now_ms() * 1000.0);
  const auto max_tokens = field<int64_t>(body, "max_tokens");
  if (max_tokens && *max_tokens < 0) bad("'max_tokens' must be >= 0", "max_tokens");
  if (max_tokens && *max_tokens > (1 << 24)) bad("'max_tokens' is too large", "max_tokens");
  s.request.max_tokens = max_tokens ? static_cast<int>(*max_tokens) : default_max_tokens;
  if (const auto n = field<int64_t>(body, "n"); n && *n != 1) bad("only n = 1 is supported", "n");
  s.stream = field<bool>(body, "stream").value_or(false);
  s.request.ignore_eos = field<bool>(body, "ignore_eos").value_or(false);  // llama-server's
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      s.stops.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= kMaxStopStrings) {
      for (const json& x : *it) {
        if (!x.is_string()) bad("'stop' must be a string or an array of strings", "stop");
        s.stops.push_back(x.get<std::string>());
      }
    } else {
      bad("'stop' must be a string or an array of at most 4 strings", "stop");
    }
    for (const std::string& x : s.stops) {
      if (x.empty()) bad("'stop' strings must not be empty", "stop");
    }
  }
  return s;
}

/// Where the first stop string begins in text (from `from` on), or npos.
size_t find_stop(const std::string& text, const std::vector<std::string>& stops, size_t from) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) {
    const size_t at = text.find(s, from > s.size() ? from - s.size() : 0);
    if (at < best) best = at;
  }
  return best;
}

/// Bytes at the end of text that may begin a stop string: a stream holds them back (whole UTF-8
/// characters only ever arrive: the scheduler's StreamDecoder holds back the incomplete ones).
size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

class Server {
 public:
  Server(const ServerOptions& o, std::shared_ptr<const GGUFFile> file, const Model& model,
         const Tokenizer& tokenizer, Engine& engine)
      : options_(o),
        file_(std::move(file)),
        model_(model),
        tokenizer_(tokenizer),
        scheduler_(engine, tokenizer, model.config().n_vocab, o.max_queue),
        model_id_(o.model_path.substr(o.model_path.find_last_of('/') + 1)),
        template_(detect_chat_template(*file_, "")) {}

  void run() {
    const int port = bind_port();
    check(port > 0, "cannot listen on ", options_.host, ":", options_.port);
    std::thread loop([this] { scheduler_.run(); });
    // A connection holds a thread while its request runs or waits: enough for every request the
    // scheduler may hold, so that past them the answer is 503, not a wait for a thread.
    const int threads = scheduler_.sequences() + options_.max_queue + kExtraHttpThreads;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const int st = res.status;
      send_error(res, st,
                 st == 413   ? "the request body is over 1 MiB"
                 : st == 404 ? "no such endpoint"
                             : "the request could not be served",
                 st == 404 ? "not_found_error" : "invalid_request_error");
    });
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options_.api_key.empty() || req.path == "/" || req.path == "/health") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      if (req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
        send_error(res, 401, "invalid or missing API key", "authentication_error");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kServerPage, "text/html; charset=utf-8");
    });
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json m = {{"id", model_id_}, {"object", "model"}, {"created", 0}, {"owned_by", "dsengine"}};
      res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(),
                      "application/json");
    });
    post("/v1/completions",
         [this](const std::string& b, httplib::Response& r) { completion(b, r, false); });
    post("/v1/chat/completions",
         [this](const std::string& b, httplib::Response& r) { completion(b, r, true); });
    post("/tokenize", [this](const std::string& b, httplib::Response& r) { tokenize(b, r); });
    post("/detokenize", [this](const std::string& b, httplib::Response& r) { detokenize(b, r); });
    std::fprintf(stderr, "server: %s (stage %s), %d sequences of %d positions, on http://%s:%d\n",
                 options_.model_path.c_str(), STAGE_NAME, scheduler_.sequences(),
                 scheduler_.context_length(), options_.host.c_str(), port);
    const bool ok = http_.listen_after_bind();
    scheduler_.stop();
    loop.join();
    check(ok || stopping_, "cannot serve on ", options_.host, ":", port);
  }

  /// Stops accepting, ends the requests in flight (their clients get what was generated).
  void shut_down() {
    stopping_ = true;
    scheduler_.stop();
    http_.stop();
  }

 private:
  /// Binds the listening socket; the port bound, or -1. Port 0: the kernel picks a free one
  /// (tests run servers side by side), and run()'s stderr line names it for a client to read.
  int bind_port() {
    // httplib's default adds SO_REUSEPORT, with which a second server binds a port in use and
    // the two share its connections; SO_REUSEADDR alone still rebinds past TIME_WAIT.
    http_.set_socket_options([](socket_t sock) {
      const int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    if (options_.port == 0) return http_.bind_to_any_port(options_.host);
    return http_.bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }

  /// A POST endpoint whose body is read by us, at most kMaxBodyBytes of it: httplib's own limit
  /// holds for a Content-Length, not for a chunked body.
  template <class F>
  void post(const char* path, F handler) {
    http_.Post(path, [this, handler](const httplib::Request&, httplib::Response& res,
                                     const httplib::ContentReader& read) {
      std::string body;
      bool over = false;
      const bool complete = read([&](const char* data, size_t n) {
        over = body.size() + n > kMaxBodyBytes;
        if (!over) body.append(data, n);
        return !over;
      });
      if (over || !complete) {
        send_error(res, over ? 413 : 400,
                   over ? "the request body is over 1 MiB" : "the request body could not be read");
        res.set_header("Connection", "close");
        return;
      }
      guarded(res, [&] { handler(body, res); });
    });
  }

  template <class F>
  void guarded(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const BadRequest& b) {
      send_error(res, b.status, b.message, "invalid_request_error", b.param);
    } catch (const json::exception& e) {
      send_error(res, 400, std::string("invalid JSON: ") + e.what());
    } catch (const Error& e) {
      send_error(res, 400, e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, e.what(), "server_error");
    }
  }

  static json parse_body(const std::string& text) {
    json body = json::parse(text);  // throws json::exception: 400
    if (!body.is_object()) bad("the request body must be a JSON object");
    return body;
  }

  std::vector<int> prompt_of(const json& body, bool chat) const {
    std::string text;
    if (chat) {
      auto it = body.find("messages");
      if (it == body.end() || !it->is_array() || it->empty()) {
        bad("'messages' must be a non-empty array", "messages");
      }
      std::vector<ChatMessage> talk;
      for (const json& m : *it) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string()) {
          bad("each message must be an object with string 'role' and 'content'", "messages");
        }
        talk.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      try {
        text = format_conversation(template_, talk, bos_text(tokenizer_));
      } catch (const Error& e) {
        bad(e.what(), "messages");
      }
      return tokenizer_.encode(text, /*parse_special=*/true);
    }
    const auto prompt = field<std::string>(body, "prompt");
    if (!prompt) bad("'prompt' must be a string", "prompt");
    return prompt_tokens(tokenizer_, *prompt);
  }

  void completion(const std::string& text, httplib::Response& res, bool chat) {
    const json body = parse_body(text);
    Sampling s = sampling_fields(body, chat ? -1 : 16);  // OpenAI's defaults
    s.request.prompt = prompt_of(body, chat);
    const int n_ctx = scheduler_.context_length();
    const int n = static_cast<int>(s.request.prompt.size());
    if (n > n_ctx) {
      bad("the prompt has " + std::to_string(n) + " tokens; the context holds " +
              std::to_string(n_ctx),
          chat ? "messages" : "prompt");
    }
    if (s.request.max_tokens >= 0 && n + s.request.max_tokens > n_ctx) {
      bad("the prompt (" + std::to_string(n) + " tokens) and max_tokens (" +
              std::to_string(s.request.max_tokens) + ") exceed the context of " +
              std::to_string(n_ctx),
          "max_tokens");
    }
    std::shared_ptr<Job> job = scheduler_.submit(s.request);
    if (!job) {
      send_error(res, 503, "too many requests queued; try again later", "server_error");
      return;
    }
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    const long created = static_cast<long>(std::time(nullptr));
    if (s.stream) {
      stream(res, job, s, chat, id, created);
    } else {
      whole(res, job, s, chat, id, created);
    }
  }

  json usage(const GenerationResult& r) const {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens}};
  }

  /// Waits for the whole text; cuts it at a stop string (and ends the job there).
  void whole(httplib::Response& res, const std::shared_ptr<Job>& job, const Sampling& s, bool chat,
             const std::string& id, long created) {
    std::string text;
    std::string finish;
    GenerationResult result;
    for (;;) {
      const size_t before = text.size();
      std::optional<GenerationResult> r = job->wait(text);
      const size_t cut = find_stop(text, s.stops, before);
      if (cut != std::string::npos) {
        text.resize(cut);
        job->cancel();
        finish = "stop";
        while (!r) {
          std::string rest;
          r = job->wait(rest);
        }
      }
      if (r) {
        result = *r;
        if (finish.empty()) finish = r->finish_reason;
        break;
      }
    }
    if (result.finish_reason == "error") {
      send_error(res, 500, result.error, "server_error");
      return;
    }
    json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      choice["text"] = text;
    }
    json out = {{"id", id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", model_id_},
                {"choices", json::array({choice})},
                {"usage", usage(result)}};
    res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  /// Server-sent events: a chunk per piece of text, then the finish reason, then [DONE]. A client
  /// that goes away cancels its job (its sequence is free at the next step).
  void stream(httplib::Response& res, std::shared_ptr<Job> job, Sampling s, bool chat,
              std::string id, long created) {
    auto chunk = [=, this](const json& delta_or_text, const json& finish) {
      json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
      if (chat) {
        choice["delta"] = delta_or_text;
      } else {
        choice["text"] = delta_or_text;
      }
      return json{{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model_id_},
                  {"choices", json::array({choice})}};
    };
    auto send = [](httplib::DataSink& sink, const json& j) {
      const std::string line =
          "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
      return sink.write(line.data(), line.size());
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          std::string text;
          size_t sent = 0;
          if (chat && !send(sink, chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr))) {
            job->cancel();
            return false;
          }
          std::string finish;
          std::optional<GenerationResult> result;
          while (!result) {
            const size_t before = text.size();
            result = job->wait(text);
            size_t ready = text.size();
            const size_t cut = find_stop(text, s.stops, std::max(before, sent));
            if (cut != std::string::npos) {
              ready = cut;
              job->cancel();
              finish = "stop";
            } else if (!result) {
              ready -= std::min(ready - sent, held_back(text, s.stops));
            }
            if (ready > sent) {
              const std::string piece = text.substr(sent, ready - sent);
              sent = ready;
              const json delta = chat ? json{{"content", piece}} : json(piece);
              if (!send(sink, chunk(delta, nullptr))) {
                job->cancel();
                return false;
              }
            }
            if (!finish.empty()) {
              while (!result) {
                std::string rest;
                result = job->wait(rest);
              }
            }
          }
          if (finish.empty())
            finish = result->finish_reason == "error" ? "stop" : result->finish_reason;
          json last = chunk(chat ? json::object() : json(""), finish);
          last["usage"] = usage(*result);
          if (result->finish_reason == "error") last["error"] = {{"message", result->error}};
          send(sink, last);
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [job](bool) { job->cancel(); });
  }

  void tokenize(const std::string& text, httplib::Response& res) {
    const json body = parse_body(text);
    const auto content = field<std::string>(body, "content");
    if (!content) bad("'content' must be a string", "content");
    std::vector<int> ids;
    if (field<bool>(body, "add_special").value_or(false) && tokenizer_.add_bos() &&
        tokenizer_.bos() >= 0) {
      ids.push_back(tokenizer_.bos());
    }
    const std::vector<int> t =
        tokenizer_.encode(*content, field<bool>(body, "parse_special").value_or(false));
    ids.insert(ids.end(), t.begin(), t.end());
    res.set_content(json{{"tokens", ids}}.dump(), "application/json");
  }

  void detokenize(const std::string& text, httplib::Response& res) {
    const json body = parse_body(text);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) bad("'tokens' must be an array of integers", "tokens");
    std::vector<int> ids;
    for (const json& t : *it) {
      if (!t.is_number_integer()) bad("'tokens' must be an array of integers", "tokens");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= tokenizer_.n_vocab()) {
        bad("token id " + std::to_string(id) + " is outside the vocabulary", "tokens");
      }
      ids.push_back(static_cast<int>(id));
    }
    const json out = {{"content", tokenizer_.decode(ids)}};
    res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  ServerOptions options_;
  std::shared_ptr<const GGUFFile> file_;
  const Model& model_;
  const Tokenizer& tokenizer_;
  Scheduler scheduler_;
  std::string model_id_;
  ChatTemplate template_;
  httplib::Server http_;
  std::atomic<bool> stopping_{false};
  std::atomic<long> next_id_{1};
};

int run(int argc, char** argv) {
  const ServerOptions o = parse_flags(argc, argv);
  // SIGINT and SIGTERM go to one thread that stops the server; the others never see them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal

  auto file = std::make_shared<const GGUFFile>(o.model_path);
  const Tokenizer tokenizer(*file);
  const Model model(file);
  check(tokenizer.n_vocab() == model.config().n_vocab, o.model_path, ": the tokenizer has ",
        tokenizer.n_vocab(), " tokens but the model's vocabulary is ", model.config().n_vocab);
  EngineOptions e;
  e.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(model.config().n_ctx_train, kDefaultContext);
  e.n_threads = std::min(o.n_threads > 0 ? o.n_threads : physical_cores(), usable_cpus());
  e.n_seq = o.parallel;
  std::unique_ptr<Engine> engine = create_engine(model, e);
  check(engine->sequences() == o.parallel, "--parallel ", o.parallel, ": stage ", STAGE_NAME,
        " holds one sequence (", kFirstBatchedStage, " and later hold several)");

  Server server(o, file, model, tokenizer, *engine);
  std::thread watcher([&server, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "server: signal %d, stopping\n", sig);
    server.shut_down();
  });
  watcher.detach();
  server.run();
  std::fprintf(stderr, "server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_reporting_errors(run, argc, argv);
}
