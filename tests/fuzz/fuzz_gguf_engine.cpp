// fuzz_gguf_engine.cpp: any bytes as a GGUF file, through everything that reads one, then a
// couple of tokens through the final stage's engine.
//
// The input goes into a memfd and is opened by path (/proc/self/fd/N), so GGUFFile maps it as it
// maps a model on disk. What reads the file: the GGUF reader, the tokenizer's vocabulary loader,
// the chat template detection and the model loader; then create_engine() with a small context and
// one thread, a prompt of two tokens, one decode step and a sampled token. A file that makes the
// engine allocate far more than its size is caught by libFuzzer's -malloc_limit_mb/-rss_limit_mb.
#include <cstdint>
#include <memory>
#include <vector>

#include "chat.h"
#include "engine.h"
#include "error.h"
#include "fuzz_support.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

namespace {

constexpr int kContext = 8;  // KV cache positions: room for the 3 tokens run below
constexpr char kPrompt[] = "Hello, 世界! 12345";

void read_vocabulary(const GGUFFile& file) {
  try {
    const Tokenizer tokenizer(file);
    const std::vector<int> ids = tokenizer.encode(kPrompt, true);
    for (int id : ids) fuzz::expect(id >= 0 && id < tokenizer.n_vocab(), "token id out of range");
    tokenizer.decode(ids, true);
  } catch (const Error&) {
  }
}

void run_engine(const std::shared_ptr<const GGUFFile>& file) {
  try {
    const Model model(file);
    EngineOptions options;
    options.n_ctx = kContext;
    options.n_threads = 1;
    const std::unique_ptr<Engine> engine = create_engine(model, options);
    const int n_vocab = model.config().n_vocab;
    const int prompt[] = {0, n_vocab - 1};
    engine->forward(prompt, 2, 0);
    const int next = n_vocab / 2;
    float* logits = engine->forward(&next, 1, 2);
    Rng rng(1);
    std::vector<Candidate> candidates;
    const int token = sample_token(logits, n_vocab, SamplerParams{}, rng, candidates);
    fuzz::expect(token >= 0 && token < n_vocab, "sampled token out of range");
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile memory(data, size);
  std::shared_ptr<const GGUFFile> file;
  try {
    file = std::make_shared<const GGUFFile>(memory.path());
  } catch (const Error&) {
    return 0;
  }
  read_vocabulary(*file);
  try {
    detect_chat_template(*file, "");
  } catch (const Error&) {
  }
  run_engine(file);
  return 0;
}
