// moe.cpp: the router (moe.h).
#include "moe.h"

#include <algorithm>
#include <cmath>

#include "engine.h"

void route(const MoeConfig& moe, float* logits, const float* bias, std::vector<ExpertPick>& picks) {
  const int n = moe.n_expert;
  if (moe.gating == Gating::Softmax) {
    softmax(logits, n);
  } else {
    for (int e = 0; e < n; ++e) logits[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  // Every expert with its choice value, then the n_expert_used highest first; ties go to the
  // lower id, so picks are reproducible. picks is reused: no allocation per token.
  picks.resize(n);
  for (int e = 0; e < n; ++e) picks[e] = {e, bias != nullptr ? logits[e] + bias[e] : logits[e]};
  std::partial_sort(picks.begin(), picks.begin() + moe.n_expert_used, picks.end(),
                    [](const ExpertPick& a, const ExpertPick& b) {
                      return a.weight > b.weight || (a.weight == b.weight && a.expert < b.expert);
                    });
  picks.resize(moe.n_expert_used);
  float sum = 0.0f;
  for (ExpertPick& pick : picks) {
    pick.weight = logits[pick.expert];  // the probability, without the bias
    sum += pick.weight;
  }
  // Renormalised (V3, norm_topk_prob) so the picked weights sum to 1, then scaled: llama.cpp
  // scales in every case; DeepSeek-V2's code only when not renormalising, and no V2 file does both.
  for (ExpertPick& pick : picks) {
    if (moe.norm_weights) pick.weight /= sum;
    pick.weight *= moe.weights_scale;
  }
}
