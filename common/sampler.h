// sampler.h: sampling parameters, the random number generator and the candidate type.
//
// The selection itself (greedy, temperature, top-k, top-p) is stage code: stage 07 replaces the
// full sort of the vocabulary by a partial sort. Every stage follows the same contract:
//   temperature <= 0        -> greedy: the highest logit, ties to the lowest token id;
//   otherwise               -> keep the top_k highest logits (all when top_k <= 0), ranked by
//                              logit with ties to the lower id; softmax of logit/temperature over
//                              them; keep the shortest ranked prefix whose probability sum
//                              reaches top_p (all when top_p >= 1); draw from it with Rng.
// So the same seed gives exactly the same tokens in every stage.
#pragma once

#include <cstdint>
#include <vector>

struct SamplerParams {
  float temperature = 0.8f;  ///< llama.cpp's default
  int top_k = 40;            ///< llama.cpp's default; <= 0 keeps the whole vocabulary
  float top_p = 0.95f;       ///< llama.cpp's default; >= 1 disables
  uint64_t seed = 0;
};

/// xorshift64* (Vigna): small, fast, and the same sequence on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed ? seed : kNonZeroSeed) {}
  uint64_t next_u64() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * kMultiplier;
  }
  /// Uniform in [0, 1), from the top 24 bits (exactly representable in a float).
  float next_float() { return static_cast<float>(next_u64() >> 40) / 16777216.0f; }

 private:
  static constexpr uint64_t kNonZeroSeed = 0x9E3779B97F4A7C15ull;  // xorshift must not start at 0
  static constexpr uint64_t kMultiplier = 0x2545F4914F6CDD1Dull;
  uint64_t state_;
};

/// A token and its score (a logit, then a probability) during selection.
struct Candidate {
  int id;
  float value;
};

/// Ranking order used by every stage: higher value first, ties to the lower id.
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}
