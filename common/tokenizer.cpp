// tokenizer.cpp: vocabulary loading, special tokens, BPE and SentencePiece merges, decoding.
//
// encode() follows llama.cpp's llama_vocab::tokenize step by step, so ids agree token for token:
//   1. Special tokens. The text is cut at every occurrence of a USER_DEFINED token (always) and of
//      CONTROL and UNKNOWN tokens (only with parse_special). Tokens are tried longest text first
//      (equal lengths: lower id first); each one cuts all the raw text the earlier ones left.
//   2. Every raw fragment left is tokenized on its own:
//      gpt2:  pre-tokenizer words (pretokenizer.h); within a word, the adjacent pair with the
//             lowest merge rank merges, again and again, until no pair has a rank (equal ranks:
//             leftmost first).
//      llama: a " " is put in front (of the first fragment and of each one after a special
//             token), spaces become "▁", then the adjacent pair whose concatenation is the
//             highest-scoring token merges until none is a token (equal scores: leftmost first);
//             a character that is no token comes out as its <0xNN> byte tokens.
// A priority queue over a linked list of symbols makes both merges O(n log n) in the word length.
#include "tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "error.h"
#include "pretokenizer.h"
#include "utf8.h"

namespace {

// ---- GGUF keys ----
const char* const kKeyModel = "tokenizer.ggml.model";
const char* const kKeyPre = "tokenizer.ggml.pre";
const char* const kKeyTokens = "tokenizer.ggml.tokens";
const char* const kKeyScores = "tokenizer.ggml.scores";
const char* const kKeyTypes = "tokenizer.ggml.token_type";
const char* const kKeyMerges = "tokenizer.ggml.merges";
const char* const kKeyBos = "tokenizer.ggml.bos_token_id";
const char* const kKeyEos = "tokenizer.ggml.eos_token_id";
const char* const kKeyEot = "tokenizer.ggml.eot_token_id";
const char* const kKeyAddBos = "tokenizer.ggml.add_bos_token";
const char* const kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

const char* const kModelBpe = "gpt2";
const char* const kModelSpm = "llama";

// Token types as GGUF stores them, 0..6 (llama.cpp's LLAMA_TOKEN_TYPE_*).
enum TokenType : int64_t { kUndefined, kNormal, kUnknown, kControl, kUserDefined, kUnused, kByte };

// Converters write "no such token" as u32 0xFFFFFFFF (stories260K's separator id, for one).
constexpr int64_t kNoTokenU32 = 0xFFFFFFFF;
// llama.cpp's SentencePiece defaults when the ids are not in the file.
constexpr int kSpmDefaultBos = 1;
constexpr int kSpmDefaultEos = 2;

// Texts llama.cpp makes CONTROL whatever type the file gives them (its end-of-generation and
// fill-in-the-middle detection). DeepSeek-Coder stores its three FIM tokens as USER_DEFINED, so
// with parse_special off they are plain text, and they print only with special tokens on.
const char* const kControlTexts[] = {
    // DeepSeek's
    "<｜end▁of▁sentence｜>", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>",
    // other families'
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>",
    "<end_of_turn>", "<EOT>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>"};

// End-of-turn tokens looked up by text when tokenizer.ggml.eot_token_id is absent; the first one
// present that is not EOS wins (DeepSeek-Coder's <|EOT|>; DeepSeek-LLM has none besides EOS).
const char* const kEndOfTurnTexts[] = {"<|EOT|>", "<|eot_id|>", "<|im_end|>",
                                       "<｜end▁of▁sentence｜>"};

const char* const kSpmSpace = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's visible space

constexpr int kByteValues = 256;

// Hash that lets the maps be searched with a string_view, without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

// The byte a token spelled "<0xNN>" stands for, or -1 when text is not of that form.
int byte_token_value(std::string_view text) {
  constexpr size_t kLength = 6;  // "<0x", two hex digits, ">"
  constexpr size_t kHexAt = 3;
  constexpr int kHexBase = 16;
  auto hex = [&](size_t i) { return std::isxdigit(static_cast<unsigned char>(text[i])) != 0; };
  if (text.size() != kLength || !text.starts_with("<0x") || text.back() != '>' || !hex(kHexAt) ||
      !hex(kHexAt + 1)) {
    return -1;
  }
  return std::stoi(std::string(text.substr(kHexAt, 2)), nullptr, kHexBase);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out.append(s.substr(at, hit - at));
    out.append(to);
  }
  out.append(s.substr(at));
  return out;
}

// A piece of the input: a special token, or raw text [begin, end) still to be tokenized.
struct Fragment {
  int token;  // -1 for raw text
  size_t begin;
  size_t end;
};

// One symbol of a word being merged: bytes [begin, begin + length) of the word, in a linked list.
struct Symbol {
  size_t begin;
  size_t length;  // 0 once merged into its left neighbour
  int prev;
  int next;
};

// A candidate merge of symbols left and right, valid while both still have the recorded lengths.
struct Bigram {
  double priority;  // BPE: -rank; SentencePiece: the merged token's score. Higher merges first.
  int left;
  int right;
  size_t left_length;
  size_t right_length;
};

struct MergesLater {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  }
};

// Splits word into characters and merges them, best pair first; returns the symbols left.
// pair_priority(left, right) gives the priority of merging two adjacent texts, or nullopt when
// they do not merge.
template <class PairPriority>
std::vector<std::string_view> merge(std::string_view word, const PairPriority& pair_priority) {
  std::vector<Symbol> symbols;
  for (size_t at = 0; at < word.size();) {
    const size_t n =
        std::min(utf8::sequence_length(static_cast<unsigned char>(word[at])), word.size() - at);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({at, n, index - 1, index + 1});
    at += n;
  }
  if (symbols.empty()) return {};
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, MergesLater> queue;
  auto text = [&](int i) { return word.substr(symbols[i].begin, symbols[i].length); };
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::optional<double> priority = pair_priority(text(left), text(right));
    if (priority) queue.push({*priority, left, right, symbols[left].length, symbols[right].length});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    // Stale when either side has merged since (a merged-away symbol has length 0).
    if (left.length != b.left_length || right.length != b.right_length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    consider(left.prev, b.left);
    consider(b.left, left.next);
  }
  std::vector<std::string_view> merged;
  for (int i = 0; i != -1; i = symbols[i].next) merged.push_back(text(i));
  return merged;
}

}  // namespace

struct Tokenizer::Impl {
  std::string path;
  std::string model;
  std::string pre;
  bool spm = false;  // SentencePiece ("llama") rather than byte-level BPE ("gpt2")

  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int64_t> types;
  std::vector<std::string> pieces;  // what each token prints as, special tokens as ""
  StringMap id_of;
  StringMap merge_rank;          // "left right" -> rank, lower merges first
  std::vector<int> specials;     // CONTROL, USER_DEFINED and UNKNOWN ids, longest text first
  std::vector<int> byte_tokens;  // byte fallback: the token of each byte, or -1
  std::unique_ptr<PreTokenizer> pre_tokenizer;

  int bos = -1;
  int eos = -1;
  int eot = -1;
  bool add_bos = false;
  bool add_space_prefix = false;

  explicit Impl(const GGUFFile& file);
  void load_tokens(const GGUFFile& file);
  void load_merges(const GGUFFile& file);
  void load_special_ids(const GGUFFile& file);
  std::string make_piece(int id) const;

  bool is_special(int id) const {
    return types[id] == kControl || types[id] == kUnknown || types[id] == kUserDefined;
  }
  int token_of(std::string_view text) const {
    auto it = id_of.find(text);
    return it == id_of.end() ? -1 : it->second;
  }
  void check_id(int id) const {
    check(id >= 0 && id < static_cast<int>(texts.size()), path, ": token id ", id,
          " is outside the vocabulary of ", texts.size(), " tokens");
  }

  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void encode_bpe(std::string_view text, std::vector<int>& out) const;
  void encode_spm(std::string_view text, std::vector<int>& out) const;
  void emit(std::string_view symbol, std::vector<int>& out) const;
};

// ---- Loading ----

Tokenizer::Impl::Impl(const GGUFFile& file) : path(file.path()) {
  model = file.get_string(kKeyModel);
  check(model == kModelBpe || model == kModelSpm, path, ": ", kKeyModel, " is '", model,
        "'; supported are '", kModelBpe, "' (byte-level BPE) and '", kModelSpm,
        "' (SentencePiece)");
  spm = model == kModelSpm;
  pre = file.get_string_or(kKeyPre, "");

  load_tokens(file);
  if (!spm) {
    load_merges(file);
    pre_tokenizer = std::make_unique<PreTokenizer>(pre, path);
  }
  load_special_ids(file);

  // llama.cpp adds BOS by default for SentencePiece and Llama 3 vocabularies (that have one).
  const bool llama3 = !spm && pre_tokenizer->ignore_merges();
  add_bos = file.get_bool_or(kKeyAddBos, (spm || llama3) && bos >= 0);
  check(!add_bos || bos >= 0, path, ": ", kKeyAddBos, " is true but there is no ", kKeyBos);
  add_space_prefix = spm && file.get_bool_or(kKeyAddSpacePrefix, true);

  pieces.resize(texts.size());
  for (int id = 0; id < static_cast<int>(texts.size()); ++id) {
    pieces[id] = make_piece(id);
    if (is_special(id)) specials.push_back(id);
  }
  std::stable_sort(specials.begin(), specials.end(),
                   [&](int a, int b) { return texts[a].size() > texts[b].size(); });

  // A byte is its one-character token; SentencePiece first tries its <0xNN> token.
  byte_tokens.assign(kByteValues, -1);
  for (int b = 0; b < kByteValues; ++b) {
    char hex[sizeof("<0xNN>")];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    const int id = spm ? token_of(hex) : -1;
    byte_tokens[b] = id >= 0 ? id : token_of(std::string(1, static_cast<char>(b)));
  }
}

void Tokenizer::Impl::load_tokens(const GGUFFile& file) {
  texts = file.get_string_array(kKeyTokens);
  const size_t n = texts.size();
  check(n > 0, path, ": ", kKeyTokens, " is empty");
  check(n < static_cast<size_t>(std::numeric_limits<int>::max()), path, ": ", kKeyTokens, " has ",
        n, " tokens, more than token ids can count");

  scores.assign(n, 0.0f);  // llama.cpp: no scores means all 0
  if (file.has(kKeyScores)) {
    const std::vector<double> s = file.get_float_array(kKeyScores);
    check(s.size() == n, path, ": ", kKeyScores, " has ", s.size(), " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i) scores[i] = static_cast<float>(s[i]);
  }
  types.assign(n, kNormal);  // llama.cpp: no types means all normal
  if (file.has(kKeyTypes)) {
    types = file.get_int_array(kKeyTypes);
    check(types.size() == n, path, ": ", kKeyTypes, " has ", types.size(), " entries for ", n,
          " tokens");
    for (size_t i = 0; i < n; ++i) {
      check(types[i] >= kUndefined && types[i] <= kByte, path, ": ", kKeyTypes, "[", i, "] is ",
            types[i], ", not a token type (0..6)");
    }
  }

  id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp renames empty tokens so that no text is ever "found" everywhere.
    if (texts[i].empty()) texts[i] = "[EMPTY_" + std::to_string(i) + "]";
    const auto [it, inserted] = id_of.emplace(texts[i], static_cast<int>(i));
    check(inserted, path, ": ", kKeyTokens, " has '", texts[i], "' twice (ids ", it->second,
          " and ", i, ")");
    check(types[i] != kByte || byte_token_value(texts[i]) >= 0, path, ": ", kKeyTokens, "[", i,
          "] '", texts[i], "' has the byte type but is not of the form <0xNN>");
  }
  for (const char* text : kControlTexts) {
    const int id = token_of(text);
    if (id >= 0) types[id] = kControl;
  }
}

void Tokenizer::Impl::load_merges(const GGUFFile& file) {
  const std::vector<std::string> merges = file.get_string_array(kKeyMerges);
  merge_rank.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.find(' ', 1);  // as llama.cpp: the first space after the first byte
    check(space != std::string::npos && space + 1 < m.size(), path, ": ", kKeyMerges, "[", i, "] '",
          m, "' is not two tokens separated by a space");
    merge_rank.emplace(m, static_cast<int>(i));  // a repeated pair keeps its first rank
  }
}

void Tokenizer::Impl::load_special_ids(const GGUFFile& file) {
  const int n = static_cast<int>(texts.size());
  auto read_id = [&](const char* key, int fallback) {
    if (!file.has(key)) return fallback < n ? fallback : -1;
    const int64_t v = file.get_int(key);
    if (v == kNoTokenU32 || v == -1) return -1;
    check(v >= 0 && v < n, path, ": ", key, " = ", v, " is outside the vocabulary of ", n,
          " tokens");
    return static_cast<int>(v);
  };
  bos = read_id(kKeyBos, spm ? kSpmDefaultBos : -1);
  eos = read_id(kKeyEos, spm ? kSpmDefaultEos : -1);
  eot = read_id(kKeyEot, -1);
  if (!file.has(kKeyEot)) {
    for (const char* text : kEndOfTurnTexts) {
      const int id = token_of(text);
      if (eot < 0 && id >= 0 && id != eos) eot = id;
    }
  }
}

// What token id prints as, without special tokens (their text is added by piece()).
std::string Tokenizer::Impl::make_piece(int id) const {
  const std::string& text = texts[id];
  switch (types[id]) {
    case kNormal: {
      if (spm) return replace_all(text, kSpmSpace, " ");
      // Byte-level: each character stands for one byte. A character outside GPT-2's table
      // (no real vocabulary has one in a normal token) is printed as itself.
      std::string bytes;
      for (uint32_t cp : utf8::decode(text)) {
        const int b = byte_level::codepoint_to_byte(cp);
        if (b >= 0) {
          bytes += static_cast<char>(b);
        } else {
          utf8::append(bytes, cp);
        }
      }
      return bytes;
    }
    case kUserDefined:
      return text;  // user-defined tokens are literal text, not byte-encoded
    case kByte:
      return std::string(1, static_cast<char>(byte_token_value(text)));
    default:
      return "";  // control, unknown (printed by piece() when asked), unused, undefined
  }
}

// ---- Encoding ----

std::vector<Fragment> Tokenizer::Impl::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int id : specials) {
    if (!parse_special && types[id] != kUserDefined) continue;
    const std::string& special = texts[id];
    // DeepSeek-LLM has 2400 user-defined tokens and a prompt rarely holds any: one search of the
    // whole text rules each out before the cutting loop.
    if (text.find(special) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(0, f.end);
      size_t at = f.begin;
      for (size_t hit; (hit = raw.find(special, at)) != std::string_view::npos;) {
        if (hit > at) next.push_back({-1, at, hit});
        next.push_back({id, hit, hit + special.size()});
        at = hit + special.size();
      }
      if (at < f.end) next.push_back({-1, at, f.end});
    }
    fragments.swap(next);
  }
  return fragments;
}

// Emits symbol's token or, when it is none, as llama.cpp, the token of each of its bytes.
void Tokenizer::Impl::emit(std::string_view symbol, std::vector<int>& out) const {
  const int id = token_of(symbol);
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  for (unsigned char b : symbol) {
    check(byte_tokens[b] >= 0, path, ": the vocabulary has no token for '", symbol,
          "' nor for its byte ", static_cast<int>(b));
    out.push_back(byte_tokens[b]);
  }
}

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int>& out) const {
  std::string key;
  auto rank_of = [&](std::string_view left, std::string_view right) -> std::optional<double> {
    key.assign(left);
    key += ' ';
    key.append(right);
    auto it = merge_rank.find(key);
    if (it == merge_rank.end()) return std::nullopt;
    return -static_cast<double>(it->second);  // lower rank merges first
  };
  for (const std::string& word : pre_tokenizer->split(text)) {
    const int id = pre_tokenizer->ignore_merges() ? token_of(word) : -1;
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (std::string_view symbol : merge(word, rank_of)) emit(symbol, out);
  }
}

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int>& out) const {
  auto score_of = [&](std::string_view left, std::string_view right) -> std::optional<double> {
    // left and right are adjacent in one word, so their concatenation is a view of it.
    const int id = token_of(std::string_view(left.data(), left.size() + right.size()));
    if (id < 0) return std::nullopt;
    return scores[id];
  };
  const std::string word = replace_all(text, " ", kSpmSpace);
  for (std::string_view symbol : merge(word, score_of)) emit(symbol, out);
}

// ---- Tokenizer ----

Tokenizer::Tokenizer(const GGUFFile& file) : impl_(std::make_unique<Impl>(file)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int> Tokenizer::encode(const std::string& text, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int> ids;
  bool after_special = true;  // SentencePiece puts a space before the first fragment too
  for (const Fragment& f : m.partition(text, parse_special)) {
    if (f.token >= 0) {
      ids.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view raw = std::string_view(text).substr(f.begin, f.end - f.begin);
    if (m.spm) {
      const std::string prefix = m.add_space_prefix && after_special ? " " : "";
      m.encode_spm(prefix + std::string(raw), ids);
    } else {
      m.encode_bpe(raw, ids);
    }
    after_special = false;
  }
  return ids;
}

std::string Tokenizer::piece(int id, bool with_special) const {
  impl_->check_id(id);
  const bool control = impl_->types[id] == kControl || impl_->types[id] == kUnknown;
  if (control) return with_special ? impl_->texts[id] : "";
  return impl_->pieces[id];
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool with_special) const {
  std::string text;
  // SentencePiece: the space encode() put in front of the text goes again, from the first token
  // after BOS (llama2.c), or the first token when there is no BOS (llama.cpp).
  const size_t first = !ids.empty() && ids[0] == impl_->bos ? 1 : 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    std::string p = piece(ids[k], with_special);
    if (impl_->add_space_prefix && k == first && !p.empty() && p[0] == ' ') p.erase(0, 1);
    text += p;
  }
  return text;
}

int Tokenizer::n_vocab() const {
  return static_cast<int>(impl_->texts.size());
}
int Tokenizer::bos() const {
  return impl_->bos;
}
int Tokenizer::eos() const {
  return impl_->eos;
}
int Tokenizer::eot() const {
  return impl_->eot;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}

bool Tokenizer::is_control(int id) const {
  impl_->check_id(id);
  return impl_->types[id] == kControl;
}

bool Tokenizer::is_end_of_generation(int id) const {
  return id >= 0 && (id == impl_->eos || id == impl_->eot);
}

const std::string& Tokenizer::model_name() const {
  return impl_->model;
}
const std::string& Tokenizer::pre_name() const {
  return impl_->pre;
}
int Tokenizer::find_token(const std::string& text) const {
  return impl_->token_of(text);
}

// ---- StreamDecoder ----

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool with_special)
    : tokenizer_(tokenizer), with_special_(with_special) {}

std::string StreamDecoder::push(int token) {
  // decode() of the first token (after BOS) drops the SentencePiece leading space; later tokens
  // are plain pieces.
  if (at_start_) {
    pending_ += tokenizer_.decode({token}, with_special_);
    if (token != tokenizer_.bos()) at_start_ = false;
  } else {
    pending_ += tokenizer_.piece(token, with_special_);
  }
  const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
  std::string out = utf8::sanitize(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}
