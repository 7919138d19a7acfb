// test_perplexity.cpp: perplexity() and the KL divergence on an engine whose logits are known,
// so every figure has a closed form: uniform logits over V tokens give PPL = V exactly.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "error.h"
#include "gguf.h"
#include "perplexity.h"
#include "support/paths.h"
#include "tokenizer.h"

namespace {

constexpr int kChunk = 16;

/// Logits 0 for every token but token 0, which gets boost; records every forward() call.
class FixedEngine : public Engine {
 public:
  FixedEngine(int n_vocab, float boost) : logits_(n_vocab, 0.0f) { logits_[0] = boost; }
  float* forward(const int* tokens, int n_tokens, int pos) override {
    calls.push_back({tokens[0], n_tokens, pos});
    return logits_.data();
  }
  int context_length() const override { return kChunk; }
  bool slides_past_context() const override { return false; }
  int threads() const override { return 1; }

  struct Call {
    int first_token, n_tokens, pos;
  };
  std::vector<Call> calls;

 private:
  std::vector<float> logits_;
};

struct Fixture {
  GGUFFile file{project_path("data/models/tiny-llama-f32.gguf")};
  Tokenizer tokenizer{file};
  int n_vocab = tokenizer.n_vocab();
  std::string text;
  Fixture() {
    for (int i = 0; i < 20; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  }
};

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string(name) + "-" + std::to_string(getpid())))
      .string();
}

}  // namespace

TEST_CASE("perplexity: chunks, BOS, scored positions, and uniform logits give PPL = V",
          "[perplexity]") {
  Fixture f;
  FixedEngine engine(f.n_vocab, 0.0f);
  PerplexityOptions o;
  o.n_ctx = kChunk;
  o.max_chunks = 3;
  const PerplexityResult r = perplexity(engine, f.tokenizer, f.text, f.n_vocab, o);
  CHECK(r.chunks == 3);
  CHECK(r.scored == 3 * (kChunk - 1 - kChunk / 2));  // positions 8..14 of each chunk
  // Log-probabilities are float32 (as stored in the KL base file): log(1/384) = -5.95 carries an
  // error of up to 2^-22 there, ~5e-7 relative on PPL.
  CHECK(r.ppl == Approx(f.n_vocab).epsilon(1e-6));
  CHECK(r.ppl_err == Approx(0).margin(1e-9));
  CHECK_FALSE(r.has_kl);
  // Per chunk: positions 0..8 in one batch starting with BOS, then 9..14 one at a time.
  REQUIRE(engine.calls.size() == size_t(3 * (1 + kChunk - 2 - kChunk / 2)));
  CHECK(engine.calls[0].first_token == f.tokenizer.bos());
  CHECK(engine.calls[0].n_tokens == kChunk / 2 + 1);
  CHECK(engine.calls[0].pos == 0);
  CHECK(engine.calls[1].n_tokens == 1);
  CHECK(engine.calls[1].pos == kChunk / 2 + 1);
  CHECK(engine.calls[7].first_token == f.tokenizer.bos());  // the second chunk starts again
  CHECK(engine.calls[7].pos == 0);
}

TEST_CASE("perplexity: KL divergence against a stored base run", "[perplexity]") {
  Fixture f;
  const std::string base = temp_path("ppl-base");
  PerplexityOptions o;
  o.n_ctx = kChunk;
  o.max_chunks = 2;
  o.kl_base_out = base;
  FixedEngine uniform(f.n_vocab, 0.0f);
  perplexity(uniform, f.tokenizer, f.text, f.n_vocab, o);

  o.kl_base_out.clear();
  o.kl_base_in = base;
  FixedEngine same(f.n_vocab, 0.0f);
  const PerplexityResult r0 = perplexity(same, f.tokenizer, f.text, f.n_vocab, o);
  REQUIRE(r0.has_kl);
  CHECK(r0.kl_mean == Approx(0).margin(1e-12));
  CHECK(r0.same_top == 1.0);

  // Token 0 twice as likely: KL(uniform || q) = log((V + 1) / V) - log(2) / V, at every position.
  const double boost = std::log(2.0);
  FixedEngine skewed(f.n_vocab, float(boost));
  const PerplexityResult r = perplexity(skewed, f.tokenizer, f.text, f.n_vocab, o);
  const double v = f.n_vocab;
  const double expected = std::log((v + 1) / v) - std::log(2.0) / v;
  // Each float32 log-probability is off by up to ~5e-7; KL sums p_i times their differences, so
  // it is off by about as much (absolute), against an expected 8e-4.
  constexpr double kFloatLogProbError = 2e-6;
  CHECK(r.kl_mean == Approx(expected).margin(kFloatLogProbError));
  CHECK(r.kl_p99 == Approx(expected).margin(kFloatLogProbError));
  CHECK(r.same_top == 1.0);  // both rank token 0 first (the uniform one by its lowest index)

  // A base file from another context length or text is refused by name.
  o.n_ctx = kChunk / 2;
  CHECK_THROWS_WITH(perplexity(same, f.tokenizer, f.text, f.n_vocab, o),
                    Catch::Matchers::Contains(base));
  o.n_ctx = kChunk;
  CHECK_THROWS_WITH(perplexity(same, f.tokenizer, "a " + f.text, f.n_vocab, o),
                    Catch::Matchers::Contains("other tokens"));
  std::remove(base.c_str());
}

TEST_CASE("perplexity: a text shorter than two chunks is refused", "[perplexity]") {
  Fixture f;
  FixedEngine engine(f.n_vocab, 0.0f);
  PerplexityOptions o;
  o.n_ctx = kChunk;
  CHECK_THROWS_WITH(perplexity(engine, f.tokenizer, "the fox", f.n_vocab, o),
                    Catch::Matchers::Contains("need at least"));
  o.n_ctx = 2 * kChunk;  // more than the engine's context
  CHECK_THROWS_AS(perplexity(engine, f.tokenizer, f.text, f.n_vocab, o), Error);
}
