#!/usr/bin/env bash
# Prints a fingerprint of the sources the GPU check's binaries are built from (C++, CUDA and CMake
# files under the folders that go into them: the library, the tests, the CLI and the probe it
# links, the GPU benchmark), so that gpu_check.sh can tell binaries that
# prepare_gpu_check.sh built from this tree from ones left over from another. Run from the
# repository root; needs no git (the device machine's copy of the tree has none).
set -euo pipefail
find CMakeLists.txt cmake include src tests tools bench/CMakeLists.txt bench/gpu bench/probe -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
  -o -name '*.cmake' -o -name '*.in' -o -name CMakeLists.txt \) -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
