// pretokenizer.cpp: the regex lists of llama.cpp's pre-tokenizers and the split that applies them.
#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdio>

#include "error.h"
#include "utf8.h"

namespace {

// ---- The regex lists (llama.cpp's src/llama-vocab.cpp), in PCRE2 syntax ----

// GPT-2's own split; also the second regex of llama.cpp's default list.
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

const std::vector<std::string> kGpt2Only = {kGpt2};

// llama.cpp's list for a missing (or, here, unknown) tokenizer.ggml.pre.
const std::vector<std::string> kDefault = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    kGpt2,
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};

// The cased letters (Unicode's Lu, Ll, Lt, as far as DeepSeek's tokenizer.json lists them).
const std::string kDeepSeekLetters =
    R"(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943})";

// CJK ideographs U+4E00..U+9FA5, U+0800..U+4E00 (as DeepSeek writes it) and Hangul to U+D7FF.
const char* const kDeepSeekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

const std::vector<std::string> kDeepSeekLlm = {
    R"([\r\n])",
    R"(\s?[)" + kDeepSeekLetters + "]+",
    // ASCII punctuation and symbols, their fullwidth forms, curly quotes, CJK space, 、 and 。
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
    R"(\s+$)",
    kDeepSeekCjk,
    R"(\p{N}+)",
};

const std::vector<std::string> kDeepSeekCoder = {
    R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepSeekCjk, R"(\p{N})",
};

// DeepSeek-V3/R1. llama.cpp runs the third regex on its "collapsed" text, where \p{S} covers the
// ASCII symbols $+<=>^`| but not '~'; the (?!~) and ~| below keep that, so "~" agrees too.
const std::vector<std::string> kDeepSeekV3 = {
    R"(\p{N}{1,3})",
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)"
    R"(|(?:~|[^\r\n\p{L}\p{P}\p{S}])?[\p{L}\p{M}]+)"
    R"(| ?(?:(?!~)[\p{P}\p{S}])+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// Qwen2, used by the DeepSeek-R1 distills of Qwen ("deepseek-r1-qwen"): digits one by one.
const std::vector<std::string> kQwen2 = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// Llama 3 (the R1 distills of Llama): digits in groups of up to three.
const std::vector<std::string> kLlama3 = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

struct NamedList {
  const char* name;
  const std::vector<std::string>* regexes;
  bool ignore_merges;
};

const NamedList kLists[] = {
    {"deepseek-llm", &kDeepSeekLlm, false},
    {"deepseek-coder", &kDeepSeekCoder, false},
    {"deepseek-v3", &kDeepSeekV3, false},
    {"deepseek-r1-qwen", &kQwen2, false},
    {"qwen2", &kQwen2, false},
    {"llama-bpe", &kLlama3, true},
    {"llama3", &kLlama3, true},
    {"gpt-2", &kGpt2Only, false},
    {"default", &kDefault, false},
};

std::string error_message(int code) {
  PCRE2_UCHAR message[256];  // room for any PCRE2 error message
  pcre2_get_error_message(code, message, sizeof(message));
  return reinterpret_cast<const char*>(message);
}

// Non-ASCII whitespace is matched as this ASCII one (see pretokenizer.h).
constexpr uint32_t kWhitespaceStandIn = 0x0B;

// A fragment of the text, as byte offsets [begin, end) into the subject the regexes see.
struct Span {
  size_t begin;
  size_t end;
};

// PCRE2's JIT keeps a backtracking frame on its own stack for each repetition of a group:
// deepseek-v3's (?:(?!~)[\p{P}\p{S}])+ takes 8 bytes per character, so the default 32 KiB stack
// ends at 4,094 punctuation characters ("JIT stack limit reached"). A subject gets a stack of
// kJitStackPerByte bytes for each of its bytes (a character is at least one byte), at most
// kMaxJitStack; the stack is reserved address space, and only the pages a match touches are used.
constexpr size_t kDefaultJitStack = 32 * 1024;  // what PCRE2 uses without a match context
constexpr size_t kJitStackPerByte = 16;
constexpr size_t kMaxJitStack = size_t(256) << 20;

// The match data and match context for the matches on one subject. Each split() has its own, so
// a PreTokenizer holds no mutable state and may split on several threads at once.
class Matcher {
 public:
  Matcher(size_t subject_bytes, const std::string& where)
      : data_(pcre2_match_data_create(1, nullptr)), context_(pcre2_match_context_create(nullptr)) {
    check(data_ != nullptr && context_ != nullptr, where, ": out of memory for regex match data");
    const size_t wanted = std::min(kMaxJitStack, subject_bytes * kJitStackPerByte);
    if (wanted > kDefaultJitStack) {
      // nullptr when the space cannot be had: the matches then fall back to the interpreter.
      stack_ = pcre2_jit_stack_create(kDefaultJitStack, wanted, nullptr);
      if (stack_ != nullptr) pcre2_jit_stack_assign(context_, nullptr, stack_);
    }
  }
  ~Matcher() {
    pcre2_jit_stack_free(stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(data_);
  }
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  /// pcre2_match's result for a match starting at byte start of subject [0, length).
  int match(const pcre2_code* code, PCRE2_SPTR subject, size_t length, size_t start) {
    const int rc = pcre2_match(code, subject, length, start, PCRE2_NO_UTF_CHECK, data_, context_);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
    // Past kMaxJitStack: the interpreter keeps its backtracking frames on the heap instead.
    return pcre2_match(code, subject, length, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data_,
                       context_);
  }
  const PCRE2_SIZE* ovector() const { return pcre2_get_ovector_pointer(data_); }

 private:
  pcre2_match_data* data_;
  pcre2_match_context* context_;
  pcre2_jit_stack* stack_ = nullptr;
};

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre, const std::string& where) : where_(where) {
  const NamedList* list = nullptr;
  for (const NamedList& l : kLists) {
    if (pre == l.name) list = &l;
  }
  const std::vector<std::string>* patterns = list ? list->regexes : &kDefault;
  ignore_merges_ = list && list->ignore_merges;
  if (list == nullptr) {
    const std::string what =
        pre.empty() ? "is missing" : "'" + pre + "' is not one this engine knows";
    std::fprintf(stderr,
                 "warning: %s: tokenizer.ggml.pre %s; splitting with llama.cpp's default regexes, "
                 "tokens may differ from the model's\n",
                 where.c_str(), what.c_str());
  }

  for (const std::string& pattern : *patterns) {
    auto regex = std::make_unique<Regex>();
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (regex->code == nullptr) {
      fail(where, ": pre-tokenizer regex for '", pre, "' does not compile at offset ", error_offset,
           ": ", error_message(error));
    }
    // JIT only makes matching faster; where the platform lacks it PCRE2 interprets, same results.
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(regex));
  }

  for (size_t b = 0; b < byte_text_.size(); ++b) {
    utf8::append(byte_text_[b], byte_level::byte_to_codepoint(static_cast<uint8_t>(b)));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cps = utf8::decode(text);

  // What the regexes see, and where each codepoint starts in it (plus the end).
  std::string subject;
  subject.reserve(text.size());
  std::vector<size_t> starts(cps.size() + 1);
  for (size_t i = 0; i < cps.size(); ++i) {
    starts[i] = subject.size();
    const bool foreign_space = cps[i] >= 0x80 && utf8::is_whitespace(cps[i]);
    utf8::append(subject, foreign_space ? kWhitespaceStandIn : cps[i]);
  }
  starts[cps.size()] = subject.size();

  std::vector<Span> spans;
  if (!subject.empty()) spans.push_back({0, subject.size()});
  std::vector<Span> next;
  Matcher matcher(subject.size(), where_);

  for (const auto& regex : regexes_) {
    next.clear();
    for (const Span& span : spans) {
      const size_t length = span.end - span.begin;
      const auto* fragment = reinterpret_cast<PCRE2_SPTR>(subject.data() + span.begin);
      size_t at = 0;   // where the next search starts, in bytes from the fragment's start
      size_t gap = 0;  // start of the text not yet covered by a match
      while (at < length) {
        const int rc = matcher.match(regex->code, fragment, length, at);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          fail(where_, ": pre-tokenizer regex failed on a ", length,
               "-byte fragment: ", error_message(rc));
        }
        const PCRE2_SIZE* ovector = matcher.ovector();
        const size_t m_begin = ovector[0];
        const size_t m_end = ovector[1];
        if (m_end == m_begin) {  // an empty match cuts nothing; step over one character
          if (m_begin >= length) break;
          at = m_begin + utf8::sequence_length(fragment[m_begin]);
          continue;
        }
        if (m_begin > gap) next.push_back({span.begin + gap, span.begin + m_begin});
        next.push_back({span.begin + m_begin, span.begin + m_end});
        gap = at = m_end;
      }
      if (gap < length) next.push_back({span.begin + gap, span.end});
    }
    spans.swap(next);
  }

  // Each word from the original codepoints (the stand-in spaces may differ in length).
  auto codepoint_index = [&](size_t byte) {
    return size_t(std::lower_bound(starts.begin(), starts.end(), byte) - starts.begin());
  };
  std::vector<std::string> words;
  words.reserve(spans.size());
  std::string bytes;
  for (const Span& span : spans) {
    bytes.clear();
    const size_t end = codepoint_index(span.end);
    for (size_t i = codepoint_index(span.begin); i < end; ++i) utf8::append(bytes, cps[i]);
    std::string word;
    for (unsigned char b : bytes) word += byte_text_[b];
    words.push_back(std::move(word));
  }
  return words;
}
