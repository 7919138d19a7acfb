#!/usr/bin/env bash
# Installs the Debian packages the build and tests need (when root), or names the missing ones.
#   g++, make        the compiler and build
#   catch2           the test framework (v2, header catch2/catch.hpp)
#   libpcre2-dev     the tokenizer's regex engine (UTF + Unicode properties)
#   python3-numpy    tools/make_models.py: regenerating and checking the test models
#   libcpp-httplib-dev, nlohmann-json3-dev   the server (HTTP and JSON), from stage 23 on
#   libopenmpi-dev, openmpi-bin   MPI (mpicxx, mpirun): the pipeline stage, 21 on
# Optional, installed by the targets that need them: python3-torch (make golden), doxygen (make docs),
# pybind11-dev, python3-dev, python3-pytest and pip/venv/wheel (make python, make test: PY_DEPS),
# gnuplot-nox (make bench chart).
set -euo pipefail
packages=(g++ make catch2 libpcre2-dev python3-numpy libcpp-httplib-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  echo "missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
