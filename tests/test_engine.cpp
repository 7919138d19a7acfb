// test_engine.cpp: whole forward passes against an independent PyTorch reference (data/golden),
// the real stories260K model (../shared), and the context limit.
//
// data/golden/<model>.txt describes data/models/<model>.gguf:
//   prompt <ids>      the token ids fed one at a time from position 0
//   greedy <ids>      the reference's greedy continuation of the prompt
//   n_vocab <n>
//   positions <T>     rows of <model>.logits.f32: float32 little-endian (T, n_vocab), the logits
//                     after each of the first T prompt tokens
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
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
#include "support/paths.h"
#include "tokenizer.h"

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
  const std::vector<std::filesystem::path> files = golden_files();
  REQUIRE(!files.empty());
  const std::string model_path =
      project_path("data/models/" + files.front().stem().string() + ".gguf");
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
