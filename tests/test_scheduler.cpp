// test_scheduler.cpp: the server's loop (common/scheduler.h) against the CLI's generation loop.
//
// Requests decoded together (as many at once as the stage's engine holds sequences: one before
// kFirstBatchedStage) give each the text that Session::generate gives it alone.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chat.h"
#include "engine.h"
#include "error.h"
#include "generate.h"
#include "model.h"
#include "scheduler.h"
#include "support/paths.h"
#include "tokenizer.h"

namespace {

struct Setup {
  std::shared_ptr<const GGUFFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  explicit Setup(const std::string& name)
      : file(std::make_shared<const GGUFFile>(project_path("data/models/" + name))),
        model(std::make_unique<Model>(file)),
        tokenizer(std::make_unique<Tokenizer>(*file)) {}
  std::unique_ptr<Engine> engine(int n_ctx, int n_seq) const {
    EngineOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    o.n_seq = n_seq;
    return create_engine(*model, o);
  }
  std::vector<int> prompt(const std::string& text) const { return prompt_tokens(*tokenizer, text); }
};

/// The text Session::generate gives the request alone.
std::string alone(const Setup& s, const GenerationRequest& r, int n_ctx) {
  auto engine = s.engine(n_ctx, 1);
  Session session(*engine, *s.tokenizer, r.sampler, s.model->config().n_vocab);
  std::string text;
  session.generate(r.prompt, r.max_tokens, [&](int, const std::string& t) {
    text += t;
    return true;
  });
  return text;
}

std::string collect(Job& job, GenerationResult& result) {
  std::string text;
  for (;;) {
    if (auto r = job.wait(text)) {
      result = *r;
      return text;
    }
  }
}

}  // namespace

TEST_CASE("scheduler: requests decoded together give each its own text", "[scheduler]") {
  const Setup s("tiny-kjv-q4_0.gguf");
  constexpr int kContext = 96;
  auto engine = s.engine(kContext, 3);
  Scheduler scheduler(*engine, *s.tokenizer, s.model->config().n_vocab, 16);
  std::thread loop([&] { scheduler.run(); });

  const char* prompts[] = {"And it came to pass", "In the beginning", "The LORD said unto Moses",
                           "Blessed are", "And God"};
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.prompt = s.prompt(prompts[i]);
    r.max_tokens = 10 + 5 * i;
    r.sampler.temperature = i % 2 == 0 ? 0.0f : 0.9f;  // greedy and sampled, side by side
    r.sampler.seed = 100 + i;
    requests.push_back(r);
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenerationRequest& r : requests) jobs.push_back(scheduler.submit(r));
  for (int i = 0; i < 5; ++i) {
    REQUIRE(jobs[i] != nullptr);
    GenerationResult result;
    const std::string text = collect(*jobs[i], result);
    INFO("request " << i << ": " << prompts[i]);
    CHECK(text == alone(s, requests[i], kContext));
    CHECK(result.prompt_tokens == static_cast<int>(requests[i].prompt.size()));
    CHECK(result.error.empty());
    if (result.finish_reason == "length") CHECK(result.completion_tokens == requests[i].max_tokens);
  }
  // A job cancelled while it runs ends at the next step; until the end of the context otherwise.
  GenerationRequest endless;
  endless.prompt = s.prompt("And");
  endless.sampler.temperature = 0.8f;
  auto job = scheduler.submit(endless);
  REQUIRE(job != nullptr);
  std::string text;
  while (text.empty()) job->wait(text);
  job->cancel();
  GenerationResult result;
  collect(*job, result);
  CHECK(result.finish_reason == "stop");
  CHECK(result.completion_tokens < kContext);

  scheduler.stop();
  loop.join();
  CHECK(scheduler.submit(requests[0]) == nullptr);  // stopped: no more requests
}

TEST_CASE("scheduler: bad requests and a full queue", "[scheduler]") {
  const Setup s("tiny-kjv-q4_0.gguf");
  auto engine = s.engine(32, 2);
  Scheduler scheduler(*engine, *s.tokenizer, s.model->config().n_vocab, 2);
  GenerationRequest r;
  CHECK_THROWS_WITH(scheduler.submit(r), Catch::Contains("empty"));
  r.prompt.assign(33, 5);
  CHECK_THROWS_WITH(scheduler.submit(r), Catch::Contains("33 tokens; the context holds 32"));
  r.prompt.assign(30, 5);
  r.max_tokens = 3;
  CHECK_THROWS_WITH(scheduler.submit(r), Catch::Contains("need 33 positions"));
  r.prompt = {1, 1 << 30};
  r.max_tokens = 1;
  CHECK_THROWS_WITH(scheduler.submit(r), Catch::Contains("outside the vocabulary"));
  // Nothing runs the loop here: the queue fills up.
  r.prompt = s.prompt("And");
  CHECK(scheduler.submit(r) != nullptr);
  CHECK(scheduler.submit(r) != nullptr);
  CHECK(scheduler.submit(r) == nullptr);
  CHECK(scheduler.queued() == 2);
  // stop() ends the queued jobs too, once the loop runs.
  std::thread loop([&] { scheduler.run(); });
  scheduler.stop();
  loop.join();
  CHECK(scheduler.queued() == 0);
}
