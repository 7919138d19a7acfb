// utf8.cpp: UTF-8 decoding with replacement, and GPT-2's byte table.
#include "utf8.h"

#include <algorithm>
#include <array>

namespace utf8 {

namespace {

constexpr unsigned char kContinuationLow = 0x80;
constexpr unsigned char kContinuationHigh = 0xBF;

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
  constexpr uint32_t kPayloadBits = 6;
  constexpr uint32_t kPayloadMask = 0x3F;
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
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> decode(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Prefix p = well_formed_prefix(text, i);
    if (p.valid == p.needed) {
      cps.push_back(codepoint_at(text, i, p.needed));
      i += p.needed;
    } else {
      cps.push_back(kReplacement);  // one per byte, as llama.cpp's unicode_cpts_from_utf8
      i += 1;
    }
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
  size_t i = 0;
  while (i < s.size()) {
    const Prefix p = well_formed_prefix(s, i);
    if (p.valid == p.needed) {
      out.append(s.substr(i, p.needed));
      i += p.needed;
    } else {
      append(out, kReplacement);  // one per maximal ill-formed subpart
      i += std::max<size_t>(p.valid, 1);
    }
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

constexpr uint32_t kFirstShifted = 0x100;  // where the non-printable bytes start: U+0100
// The non-printable bytes, in byte order: 00..20 (33 of them), 7F..A0 (34), AD (1).
constexpr uint32_t kLowRunEnd = 0x20;
constexpr uint32_t kLowRunCount = kLowRunEnd + 1;
constexpr uint32_t kMidRunBegin = 0x7F;
constexpr uint32_t kMidRunEnd = 0xA0;
constexpr uint32_t kMidRunCount = kMidRunEnd - kMidRunBegin + 1;
constexpr uint32_t kSoftHyphen = 0xAD;
constexpr uint32_t kShiftedCount = kLowRunCount + kMidRunCount + 1;

bool is_printable(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) {
  if (is_printable(byte)) return byte;
  if (byte <= kLowRunEnd) return kFirstShifted + byte;
  if (byte <= kMidRunEnd) return kFirstShifted + kLowRunCount + (byte - kMidRunBegin);
  return kFirstShifted + kLowRunCount + kMidRunCount;  // the soft hyphen, last
}

int codepoint_to_byte(uint32_t cp) {
  if (cp < kFirstShifted) return is_printable(cp) ? static_cast<int>(cp) : -1;
  const uint32_t n = cp - kFirstShifted;
  if (n >= kShiftedCount) return -1;
  if (n < kLowRunCount) return static_cast<int>(n);
  if (n < kLowRunCount + kMidRunCount) return static_cast<int>(kMidRunBegin + n - kLowRunCount);
  return static_cast<int>(kSoftHyphen);
}

}  // namespace byte_level
