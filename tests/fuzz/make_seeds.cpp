// make_seeds.cpp: writes the seed corpora of the fuzz targets (make fuzz runs it; nothing here is
// committed as data). Usage: make_seeds OUT_DIR; writes OUT_DIR/<target>/seed-N files.
//
//   gguf_engine  : the project's small test models (data/models, those under kMaxModelSeed) and
//                  micro models built here (1 layer, width 32: a few KB each), one per feature the
//                  loader knows: llama and qwen2, F32 / Q4_0 / Q8_0, tied output, GQA, biases,
//                  rope scaling and frequency factors, a vocabulary and a chat template.
//   tokenizer, pretokenizer, utf8 : sample texts (llama.cpp's test inputs for the DeepSeek
//                  vocabularies when ../shared has them, and the list below), each behind the
//                  selector byte the target reads first.
//   chat         : NUL-separated fields, as fuzz_chat.cpp reads them.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/gguf_builder.h"
#include "utf8.h"

namespace fs = std::filesystem;

namespace {

constexpr uintmax_t kMaxModelSeed = 150 * 1024;  // larger inputs slow every mutation down
constexpr int kTokenizerSelectors = 12;          // vocabularies fuzz_tokenizer may load
constexpr int kPreTokenizers = 7;
constexpr uint8_t kParseSpecialBit = 0x80;

const char* const kTexts[] = {
    "Hello world",
    "And it came to pass, that the LORD spake unto Moses.",
    "  leading spaces\tand tabs\n\nnew lines\r\n",
    "中文测试，你好世界。日本語のテキスト、한국어",
    "int main() { return a[i] + b->c * 3.14e-2; } // comment",
    "12345678901234567890 1,000,000 3.14159",
    "emoji \xF0\x9F\x99\x82\xF0\x9F\x98\x80 done",
    "invalid \xFF\xFE \xC0\x80 \xED\xA0\x80 \xE4\xB8 \xF4\x90\x80\x80 cut \xE6\x96",
    "!!!???...~~~```$$$+++<<<>>>^^^|||",
    "<｜begin▁of▁sentence｜>User: hi\n\nAssistant:<｜end▁of▁sentence｜>",
    "<|EOT|><｜fim▁begin｜>x<｜fim▁hole｜>y<｜fim▁end｜><s></s>",
    "Führer naïve café \xC2\xA0nbsp\xE3\x80\x80ideographic space\u2003em",
    "▁sentence▁piece▁ spaces",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE",
    "ＦＵＬＬＷＩＤＴＨ！？",
    "",
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& dir, int& n, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + std::to_string(n++)), std::ios::binary) << bytes;
}

// llama.cpp's test inputs (.inp files: inputs separated by "\n__ggml_vocab_test__\n").
std::vector<std::string> sample_texts(const fs::path& root) {
  std::vector<std::string> texts(std::begin(kTexts), std::end(kTexts));
  for (const char* name :
       {"ggml-vocab-deepseek-llm.gguf.inp", "ggml-vocab-deepseek-coder.gguf.inp"}) {
    const fs::path path = root / "../shared/vocab" / name;
    if (!fs::exists(path)) continue;
    const std::string inp = read_file(path);
    const std::string separator = "\n__ggml_vocab_test__\n";
    size_t at = 0;
    for (size_t hit; (hit = inp.find(separator, at)) != std::string::npos;) {
      texts.push_back(inp.substr(at, hit - at));
      at = hit + separator.size();
    }
  }
  return texts;
}

// ---- micro models ----

struct Micro {
  std::string arch = "llama";
  GGMLType type = GGMLType::F32;  // of the matrices
  GGMLType output_type = GGMLType::F32;
  int n_embd = 32, n_ff = 64, n_head = 2, n_head_kv = 2, n_layer = 1;
  bool tied = false, bias = false, rope_freqs = false, rope_scale = false, vocab = true;
  std::string chat_template;
};

constexpr int kVocabBytes = 256;
constexpr uint16_t kHalfScale = 0x2000;  // fp16 2^-7: small weights, finite activations

std::string tensor_bytes(GGMLType type, int64_t n, uint32_t& state) {
  auto next = [&] { return state = state * 1664525u + 1013904223u; };  // Numerical Recipes LCG
  std::string raw;
  if (type == GGMLType::F32) {
    std::vector<float> v(n);
    for (float& x : v) x = float(int(next() >> 24) - 128) / 1024.0f;
    return GGUFBuilder::f32_bytes(v);
  }
  const int weights_per_block = 32;
  const int payload = type == GGMLType::Q4_0 ? 16 : 32;  // Q4_0: nibbles; Q8_0: int8
  for (int64_t block = 0; block < n / weights_per_block; ++block) {
    raw += char(kHalfScale & 0xFF);
    raw += char(kHalfScale >> 8);
    for (int k = 0; k < payload; ++k) raw += char(next() >> 24);
  }
  return raw;
}

std::string micro_model(const Micro& m) {
  GGUFBuilder b;
  const std::string& a = m.arch;
  const int n_vocab = kVocabBytes + 2;  // the bytes, BOS, EOS
  const int head_dim = m.n_embd / m.n_head;
  const int64_t kv = int64_t(m.n_head_kv) * head_dim;
  b.add_string("general.architecture", a);
  b.add_string("general.name", "micro-" + a);
  b.add_u32(a + ".context_length", 64);
  b.add_u32(a + ".embedding_length", m.n_embd);
  b.add_u32(a + ".block_count", m.n_layer);
  b.add_u32(a + ".feed_forward_length", m.n_ff);
  b.add_u32(a + ".attention.head_count", m.n_head);
  b.add_u32(a + ".attention.head_count_kv", m.n_head_kv);
  b.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  b.add_f32(a + ".rope.freq_base", 10000.0f);
  b.add_u32(a + ".rope.dimension_count", head_dim);
  if (m.rope_scale) {
    b.add_string(a + ".rope.scaling.type", "linear");
    b.add_f32(a + ".rope.scaling.factor", 4.0f);
  }
  if (m.vocab) {
    std::vector<std::string> tokens;
    std::vector<int32_t> types(n_vocab, 1);
    for (int byte = 0; byte < kVocabBytes; ++byte) {
      std::string t;
      utf8::append(t, byte_level::byte_to_codepoint(uint8_t(byte)));
      tokens.push_back(t);
    }
    tokens.push_back("<｜begin▁of▁sentence｜>");
    tokens.push_back("<｜end▁of▁sentence｜>");
    types[kVocabBytes] = types[kVocabBytes + 1] = 3;
    b.add_string("tokenizer.ggml.model", "gpt2");
    b.add_string("tokenizer.ggml.pre", a == "qwen2" ? "deepseek-r1-qwen" : "deepseek-llm");
    b.add_string_array("tokenizer.ggml.tokens", tokens);
    b.add_i32_array("tokenizer.ggml.token_type", types);
    b.add_string_array("tokenizer.ggml.merges", {});
    b.add_u32("tokenizer.ggml.bos_token_id", kVocabBytes);
    b.add_u32("tokenizer.ggml.eos_token_id", kVocabBytes + 1);
  }
  if (!m.chat_template.empty()) b.add_string("tokenizer.chat_template", m.chat_template);

  uint32_t state = 1;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, GGMLType type) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    b.add_tensor(name, type, ne, tensor_bytes(type, n, state));
  };
  add("token_embd.weight", {m.n_embd, n_vocab}, m.type);
  add("output_norm.weight", {m.n_embd}, GGMLType::F32);
  if (!m.tied) add("output.weight", {m.n_embd, n_vocab}, m.output_type);
  if (m.rope_freqs) add("rope_freqs.weight", {head_dim / 2}, GGMLType::F32);
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {m.n_embd}, GGMLType::F32);
    add(p + "attn_q.weight", {m.n_embd, m.n_embd}, m.type);
    add(p + "attn_k.weight", {m.n_embd, kv}, m.type);
    add(p + "attn_v.weight", {m.n_embd, kv}, m.type);
    add(p + "attn_output.weight", {m.n_embd, m.n_embd}, m.type);
    if (m.bias) {
      add(p + "attn_q.bias", {m.n_embd}, GGMLType::F32);
      add(p + "attn_k.bias", {kv}, GGMLType::F32);
      add(p + "attn_v.bias", {kv}, GGMLType::F32);
    }
    add(p + "ffn_norm.weight", {m.n_embd}, GGMLType::F32);
    add(p + "ffn_gate.weight", {m.n_embd, m.n_ff}, m.type);
    add(p + "ffn_up.weight", {m.n_embd, m.n_ff}, m.type);
    add(p + "ffn_down.weight", {m.n_ff, m.n_embd}, m.type);
  }
  return b.bytes();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path root = PROJECT_ROOT;
  const std::vector<std::string> texts = sample_texts(root);

  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(root / "data/models")) {
    if (e.path().extension() == ".gguf" && e.file_size() <= kMaxModelSeed) {
      write(out / "gguf_engine", n, read_file(e.path()));
    }
  }
  const std::string r1_template = "{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜>'}}";
  std::vector<Micro> micros(9);
  micros[1].type = micros[1].output_type = GGMLType::Q4_0;
  micros[2].type = GGMLType::Q4_0;
  micros[2].output_type = GGMLType::Q8_0;
  micros[3].arch = "qwen2";
  micros[3].bias = true;
  micros[3].n_head_kv = 1;
  micros[3].chat_template = r1_template;
  micros[4].tied = true;
  micros[4].n_head = 4;
  micros[4].n_head_kv = 2;
  micros[5].rope_freqs = true;
  micros[6].rope_scale = true;
  micros[6].n_layer = 2;
  micros[7].vocab = false;
  micros[8].type = GGMLType::Q8_0;
  micros[8].arch = "qwen2";
  micros[8].bias = true;
  for (const Micro& m : micros) write(out / "gguf_engine", n, micro_model(m));

  n = 0;
  for (const std::string& text : texts) {
    write(out / "utf8", n, text);
    for (int s = 0; s < kTokenizerSelectors; ++s) {
      write(out / "tokenizer", n, char(s) + text);
      write(out / "tokenizer", n, char(s | kParseSpecialBit) + text);
    }
    for (int s = 0; s < kPreTokenizers; ++s) write(out / "pretokenizer", n, char(s) + text);
  }

  n = 0;
  const std::string nul(1, '\0');
  for (const char* flags : {"\x04", "\x00"}) {
    for (const char* name : {"deepseek-llm", "deepseek-coder", "deepseek-r1", "deepseek3", ""}) {
      write(out / "chat", n,
            flags + nul + "You are a helpful assistant." + nul + "Hello, 你好!" + nul +
                "<｜begin▁of▁sentence｜>" + nul + (*flags ? "" : "<|EOT|>") + nul + name + nul +
                r1_template + nul + "deepseek-coder" + nul + "DeepSeek-Coder-V2");
    }
  }
  write(out / "chat", n,
        std::string("\x04") + nul + "" + nul + "hi" + nul + "" + nul + "" + nul + "" + nul +
            "### Instruction" + nul + "" + nul + "deepseek-r1");
  std::printf("seeds written under %s\n", out.c_str());
  return 0;
}
