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

/// Ends the current test case with a visible "SKIPPED" line when a ../shared file is missing.
#define REQUIRE_SHARED_OR_SKIP(path_var, relative)                                   \
  const std::string path_var = shared_path(relative);                               \
  if (path_var.empty()) {                                                            \
    WARN("SKIPPED: ../shared/" << (relative) << " is not present");                  \
    return;                                                                          \
  }
