// paths.h: where the tests find their files, and the visible skip for ../shared.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

/// The repository root (set by the Makefile).
inline std::string project_path(const std::string& relative) {
  return std::string(PROJECT_ROOT) + "/" + relative;
}

/// A file under ../shared/ (beside the repository); "" when it is not there.
inline std::string shared_path(const std::string& relative) {
  std::string path = std::string(PROJECT_ROOT) + "/../shared/" + relative;
  return std::filesystem::exists(path) ? path : std::string();
}

/// Where the ../shared files come from, for the skip message (docs/verification.md says more).
inline const char* shared_origin(const std::string& relative) {
  return relative.rfind("vocab/", 0) == 0
             ? "llama.cpp's models/ folder has the ggml-vocab-deepseek-*.gguf files and their "
               ".inp/.out test vectors"
             : "stories260K: Karpathy's tinyllamas checkpoint, converted with llama.cpp's "
               "convert-llama2c-to-ggml";
}

/// Ends the current test case with a visible "SKIPPED" line when a ../shared file is missing.
#define REQUIRE_SHARED_OR_SKIP(path_var, relative)                                             \
  const std::string path_var = shared_path(relative);                                          \
  if (path_var.empty()) {                                                                      \
    WARN("SKIPPED: ../shared/" << (relative) << " is not present (" << shared_origin(relative) \
                               << ")");                                                        \
    return;                                                                                    \
  }
