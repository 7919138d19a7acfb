// test_engine.cpp: whole forward passes against an independent PyTorch reference (data/golden),
// the real stories260K model (../shared), and the context limit.
//
// data/golden/<model>.txt describes data/models/<model>.gguf:
//   prompt <ids>      the token ids fed one at a time from position 0
//   greedy <ids>      the reference's greedy continuation of the prompt
//   n_vocab <n>
//   positions <T>     rows of <model>.logits.f32: float32 little-endian (T, n_vocab), the logits
//                     after each of the first T prompt tokens
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <ctime>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine.h"
#include "error.h"
#include "model.h"
#include "support/gguf_builder.h"
#include "support/paths.h"
#include "tokenizer.h"

using Catch::Matchers::Contains;

namespace {

struct Golden {
  std::string name;  ///< the model's file stem
  std::vector<int> prompt;
  std::vector<int> greedy;
  int n_vocab = 0;
  int positions = 0;
  std::vector<float> logits;  ///< (positions, n_vocab)
};

/// Every data/golden/*.txt, sorted by name.
std::vector<std::filesystem::path> golden_files() {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path dir = project_path("data/golden");
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

Golden read_golden(const std::filesystem::path& txt) {
  Golden golden;
  golden.name = txt.stem().string();
  std::ifstream in(txt);
  REQUIRE(in.good());
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    std::vector<int> values;
    for (int value; fields >> value;) values.push_back(value);
    if (key == "prompt") golden.prompt = values;
    if (key == "greedy") golden.greedy = values;
    if (key == "n_vocab" && values.size() == 1) golden.n_vocab = values[0];
    if (key == "positions" && values.size() == 1) golden.positions = values[0];
  }
  REQUIRE(!golden.prompt.empty());
  REQUIRE(!golden.greedy.empty());
  REQUIRE(golden.n_vocab > 0);
  REQUIRE(golden.positions > 0);
  REQUIRE(golden.positions <= static_cast<int>(golden.prompt.size()));

  std::filesystem::path bin = txt;
  bin.replace_extension(".logits.f32");
  const size_t n_floats = static_cast<size_t>(golden.positions) * golden.n_vocab;
  REQUIRE(std::filesystem::exists(bin));
  REQUIRE(std::filesystem::file_size(bin) == n_floats * sizeof(float));
  golden.logits.resize(n_floats);
  std::ifstream data(bin, std::ios::binary);
  data.read(reinterpret_cast<char*>(golden.logits.data()), n_floats * sizeof(float));
  REQUIRE(data.good());
  return golden;
}

struct LoadedModel {
  std::shared_ptr<const GGUFFile> file;
  std::unique_ptr<Model> model;
};

LoadedModel load(const std::string& path) {
  LoadedModel loaded;
  loaded.file = std::make_shared<const GGUFFile>(path);
  loaded.model = std::make_unique<Model>(loaded.file);
  return loaded;
}

std::unique_ptr<Engine> make_engine(const Model& model, int n_ctx) {
  EngineOptions options;
  options.n_ctx = n_ctx;
  options.n_threads = 2;
  return create_engine(model, options);
}

// The reference dequantizes the weights exactly as ggml does, so for F32 and quantized models
// alike an fp32 stage differs from it only by rounding: a few 1e-6 of the logits' scale after a
// few layers. Each stage states its bound (logit_tolerance(): 1e-4 of max(1, max |ref|) for fp32
// stages, ~30x room that still catches any wrong op); a stage that quantizes activations states
// a larger one.

/// Largest |logits - ref| over a row, and the allowed bound for that row.
void check_logits(const float* logits, const float* ref, int n_vocab, double tolerance,
                  const std::string& what) {
  double max_diff = 0.0;
  double max_ref = 1.0;
  int worst = 0;
  bool finite = true;
  for (int i = 0; i < n_vocab; ++i) {
    finite = finite && std::isfinite(logits[i]);
    const double diff = std::fabs(static_cast<double>(logits[i]) - ref[i]);
    if (diff > max_diff) {
      max_diff = diff;
      worst = i;
    }
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  INFO(what << ": max |diff| " << max_diff << " at token " << worst << " (engine " << logits[worst]
            << ", reference " << ref[worst] << "), bound " << tolerance * max_ref);
  CHECK(finite);
  CHECK(max_diff <= tolerance * max_ref);
}

/// max(1, max |logit|): the scale the tolerances are relative to.
double max_abs(const float* logits, int n_vocab) {
  double m = 1.0;
  for (int i = 0; i < n_vocab; ++i) m = std::max(m, std::fabs(static_cast<double>(logits[i])));
  return m;
}

/// The best logit minus the second best.
double top_two_margin(const float* logits, int n_vocab) {
  std::vector<float> top(logits, logits + n_vocab);
  std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
  return static_cast<double>(top[0]) - top[1];
}

int greedy_token(const float* logits, int n_vocab) {
  std::vector<float> copy(logits, logits + n_vocab);
  SamplerParams params;
  params.temperature = 0.0f;
  Rng rng(params.seed);
  std::vector<Candidate> candidates;
  return sample_token(copy.data(), n_vocab, params, rng, candidates);
}

}  // namespace

TEST_CASE("engine: golden logits and greedy tokens from the PyTorch reference", "[engine]") {
  const std::vector<std::filesystem::path> files = golden_files();
  INFO("golden files in " << project_path("data/golden") << " (make golden)");
  REQUIRE(!files.empty());
  for (const std::filesystem::path& txt : files) {
    const Golden golden = read_golden(txt);
    INFO("model " << golden.name);
    const std::string model_path = project_path("data/models/" + golden.name + ".gguf");
    REQUIRE(std::filesystem::exists(model_path));
    const LoadedModel loaded = load(model_path);
    if (!stage_runs(loaded.model->config().arch)) {  // deepseek2 before stage 20: refused by name
      CHECK_THROWS_WITH(make_engine(*loaded.model, 8),
                        Contains("needs stage " + std::string(kFirstDeepSeek2Stage)));
      continue;
    }
    const int n_vocab = loaded.model->config().n_vocab;
    REQUIRE(n_vocab == golden.n_vocab);
    const int n_prompt = static_cast<int>(golden.prompt.size());
    const int n_greedy = static_cast<int>(golden.greedy.size());
    const double tolerance = logit_tolerance(*loaded.model);

    // The prompt one token at a time, logits compared at every position.
    auto engine = make_engine(*loaded.model, n_prompt + n_greedy);
    const float* logits = nullptr;
    for (int pos = 0; pos < n_prompt; ++pos) {
      logits = engine->forward(&golden.prompt[pos], 1, pos);
      if (pos < golden.positions) {
        check_logits(logits, golden.logits.data() + static_cast<size_t>(pos) * n_vocab, n_vocab,
                     tolerance, "position " + std::to_string(pos));
      }
    }
    // Greedy continuation: argmax, feed it back. Each choice must be the reference's wherever the
    // stage's own top-two margin exceeds twice its error bound (then the reference, within the
    // bound of every logit, has the same argmax). For fp32 stages that is every step.
    for (int i = 0; i < n_greedy; ++i) {
      const int next = greedy_token(logits, n_vocab);
      if (top_two_margin(logits, n_vocab) <= 2.0 * tolerance * max_abs(logits, n_vocab)) {
        WARN(golden.name << ": greedy step " << i << " is within this stage's error bound; "
                         << "not compared further");
        break;
      }
      INFO("greedy step " << i);
      CHECK(next == golden.greedy[i]);
      if (next != golden.greedy[i]) break;
      if (i + 1 < n_greedy) logits = engine->forward(&next, 1, n_prompt + i);
    }

    // The whole prompt in one call gives the same last logits.
    auto batched = make_engine(*loaded.model, n_prompt);
    logits = batched->forward(golden.prompt.data(), golden.positions, 0);
    check_logits(logits, golden.logits.data() + static_cast<size_t>(golden.positions - 1) * n_vocab,
                 n_vocab, tolerance, "one call of " + std::to_string(golden.positions) + " tokens");
  }
}

TEST_CASE("engine: stories260K greedy from 'Once upon a time' tells the known story", "[engine]") {
  REQUIRE_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  const LoadedModel loaded = load(path);
  const Tokenizer tokenizer(*loaded.file);
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park.";
  std::vector<int> ids = {tokenizer.bos()};
  for (int id : tokenizer.encode("Once upon a time", false)) ids.push_back(id);
  const int n_vocab = loaded.model->config().n_vocab;
  const int max_new_tokens = 100;  // the expected text is ~30 tokens of this 512-token vocabulary
  auto engine = make_engine(*loaded.model, static_cast<int>(ids.size()) + max_new_tokens);

  const float* logits = engine->forward(ids.data(), static_cast<int>(ids.size()), 0);
  std::string text;
  for (int i = 0; i < max_new_tokens; ++i) {
    const int next = greedy_token(logits, n_vocab);
    ids.push_back(next);
    text = tokenizer.decode(ids);
    if (text.size() >= expected.size() || tokenizer.is_end_of_generation(next)) break;
    logits = engine->forward(&next, 1, static_cast<int>(ids.size()) - 1);
  }
  INFO("generated: " << text);
  CHECK(text.rfind(expected, 0) == 0);
}

TEST_CASE("engine: the context limit and bad input raise Error", "[engine]") {
  const std::string model_path = project_path("data/models/tiny-kjv-f32.gguf");
  const LoadedModel loaded = load(model_path);
  const int n_ctx = 3;
  const std::vector<int> tokens = {1, 2, 3, 4};

  SECTION("a context of 0 positions is refused") {
    CHECK_THROWS_AS(make_engine(*loaded.model, 0), Error);
  }
  SECTION("token ids outside the vocabulary are refused") {
    auto engine = make_engine(*loaded.model, n_ctx);
    const int bad[2] = {-1, loaded.model->config().n_vocab};
    CHECK_THROWS_AS(engine->forward(&bad[0], 1, 0), Error);
    CHECK_THROWS_AS(engine->forward(&bad[1], 1, 0), Error);
  }
  SECTION("a position that leaves a gap in the cache is refused; 0 starts again") {
    auto engine = make_engine(*loaded.model, n_ctx);
    try {
      engine->forward(&tokens[0], 1, 1);  // a fresh engine has nothing at position 0
      FAIL("forward at position 1 of an empty cache");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("leaves a gap") != std::string::npos);
    }
    CHECK_NOTHROW(engine->forward(&tokens[0], 2, 0));
    CHECK_THROWS_AS(engine->forward(&tokens[0], 1, 1), Error);  // rewinding is not continuing
    CHECK_THROWS_AS(engine->forward(&tokens[0], 1, 3), Error);
    CHECK_THROWS_AS(engine->forward(&tokens[0], 1, -1), Error);
    const float* again = engine->forward(&tokens[0], 1, 0);  // start again: a fresh engine's logits
    const std::vector<float> restarted(again, again + loaded.model->config().n_vocab);
    auto fresh = make_engine(*loaded.model, n_ctx);
    const float* first = fresh->forward(&tokens[0], 1, 0);
    CHECK(std::equal(restarted.begin(), restarted.end(), first));
  }
  SECTION("positions past the context") {
    auto engine = make_engine(*loaded.model, n_ctx);
    CHECK(engine->context_length() == n_ctx);
    if (engine->slides_past_context()) {
      for (int pos = 0; pos < n_ctx + 2; ++pos) CHECK_NOTHROW(engine->forward(&tokens[0], 1, pos));
    } else {
      CHECK_THROWS_AS(engine->forward(tokens.data(), n_ctx + 1, 0), Error);  // all at once
      for (int pos = 0; pos < n_ctx; ++pos) CHECK_NOTHROW(engine->forward(&tokens[pos], 1, pos));
      try {
        engine->forward(&tokens[n_ctx], 1, n_ctx);
        FAIL("forward at position " << n_ctx << " of a " << n_ctx << "-position context");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("context full") != std::string::npos);
      }
    }
  }
}

// Stage 06 on: a ring cache keeps generating past its context. Until it wraps it must compute
// exactly what a large cache computes; after, its logits must stay finite and deterministic.
TEST_CASE("engine: a sliding cache equals a large one until it wraps, then keeps going",
          "[engine]") {
  const LoadedModel loaded = load(project_path("data/models/tiny-llama-f32.gguf"));
  const int n_vocab = loaded.model->config().n_vocab;
  constexpr int kSmallContext = 16;
  constexpr int kTokens = 3 * kSmallContext;
  auto small = make_engine(*loaded.model, kSmallContext);
  if (!small->slides_past_context()) {
    WARN("this stage stops at the context limit (ring KV cache from stage 06 on)");
    return;
  }
  auto large = make_engine(*loaded.model, kTokens);
  auto again = make_engine(*loaded.model, kSmallContext);
  for (int pos = 0; pos < kTokens; ++pos) {
    const int token = (pos * 37 + 11) % n_vocab;
    const float* s = small->forward(&token, 1, pos);
    const std::vector<float> small_logits(s, s + n_vocab);
    const float* l = large->forward(&token, 1, pos);
    const float* g = again->forward(&token, 1, pos);
    INFO("position " << pos);
    if (pos < kSmallContext) {
      CHECK(std::equal(small_logits.begin(), small_logits.end(), l));
    }
    CHECK(std::all_of(small_logits.begin(), small_logits.end(),
                      [](float v) { return std::isfinite(v); }));
    CHECK(std::equal(small_logits.begin(), small_logits.end(), g));  // deterministic
  }
}

TEST_CASE("engine: stories260K stays fluent far past a small sliding context", "[engine]") {
  REQUIRE_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  const LoadedModel loaded = load(path);
  const Tokenizer tokenizer(*loaded.file);
  constexpr int kContext = 48;
  constexpr int kNewTokens = 4 * kContext;
  auto engine = make_engine(*loaded.model, kContext);
  if (!engine->slides_past_context()) {
    WARN("this stage stops at the context limit (ring KV cache from stage 06 on)");
    return;
  }
  std::vector<int> ids = {tokenizer.bos()};
  for (int id : tokenizer.encode("Once upon a time", false)) ids.push_back(id);
  const float* logits = engine->forward(ids.data(), static_cast<int>(ids.size()), 0);
  for (int i = 0; i < kNewTokens; ++i) {
    const int next = greedy_token(logits, loaded.model->config().n_vocab);
    if (tokenizer.is_end_of_generation(next)) break;
    ids.push_back(next);
    logits = engine->forward(&next, 1, static_cast<int>(ids.size()) - 1);
  }
  const std::string text = tokenizer.decode(ids);
  INFO("generated: " << text);
  // Fluent: only the characters of the training stories, and whole words of them after the wrap.
  CHECK(ids.size() > static_cast<size_t>(2 * kContext));
  CHECK(std::all_of(text.begin(), text.end(), [](unsigned char ch) {
    return std::isalnum(ch) || std::isspace(ch) || std::strchr(".,!?'\"-:;", ch) != nullptr;
  }));
  const std::string tail = text.substr(text.size() / 2);
  const auto spaces = std::count(tail.begin(), tail.end(), ' ');
  CHECK(spaces * 10 > static_cast<long>(tail.size()));  // words of English length, not noise
}

namespace {

/// tiny-llama-f32 cut to its first layer (a file written to a temp dir). With one layer, a key
/// and value depend only on their token and position, so what a ring cache computes after it
/// wraps can be rebuilt from scratch: the sinks, then the tokens still in the ring.
std::string first_layer_of(const LoadedModel& loaded) {
  const ModelConfig& c = loaded.model->config();
  GGUFBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.context_length", c.n_ctx_train);
  b.add_u32("llama.embedding_length", c.n_embd);
  b.add_u32("llama.block_count", 1);
  b.add_u32("llama.feed_forward_length", c.n_ff);
  b.add_u32("llama.attention.head_count", c.n_head);
  b.add_u32("llama.attention.head_count_kv", c.n_head_kv);
  b.add_f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps);
  b.add_f32("llama.rope.freq_base", c.rope.freq_base);
  for (const TensorInfo& t : loaded.file->tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && t.name.rfind("blk.0.", 0) != 0) continue;
    b.add_tensor(t.name, t.type, t.ne, std::string(static_cast<const char*>(t.data), t.nbytes));
  }
  return b.write_temp("tiny-llama-first-layer.gguf");
}

}  // namespace

// Stage 06 on: once the ring has wrapped, a query at position p attends to the kSinkTokens = 4
// sink tokens, placed just before the oldest key still in the ring, and the n_ctx - 4 newest
// tokens. A fresh engine fed exactly those tokens from position 0 sees the same query-key
// distances (RoPE scores depend only on them), so with one layer it computes the same logits.
TEST_CASE("engine: after a wrap, the sink keys sit just before the oldest key in the ring",
          "[engine]") {
  const LoadedModel full = load(project_path("data/models/tiny-llama-f32.gguf"));
  const LoadedModel one = load(first_layer_of(full));
  REQUIRE(one.model->config().n_layer == 1);
  const int n_vocab = one.model->config().n_vocab;
  constexpr int kContext = 16;
  constexpr int kSinks = 4;
  constexpr int kTokens = 3 * kContext;
  auto ring = make_engine(*one.model, kContext);
  if (!ring->slides_past_context()) {
    WARN("this stage stops at the context limit (ring KV cache from stage 06 on)");
    return;
  }
  std::vector<int> tokens(kTokens);
  for (int p = 0; p < kTokens; ++p) tokens[p] = (p * 37 + 11) % n_vocab;
  for (int p = 0; p < kTokens; ++p) {
    const float* logits = ring->forward(&tokens[p], 1, p);
    if (p < kContext) continue;
    // The sinks, then positions p - (kContext - kSinks) + 1 .. p.
    std::vector<int> seen(tokens.begin(), tokens.begin() + kSinks);
    seen.insert(seen.end(), tokens.begin() + p - (kContext - kSinks) + 1, tokens.begin() + p + 1);
    REQUIRE(seen.size() == size_t(kContext));
    auto fresh = make_engine(*one.model, kContext);
    const float* expected = fresh->forward(seen.data(), kContext, 0);
    check_logits(logits, std::vector<float>(expected, expected + n_vocab).data(), n_vocab,
                 logit_tolerance(*one.model), "position " + std::to_string(p));
  }
}

// A prompt batch that ends exactly at the end of the ring, or runs past it, computes what the
// same tokens one at a time compute, and so does every token after it.
TEST_CASE("engine: a batch that reaches the end of the ring equals token-by-token", "[engine]") {
  const LoadedModel loaded = load(project_path("data/models/tiny-llama-f32.gguf"));
  const int n_vocab = loaded.model->config().n_vocab;
  constexpr int kContext = 16;
  constexpr int kTokens = 3 * kContext;
  if (!make_engine(*loaded.model, kContext)->slides_past_context()) {
    WARN("this stage stops at the context limit (ring KV cache from stage 06 on)");
    return;
  }
  std::vector<int> tokens(kTokens);
  for (int p = 0; p < kTokens; ++p) tokens[p] = (p * 53 + 5) % n_vocab;
  std::vector<std::vector<float>> one_by_one;
  auto single = make_engine(*loaded.model, kContext);
  for (int p = 0; p < kTokens; ++p) {
    const float* l = single->forward(&tokens[p], 1, p);
    one_by_one.emplace_back(l, l + n_vocab);
  }
  for (int batch : {kContext, kContext + 5}) {
    auto batched = make_engine(*loaded.model, kContext);
    const float* logits = batched->forward(tokens.data(), batch, 0);
    check_logits(logits, one_by_one[batch - 1].data(), n_vocab, logit_tolerance(*loaded.model),
                 "batch of " + std::to_string(batch));
    for (int p = batch; p < kTokens; ++p) {
      logits = batched->forward(&tokens[p], 1, p);
      check_logits(logits, one_by_one[p].data(), n_vocab, logit_tolerance(*loaded.model),
                   "after a batch of " + std::to_string(batch) + ", position " + std::to_string(p));
    }
  }
}

namespace {

/// Resident memory of this process in bytes (/proc/self/statm's second field, in pages).
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

/// CPU time this process has used, in milliseconds.
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

}  // namespace

// Hidden ([.]): tests/run_all.sh runs it once, on the final stage. The default model generates
// 100,000 tokens through a 256-position ring (never stopping at an end token: one is replaced by
// the next id). Memory must stay flat (the cache and scratch are allocated up front) and every
// 10,000-token window take about as long as the first (a ring's cost does not grow with length).
TEST_CASE("engine: 100,000 tokens past the context with memory flat and no slowdown",
          "[.][long]") {
  const LoadedModel loaded = load(project_path("data/models/tiny-kjv-q4_0.gguf"));
  const Tokenizer tokenizer(*loaded.file);
  const int n_vocab = loaded.model->config().n_vocab;
  constexpr int kContext = 256;
  constexpr int kTokens = 100000;
  constexpr int kWindow = 10000;
  constexpr size_t kRssSlack = size_t(4) << 20;  // allocator noise, not growth per token
  constexpr double kSlowdown = 2.0;              // a noisy machine, not a cost that grows
  // One thread, timed by the CPU time it uses: other work on the machine does not count.
  EngineOptions options;
  options.n_ctx = kContext;
  options.n_threads = 1;
  auto engine = create_engine(*loaded.model, options);
  REQUIRE(engine->slides_past_context());
  SamplerParams params;
  params.seed = 7;
  Rng rng(params.seed);
  std::vector<Candidate> candidates;
  std::vector<float> logits(n_vocab);
  int token = tokenizer.bos();
  size_t rss_first = 0;
  double first_ms = 0, slowest_ms = 0;
  double window_start = cpu_ms();
  for (int pos = 0; pos < kTokens; ++pos) {
    const float* out = engine->forward(&token, 1, pos);
    std::copy(out, out + n_vocab, logits.begin());
    token = sample_token(logits.data(), n_vocab, params, rng, candidates);
    if (tokenizer.is_end_of_generation(token)) token = (token + 1) % n_vocab;
    if ((pos + 1) % kWindow != 0) continue;
    const double now = cpu_ms();
    const double ms = now - window_start;
    window_start = now;
    const size_t rss = resident_bytes();
    INFO("tokens " << pos + 1 << ": window " << ms << " ms, RSS " << rss / 1024 << " KiB");
    if (pos + 1 == kWindow) {
      rss_first = rss;
      first_ms = ms;
    }
    slowest_ms = std::max(slowest_ms, ms);
    CHECK(rss <= rss_first + kRssSlack);
    CHECK(slowest_ms <= kSlowdown * first_ms);
  }
}

// Threads share out rows, heads and tokens, never the terms of one sum, so a stage's logits are
// the same bits on any thread count: stage 29 may change the count between decode steps
// (thread_chooser.h), and a run's text must not depend on when it did.
TEST_CASE("engine: the same logits, bit for bit, on 1 and 2 threads", "[engine]") {
  constexpr int kDecodeSteps = 24;  // past stage 29's first probe, which runs one step on 1 thread
  const std::vector<int> prompt = {1, 5, 9, 13, 17};
  for (const char* name : {"tiny-kjv-q4_0", "tiny-deepseek2-lite-q4_0"}) {
    const LoadedModel loaded = load(project_path(std::string("data/models/") + name + ".gguf"));
    if (!stage_runs(loaded.model->config().arch)) continue;
    const int n_vocab = loaded.model->config().n_vocab;
    // Every step's logits, greedy decoding from the prompt.
    auto run = [&](int threads) {
      EngineOptions options;
      options.n_ctx = static_cast<int>(prompt.size()) + kDecodeSteps;
      options.n_threads = threads;
      auto engine = create_engine(*loaded.model, options);
      std::vector<float> all;
      const float* logits = engine->forward(prompt.data(), static_cast<int>(prompt.size()), 0);
      for (int step = 0; step < kDecodeSteps; ++step) {
        all.insert(all.end(), logits, logits + n_vocab);
        const int next = static_cast<int>(std::max_element(logits, logits + n_vocab) - logits);
        logits = engine->forward(&next, 1, static_cast<int>(prompt.size()) + step);
      }
      return all;
    };
    const std::vector<float> one = run(1), two = run(2);
    INFO(name);
    REQUIRE(one.size() == two.size());
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}
