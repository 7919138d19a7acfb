// fuzz_chat.cpp: the chat template renderer (common/chat.h) on any strings.
//
// The input is split at NUL bytes into: a flags byte, system, user, BOS text, stop text, a
// template name, and the three metadata strings detection reads (tokenizer.chat_template,
// tokenizer.ggml.pre, general.name), written into a GGUF file in memory. Checked:
//   - format_user_turn() is [BOS + system on the first turn] + at most two newlines + the
//     template's user prefix + user + its assistant prefix, the message untouched;
//   - format_reply_end() writes the end token only when no end token stopped the reply;
//   - a name is refused with Error or names a template whose canonical name maps back to it;
//   - detection never fails on a readable file, and a valid override always wins.
#include <cstdint>
#include <string>
#include <string_view>

#include "../support/gguf_builder.h"
#include "chat.h"
#include "error.h"
#include "fuzz_support.h"
#include "gguf.h"

namespace {

constexpr ChatTemplate kTemplates[] = {ChatTemplate::DeepSeekLLM, ChatTemplate::DeepSeekCoder,
                                       ChatTemplate::DeepSeekR1};
constexpr uint8_t kFirstTurnBit = 0x04;

struct Frame {
  const char* user_prefix;
  const char* assistant_prefix;
  const char* reply_end;  // when no end token stopped the reply
};

Frame frame(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::DeepSeekLLM:
      return {"User: ", "\n\nAssistant:", "<｜end▁of▁sentence｜>"};
    case ChatTemplate::DeepSeekCoder:
      return {"### Instruction:\n", "\n### Response:\n", "\n<|EOT|>\n"};
    case ChatTemplate::DeepSeekR1:
      return {"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"};
  }
  fuzz::finding("unknown ChatTemplate value");
}

bool is_template(ChatTemplate t) {
  return t == ChatTemplate::DeepSeekLLM || t == ChatTemplate::DeepSeekCoder ||
         t == ChatTemplate::DeepSeekR1;
}

void check_turn(ChatTemplate t, bool first_turn, const std::string& system, const std::string& user,
                const std::string& bos, const std::string& stop) {
  const std::string turn = format_user_turn(t, system, user, first_turn, bos);
  const Frame f = frame(t);
  const std::string head = first_turn ? bos + system : "";
  const std::string tail = f.user_prefix + user + f.assistant_prefix;
  fuzz::expect(
      turn.size() >= head.size() + tail.size() && turn.starts_with(head) && turn.ends_with(tail),
      "format_user_turn() lost or moved a part");
  const std::string_view between =
      std::string_view(turn).substr(head.size(), turn.size() - head.size() - tail.size());
  fuzz::expect(between.empty() || between == "\n" || between == "\n\n",
               "format_user_turn() put more than newlines after the system text");

  const std::string end = format_reply_end(t, stop);
  const bool written = end == f.reply_end;
  fuzz::expect(stop.empty() ? written : (end.empty() || end == "\n"),
               "format_reply_end() wrote the wrong end");
}

void check_name(const std::string& name) {
  try {
    const ChatTemplate t = chat_template_from_name(name);
    fuzz::expect(is_template(t) && chat_template_from_name(chat_template_name(t)) == t,
                 "a template name does not map back");
  } catch (const Error&) {
  }
}

void check_detection(const std::string& jinja, const std::string& pre, const std::string& name,
                     const std::string& override_name) {
  GGUFBuilder b;
  if (!jinja.empty()) b.add_string("tokenizer.chat_template", jinja);
  if (!pre.empty()) b.add_string("tokenizer.ggml.pre", pre);
  if (!name.empty()) b.add_string("general.name", name);
  const std::string bytes = b.bytes();
  const fuzz::MemoryFile memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const GGUFFile file(memory.path());
  fuzz::expect(is_template(detect_chat_template(file, "")), "detection gave no template");
  try {
    const ChatTemplate wanted = chat_template_from_name(override_name);
    fuzz::expect(detect_chat_template(file, override_name) == wanted, "the override lost");
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string_view flags = fuzz::next_field(rest);
  const uint8_t f = flags.empty() ? 0 : static_cast<uint8_t>(flags[0]);
  const std::string system(fuzz::next_field(rest));
  const std::string user(fuzz::next_field(rest));
  const std::string bos(fuzz::next_field(rest));
  const std::string stop(fuzz::next_field(rest));
  const std::string name(fuzz::next_field(rest));
  const std::string jinja(fuzz::next_field(rest));
  const std::string pre(fuzz::next_field(rest));
  const std::string general_name(fuzz::next_field(rest));

  for (ChatTemplate t : kTemplates)
    check_turn(t, (f & kFirstTurnBit) != 0, system, user, bos, stop);
  check_name(name);
  check_detection(jinja, pre, general_name, name);
  return 0;
}
