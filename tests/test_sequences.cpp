// test_sequences.cpp: several sequences in one engine (kFirstBatchedStage on), decoded together.
//
// Each sequence has its own cache; a decode step runs one token of each through every layer
// together. Whatever the mix (sequences joining, leaving, starting again, wrapping their rings at
// different times), each row's logits equal those of the same tokens run alone in an engine of
// one sequence. Stages before hold one sequence and say so.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine.h"
#include "error.h"
#include "model.h"
#include "support/paths.h"

namespace {

struct Loaded {
  std::shared_ptr<const GGUFFile> file;
  std::unique_ptr<Model> model;
};

Loaded load_model(const std::string& name) {
  Loaded l;
  l.file = std::make_shared<const GGUFFile>(project_path("data/models/" + name));
  l.model = std::make_unique<Model>(l.file);
  return l;
}

std::unique_ptr<Engine> engine_of(const Model& model, int n_ctx, int n_seq) {
  EngineOptions options;
  options.n_ctx = n_ctx;
  options.n_threads = 2;
  options.n_seq = n_seq;
  return create_engine(model, options);
}

/// max |a - b| <= tolerance * max(1, max |b|), with the worst token named.
void check_row(const float* a, const std::vector<float>& b, double tolerance,
               const std::string& what) {
  double worst = 0, scale = 1;
  int at = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(diff <= worst)) {  // NaN counts as the worst
      worst = diff;
      at = static_cast<int>(i);
    }
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  INFO(what << ": max |diff| " << worst << " at token " << at << ", bound " << tolerance * scale);
  CHECK(worst <= tolerance * scale);
}

/// A sequence's own run: its engine of one sequence, and where it is.
struct Alone {
  std::unique_ptr<Engine> engine;
  int pos = 0;
};

}  // namespace

TEST_CASE("sequences: decoded together, each equals its own run alone", "[sequences]") {
  constexpr int kContext = 16;  // small: the rings wrap, at different steps for each sequence
  constexpr int kSeq = 3;
  constexpr int kSteps = 24;
  for (const char* name : {"tiny-llama-f32.gguf", "tiny-qwen2-q4_0.gguf",
                           "tiny-deepseek2-lite-f32.gguf", "tiny-deepseek2-lite-q4_0.gguf"}) {
    const Loaded l = load_model(name);
    if (!stage_runs(l.model->config().arch)) continue;  // deepseek2 before its stage
    const int n_vocab = l.model->config().n_vocab;
    auto together = engine_of(*l.model, kContext, kSeq);
    if (together->sequences() == 1) {
      WARN("this stage holds one sequence (" << kFirstBatchedStage << " on hold several)");
      const int tokens[2] = {1, 2}, seqs[2] = {0, 1}, positions[2] = {0, 0};
      CHECK_THROWS_WITH(together->forward_batch(tokens, seqs, positions, 2),
                        Catch::Contains(kFirstBatchedStage));
      CHECK_THROWS_WITH(together->forward_seq(1, tokens, 1, 0), Catch::Contains("sequence 1"));
      return;
    }
    INFO(name);
    REQUIRE(together->sequences() == kSeq);
    const double tolerance = logit_tolerance(*l.model);
    std::vector<Alone> alone(kSeq);
    for (Alone& a : alone) a.engine = engine_of(*l.model, kContext, 1);
    auto token = [n_vocab](int seq, int step) { return (seq * 131 + step * 57 + 7) % n_vocab; };

    // Prompts of different lengths, each its own batch.
    const int prompt_len[kSeq] = {5, 9, 2};
    for (int s = 0; s < kSeq; ++s) {
      std::vector<int> prompt;
      for (int i = 0; i < prompt_len[s]; ++i) prompt.push_back(token(s, 100 + i));
      const float* got = together->forward_seq(s, prompt.data(), prompt_len[s], 0);
      const float* ref = alone[s].engine->forward(prompt.data(), prompt_len[s], 0);
      check_row(got, std::vector<float>(ref, ref + n_vocab), tolerance,
                "prompt of sequence " + std::to_string(s));
      alone[s].pos = prompt_len[s];
    }
    for (int step = 0; step < kSteps; ++step) {
      // Sequence 1 sits out every third step; sequence 2 starts again at step 12 (a new request
      // in a freed slot) with a prompt of its own.
      if (step == 12) {
        const int prompt[3] = {token(2, 200), token(2, 201), token(2, 202)};
        together->forward_seq(2, prompt, 3, 0);
        alone[2].engine = engine_of(*l.model, kContext, 1);
        alone[2].engine->forward(prompt, 3, 0);
        alone[2].pos = 3;
      }
      std::vector<int> tokens, seqs, positions;
      for (int s = kSeq - 1; s >= 0; --s) {  // rows in any order
        if (s == 1 && step % 3 == 0) continue;
        tokens.push_back(token(s, step));
        seqs.push_back(s);
        positions.push_back(alone[s].pos);
      }
      const int n = static_cast<int>(tokens.size());
      const float* got = together->forward_batch(tokens.data(), seqs.data(), positions.data(), n);
      std::vector<std::vector<float>> rows;
      for (int i = 0; i < n; ++i)
        rows.emplace_back(got + size_t(i) * n_vocab, got + size_t(i + 1) * n_vocab);
      for (int i = 0; i < n; ++i) {
        Alone& a = alone[seqs[i]];
        const float* ref = a.engine->forward(&tokens[i], 1, a.pos++);
        check_row(rows[i].data(), std::vector<float>(ref, ref + n_vocab), tolerance,
                  "step " + std::to_string(step) + ", sequence " + std::to_string(seqs[i]) +
                      " at position " + std::to_string(a.pos - 1));
      }
    }
  }
}

TEST_CASE("sequences: bad batches are errors", "[sequences]") {
  const Loaded l = load_model("tiny-llama-f32.gguf");
  auto e = engine_of(*l.model, 16, 2);
  if (e->sequences() == 1) {
    WARN("this stage holds one sequence");
    return;
  }
  const int prompt[2] = {1, 2};
  e->forward_seq(0, prompt, 2, 0);
  e->forward_seq(1, prompt, 1, 0);
  const int tokens[3] = {3, 4, 5};
  {
    const int seqs[2] = {0, 0}, positions[2] = {2, 2};
    CHECK_THROWS_WITH(e->forward_batch(tokens, seqs, positions, 2), Catch::Contains("twice"));
  }
  {
    const int seqs[1] = {2}, positions[1] = {0};
    CHECK_THROWS_WITH(e->forward_batch(tokens, seqs, positions, 1),
                      Catch::Contains("sequence 2 of 2"));
  }
  {
    const int seqs[3] = {0, 1, 0}, positions[3] = {2, 1, 2};
    CHECK_THROWS_WITH(e->forward_batch(tokens, seqs, positions, 3), Catch::Contains("3 rows"));
  }
  {
    const int seqs[2] = {0, 1}, positions[2] = {2, 5};  // sequence 1 holds 1 position, not 5
    CHECK_THROWS_AS(e->forward_batch(tokens, seqs, positions, 2), Error);
  }
  {
    const int bad[2] = {-1, 3}, seqs[2] = {0, 1}, positions[2] = {2, 1};
    CHECK_THROWS_WITH(e->forward_batch(bad, seqs, positions, 2), Catch::Contains("token id -1"));
  }
  CHECK_THROWS_WITH(engine_of(*l.model, 16, 0), Catch::Contains("sequences"));
}
