// tokenizer.h: text <-> token ids for the two tokenizer families in DeepSeek GGUF files.
//
//   tokenizer.ggml.model = "gpt2":  byte-level BPE (DeepSeek-LLM, -Coder, R1 distills). The text is
//       split by the pre-tokenizer named in tokenizer.ggml.pre, each piece mapped byte -> unicode
//       (GPT-2's table) and merged by rank (tokenizer.ggml.merges).
//   tokenizer.ggml.model = "llama": SentencePiece BPE with scores and <0xNN> byte fallback
//       (stories260K, llama2.c models).
// encode() never adds BOS; callers decide (add_bos()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf.h"

class Tokenizer {
 public:
  /// Reads the vocabulary from file's tokenizer.ggml.* keys; throws Error when missing or
  /// malformed.
  explicit Tokenizer(const GGUFFile& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Token ids for text, without BOS. With parse_special, control tokens written in the text
  /// (e.g. "<｜begin▁of▁sentence｜>") become their ids; without it they are tokenized as plain
  /// text.
  std::vector<int> encode(const std::string& text, bool parse_special) const;

  /// The raw bytes a token stands for (may be part of a UTF-8 character). Control tokens give
  /// their text when with_special, else "".
  std::string piece(int id, bool with_special = false) const;
  /// Concatenated pieces; the SentencePiece leading space after BOS is removed as llama.cpp does.
  std::string decode(const std::vector<int>& ids, bool with_special = false) const;

  int n_vocab() const;
  int bos() const;  ///< -1 if none
  int eos() const;  ///< -1 if none
  int eot() const;  ///< end-of-turn (e.g. <|EOT|>), -1 if none
  bool add_bos() const;
  bool is_control(int id) const;
  /// True for tokens that end generation (EOS, EOT).
  bool is_end_of_generation(int id) const;
  const std::string& model_name() const;  ///< "gpt2" or "llama"
  const std::string& pre_name() const;    ///< tokenizer.ggml.pre, "" if absent
  /// Id of the token whose text is exactly text, or -1.
  int find_token(const std::string& text) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Streams decoded text token by token, holding back bytes of an incomplete UTF-8 character until
/// the token that completes it arrives, so a terminal never shows broken characters.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool with_special = false);
  /// Text ready to print after token (may be empty).
  std::string push(int token);
  /// Whatever is still held back (invalid or truncated UTF-8 comes out as U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool with_special_;
  bool at_start_ = true;
  std::string pending_;
};
