// moe.h: the router, which experts a token's FFN runs and with what weight.
//
// DeepSeekMoE (deepseek2 files, as llama.cpp reads them): the router's logits (n_expert) become
// probabilities by softmax (V2) or sigmoid (V3); the n_expert_used highest of probability + bias
// are picked (V3's exp_probs_b steers the choice, not the weights); the weights are the picked
// probabilities, renormalised to sum 1 when norm_weights, times weights_scale.
#pragma once

#include <vector>

#include "model.h"

/// One routed expert of a token and the weight of its output.
struct ExpertPick {
  int expert;
  float weight;
};

/// picks (n_expert_used) from logits (n_expert, overwritten by the probabilities) and bias
/// (n_expert, or nullptr), highest first.
void route(const MoeConfig& moe, float* logits, const float* bias, std::vector<ExpertPick>& picks);
