// test_chat.cpp: the DeepSeek chat formats, their detection from GGUF metadata, and how the
// formatted text tokenizes with the real vocabularies (../shared, skipped visibly when absent).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "chat.h"
#include "error.h"
#include "gguf.h"
#include "support/gguf_builder.h"
#include "support/paths.h"
#include "tokenizer.h"

namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

// Detects the template of a file holding only the given metadata strings ("" = key absent).
ChatTemplate detect(const std::string& jinja, const std::string& pre, const std::string& name,
                    const std::string& override_name = "") {
  GGUFBuilder b;
  if (!jinja.empty()) b.add_string("tokenizer.chat_template", jinja);
  if (!pre.empty()) b.add_string("tokenizer.ggml.pre", pre);
  if (!name.empty()) b.add_string("general.name", name);
  const std::string path = b.write_temp("chat_detect.gguf");
  GGUFFile file(path);
  std::filesystem::remove(path);  // the mapping stays valid
  return detect_chat_template(file, override_name);
}

}  // namespace

TEST_CASE("chat: template names", "[chat]") {
  for (ChatTemplate t :
       {ChatTemplate::DeepSeekLLM, ChatTemplate::DeepSeekCoder, ChatTemplate::DeepSeekR1}) {
    CHECK(chat_template_from_name(chat_template_name(t)) == t);
  }
  CHECK(std::string(chat_template_name(ChatTemplate::DeepSeekR1)) == "deepseek-r1");
  // llama.cpp's names for the same formats
  CHECK(chat_template_from_name("deepseek") == ChatTemplate::DeepSeekCoder);
  CHECK(chat_template_from_name("deepseek2") == ChatTemplate::DeepSeekLLM);
  CHECK(chat_template_from_name("deepseek3") == ChatTemplate::DeepSeekR1);
  CHECK_THROWS_AS(chat_template_from_name("chatml"), Error);
}

TEST_CASE("chat: detection from the GGUF metadata", "[chat]") {
  // Fragments of the real Jinja templates.
  const std::string r1 = "{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜>'}}";
  const std::string coder = "{{'### Instruction:\\n' + message['content'] + '\\n'}}<|EOT|>";
  const std::string llm = "{{ 'User: ' + message['content'] + '\\n\\n' }}{{ 'Assistant:' }}";
  CHECK(detect(r1, "", "") == ChatTemplate::DeepSeekR1);
  CHECK(detect(coder, "", "") == ChatTemplate::DeepSeekCoder);
  CHECK(detect(llm, "", "") == ChatTemplate::DeepSeekLLM);
  // The template wins over the pre-tokenizer.
  CHECK(detect(r1, "deepseek-llm", "") == ChatTemplate::DeepSeekR1);
  // Without a template: the pre-tokenizer, then the name, then deepseek-llm.
  CHECK(detect("", "deepseek-coder", "") == ChatTemplate::DeepSeekCoder);
  CHECK(detect("", "deepseek-r1-qwen", "") == ChatTemplate::DeepSeekR1);
  CHECK(detect("", "deepseek-v3", "") == ChatTemplate::DeepSeekR1);
  CHECK(detect("", "llama-bpe", "DeepSeek-R1-Distill-Llama-8B") == ChatTemplate::DeepSeekR1);
  CHECK(detect("", "", "deepseek-coder-6.7b-instruct") == ChatTemplate::DeepSeekCoder);
  CHECK(detect("{{ unrelated }}", "", "") == ChatTemplate::DeepSeekLLM);
  CHECK(detect("", "", "") == ChatTemplate::DeepSeekLLM);
  // --chat-template overrides everything; a bad name is an Error.
  CHECK(detect(r1, "deepseek-r1-qwen", "", "deepseek-coder") == ChatTemplate::DeepSeekCoder);
  CHECK_THROWS_AS(detect(r1, "", "", "nope"), Error);
}

TEST_CASE("chat: deepseek-llm format", "[chat]") {
  const ChatTemplate t = ChatTemplate::DeepSeekLLM;
  CHECK(format_user_turn(t, "", "Hi", true, kBos) == kBos + "User: Hi\n\nAssistant:");
  CHECK(format_user_turn(t, "Be brief.", "Hi", true, kBos) ==
        kBos + "Be brief.\n\nUser: Hi\n\nAssistant:");
  CHECK(format_user_turn(t, "Be brief.", "And?", false, kBos) == "User: And?\n\nAssistant:");
  CHECK(format_user_turn(t, "", "Hi", true, "") == "User: Hi\n\nAssistant:");
  CHECK(format_reply_end(t, kEos) == "");  // the EOS that stopped it is already in the context
  CHECK(format_reply_end(t, "") == kEos);
}

TEST_CASE("chat: deepseek-coder format", "[chat]") {
  const ChatTemplate t = ChatTemplate::DeepSeekCoder;
  CHECK(format_user_turn(t, "", "Sort a list.", true, kBos) ==
        kBos + "### Instruction:\nSort a list.\n### Response:\n");
  CHECK(format_user_turn(t, "You code.", "Sort.", true, kBos) ==
        kBos + "You code.\n### Instruction:\nSort.\n### Response:\n");
  CHECK(format_user_turn(t, "You code.\n", "Sort.", true, kBos) ==
        kBos + "You code.\n### Instruction:\nSort.\n### Response:\n");
  CHECK(format_user_turn(t, "You code.", "More.", false, kBos) ==
        "### Instruction:\nMore.\n### Response:\n");
  CHECK(format_reply_end(t, "<|EOT|>") == "\n");
  CHECK(format_reply_end(t, "") == "\n<|EOT|>\n");
}

TEST_CASE("chat: deepseek-r1 format", "[chat]") {
  const ChatTemplate t = ChatTemplate::DeepSeekR1;
  CHECK(format_user_turn(t, "", "1+1?", true, kBos) == kBos + "<｜User｜>1+1?<｜Assistant｜>");
  CHECK(format_user_turn(t, "Think.", "1+1?", true, kBos) ==
        kBos + "Think.<｜User｜>1+1?<｜Assistant｜>");
  CHECK(format_user_turn(t, "Think.", "2+2?", false, kBos) == "<｜User｜>2+2?<｜Assistant｜>");
  CHECK(format_reply_end(t, kEos) == "");
  CHECK(format_reply_end(t, "") == kEos);
}

TEST_CASE("chat: a whole conversation as the templates write it", "[chat]") {
  const std::vector<ChatMessage> talk = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "And?"}};
  CHECK(format_conversation(ChatTemplate::DeepSeekLLM, talk, kBos) ==
        kBos + "Be brief.\n\nUser: Hi\n\nAssistant:Hello." + kEos + "User: And?\n\nAssistant:");
  CHECK(format_conversation(ChatTemplate::DeepSeekCoder, talk, kBos) ==
        kBos + "Be brief.\n### Instruction:\nHi\n### Response:\nHello.\n<|EOT|>\n" +
            "### Instruction:\nAnd?\n### Response:\n");
  CHECK(format_conversation(ChatTemplate::DeepSeekR1, talk, kBos) ==
        kBos + "Be brief.<｜User｜>Hi<｜Assistant｜>Hello." + kEos +
            "<｜User｜>And?<｜Assistant｜>");
  // One user message: the same text as the CLI's first turn.
  CHECK(format_conversation(ChatTemplate::DeepSeekLLM, {{"user", "Hi"}}, kBos) ==
        format_user_turn(ChatTemplate::DeepSeekLLM, "", "Hi", true, kBos));
  const ChatTemplate t = ChatTemplate::DeepSeekLLM;
  CHECK_THROWS_WITH(format_conversation(t, {}, kBos), Catch::Contains("needs a user message"));
  CHECK_THROWS_WITH(format_conversation(t, {{"system", "x"}}, kBos),
                    Catch::Contains("needs a user message"));
  CHECK_THROWS_WITH(format_conversation(t, {{"assistant", "x"}}, kBos),
                    Catch::Contains("message 0: expected role 'user'"));
  CHECK_THROWS_WITH(format_conversation(t, {{"user", "a"}, {"user", "b"}}, kBos),
                    Catch::Contains("message 1: expected role 'assistant'"));
  CHECK_THROWS_WITH(format_conversation(t, {{"user", "a"}, {"assistant", "b"}}, kBos),
                    Catch::Contains("must be the user's"));
  CHECK_THROWS_WITH(format_conversation(t, {{"user", "a"}, {"tool", "b"}}, kBos),
                    Catch::Contains("got 'tool'"));
}

TEST_CASE("chat: formatted turns tokenize with their special tokens", "[chat]") {
  SECTION("deepseek-llm") {
    REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-llm.gguf");
    GGUFFile file(path);
    Tokenizer tok(file);
    const ChatTemplate t = detect_chat_template(file, "");
    CHECK(t == ChatTemplate::DeepSeekLLM);  // from its pre-tokenizer: the file has no template
    const std::string bos_text = tok.piece(tok.bos(), true);
    const std::string text = format_user_turn(t, "", "Hello", true, bos_text) + " Hi!" +
                             format_reply_end(t, "") + format_user_turn(t, "", "Bye", false, "");
    const std::vector<int> ids = tok.encode(text, true);
    REQUIRE(ids.size() > 2);
    CHECK(ids.front() == tok.bos());
    CHECK(std::count(ids.begin(), ids.end(), tok.eos()) == 1);
    CHECK(tok.decode(ids, true) == text);
  }
  SECTION("deepseek-coder") {
    REQUIRE_SHARED_OR_SKIP(path, "vocab/ggml-vocab-deepseek-coder.gguf");
    GGUFFile file(path);
    Tokenizer tok(file);
    const ChatTemplate t = detect_chat_template(file, "");
    CHECK(t == ChatTemplate::DeepSeekCoder);
    const std::string text = format_user_turn(t, "", "Sort.", true, tok.piece(tok.bos(), true)) +
                             "sorted(x)" + format_reply_end(t, "");
    const std::vector<int> ids = tok.encode(text, true);
    CHECK(ids.front() == tok.bos());
    CHECK(std::count(ids.begin(), ids.end(), tok.eot()) == 1);
    CHECK(tok.decode(ids, true) == text);
  }
}
