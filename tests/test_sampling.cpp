// test_sampling.cpp: sample_token against the contract in sampler.h (greedy, top-k, top-p,
// temperature, reproducibility). Every stage must pick the same tokens for the same seed.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "engine.h"

namespace {

/// One draw; logits are copied because sample_token may modify them.
int draw(const std::vector<float>& logits, const SamplerParams& params, Rng& rng,
         std::vector<Candidate>& candidates) {
  std::vector<float> copy = logits;
  return sample_token(copy.data(), static_cast<int>(copy.size()), params, rng, candidates);
}

SamplerParams make_params(float temperature, int top_k, float top_p, uint64_t seed = 1) {
  SamplerParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.seed = seed;
  return params;
}

/// Ids drawn over n_draws fresh generators seeded 1..n_draws.
std::multiset<int> draws_over_seeds(const std::vector<float>& logits, const SamplerParams& params,
                                    int n_draws) {
  std::vector<Candidate> candidates;
  std::multiset<int> ids;
  for (int seed = 1; seed <= n_draws; ++seed) {
    Rng rng(seed);
    ids.insert(draw(logits, params, rng, candidates));
  }
  return ids;
}

std::set<int> distinct(const std::multiset<int>& ids) {
  return {ids.begin(), ids.end()};
}

// Probabilities 0.5, 0.3, 0.15, 0.05 at ids 3, 0, 2, 1 (temperature 1 gives them back exactly).
const std::vector<float> kFourLogits = {std::log(0.3f), std::log(0.05f), std::log(0.15f),
                                        std::log(0.5f)};

}  // namespace

TEST_CASE("sampling: temperature <= 0 is greedy, ties to the lower id", "[sampling]") {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  std::vector<Candidate> candidates;
  Rng rng(5);
  for (float temperature : {0.0f, -1.0f}) {
    CHECK(draw(logits, make_params(temperature, 40, 0.95f), rng, candidates) == 1);
    CHECK(draw(logits, make_params(temperature, 0, 1.0f), rng, candidates) == 1);
    CHECK(draw(logits, make_params(temperature, 3, 0.1f), rng, candidates) == 1);
  }
  CHECK(draw({-5.0f}, make_params(0.0f, 40, 0.95f), rng, candidates) == 0);
  CHECK(draw({-1e30f, -1e30f, -1e30f}, make_params(0.0f, 40, 0.95f), rng, candidates) == 0);
}

TEST_CASE("sampling: top_k = 1 is greedy at any temperature", "[sampling]") {
  const std::vector<float> logits = {0.1f, 2.5f, 2.4f, -3.0f, 2.5f, 1.0f};  // tie at 1 and 4
  for (float temperature : {0.5f, 1.0f, 10.0f}) {
    const std::multiset<int> ids = draws_over_seeds(logits, make_params(temperature, 1, 1.0f), 200);
    CHECK(distinct(ids) == std::set<int>{1});
  }
}

TEST_CASE("sampling: top-k keeps exactly the k highest logits", "[sampling]") {
  // Ranked: id 3 (1.1), 7 (1.05), 1 (1.0), 4 (0.9), 6 (0.5), ...
  const std::vector<float> logits = {0.0f, 1.0f, 0.2f, 1.1f, 0.9f, -3.0f, 0.5f, 1.05f, 0.3f, 0.4f};
  CHECK(distinct(draws_over_seeds(logits, make_params(1.0f, 3, 1.0f), 2000)) ==
        std::set<int>{3, 7, 1});
  CHECK(distinct(draws_over_seeds(logits, make_params(1.0f, 5, 1.0f), 2000)) ==
        std::set<int>{3, 7, 1, 4, 6});
  SECTION("top_k beyond the vocabulary, or <= 0, keeps everything") {
    std::set<int> all;
    for (int id = 0; id < 10; ++id) all.insert(id);
    // Token 5 has probability ~0.3%: 20000 draws see it ~60 times.
    CHECK(distinct(draws_over_seeds(logits, make_params(1.0f, 100, 1.0f), 20000)) == all);
    CHECK(distinct(draws_over_seeds(logits, make_params(1.0f, 0, 1.0f), 20000)) == all);
  }
}

TEST_CASE("sampling: top-p keeps the shortest prefix reaching p", "[sampling]") {
  // Ranked probabilities 0.5 (id 3), 0.3 (id 0), 0.15 (id 2), 0.05 (id 1).
  CHECK(distinct(draws_over_seeds(kFourLogits, make_params(1.0f, 0, 0.4f), 1000)) ==
        std::set<int>{3});
  CHECK(distinct(draws_over_seeds(kFourLogits, make_params(1.0f, 0, 0.75f), 1000)) ==
        std::set<int>{3, 0});
  CHECK(distinct(draws_over_seeds(kFourLogits, make_params(1.0f, 0, 0.9f), 1000)) ==
        std::set<int>{3, 0, 2});
  CHECK(distinct(draws_over_seeds(kFourLogits, make_params(1.0f, 0, 1.0f), 1000)) ==
        std::set<int>{3, 0, 2, 1});
  SECTION("top-p applies to the probabilities renormalised over the top k") {
    // top_k 2 -> 0.625 (id 3), 0.375 (id 0): 0.625 alone reaches 0.6 (0.5 would not).
    CHECK(distinct(draws_over_seeds(kFourLogits, make_params(1.0f, 2, 0.6f), 1000)) ==
          std::set<int>{3});
  }
}

TEST_CASE("sampling: draws follow softmax(logit / temperature)", "[sampling]") {
  const std::vector<float> logits = {0.0f, 1.0f};
  const int n_draws = 20000;
  // 5 standard deviations of a frequency over 20000 draws: 5 * sqrt(0.25 / 20000) = 0.018.
  const double tolerance = 0.018;
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    INFO("temperature " << temperature);
    std::vector<Candidate> candidates;
    Rng rng(2024);
    int ones = 0;
    for (int i = 0; i < n_draws; ++i) {
      ones += draw(logits, make_params(temperature, 0, 1.0f), rng, candidates);
    }
    const double expected = 1.0 / (1.0 + std::exp(-1.0 / temperature));  // 0.881, 0.731, 0.622
    CHECK(static_cast<double>(ones) / n_draws == Approx(expected).margin(tolerance));
  }
  SECTION("the kept probabilities are renormalised") {
    // top_p 0.75 keeps ids 3 and 0 with 0.5 : 0.3 -> 0.625 : 0.375.
    std::vector<Candidate> candidates;
    Rng rng(7);
    int threes = 0;
    for (int i = 0; i < n_draws; ++i) {
      threes += draw(kFourLogits, make_params(1.0f, 0, 0.75f), rng, candidates) == 3;
    }
    CHECK(static_cast<double>(threes) / n_draws == Approx(0.625).margin(tolerance));
  }
}

TEST_CASE("sampling: the same seed gives the same tokens", "[sampling]") {
  std::vector<float> logits(300);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * i) * 3.0f;
  const SamplerParams params = make_params(0.8f, 40, 0.95f);
  auto run = [&](uint64_t seed) {
    std::vector<Candidate> candidates;
    Rng rng(seed);
    std::vector<int> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(draw(logits, params, rng, candidates));
    return ids;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

namespace {

// A reproducible vocabulary of logits with many exact ties (values on a 0.25 grid).
std::vector<float> tied_logits(int n_vocab, uint64_t seed) {
  constexpr float kGrid = 0.25f;
  constexpr float kRange = 40.0f;  // 40 grid steps either side of zero
  Rng rng(seed);
  std::vector<float> logits(n_vocab);
  for (float& l : logits) l = std::floor((rng.next_float() * 2.0f - 1.0f) * kRange) * kGrid;
  return logits;
}

// FNV-1a over the ids drawn by n_draws calls of sample_token with one seeded Rng.
uint64_t draw_hash(const std::vector<float>& logits, const SamplerParams& params, int n_draws) {
  constexpr uint64_t kFnvOffset = 1469598103934665603ull;
  constexpr uint64_t kFnvPrime = 1099511628211ull;
  Rng rng(params.seed);
  std::vector<Candidate> scratch;
  uint64_t hash = kFnvOffset;
  for (int i = 0; i < n_draws; ++i) {
    std::vector<float> copy = logits;
    const int id = sample_token(copy.data(), static_cast<int>(copy.size()), params, rng, scratch);
    hash = (hash ^ static_cast<uint64_t>(id)) * kFnvPrime;
  }
  return hash;
}

}  // namespace

// The hashes below were recorded from stage 01 (full std::sort). Every stage must draw exactly the
// same tokens for the same seed, whatever selection algorithm it uses (stage 07: partial sort).
TEST_CASE("sampling: every stage draws stage 01's tokens for the same seed", "[sampling]") {
  constexpr int kVocab = 5000;
  constexpr int kDraws = 300;
  const std::vector<float> logits = tied_logits(kVocab, 77);
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    uint64_t expected;
  };
  const Case cases[] = {
      {0.8f, 40, 0.95f, 16908938418888101630ull}, {1.0f, 0, 0.9f, 5242717253704381170ull},
      {0.7f, 0, 1.0f, 12530991394577968244ull},   {1.2f, 5, 1.0f, 12751567768645287444ull},
      {1.0f, 0, 0.05f, 16681857522975287107ull},  {2.0f, 1000, 0.5f, 18032947111608558679ull},
  };
  for (const Case& c : cases) {
    SamplerParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.seed = 1234;
    const uint64_t hash = draw_hash(logits, params, kDraws);
    INFO("temp " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p << " hash "
                 << hash << "ull");
    CHECK(hash == c.expected);
  }
}
