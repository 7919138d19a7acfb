// perplexity.h: what a model's quantization costs, measured as llama-perplexity measures it.
//
// The text is cut into chunks of n_ctx tokens; each chunk starts a fresh cache with BOS in place
// of its first token, and only its second half is scored, so every scored token has at least
// n_ctx / 2 tokens of context: position j's logits predict token j + 1, for j = n_ctx/2 ..
// n_ctx - 2. PPL = exp(mean negative log-likelihood), +/- from the spread of the per-token values.
//
// KL divergence compares a quantized model's token distributions with a base model's (the F32
// file) at the same positions: the base run writes its log-probabilities to a file, the other run
// reads them. Reported: mean and 99th percentile of KL(base || model), and the share of positions
// where both models rank the same token first.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "engine.h"
#include "tokenizer.h"

struct PerplexityOptions {
  int n_ctx = 0;                  ///< tokens per chunk (the engine's context must hold them)
  int max_chunks = -1;            ///< at most this many chunks; -1 = all whole chunks of the text
  std::string kl_base_out;        ///< write the scored log-probabilities here (the base run)
  std::string kl_base_in;         ///< compare against the log-probabilities stored here
  std::FILE* progress = nullptr;  ///< running "[chunk]ppl," figures go here when set
};

struct PerplexityResult {
  int chunks = 0;
  int scored = 0;      ///< tokens scored
  double ppl = 0;      ///< exp(mean negative log-likelihood)
  double ppl_err = 0;  ///< ppl * standard error of that mean
  bool has_kl = false;
  double kl_mean = 0;
  double kl_err = 0;        ///< standard error of kl_mean
  double kl_p99 = 0;        ///< 99th percentile of the per-token KL divergence
  double same_top = 0;      ///< share of positions whose most likely token is the base model's
  double same_top_err = 0;  ///< its standard error
};

/// Scores text (tokenized as llama-perplexity does: BOS first when the vocabulary adds one).
/// Throws Error when the text is shorter than 2 chunks, or a base file does not match the run.
PerplexityResult perplexity(Engine& engine, const Tokenizer& tokenizer, const std::string& text,
                            int n_vocab, const PerplexityOptions& options);
