// fuzz_support.h: what the libFuzzer targets share: bytes as a file, and how a target reports a
// broken invariant.
//
// A target's "clean" outcomes are a result or an Error (the engine's one exception type). Anything
// else is a finding: a sanitizer report, another exception, a crash, or a failed expect() below,
// which aborts so that libFuzzer saves the input under build/fuzz/findings/.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace fuzz {

/// Prints what broke and aborts: libFuzzer reports the input as a crash.
[[noreturn]] inline void finding(const char* what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what);
  std::abort();
}

inline void expect(bool ok, const char* what) {
  if (!ok) finding(what);
}

/// Bytes in an anonymous in-memory file (memfd), opened by path like any file on disk:
/// /proc/self/fd/N. Nothing touches the disk, and the file goes with the object.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(memfd_create("fuzz-input", MFD_CLOEXEC)) {
    expect(fd_ >= 0, "memfd_create failed");
    for (size_t done = 0; done < size;) {
      const ssize_t n = write(fd_, data + done, size - done);
      expect(n > 0, "write to the memfd failed");
      done += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

/// Splits an input into fields at each kSeparator byte: the fuzzer's way to fill several strings.
inline constexpr char kSeparator = '\0';
inline std::string_view next_field(std::string_view& rest) {
  const size_t end = rest.find(kSeparator);
  const std::string_view field = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  return field;
}

}  // namespace fuzz
