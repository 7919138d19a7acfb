// sampling.cpp: logits -> next token, by the contract in sampler.h.
//
// This is the seed article's first version: rank the WHOLE vocabulary with std::sort
// (O(V log V), V = 102400 for DeepSeek) even though top-k keeps only 40. Stage 07 replaces the
// sort by a partial sort. Every sum below has a fixed order (the normalizer in id order, the
// top-p and draw sums in rank order), so a stage that ranks the kept prefix the same way reproduces
// the same probabilities, bit for bit, and so the same tokens for the same seed.
#include <algorithm>
#include <cmath>

#include "engine.h"
#include "error.h"

namespace {

/// The highest logit, ties to the lowest id.
int argmax(const float* logits, int n_vocab) {
  int best = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

int sample_token(float* logits, int n_vocab, const SamplerParams& params, Rng& rng,
                 std::vector<Candidate>& candidates) {
  check(n_vocab > 0, "sample_token: empty vocabulary");
  // A NaN would break the ranking's strict weak order (undefined behaviour in std::sort), and an
  // infinity turns softmax into NaN: either means the forward pass went wrong.
  for (int i = 0; i < n_vocab; ++i) {
    check(std::isfinite(logits[i]), "sample_token: logit of token ", i, " is ", logits[i]);
  }
  if (params.temperature <= 0.0f) return argmax(logits, n_vocab);

  // Rank every token: highest logit first, ties to the lower id.
  candidates.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) candidates[i] = {i, logits[i]};
  std::sort(candidates.begin(), candidates.end(), ranks_before);

  // top-k: keep the k best (all when top_k <= 0).
  const int n_top = params.top_k > 0 ? std::min(params.top_k, n_vocab) : n_vocab;

  // softmax(logit / temperature) over the kept ones; the first has the max logit. The normalizer
  // is summed in id order over the kept set (a token is kept when it ranks no lower than the last
  // kept one), so a stage that ranks only a prefix of the vocabulary gets exactly this sum.
  const float max_logit = candidates[0].value;
  const Candidate last_kept = candidates[n_top - 1];
  float sum = 0.0f;
  for (int i = 0; i < n_vocab; ++i) {
    if (!ranks_before(last_kept, {i, logits[i]}))
      sum += std::exp((logits[i] - max_logit) / params.temperature);
  }

  // top-p: the shortest ranked prefix whose probability reaches top_p (all when top_p >= 1).
  int n_kept = n_top;
  float kept_mass = 0.0f;
  for (int i = 0; i < n_top; ++i) {
    candidates[i].value = std::exp((candidates[i].value - max_logit) / params.temperature) / sum;
    kept_mass += candidates[i].value;
    if (params.top_p < 1.0f && kept_mass >= params.top_p) {
      n_kept = i + 1;
      break;
    }
  }

  // Draw r in [0, kept_mass) and walk the same cumulative sum until it passes r.
  const float r = rng.next_float() * kept_mass;
  float cumulative = 0.0f;
  for (int i = 0; i < n_kept; ++i) {
    cumulative += candidates[i].value;
    if (r < cumulative) return candidates[i].id;
  }
  // Only reached when rounding makes r equal kept_mass: take the most probable token.
  return candidates[0].id;
}
