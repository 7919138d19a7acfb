// generate.h: the generation loop (prefill, then sample/decode until EOS, EOT or n_predict).
//
// A Session keeps the engine's position between calls, so an interactive chat keeps its context.
// Each generated token is handed to a callback together with the text that is safe to print now
// (UTF-8 characters split across tokens are held back until complete).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine.h"
#include "sampler.h"
#include "tokenizer.h"

/// Called for each generated token with its printable text; return false to stop generating.
/// A final call with token -1 may deliver text held back at the end (an incomplete character).
using TokenCallback = std::function<bool(int token, const std::string& text)>;

/// Why generation stopped.
enum class StopReason { EndOfGeneration, TokenLimit, ContextFull, Callback };

struct GenerationStats {
  int prompt_tokens = 0;
  double prefill_ms = 0;
  int gen_tokens = 0;    ///< tokens sampled
  int decode_steps = 0;  ///< forward passes of sampled tokens (what decode tok/s counts)
  double decode_ms = 0;  ///< time of those forward passes
  StopReason stop = StopReason::TokenLimit;
  int last_token = -1;  ///< the last sampled token (the EOS/EOT one when stop is EndOfGeneration)
};

/// One step of a generation: the sampled token and the text that is now safe to print.
struct GenerationStep {
  int token = -1;
  std::string text;
};

class Session {
 public:
  /// show_special: stream control tokens' text too (--special).
  Session(Engine& engine, const Tokenizer& tokenizer, const SamplerParams& params, int n_vocab,
          bool show_special = false);

  /// Feeds input (already tokenized, BOS included if wanted), then samples up to n_predict tokens
  /// (< 0: until the end of generation or of the context). Throws Error when the input does not
  /// fit the context of an engine that cannot slide past it.
  GenerationStats generate(const std::vector<int>& input, int n_predict,
                           const TokenCallback& on_token);

  // The same loop one token at a time, for callers that cannot hand over a callback (an
  // iterator in the Python module): start(), then next() until it returns false, then finish().
  // generate() is exactly these three calls.

  /// Prefill: feeds input (as generate() does) and prepares to sample up to n_predict tokens.
  void start(const std::vector<int>& input, int n_predict);
  /// Runs the previous step's token through the engine (unless a limit ends the generation
  /// there), then samples the next one into step. Returns false, with nothing in step, once the
  /// generation has ended; stats().stop then says why.
  bool next(GenerationStep& step);
  /// Ends the generation (before next() returned false: as a callback returning false would).
  /// The last sampled token is kept for the next input. Returns the text still held back.
  std::string finish();
  const GenerationStats& stats() const { return stats_; }

  /// Runs input through the engine and returns the logits after its last token (prefill only).
  const float* evaluate(const std::vector<int>& input);
  /// Forgets the context: the next input starts at position 0.
  void reset();
  /// The sampler for the next generations; the random stream goes on unless reseed().
  void set_sampler(const SamplerParams& params) { params_ = params; }
  void reseed(uint64_t seed) { rng_ = Rng(seed); }

  int position() const { return pos_; }
  /// The engine's logits after the last token run (nullptr before any); valid until the next
  /// call that runs tokens.
  const float* last_logits() const { return step_logits_; }

 private:
  std::vector<int> with_pending(const std::vector<int>& input);
  const float* run(const std::vector<int>& input);
  void end(StopReason reason);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  SamplerParams params_;
  int n_vocab_;
  bool show_special_;
  Rng rng_;
  int pos_ = 0;
  int pending_ = -1;  ///< last sampled token, not yet run through the engine
  std::vector<float> logits_;
  std::vector<Candidate> candidates_;
  // The generation in progress (start() .. finish()).
  GenerationStats stats_;
  std::optional<StreamDecoder> decoder_;  ///< made anew for each generation
  const float* step_logits_ = nullptr;    ///< the engine's logits after the last token run
  int n_predict_ = 0;
  int unfed_ = -1;     ///< the token next() returned last, not yet run through the engine
  bool ended_ = true;  ///< next() returns false
};
