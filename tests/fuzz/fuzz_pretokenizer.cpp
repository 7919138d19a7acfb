// fuzz_pretokenizer.cpp: any bytes through every pre-tokenizer's split().
//
// The first byte picks the pre-tokenizer; the rest is the text. split() must not throw on any
// text (PCRE2 errors such as "JIT stack limit reached" are faults: issue 21, fault 3), no word may
// be empty, and the words must spell the whole text: their concatenation is the text with each
// invalid byte as U+FFFD, written with GPT-2's byte table.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "pretokenizer.h"
#include "utf8.h"

namespace {

constexpr std::array<const char*, 7> kNames = {"deepseek-llm",     "deepseek-coder", "deepseek-v3",
                                               "deepseek-r1-qwen", "llama-bpe",      "gpt-2",
                                               "default"};

std::vector<std::unique_ptr<PreTokenizer>> make_all() {
  std::vector<std::unique_ptr<PreTokenizer>> all;
  for (const char* name : kNames) all.push_back(std::make_unique<PreTokenizer>(name, "fuzz"));
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers = make_all();
  if (size == 0) return 0;
  const PreTokenizer& p = *pre_tokenizers[data[0] % pre_tokenizers.size()];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::string expected;
  for (uint32_t cp : utf8::decode(text)) {
    std::string bytes;
    utf8::append(bytes, cp);
    for (unsigned char b : bytes) utf8::append(expected, byte_level::byte_to_codepoint(b));
  }
  std::string joined;
  for (const std::string& word : p.split(text)) {
    fuzz::expect(!word.empty(), "split() gave an empty word");
    joined += word;
  }
  fuzz::expect(joined == expected, "the words do not spell the text");
  return 0;
}
