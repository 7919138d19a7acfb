// chat.cpp: the three DeepSeek chat formats, as their Hugging Face chat templates write them.
//
//   deepseek-llm (DeepSeek-LLM-7B/67B-chat, also DeepSeek-V2):
//     <BOS>{system}\n\nUser: {user}\n\nAssistant: {reply}<EOS>User: {user}\n\nAssistant:
//     The prompt ends with "Assistant:" and no space: the model writes the space itself.
//   deepseek-coder (DeepSeek-Coder-Instruct):
//     <BOS>{system}\n### Instruction:\n{user}\n### Response:\n{reply}\n<|EOT|>\n### Instruction:...
//     The template's own default system prompt is left out unless one is given.
//   deepseek-r1 (DeepSeek-V3, R1 and the R1 distills):
//     <BOS>{system}<｜User｜>{user}<｜Assistant｜>{reply}<｜end▁of▁sentence｜><｜User｜>...
#include "chat.h"

#include <algorithm>
#include <cctype>

#include "error.h"

namespace {

const char* const kEndOfSentence = "<｜end▁of▁sentence｜>";  // DeepSeek's EOS text
const char* const kCoderEndOfTurn = "<|EOT|>";

struct TemplateName {
  const char* name;
  ChatTemplate value;
};

// Canonical names first; then llama.cpp's names for the same formats.
const TemplateName kNames[] = {
    {"deepseek-llm", ChatTemplate::DeepSeekLLM}, {"deepseek-coder", ChatTemplate::DeepSeekCoder},
    {"deepseek-r1", ChatTemplate::DeepSeekR1},   {"deepseek2", ChatTemplate::DeepSeekLLM},
    {"deepseek", ChatTemplate::DeepSeekCoder},   {"deepseek3", ChatTemplate::DeepSeekR1},
};

bool contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

ChatTemplate chat_template_from_name(const std::string& name) {
  for (const TemplateName& t : kNames) {
    if (name == t.name) return t.value;
  }
  fail("unknown chat template '", name, "'; known: deepseek-llm, deepseek-coder, deepseek-r1");
}

const char* chat_template_name(ChatTemplate t) {
  for (const TemplateName& n : kNames) {
    if (n.value == t) return n.name;  // the canonical name, listed first
  }
  return "deepseek-llm";
}

ChatTemplate detect_chat_template(const GGUFFile& file, const std::string& override_name) {
  if (!override_name.empty()) return chat_template_from_name(override_name);

  // The Jinja template in the file, recognised by what only one of the formats writes.
  const std::string jinja = file.get_string_or("tokenizer.chat_template", "");
  if (contains(jinja, "<｜User｜>") || contains(jinja, "<｜Assistant｜>")) {
    return ChatTemplate::DeepSeekR1;
  }
  if (contains(jinja, "### Instruction")) return ChatTemplate::DeepSeekCoder;
  if (contains(jinja, "User: ") || contains(jinja, "Assistant:")) return ChatTemplate::DeepSeekLLM;

  // No (recognisable) template: the pre-tokenizer, then the model's name.
  const std::string pre = file.get_string_or("tokenizer.ggml.pre", "");
  if (pre == "deepseek-coder") return ChatTemplate::DeepSeekCoder;
  if (pre == "deepseek-v3" || pre == "deepseek-r1-qwen") return ChatTemplate::DeepSeekR1;
  if (pre == "deepseek-llm") return ChatTemplate::DeepSeekLLM;
  const std::string name = lowercase(file.get_string_or("general.name", ""));
  if (contains(name, "coder")) return ChatTemplate::DeepSeekCoder;
  if (contains(name, "r1") || contains(name, "v3")) return ChatTemplate::DeepSeekR1;
  return ChatTemplate::DeepSeekLLM;
}

std::vector<int> prompt_tokens(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int> ids;
  if (tokenizer.add_bos() && tokenizer.bos() >= 0) ids.push_back(tokenizer.bos());
  const std::vector<int> body = tokenizer.encode(text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::string bos_text(const Tokenizer& tokenizer) {
  return tokenizer.add_bos() && tokenizer.bos() >= 0 ? tokenizer.piece(tokenizer.bos(), true) : "";
}

std::string format_user_turn(ChatTemplate t, const std::string& system, const std::string& user,
                             bool first_turn, const std::string& bos_text) {
  std::string text = first_turn ? bos_text + system : "";
  // deepseek-r1's system text runs straight into <｜User｜>; the others end it with newlines.
  if (first_turn && !system.empty()) {
    if (t == ChatTemplate::DeepSeekLLM) text += "\n\n";
    // The coder template's default system prompt ends in "\n"; a given one gets the same.
    if (t == ChatTemplate::DeepSeekCoder && system.back() != '\n') text += "\n";
  }
  switch (t) {
    case ChatTemplate::DeepSeekLLM:
      return text + "User: " + user + "\n\nAssistant:";
    case ChatTemplate::DeepSeekCoder:
      return text + "### Instruction:\n" + user + "\n### Response:\n";
    case ChatTemplate::DeepSeekR1:
      return text + "<｜User｜>" + user + "<｜Assistant｜>";
  }
  return text;
}

std::string format_reply_end(ChatTemplate t, const std::string& stop_text) {
  // When an end token stopped the reply it is already in the context (the generation loop feeds
  // the last sampled token before the next input); otherwise the end token is written here.
  const bool stopped_by_end_token = !stop_text.empty();
  switch (t) {
    case ChatTemplate::DeepSeekLLM:
    case ChatTemplate::DeepSeekR1:
      return stopped_by_end_token ? "" : kEndOfSentence;
    case ChatTemplate::DeepSeekCoder:
      return stopped_by_end_token ? "\n" : std::string("\n") + kCoderEndOfTurn + "\n";
  }
  return "";
}

std::string format_conversation(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                const std::string& bos_text) {
  size_t i = 0;
  std::string system;
  if (i < messages.size() && messages[i].role == "system") system = messages[i++].content;
  check(i < messages.size(), "a conversation needs a user message");
  std::string text;
  for (bool first = true; i < messages.size(); first = false) {
    check(messages[i].role == "user", "message ", i, ": expected role 'user' here, got '",
          messages[i].role, "' (roles: an optional 'system' first, then 'user' and 'assistant' ",
          "in turn, ending with 'user')");
    text += format_user_turn(t, system, messages[i++].content, first, bos_text);
    if (i == messages.size()) break;
    check(messages[i].role == "assistant", "message ", i, ": expected role 'assistant' here, got '",
          messages[i].role, "'");
    text += messages[i++].content + format_reply_end(t, "");
    check(i < messages.size(),
          "the conversation ends with an assistant message: the last "
          "message must be the user's");
  }
  return text;
}
