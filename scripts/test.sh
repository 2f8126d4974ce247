#!/usr/bin/env bash
# The README's test command, and CI's: installs what is missing (scripts/install-deps.sh: the
# Debian packages, .venv for Python and Spark, a JDK and Flink's jars), builds and runs the C++ and
# Flink tests (ctest), then builds the Python package into .venv and runs its tests (with Spark's),
# then its manylinux wheel (scripts/build-wheel.sh) and that wheel's test in a fresh environment.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh --python --flink

# CMake builds the CUDA backend when it finds nvcc; the toolkit's usual place may be off PATH.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=$PATH:/usr/local/cuda/bin
fi

# Apache Arrow's Parquet filter from PyPI, so that the tests check sb256 against it byte for byte.
bench/fetch_arrow.sh

cmake --workflow --preset test

# The Python package, built from this tree (build/python keeps the build between runs), then its
# tests, which compare it with the command-line tool just built.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps .
BULKBLOOM_CLI="$PWD/build/release/bulkbloom" .venv/bin/python -m pytest tests/python -q

# The wheel for other machines: the build above repackaged with the libraries it links
# (scripts/build-wheel.sh, seconds), installed and run in a fresh virtual environment.
wheel=$(bash scripts/build-wheel.sh build/wheel)
BULKBLOOM_WHEEL="$wheel" .venv/bin/python -m pytest tests/wheel -q
