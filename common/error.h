// error.h: the one error type of the engine.
//
// Every boundary (file, metadata, tensor shapes, flags) validates its input and throws Error with a
// message that names the file, key or tensor. main() catches it, prints one line on stderr and
// exits non-zero. Checks are always on: they do not vanish under NDEBUG like assert().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

/// The engine's only exception type: a one-line, user-facing message.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws Error with the parts concatenated (built only when the check fails).
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

/// Throws Error(parts...) unless ok. Use at boundaries, not in hot loops. Its parts are made
/// before the call, failing or not: a part that builds a string (a type's name, a list) belongs
/// in `if (!ok) fail(...)` on a path every matrix product takes.
template <class... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}
