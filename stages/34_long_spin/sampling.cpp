// sampling.cpp: logits -> next token, by the contract in sampler.h.
//
// Seed article §5.1: rank only as much of the vocabulary as the choice needs. Top-k
// needs the k best in order: std::partial_sort, O(V log k) instead of the full sort's O(V log V)
// (V = 102400 for DeepSeek, k = 40). Top-p alone needs the ranked prefix that reaches p: it is
// sorted in growing chunks until the running sum gets there. Every sum keeps stage 01's order (the
// normalizer in id order, the top-p and draw sums in rank order) and ties still go to the lower
// id, so the same seed gives exactly the same tokens as the full sort.
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

  candidates.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) candidates[i] = {i, logits[i]};
  const auto first = candidates.begin();

  // top-k: keep the k best (all when top_k <= 0). Only those k are put in order.
  const int n_top = params.top_k > 0 ? std::min(params.top_k, n_vocab) : n_vocab;
  int n_ranked = 0;  // candidates[0 .. n_ranked) are the best, in rank order
  auto rank_up_to = [&](int n) {
    if (n <= n_ranked) return;
    std::partial_sort(first + n_ranked, first + n, candidates.end(), ranks_before);
    n_ranked = n;
  };
  rank_up_to(n_top < n_vocab ? n_top : 1);  // with every token kept, only the best is needed now

  // softmax(logit / temperature) over the kept ones; the first has the max logit. The normalizer
  // is summed in id order over the kept set (a token is kept when it ranks no lower than the last
  // kept one), exactly as the full sort of stages 01-06 sums it.
  const float max_logit = candidates[0].value;
  float sum = 0.0f;
  for (int i = 0; i < n_vocab; ++i) {
    const bool kept = n_top == n_vocab || !ranks_before(candidates[n_top - 1], {i, logits[i]});
    if (kept) sum += std::exp((logits[i] - max_logit) / params.temperature);
  }

  // top-p: the shortest ranked prefix whose probability reaches top_p (all when top_p >= 1).
  // Ranked in chunks that grow 4x, starting at kFirstChunk: most of the mass is in the first few.
  constexpr int kFirstChunk = 64;
  constexpr int kChunkGrowth = 4;
  int n_kept = n_top;
  float kept_mass = 0.0f;
  for (int i = 0; i < n_top; ++i) {
    if (i == n_ranked) rank_up_to(std::min(n_top, std::max(kFirstChunk, n_ranked * kChunkGrowth)));
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
