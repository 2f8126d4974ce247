#!/usr/bin/env bash
# Downloads, on a machine with Debian's apt and a network, the build dependencies that
# bench/gpu_check.sh unpacks on a GPU machine that has neither: Highway, GoogleTest, Google
# Benchmark and xxHash headers and libraries, as .deb files in .deps/gpu/ (ignored by git; carry
# it to the GPU machine). Nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libhwy-dev libhwy1 libgtest-dev libbenchmark-dev libbenchmark1debian libxxhash-dev)
mkdir -p .deps/gpu
rm -f .deps/gpu/*.deb
(cd .deps/gpu && apt-get download "${packages[@]}")
ls -l .deps/gpu
