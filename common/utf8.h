// utf8.h: the UTF-8 and byte-level helpers the tokenizer needs.
//
// Two views of invalid UTF-8 live here, on purpose:
//   - decode() is the encoder's view, llama.cpp's: every byte that does not start a well-formed
//     sequence becomes its own U+FFFD (so "\xE4\xB8a" gives U+FFFD U+FFFD 'a').
//   - sanitize() / incomplete_tail() are the printer's view: a truncated sequence is one U+FFFD,
//     and a sequence cut off at the end of a buffer can be held back until its bytes arrive.
// Well-formed means Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace utf8 {

constexpr uint32_t kReplacement = 0xFFFD;  // U+FFFD REPLACEMENT CHARACTER
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

/// Bytes of the sequence a lead byte announces, by its top four bits (llama.cpp's
/// unicode_len_utf8): 1 for ASCII and for stray continuation bytes, else 2..4.
size_t sequence_length(unsigned char lead);

/// Appends the UTF-8 encoding of cp (cp <= kMaxCodepoint).
void append(std::string& out, uint32_t cp);

/// Codepoints of text; each byte that does not begin a well-formed sequence becomes U+FFFD.
std::vector<uint32_t> decode(std::string_view text);

/// Number of bytes at the end of s that are a well-formed but unfinished sequence (0..3).
size_t incomplete_tail(std::string_view s);

/// s with each ill-formed or truncated sequence replaced by one U+FFFD.
std::string sanitize(std::string_view s);

/// True for Unicode's White_Space characters (PropList.txt).
bool is_whitespace(uint32_t cp);

}  // namespace utf8

/// GPT-2's reversible byte <-> character table: byte-level BPE vocabularies spell every byte as a
/// printable character. Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
/// themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) map in byte order to
/// U+0100..U+0143, so ' ' is 'Ġ' (U+0120) and '\n' is 'Ċ' (U+010A).
namespace byte_level {

uint32_t byte_to_codepoint(uint8_t byte);
/// The byte cp stands for, or -1 when cp is not in the table.
int codepoint_to_byte(uint32_t cp);

}  // namespace byte_level
