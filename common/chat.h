// chat.h: DeepSeek chat templates.
//
//   deepseek-llm   : BOS, optional system text + "\n\n", then "User: {msg}\n\nAssistant:" and the
//                    reply followed by EOS.
//   deepseek-coder : BOS, system text, "### Instruction:\n{msg}\n### Response:\n"; replies end
//                    with <|EOT|>.
//   deepseek-r1    : BOS, system text, "<｜User｜>{msg}<｜Assistant｜>" (R1 and its distills).
// The GGUF's tokenizer.chat_template is recognised when it is one of these formats; --chat-template
// NAME overrides. Formatted text contains special tokens, so encode it with parse_special = true.
#pragma once

#include <string>
#include <vector>

#include "gguf.h"
#include "tokenizer.h"

enum class ChatTemplate { DeepSeekLLM, DeepSeekCoder, DeepSeekR1 };

/// Template for name ("deepseek-llm", "deepseek-coder", "deepseek-r1"); throws Error otherwise.
ChatTemplate chat_template_from_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);
/// The template named by override_name if not empty, else detected from tokenizer.chat_template,
/// else from tokenizer.ggml.pre / general.name; deepseek-llm when nothing says otherwise.
ChatTemplate detect_chat_template(const GGUFFile& file, const std::string& override_name);

/// The tokens of a prompt as the CLI, the server and the Python module feed it: BOS when the
/// model adds one, then the text with the special tokens written in it parsed (as llama.cpp's CLI
/// does).
std::vector<int> prompt_tokens(const Tokenizer& tokenizer, const std::string& text);
/// BOS's text when the model adds one, else "": what a chat's first turn starts with.
std::string bos_text(const Tokenizer& tokenizer);

/// Text to feed for one user turn: the system text and BOS on the first turn only, then the user
/// message and the assistant prefix. bos_text is the BOS token's text ("" to add no BOS).
std::string format_user_turn(ChatTemplate t, const std::string& system, const std::string& user,
                             bool first_turn, const std::string& bos_text);
/// Text that closes an assistant reply before the next user turn (e.g. EOS text for deepseek-llm),
/// given the end-of-generation token's text that stopped it ("" if it stopped for another reason).
std::string format_reply_end(ChatTemplate t, const std::string& stop_text);

/// One message of a conversation: role "system", "user" or "assistant".
struct ChatMessage {
  std::string role;
  std::string content;
};

/// A whole conversation as the template writes it, ending with the assistant prefix (what the
/// Python module's create_chat_completion feeds): an optional system message first, then user
/// and assistant messages in turn, the last one the user's. Each earlier reply ends with its end
/// token's text. Throws Error on any other order or role.
std::string format_conversation(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                const std::string& bos_text);
