// utf8.cpp: UTF-8 decoding with replacement, and GPT-2's byte table.
#include "utf8.h"

#include <algorithm>
#include <array>

namespace utf8 {

namespace {

constexpr unsigned char kContinuationLow = 0x80;
constexpr unsigned char kContinuationHigh = 0xBF;
constexpr uint32_t kPayloadBits = 6;  // each continuation byte carries 6 bits: 10xxxxxx
constexpr uint32_t kPayloadMask = 0x3F;

// How a well-formed sequence starting with a given lead byte goes on (Unicode table 3-7): its
// length and the allowed range of its second byte (later bytes are always 80..BF).
struct LeadRule {
  size_t length = 0;  // 0: the byte cannot start a sequence
  unsigned char second_low = kContinuationLow;
  unsigned char second_high = kContinuationHigh;
};

LeadRule lead_rule(unsigned char b) {
  if (b < 0x80) return {1};
  if (b >= 0xC2 && b <= 0xDF) return {2};
  if (b == 0xE0) return {3, 0xA0, kContinuationHigh};  // no overlong 3-byte forms
  if (b == 0xED) return {3, kContinuationLow, 0x9F};   // no surrogates D800..DFFF
  if (b >= 0xE1 && b <= 0xEF) return {3};
  if (b == 0xF0) return {4, 0x90, kContinuationHigh};  // no overlong 4-byte forms
  if (b >= 0xF1 && b <= 0xF3) return {4};
  if (b == 0xF4) return {4, kContinuationLow, 0x8F};  // nothing past U+10FFFF
  return {};                                          // 80..C1, F5..FF
}

// How many bytes of s starting at i form the beginning of a well-formed sequence (0 when s[i]
// cannot start one), and how many the full sequence needs.
struct Prefix {
  size_t valid = 0;
  size_t needed = 0;
};

Prefix well_formed_prefix(std::string_view s, size_t i) {
  const LeadRule rule = lead_rule(static_cast<unsigned char>(s[i]));
  if (rule.length == 0) return {0, 1};
  size_t n = 1;
  while (n < rule.length && i + n < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    const bool second = n == 1;
    const unsigned char low = second ? rule.second_low : kContinuationLow;
    const unsigned char high = second ? rule.second_high : kContinuationHigh;
    if (b < low || b > high) break;
    ++n;
  }
  return {n, rule.length};
}

uint32_t codepoint_at(std::string_view s, size_t i, size_t length) {
  constexpr uint32_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};  // payload bits of the lead byte
  uint32_t cp = static_cast<unsigned char>(s[i]) & kLeadMask[length];
  for (size_t k = 1; k < length; ++k) {
    cp = (cp << kPayloadBits) | (static_cast<unsigned char>(s[i + k]) & kPayloadMask);
  }
  return cp;
}

}  // namespace

size_t sequence_length(unsigned char lead) {
  constexpr std::array<size_t, 16> kByTopNibble = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  constexpr int kNibbleShift = 4;
  return kByTopNibble[lead >> kNibbleShift];
}

void append(std::string& out, uint32_t cp) {
  constexpr unsigned char kLeadMarker[] = {0, 0x00, 0xC0, 0xE0, 0xF0};  // by sequence length
  const int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  out += static_cast<char>(kLeadMarker[n] | (cp >> (kPayloadBits * (n - 1))));
  for (int k = n - 2; k >= 0; --k) {
    out += static_cast<char>(kContinuationLow | ((cp >> (kPayloadBits * k)) & kPayloadMask));
  }
}

std::vector<uint32_t> decode(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Prefix p = well_formed_prefix(text, i);
    const bool ok = p.valid == p.needed;
    // An ill-formed sequence gives one U+FFFD per byte, as llama.cpp's unicode_cpts_from_utf8.
    cps.push_back(ok ? codepoint_at(text, i, p.needed) : kReplacement);
    i += ok ? p.needed : 1;
  }
  return cps;
}

size_t incomplete_tail(std::string_view s) {
  constexpr size_t kMaxTail = 3;  // a 4-byte sequence missing its last byte
  const size_t first = s.size() > kMaxTail ? s.size() - kMaxTail : 0;
  for (size_t i = s.size(); i-- > first;) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= kContinuationLow && b <= kContinuationHigh) continue;  // keep looking for the lead
    const Prefix p = well_formed_prefix(s, i);
    const bool unfinished = p.valid == s.size() - i && p.valid < p.needed;
    return unfinished ? p.valid : 0;
  }
  return 0;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Prefix p = well_formed_prefix(s, i);
    if (p.valid == p.needed) {
      out.append(s.substr(i, p.needed));
    } else {
      append(out, kReplacement);  // one per maximal ill-formed subpart
    }
    i += std::max<size_t>(p.valid, 1);  // valid = needed >= 1 when well-formed
  }
  return out;
}

bool is_whitespace(uint32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0) return true;
  if (cp < 0x1680) return false;
  return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace utf8

namespace byte_level {

namespace {

// GPT-2's bytes_to_unicode: a byte that prints stands for itself; the other 68 (00..20, 7F..A0,
// AD) take U+0100, U+0101, ... in byte order.
constexpr uint32_t kFirstShifted = 0x100;
constexpr uint32_t kByteCount = 256;
constexpr uint32_t kShiftedCount = 68;

constexpr bool is_printable(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// Each byte's character, and the byte of each shifted character U+0100 + n.
struct Table {
  uint32_t codepoint[kByteCount];
  uint8_t shifted_byte[kShiftedCount];
  constexpr Table() : codepoint(), shifted_byte() {
    for (uint32_t b = 0, n = 0; b < kByteCount; ++b) {
      codepoint[b] = is_printable(b) ? b : kFirstShifted + n;
      if (!is_printable(b)) shifted_byte[n++] = static_cast<uint8_t>(b);
    }
  }
};
constexpr Table kTable;

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) {
  return kTable.codepoint[byte];
}

int codepoint_to_byte(uint32_t cp) {
  if (cp < kFirstShifted) return is_printable(cp) ? static_cast<int>(cp) : -1;
  return cp - kFirstShifted < kShiftedCount ? kTable.shifted_byte[cp - kFirstShifted] : -1;
}

}  // namespace byte_level
