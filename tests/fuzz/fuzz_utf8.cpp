// fuzz_utf8.cpp: the UTF-8 helpers (common/utf8.h) and GPT-2's byte table against a reference
// written here from the definition, not from utf8.cpp's table.
//
// The reference decodes a sequence by its lead byte's length and then judges the codepoint it
// spells (overlong, surrogate, past U+10FFFF), where utf8.cpp checks the second byte's range
// (Unicode's table 3-7); the two must agree byte for byte. Checked on any bytes:
//   - decode() gives the reference's codepoints (one U+FFFD per byte that starts no well-formed
//     sequence), and append() of them gives back the text where it was well-formed;
//   - sanitize() gives well-formed UTF-8, leaves well-formed text alone and is idempotent;
//   - incomplete_tail() is the length of an unfinished but well-formed final sequence, else 0;
//   - the byte table is a bijection between the 256 bytes and its 256 characters.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "utf8.h"

namespace {

constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// Length a lead byte announces, 0 for a byte that never starts a sequence (80..BF, C0, C1, F5+).
size_t lead_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// The codepoint of the well-formed sequence at s[i], or -1.
int64_t sequence_at(std::string_view s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const size_t n = lead_length(lead);
  if (n == 0 || i + n > s.size()) return -1;
  if (n == 1) return lead;
  constexpr uint32_t kLeadBits[] = {0, 0, 0x1F, 0x0F, 0x07};
  constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
  uint32_t cp = lead & kLeadBits[n];
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!is_continuation(b)) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  const bool surrogate = cp >= kSurrogateFirst && cp <= kSurrogateLast;
  if (cp < kSmallest[n] || surrogate || cp > utf8::kMaxCodepoint) return -1;
  return cp;
}

std::vector<uint32_t> reference_decode(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    const int64_t cp = sequence_at(s, i);
    cps.push_back(cp < 0 ? utf8::kReplacement : uint32_t(cp));
    i += cp < 0 ? 1 : lead_length(static_cast<unsigned char>(s[i]));
  }
  return cps;
}

bool well_formed(std::string_view s) {
  for (size_t i = 0; i < s.size(); i += lead_length(static_cast<unsigned char>(s[i]))) {
    if (sequence_at(s, i) < 0) return false;
  }
  return true;
}

// True when tail is the start of a well-formed sequence that needs more bytes: some choice of the
// missing continuation bytes completes it (the second byte's range depends on the lead: E0 needs
// A0.., F0 90.., ED and F4 ..8F/..9F; later bytes take anything in 80..BF).
bool unfinished(std::string_view tail) {
  const size_t n = lead_length(static_cast<unsigned char>(tail[0]));
  if (n <= tail.size()) return false;
  for (unsigned char second : {0x80, 0x90, 0xA0}) {
    std::string full(tail);
    while (full.size() < n) full += static_cast<char>(full.size() == 1 ? second : 0x80);
    if (sequence_at(full, 0) >= 0) return true;
  }
  return false;
}

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) utf8::append(out, cp);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const std::vector<uint32_t> cps = utf8::decode(text);
  fuzz::expect(cps == reference_decode(text), "decode() differs from the reference");
  const std::string reencoded = encode(cps);
  fuzz::expect(well_formed(reencoded), "append() wrote ill-formed UTF-8");
  fuzz::expect(reference_decode(reencoded) == cps, "append() does not decode back");
  if (well_formed(text)) fuzz::expect(reencoded == text, "well-formed text does not round-trip");

  const std::string clean = utf8::sanitize(text);
  fuzz::expect(well_formed(clean), "sanitize() gave ill-formed UTF-8");
  fuzz::expect(utf8::sanitize(clean) == clean, "sanitize() is not idempotent");
  if (well_formed(text)) fuzz::expect(clean == text, "sanitize() changed well-formed text");

  size_t expected_tail = 0;
  for (size_t k = 1; k <= 3 && k <= text.size(); ++k) {
    if (unfinished(text.substr(text.size() - k))) expected_tail = k;
  }
  fuzz::expect(utf8::incomplete_tail(text) == expected_tail, "incomplete_tail() is wrong");

  for (unsigned char b : text) {
    const uint32_t cp = byte_level::byte_to_codepoint(b);
    fuzz::expect(byte_level::codepoint_to_byte(cp) == b, "byte table is not a bijection");
    fuzz::expect(utf8::sequence_length(b) == (b < 0xC0   ? 1
                                              : b < 0xE0 ? 2
                                              : b < 0xF0 ? 3
                                                         : 4),
                 "sequence_length() is wrong");
  }
  // Any 24-bit value as a codepoint: the table maps it back to its byte or to nothing.
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const uint32_t cp = data[i] | uint32_t(data[i + 1]) << 8 | uint32_t(data[i + 2]) << 16;
    const int b = byte_level::codepoint_to_byte(cp);
    fuzz::expect(b == -1 || byte_level::byte_to_codepoint(uint8_t(b)) == cp,
                 "codepoint_to_byte() names the wrong byte");
  }
  return 0;
}
