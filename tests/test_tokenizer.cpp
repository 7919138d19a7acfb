// test_tokenizer.cpp: the tokenizer against llama.cpp's own test vectors for the real DeepSeek
// vocabularies (../shared, skipped visibly when absent), and known answers on small vocabularies
// built here, whose expected tokens follow by hand from the merge rules and regexes.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "error.h"
#include "gguf.h"
#include "pretokenizer.h"
#include "support/gguf_builder.h"
#include "support/paths.h"
#include "tokenizer.h"
#include "utf8.h"

namespace {

using Ids = std::vector<int>;

constexpr int32_t kNormal = 1;
constexpr int32_t kUnknown = 2;
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;
constexpr int32_t kByte = 6;

// Writes the builder's file, loads a Tokenizer from it and removes the file again.
std::unique_ptr<Tokenizer> load(const GGUFBuilder& builder, const std::string& name) {
  const std::string path = builder.write_temp(name);
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    GGUFFile file(path);
    tokenizer = std::make_unique<Tokenizer>(file);
  } catch (...) {
    std::filesystem::remove(path);
    throw;
  }
  std::filesystem::remove(path);
  return tokenizer;
}

// GPT-2's spelling of a byte (checked against known answers below).
std::string byte_char(unsigned char b) {
  std::string s;
  utf8::append(s, byte_level::byte_to_codepoint(b));
  return s;
}

// GPT-2's spelling of a whole string, byte by byte.
std::string spelled(const std::string& text) {
  std::string s;
  for (unsigned char b : text) s += byte_char(b);
  return s;
}

// A byte-level BPE vocabulary: ids 0..255 are the bytes in byte order, then added tokens.
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  BpeVocab() {
    for (int b = 0; b < 256; ++b) add(byte_char(static_cast<unsigned char>(b)));
  }
  int add(const std::string& text, int32_t type = kNormal) {
    tokens.push_back(text);
    types.push_back(type);
    return static_cast<int>(tokens.size()) - 1;
  }
  /// Adds the merge "left right" and the token it makes (texts in GPT-2 spelling).
  int merge(const std::string& left, const std::string& right) {
    merges.push_back(left + " " + right);
    return add(left + right);
  }
  int id(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return static_cast<int>(i);
    }
    FAIL("no token '" << text << "' in the test vocabulary");
    return -1;
  }
  int byte(unsigned char b) const { return b; }

  GGUFBuilder builder(const std::string& pre) const {
    GGUFBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) b.add_string("tokenizer.ggml.pre", pre);
    b.add_string_array("tokenizer.ggml.tokens", tokens);
    b.add_i32_array("tokenizer.ggml.token_type", types);
    b.add_string_array("tokenizer.ggml.merges", merges);
    return b;
  }
  std::unique_ptr<Tokenizer> tokenizer(const std::string& pre) const {
    return load(builder(pre), "bpe_" + (pre.empty() ? std::string("none") : pre) + ".gguf");
  }
};

// The vocabulary most known-answer tests use; `pre` picks the pre-tokenizer.
BpeVocab test_vocab() {
  BpeVocab v;
  // "hello" and " world"
  v.merge("h", "e");
  v.merge("l", "l");
  v.merge("he", "ll");
  v.merge("hell", "o");
  v.merge("Ġ", "w");
  v.merge("o", "r");
  v.merge("Ġw", "or");
  v.merge("l", "d");
  v.merge("Ġwor", "ld");
  // whitespace
  v.merge("Ġ", "Ġ");
  v.merge("Ġ", "b");
  v.merge("Ċ", "Ċ");
  // digits
  v.merge("1", "2");
  v.merge("3", "4");
  v.merge("12", "3");
  v.merge("4", "5");
  // 中 is E4 B8 AD
  v.merge(byte_char(0xE4), byte_char(0xB8));
  v.merge(byte_char(0xE4) + byte_char(0xB8), byte_char(0xAD));
  // special tokens
  v.add("<|user|>", kUserDefined);
  v.add("<ctl>", kControl);
  return v;
}

Ids ids_of(const BpeVocab& v, const std::vector<std::string>& texts) {
  Ids ids;
  for (const std::string& t : texts) ids.push_back(v.id(t));
  return ids;
}

// ---- llama.cpp's test vectors ----

struct VocabTest {
  std::vector<std::string> inputs;
  std::vector<Ids> expected;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// .inp: each input followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per input.
VocabTest read_vocab_test(const std::string& gguf_path) {
  VocabTest t;
  const std::string inp = read_file(gguf_path + ".inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t at = 0;
  for (size_t hit; (hit = inp.find(separator, at)) != std::string::npos;) {
    t.inputs.push_back(inp.substr(at, hit - at));
    at = hit + separator.size();
  }
  std::istringstream out(read_file(gguf_path + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream numbers(line);
    Ids ids;
    for (int id; numbers >> id;) ids.push_back(id);
    t.expected.push_back(ids);
  }
  return t;
}

void check_conformance(const std::string& path) {
  GGUFFile file(path);
  Tokenizer tokenizer(file);
  const VocabTest t = read_vocab_test(path);
  REQUIRE(t.inputs.size() == t.expected.size());
  REQUIRE(!t.inputs.empty());
  int matching = 0;
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    INFO("input " << i << ": '" << t.inputs[i] << "'");
    const Ids ids = tokenizer.encode(t.inputs[i], false);
    CHECK(ids == t.expected[i]);
    CHECK(tokenizer.decode(ids) == t.inputs[i]);
    matching += ids == t.expected[i];
  }
  CHECK(matching == static_cast<int>(t.inputs.size()));
}

}  // namespace

// ---- Real vocabularies ----

TEST_CASE("tokenizer: deepseek-llm matches llama.cpp's test vectors", "[tokenizer]") {
  REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-llm.gguf");
  check_conformance(path);
}

TEST_CASE("tokenizer: deepseek-coder matches llama.cpp's test vectors", "[tokenizer]") {
  REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-coder.gguf");
  check_conformance(path);
}

TEST_CASE("tokenizer: deepseek-llm metadata and special tokens", "[tokenizer]") {
  REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-llm.gguf");
  GGUFFile file(path);
  Tokenizer t(file);
  CHECK(t.model_name() == "gpt2");
  CHECK(t.pre_name() == "deepseek-llm");
  CHECK(t.n_vocab() == 102400);
  CHECK(t.bos() == 100000);
  CHECK(t.eos() == 100001);
  CHECK(t.eot() == -1);  // its only end token is EOS
  CHECK(t.add_bos());
  CHECK(t.is_control(t.bos()));
  CHECK(t.is_end_of_generation(t.eos()));
  CHECK_FALSE(t.is_end_of_generation(t.bos()));

  const std::string bos_text = "<｜begin▁of▁sentence｜>";
  CHECK(t.find_token(bos_text) == 100000);
  CHECK(t.piece(t.bos()) == "");
  CHECK(t.piece(t.bos(), true) == bos_text);
  Ids bos_hi = t.encode("Hi", false);
  bos_hi.insert(bos_hi.begin(), 100000);
  CHECK(t.encode(bos_text + "Hi", true) == bos_hi);
  const Ids plain = t.encode(bos_text, false);  // without parse_special: ordinary text
  CHECK(plain.size() > 1);
  CHECK(t.decode(plain) == bos_text);
  // Its user-defined single-character tokens are matched before BPE (llama.cpp's "Führer" case).
  CHECK(t.encode("ü", false) == Ids{100014});
  CHECK(t.decode({100014}) == "ü");
}

TEST_CASE("tokenizer: deepseek-coder end of turn and FIM tokens", "[tokenizer]") {
  REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-coder.gguf");
  GGUFFile file(path);
  Tokenizer t(file);
  CHECK(t.bos() == 32013);
  CHECK(t.eos() == 32014);
  CHECK(t.eot() == 32021);  // <|EOT|>, found by its text
  CHECK(t.is_end_of_generation(32021));
  // <|EOT|> is user-defined: one token even without parse_special, and always printed.
  CHECK(t.encode("a<|EOT|>", false) == Ids{t.encode("a", false)[0], 32021});
  CHECK(t.piece(32021) == "<|EOT|>");
  // The FIM tokens are user-defined in the file but control for llama.cpp.
  const std::string fim = "<｜fim▁begin｜>";
  CHECK(t.encode(fim, true) == Ids{32016});
  CHECK(t.encode(fim, false) != Ids{32016});
  CHECK(t.piece(32016) == "");
  CHECK(t.piece(32016, true) == fim);
}

TEST_CASE("tokenizer: stories260K SentencePiece encodes as llama.cpp", "[tokenizer]") {
  REQUIRE_SHARED_OR_SKIP(path, "models/stories260K.gguf");
  GGUFFile file(path);
  Tokenizer t(file);
  CHECK(t.model_name() == "llama");
  CHECK(t.n_vocab() == 512);
  CHECK(t.bos() == 1);
  CHECK(t.eos() == 2);
  CHECK(t.add_bos());
  // "▁Once" "▁upon" "▁a" "▁time": best-score-first merges, as llama2.c's encoder gives too.
  const Ids once = t.encode("Once upon a time", false);
  CHECK(once == Ids{403, 407, 261, 378});
  CHECK(t.decode(once) == "Once upon a time");
  Ids with_bos = once;
  with_bos.insert(with_bos.begin(), t.bos());
  CHECK(t.decode(with_bos) == "Once upon a time");  // the space after BOS goes
  CHECK(t.decode(with_bos, true) == "<s>Once upon a time");
  // Characters outside the vocabulary fall back to their bytes.
  const Ids chinese = t.encode("中文 ok", false);
  CHECK(chinese == Ids{410, 231, 187, 176, 233, 153, 138, 334, 433});
  CHECK(t.decode(chinese) == "中文 ok");
  // Special tokens in the text, and the space SentencePiece puts after each one.
  CHECK(t.encode("<s>Once</s>", true) == Ids{1, 403, 2});
  for (const std::string text : {"  two  spaces", "Lily's ball!\nNew line", "x", "\xFF\xFE"}) {
    CHECK(t.decode(t.encode(text, false)) == text);
  }
}

// ---- Known answers on small vocabularies ----

TEST_CASE("tokenizer: GPT-2 byte table", "[tokenizer]") {
  CHECK(byte_char('a') == "a");
  CHECK(byte_char(' ') == "Ġ");   // U+0120
  CHECK(byte_char('\n') == "Ċ");  // U+010A
  CHECK(byte_char(0x00) == "Ā");  // U+0100, the first shifted byte
  CHECK(byte_char(0x7F) == "ġ");  // U+0121, after the 33 bytes 00..20
  CHECK(byte_char(0xA0) == "ł");  // U+0142
  CHECK(byte_char(0xAD) == "Ń");  // U+0143, the last
  CHECK(byte_char(0xE4) == "ä");  // printable Latin-1 stands for itself
  for (int b = 0; b < 256; ++b) {
    CHECK(byte_level::codepoint_to_byte(byte_level::byte_to_codepoint(b)) == b);
  }
  CHECK(byte_level::codepoint_to_byte(0x144) == -1);
  CHECK(byte_level::codepoint_to_byte(' ') == -1);
}

TEST_CASE("tokenizer: merges apply by rank", "[tokenizer]") {
  SECTION("whole words") {
    const BpeVocab v = test_vocab();
    auto t = v.tokenizer("gpt-2");
    const Ids ids = t->encode("hello world", false);
    CHECK(ids == ids_of(v, {"hello", "Ġworld"}));
    CHECK(t->decode(ids) == "hello world");
  }
  SECTION("the lower rank wins") {
    BpeVocab bc_first;
    bc_first.merge("b", "c");
    bc_first.merge("a", "b");
    CHECK(bc_first.tokenizer("gpt-2")->encode("abc", false) == ids_of(bc_first, {"a", "bc"}));
    BpeVocab ab_first;
    ab_first.merge("a", "b");
    ab_first.merge("b", "c");
    CHECK(ab_first.tokenizer("gpt-2")->encode("abc", false) == ids_of(ab_first, {"ab", "c"}));
  }
  SECTION("equal ranks merge leftmost first") {
    BpeVocab v;
    v.merge("a", "a");
    CHECK(v.tokenizer("gpt-2")->encode("aaa", false) == ids_of(v, {"aa", "a"}));
    CHECK(v.tokenizer("gpt-2")->encode("aaaa", false) == ids_of(v, {"aa", "aa"}));
  }
  SECTION("a merge only happens inside a pre-tokenizer word") {
    const BpeVocab v = test_vocab();
    // gpt-2 cuts "a b" into "a" and " b"; "Ġ b" merges inside the second word.
    CHECK(v.tokenizer("gpt-2")->encode("a b", false) == ids_of(v, {"a", "Ġb"}));
  }
}

TEST_CASE("tokenizer: whitespace runs", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  for (const std::string pre : {"gpt-2", "deepseek-llm"}) {
    INFO("pre " << pre);
    auto t = v.tokenizer(pre);
    // The run before a word keeps its last space for the word: "a", "  ", " b".
    CHECK(t->encode("a   b", false) == ids_of(v, {"a", "ĠĠ", "Ġb"}));
    // A trailing run is one word; equal-rank merges go left to right.
    CHECK(t->encode("a   ", false) == ids_of(v, {"a", "ĠĠ", "Ġ"}));
    CHECK(t->encode("\t", false) == Ids{v.byte('\t')});
    CHECK(t->decode(t->encode(" \t \n ", false)) == " \t \n ");
  }
}

TEST_CASE("tokenizer: newlines per pre-tokenizer", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  // DeepSeek-LLM/Coder cut every \r and \n alone; GPT-2 leaves them apart here too.
  for (const std::string pre : {"gpt-2", "deepseek-llm", "deepseek-coder"}) {
    INFO("pre " << pre);
    CHECK(v.tokenizer(pre)->encode("a\n\nb", false) == ids_of(v, {"a", "Ċ", "Ċ", "b"}));
  }
  // Qwen2 / Llama 3 / DeepSeek-V3 keep a newline run together (\s*[\r\n]+).
  for (const std::string pre : {"deepseek-r1-qwen", "llama-bpe", "deepseek-v3"}) {
    INFO("pre " << pre);
    CHECK(v.tokenizer(pre)->encode("a\n\nb", false) == ids_of(v, {"a", "ĊĊ", "b"}));
  }
}

TEST_CASE("tokenizer: digit splitting per pre-tokenizer", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  // Merges: "1 2", "3 4", "12 3", "4 5". One word "12345" gives 12|34|5; words of up to three
  // digits give 123|45; single digits stay single.
  const Ids one_word = ids_of(v, {"12", "34", "5"});
  const Ids threes = ids_of(v, {"123", "45"});
  const Ids singles = ids_of(v, {"1", "2", "3", "4", "5"});
  CHECK(v.tokenizer("deepseek-llm")->encode("12345", false) == one_word);
  CHECK(v.tokenizer("gpt-2")->encode("12345", false) == one_word);
  CHECK(v.tokenizer("deepseek-coder")->encode("12345", false) == singles);
  CHECK(v.tokenizer("deepseek-r1-qwen")->encode("12345", false) == singles);
  CHECK(v.tokenizer("deepseek-v3")->encode("12345", false) == threes);
  CHECK(v.tokenizer("llama-bpe")->encode("12345", false) == threes);
  CHECK(v.tokenizer("default")->encode("12345", false) == threes);
}

TEST_CASE("tokenizer: CJK, emoji and invalid UTF-8", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  auto t = v.tokenizer("deepseek-llm");
  const int zhong = v.id(spelled("中"));
  // 中 merges to one token; 文 (E6 96 87) has no merges and stays three byte tokens.
  CHECK(t->encode("中", false) == Ids{zhong});
  CHECK(t->encode("中文", false) == Ids{zhong, v.byte(0xE6), v.byte(0x96), v.byte(0x87)});
  // The CJK run is its own word, apart from the letters around it.
  CHECK(t->encode("hello中", false) == Ids{v.id("hello"), zhong});
  const std::string emoji = "\xF0\x9F\x99\x82";  // U+1F642
  CHECK(t->encode(emoji, false) == Ids{0xF0, 0x9F, 0x99, 0x82});
  for (const std::string& text : {std::string("中文"), std::string("hello中文 world"), emoji + "!",
                                  std::string("日本語のテキスト")}) {
    CHECK(t->decode(t->encode(text, false)) == text);
  }
  // Invalid UTF-8 (llama.cpp's rule): each bad byte becomes U+FFFD (EF BF BD), never a crash.
  CHECK(t->encode("\xFF", false) == Ids{0xEF, 0xBF, 0xBD});
  CHECK(t->decode(t->encode("a\xFF"
                            "b",
                            false)) ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(t->decode(t->encode("\xE4\xB8", false)) == "\xEF\xBF\xBD\xEF\xBF\xBD");  // cut-off 中
  for (const std::string pre : {"gpt-2", "deepseek-coder", "deepseek-v3", "deepseek-r1-qwen"}) {
    CHECK_NOTHROW(v.tokenizer(pre)->encode("x\xC0\x80\xED\xA0\x80\xF5 \xE4\xB8", false));
  }
}

// PCRE2's JIT stack held 4,093 characters of one deepseek-v3 punctuation run (8 bytes each of
// its default 32 KiB); the 4,094th gave "JIT stack limit reached".
TEST_CASE("tokenizer: deepseek-v3 takes punctuation runs past the default JIT stack",
          "[tokenizer]") {
  const BpeVocab v = test_vocab();
  auto t = v.tokenizer("deepseek-v3");
  constexpr size_t kPastDefaultStack = 4094;
  CHECK(t->encode(std::string(kPastDefaultStack, '!'), false) == Ids(kPastDefaultStack, '!'));
  // Each invalid byte is a U+FFFD, a symbol too: three byte tokens apiece.
  const Ids ids = t->encode(std::string(kPastDefaultStack, '\xFF'), false);
  CHECK(ids.size() == 3 * kPastDefaultStack);
  CHECK(t->decode(ids).size() == 3 * kPastDefaultStack);
}

namespace {

// Runs of 1 MB of one kind of character through pre: the words must spell the whole text, each
// invalid byte as U+FFFD. (0.14 to 0.28 s per pre-tokenizer at -O3 on 2 cores; one word per
// digit or newline is what costs.)
void check_megabyte_runs(const std::string& pre) {
  constexpr size_t kRunBytes = size_t(1) << 20;
  const PreTokenizer p(pre, "test");
  for (const std::string unit : {"!", "a", "7", " ", "\xFF", "中"}) {
    INFO("pre " << pre << ", a run of '" << unit << "'");
    std::string text;
    while (text.size() < kRunBytes) text += unit;
    std::string valid;  // the text as the pre-tokenizer reads it
    for (uint32_t cp : utf8::decode(text)) utf8::append(valid, cp);
    std::string joined;
    for (const std::string& word : p.split(text)) joined += word;
    CHECK(joined == spelled(valid));
  }
}

}  // namespace

TEST_CASE("tokenizer: 1 MB runs, deepseek-llm", "[tokenizer]") {
  check_megabyte_runs("deepseek-llm");
}
TEST_CASE("tokenizer: 1 MB runs, deepseek-coder", "[tokenizer]") {
  check_megabyte_runs("deepseek-coder");
}
TEST_CASE("tokenizer: 1 MB runs, deepseek-v3", "[tokenizer]") {
  check_megabyte_runs("deepseek-v3");
}
TEST_CASE("tokenizer: 1 MB runs, qwen2", "[tokenizer]") {
  check_megabyte_runs("qwen2");
}
TEST_CASE("tokenizer: 1 MB runs, llama3", "[tokenizer]") {
  check_megabyte_runs("llama3");
}
TEST_CASE("tokenizer: 1 MB runs, gpt-2", "[tokenizer]") {
  check_megabyte_runs("gpt-2");
}
TEST_CASE("tokenizer: 1 MB runs, default", "[tokenizer]") {
  check_megabyte_runs("default");
}

TEST_CASE("tokenizer: user-defined and control tokens", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  auto t = v.tokenizer("gpt-2");
  const int user = v.id("<|user|>");
  const int ctl = v.id("<ctl>");
  SECTION("user-defined tokens match always") {
    CHECK(t->encode("a<|user|>b", false) == Ids{v.id("a"), user, v.id("b")});
    CHECK(t->encode("a<|user|>b", true) == Ids{v.id("a"), user, v.id("b")});
    CHECK(t->piece(user) == "<|user|>");
    CHECK_FALSE(t->is_control(user));
  }
  SECTION("control tokens match only with parse_special") {
    CHECK(t->encode("a<ctl>b", true) == Ids{v.id("a"), ctl, v.id("b")});
    const Ids plain = t->encode("a<ctl>b", false);
    CHECK(plain == ids_of(v, {"a", "<", "c", "t", "l", ">", "b"}));
    CHECK(t->is_control(ctl));
    CHECK(t->piece(ctl) == "");
    CHECK(t->piece(ctl, true) == "<ctl>");
    CHECK(t->decode({v.id("a"), ctl}) == "a");
    CHECK(t->decode({v.id("a"), ctl}, true) == "a<ctl>");
  }
  SECTION("longer special tokens are matched first") {
    BpeVocab w;
    const int ab = w.add("ab", kUserDefined);
    const int abc = w.add("abc", kUserDefined);
    auto tw = w.tokenizer("gpt-2");
    CHECK(tw->encode("abcab", false) == Ids{abc, ab});
    CHECK(tw->encode("xabcx", false) == Ids{w.id("x"), abc, w.id("x")});
  }
  CHECK(t->find_token("<ctl>") == ctl);
  CHECK(t->find_token("no such token") == -1);
  CHECK_THROWS_AS(t->piece(t->n_vocab()), Error);
  CHECK_THROWS_AS(t->decode({-1}), Error);
}

TEST_CASE("tokenizer: metadata defaults and end tokens", "[tokenizer]") {
  BpeVocab v;
  const int eot = v.add("<|EOT|>", kUserDefined);
  const int end = v.add("<｜end▁of▁sentence｜>", kControl);
  GGUFBuilder b = v.builder("deepseek-coder");
  b.add_u32("tokenizer.ggml.eos_token_id", end);
  b.add_u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);  // "none"
  auto t = load(b, "end_tokens.gguf");
  CHECK(t->bos() == -1);
  CHECK(t->eos() == end);
  CHECK(t->eot() == eot);
  CHECK_FALSE(t->add_bos());  // gpt2 vocabularies add BOS only when the file says so
  CHECK(t->is_end_of_generation(eot));
  CHECK(t->is_end_of_generation(end));
  CHECK_FALSE(t->is_end_of_generation(-1));
}

TEST_CASE("tokenizer: an unknown pre-tokenizer uses llama.cpp's default", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  auto t = v.tokenizer("no-such-pre");  // warns once on stderr
  CHECK(t->pre_name() == "no-such-pre");
  CHECK(t->encode("hello world", false) == ids_of(v, {"hello", "Ġworld"}));
  CHECK(t->encode("12345", false) == ids_of(v, {"123", "45"}));
}

TEST_CASE("tokenizer: malformed vocabularies are errors naming the key", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  auto rejects = [](const GGUFBuilder& b, const std::string& key) {
    CHECK_THROWS_WITH(load(b, "bad.gguf"), Catch::Contains(key));
  };
  SECTION("missing tokens") {
    GGUFBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    rejects(b, "tokenizer.ggml.tokens");
  }
  SECTION("unknown model") {
    GGUFBuilder b;
    b.add_string("tokenizer.ggml.model", "bert");
    b.add_string_array("tokenizer.ggml.tokens", {"a"});
    rejects(b, "tokenizer.ggml.model");
  }
  SECTION("scores of the wrong length") {
    GGUFBuilder b = v.builder("gpt-2");
    b.add_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f});
    rejects(b, "tokenizer.ggml.scores");
  }
  SECTION("token types of the wrong length or value") {
    BpeVocab w = v;
    w.types.pop_back();
    rejects(w.builder("gpt-2"), "tokenizer.ggml.token_type");
    w = v;
    w.types[5] = 9;
    rejects(w.builder("gpt-2"), "tokenizer.ggml.token_type");
  }
  SECTION("a merge without a space") {
    BpeVocab w = v;
    w.merges.push_back("abc");
    rejects(w.builder("gpt-2"), "tokenizer.ggml.merges");
  }
  SECTION("missing merges") {
    GGUFBuilder b;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string_array("tokenizer.ggml.tokens", v.tokens);
    rejects(b, "tokenizer.ggml.merges");
  }
  SECTION("a duplicate token") {
    BpeVocab w = v;
    w.add("hello");
    rejects(w.builder("gpt-2"), "tokenizer.ggml.tokens");
  }
  SECTION("ids out of range") {
    GGUFBuilder b = v.builder("gpt-2");
    b.add_u32("tokenizer.ggml.bos_token_id", 100000);
    rejects(b, "tokenizer.ggml.bos_token_id");
  }
  SECTION("add_bos_token without a BOS") {
    GGUFBuilder b = v.builder("gpt-2");
    b.add_bool("tokenizer.ggml.add_bos_token", true);
    rejects(b, "tokenizer.ggml.add_bos_token");
  }
  SECTION("a byte token not of the form <0xNN>") {
    BpeVocab w = v;
    w.add("<0xZZ>", kByte);
    rejects(w.builder("gpt-2"), "tokenizer.ggml.tokens");
  }
}

// ---- SentencePiece on a small vocabulary ----

namespace {

struct SpmVocab {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {kUnknown, kControl, kControl};

  SpmVocab() {
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      add(hex, 0, kByte);
    }
  }
  int add(const std::string& text, float score, int32_t type = kNormal) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(type);
    return static_cast<int>(tokens.size()) - 1;
  }
  std::unique_ptr<Tokenizer> tokenizer() const {
    GGUFBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    b.add_string_array("tokenizer.ggml.tokens", tokens);
    b.add_f32_array("tokenizer.ggml.scores", scores);
    b.add_i32_array("tokenizer.ggml.token_type", types);
    b.add_u32("tokenizer.ggml.bos_token_id", 1);
    b.add_u32("tokenizer.ggml.eos_token_id", 2);
    return load(b, "spm.gguf");
  }
};

constexpr int kSpmByteBase = 3;  // <0x00> is id 3

}  // namespace

TEST_CASE("tokenizer: SentencePiece merges by score", "[tokenizer]") {
  SpmVocab v;
  const int space = v.add("▁", -1);
  const int a = v.add("a", -1);
  const int b = v.add("b", -1);
  const int space_a = v.add("▁a", -3);
  const int ab = v.add("ab", -2);  // scores higher than ▁a: merges first
  auto t = v.tokenizer();
  CHECK(t->add_bos());  // SentencePiece default
  // " ab" -> ▁ a b -> ▁ ab (ab outscores ▁a); no "▁ab" token, so it stops there.
  CHECK(t->encode("ab", false) == Ids{space, ab});
  CHECK(t->encode("a", false) == Ids{space_a});
  CHECK(t->encode("b a", false) == Ids{space, b, space_a});
  // é (C3 A9) is no token: byte fallback.
  CHECK(t->encode("é", false) == Ids{space, kSpmByteBase + 0xC3, kSpmByteBase + 0xA9});
  CHECK(t->decode(t->encode("é", false)) == "é");
  // decode drops the space encode() added, after BOS too.
  CHECK(t->decode({space_a}) == "a");
  CHECK(t->decode({1, space_a}) == "a");
  CHECK(t->decode({1, space_a}, true) == "<s>a");
  CHECK(t->decode({a, space_a}) == "a a");

  SpmVocab with_word;
  with_word.add("▁", -1);
  with_word.add("a", -1);
  with_word.add("b", -1);
  const int word = with_word.add("▁ab", -4);
  with_word.add("ab", -2);
  CHECK(with_word.tokenizer()->encode("ab", false) == Ids{word});
}

// ---- Streaming ----

TEST_CASE("tokenizer: StreamDecoder holds back split characters", "[tokenizer]") {
  const BpeVocab v = test_vocab();
  auto t = v.tokenizer("deepseek-llm");
  SECTION("a Chinese character over three byte tokens") {
    StreamDecoder s(*t);
    CHECK(s.push(v.id("hello")) == "hello");
    CHECK(s.push(0xE6) == "");  // 文 = E6 96 87
    CHECK(s.push(0x96) == "");
    CHECK(s.push(0x87) == "文");
    CHECK(s.flush() == "");
  }
  SECTION("a truncated tail comes out as U+FFFD") {
    StreamDecoder s(*t);
    CHECK(s.push(0xF0) == "");
    CHECK(s.push(0x9F) == "");
    CHECK(s.flush() == "\xEF\xBF\xBD");
  }
  SECTION("a broken sequence is replaced, not held") {
    StreamDecoder s(*t);
    CHECK(s.push(0xE6) == "");
    CHECK(s.push(v.id("a")) ==
          "\xEF\xBF\xBD"
          "a");
    CHECK(s.push(0x87) == "\xEF\xBF\xBD");  // a lone continuation byte
  }
  SECTION("control tokens print only with_special") {
    StreamDecoder quiet(*t);
    CHECK(quiet.push(v.id("<ctl>")) == "");
    StreamDecoder loud(*t, true);
    CHECK(loud.push(v.id("<ctl>")) == "<ctl>");
  }
}

TEST_CASE("tokenizer: StreamDecoder drops the SentencePiece space after BOS", "[tokenizer]") {
  SpmVocab v;
  const int space_a = v.add("▁a", -1);
  auto t = v.tokenizer();
  StreamDecoder s(*t);
  CHECK(s.push(t->bos()) == "");
  CHECK(s.push(space_a) == "a");
  CHECK(s.push(space_a) == " a");
}
