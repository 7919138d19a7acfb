// fuzz_tokenizer.cpp: any bytes through encode(), decode() and StreamDecoder on real vocabularies.
//
// The first byte picks the vocabulary (low 7 bits) and parse_special (top bit); the rest is the
// text. Vocabularies, loaded once:
//   - DeepSeek-LLM and DeepSeek-Coder (../shared/vocab) and stories260K (../shared/models, a
//     SentencePiece vocabulary) when those files are there;
//   - the project's own vocabulary (data/models/tiny-llama-q4_0.gguf, byte-level BPE), once with
//     each pre-tokenizer this engine knows, and a small SentencePiece vocabulary built here.
// Invariants, as tests/test_tokenizer.cpp asserts them on fixed texts:
//   - encode() never throws (every vocabulary here has a token for each byte) and gives ids in
//     range;
//   - byte-level BPE: decode(encode(text)) is the text with each invalid byte as U+FFFD
//   (llama.cpp's
//     rule), with or without parse_special (a special token prints its own text then);
//   - SentencePiece without parse_special: decode(encode(text)) is the text with "▁" read as " "
//     (SentencePiece's space), invalid bytes kept (byte fallback; see below for their spaces);
//   - StreamDecoder's pushes and flush give utf8::sanitize(decode(ids)).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../support/gguf_builder.h"
#include "fuzz_support.h"
#include "gguf.h"
#include "tokenizer.h"
#include "utf8.h"

namespace {

constexpr uint8_t kParseSpecialBit = 0x80;
constexpr uint8_t kVocabMask = 0x7F;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeByte = 6;
const char* const kSpmSpace = "\xE2\x96\x81";  // U+2581

const char* const kPreTokenizers[] = {"deepseek-llm",     "deepseek-coder", "deepseek-v3",
                                      "deepseek-r1-qwen", "llama-bpe",      "gpt-2",
                                      "default"};

std::unique_ptr<Tokenizer> load_bytes(const std::string& bytes) {
  const fuzz::MemoryFile memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const GGUFFile file(memory.path());
  return std::make_unique<Tokenizer>(file);
}

// The project's vocabulary with tokenizer.ggml.pre set to pre.
std::string project_vocab(const GGUFFile& model, const std::string& pre) {
  GGUFBuilder b;
  b.add_string("tokenizer.ggml.model", "gpt2");
  b.add_string("tokenizer.ggml.pre", pre);
  b.add_string_array("tokenizer.ggml.tokens", model.get_string_array("tokenizer.ggml.tokens"));
  std::vector<int32_t> types;
  for (int64_t t : model.get_int_array("tokenizer.ggml.token_type")) types.push_back(int32_t(t));
  b.add_i32_array("tokenizer.ggml.token_type", types);
  b.add_string_array("tokenizer.ggml.merges", model.get_string_array("tokenizer.ggml.merges"));
  b.add_u32("tokenizer.ggml.bos_token_id", uint32_t(model.get_int("tokenizer.ggml.bos_token_id")));
  b.add_u32("tokenizer.ggml.eos_token_id", uint32_t(model.get_int("tokenizer.ggml.eos_token_id")));
  return b.bytes();
}

// SentencePiece: <unk> <s> </s>, the 256 byte tokens, then pieces scored longest first.
std::string spm_vocab() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, kTypeControl, kTypeControl};
  for (int byte = 0; byte < 256; ++byte) {
    char hex[sizeof("<0xNN>")];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", byte);
    tokens.push_back(hex);
    types.push_back(kTypeByte);
  }
  for (const char* piece : {"▁", "a", "b", "e", "t", "h", "ab", "▁a", "▁t", "th", "▁th", "▁the",
                            "he", "中", "文", "中文", "▁▁"}) {
    tokens.push_back(piece);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) scores[i] = -float(i);
  GGUFBuilder b;
  b.add_string("tokenizer.ggml.model", "llama");
  b.add_string_array("tokenizer.ggml.tokens", tokens);
  b.add_f32_array("tokenizer.ggml.scores", scores);
  b.add_i32_array("tokenizer.ggml.token_type", types);
  return b.bytes();
}

std::vector<std::unique_ptr<Tokenizer>> load_vocabularies() {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  const std::string root = PROJECT_ROOT;
  for (const char* shared :
       {"/../shared/vocab/ggml-vocab-deepseek-llm.gguf",
        "/../shared/vocab/ggml-vocab-deepseek-coder.gguf", "/../shared/models/stories260K.gguf"}) {
    if (!std::filesystem::exists(root + shared)) continue;
    tokenizers.push_back(std::make_unique<Tokenizer>(GGUFFile(root + shared)));
  }
  const GGUFFile model(root + "/data/models/tiny-llama-q4_0.gguf");
  for (const char* pre : kPreTokenizers)
    tokenizers.push_back(load_bytes(project_vocab(model, pre)));
  tokenizers.push_back(load_bytes(spm_vocab()));
  std::fprintf(stderr, "fuzz_tokenizer: %zu vocabularies\n", tokenizers.size());
  return tokenizers;
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::unique_ptr<Tokenizer>> tokenizers = load_vocabularies();
  if (size == 0) return 0;
  const Tokenizer& t = *tokenizers[(data[0] & kVocabMask) % tokenizers.size()];
  const bool parse_special = (data[0] & kParseSpecialBit) != 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool spm = t.model_name() == "llama";

  const std::vector<int> ids = t.encode(text, parse_special);
  for (int id : ids) fuzz::expect(id >= 0 && id < t.n_vocab(), "token id out of range");

  const std::string decoded = t.decode(ids, parse_special);
  if (!spm) {
    std::string expected;  // the text as the pre-tokenizer reads it: invalid bytes as U+FFFD
    for (uint32_t cp : utf8::decode(text)) utf8::append(expected, cp);
    fuzz::expect(decoded == expected, "byte-level BPE: decode(encode(text)) != text");
  } else if (!parse_special) {
    // An ill-formed sequence is cut as many bytes as its lead byte announces (llama.cpp's
    // unicode_len_utf8), so it may swallow the first bytes of a following "▁", which then comes
    // back as the byte tokens' raw bytes, not as " ". llama.cpp decodes the same bytes.
    const bool well_formed = utf8::sanitize(text) == text;
    const std::string spaced = replace_all(text, kSpmSpace, " ");
    fuzz::expect(well_formed ? decoded == spaced : replace_all(decoded, kSpmSpace, " ") == spaced,
                 "SentencePiece: decode(encode(text)) != text");
  }

  // A SentencePiece text with specials may hold two BOS in a row, where decode() and the stream
  // disagree on which token loses its leading space (llama.cpp's choice vs llama2.c's); not
  // checked.
  if (spm && parse_special) return 0;
  StreamDecoder stream(t, parse_special);
  std::string streamed;
  for (int id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  fuzz::expect(streamed == utf8::sanitize(decoded), "StreamDecoder != sanitize(decode(ids))");
  return 0;
}
