// pretokenizer.h: splits text into words for byte-level BPE, as llama.cpp does.
//
// tokenizer.ggml.pre names a list of regexes. They apply one after another: each regex splits
// every fragment of the current list into its matches and the gaps between them (a gap stays a
// fragment of its own), so later regexes only see the pieces earlier ones cut. Each final
// fragment is then spelled with GPT-2's byte table (utf8.h) and handed to the BPE merges.
//
// Matching follows llama.cpp's unicode_regex_split, which runs std::regex, not a Unicode regex
// engine, and that shows in three places that PCRE2 must be told about:
//   - \s and \S are ASCII-only there: before matching, every non-ASCII White_Space character is
//     replaced by U+000B (vertical tab), and PCRE2 runs in UTF mode *without* UCP, so \s means
//     [\t\n\v\f\r ] exactly as std::regex's does. \p{..} classes are Unicode in either mode.
//   - $ is the end of the fragment only (PCRE2_DOLLAR_ENDONLY; each fragment is its own subject,
//     so lookaheads and $ never see past it).
//   - Invalid UTF-8 bytes become U+FFFD, one per byte, before anything else (utf8::decode), so
//     they are tokenized as the three bytes of U+FFFD and do not survive a round trip.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

class PreTokenizer {
 public:
  /// The regexes for pre (tokenizer.ggml.pre). An empty or unknown name gets llama.cpp's default
  /// list and one warning line on stderr naming where (the GGUF path).
  PreTokenizer(const std::string& pre, const std::string& where);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  /// The words of text, each spelled with GPT-2's byte table.
  std::vector<std::string> split(std::string_view text) const;

  /// llama3-style vocabularies take a word that is itself a token as is, before any merge.
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
  /// Each of the 256 byte values as GPT-2's table spells it, in UTF-8.
  std::array<std::string, 256> byte_text_;
  bool ignore_merges_ = false;
  std::string where_;
};
