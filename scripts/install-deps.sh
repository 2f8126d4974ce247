#!/usr/bin/env bash
# Installs what bulkbloom's build needs on Debian 12 or Ubuntu 24.04, skipping what is already
# there: as root, or through sudo otherwise. The README's commands and CI (.ci/run) all start here.
#
#   bash scripts/install-deps.sh            the C++ library, the command-line tool and their tests
#   bash scripts/install-deps.sh --python   also .venv, a virtual environment with the Python
#                                           package's build and test requirements from PyPI
#                                           (python/requirements-dev.txt)
#   bash scripts/install-deps.sh --spark    what --python installs, and a Java 17 runtime for
#                                           bulkbloom.spark on a local Spark (README, "Scale out
#                                           with Spark")
#   bash scripts/install-deps.sh --flink    also a Java 17 JDK, JUnit 5 (its tests) and Apache
#                                           Flink's jars from PyPI (scripts/fetch-flink.sh), for
#                                           the Flink operator (flink/)
#   The options combine: --python --flink.
set -euo pipefail
cd "$(dirname "$0")/.."

with_python=0
with_spark=0
with_flink=0
for option in "$@"; do
  case "$option" in
    --python) with_python=1 ;;
    --spark) with_python=1 with_spark=1 ;;
    --flink) with_flink=1 ;;
    *) echo "usage: $0 [--python] [--spark] [--flink]" >&2; exit 2 ;;
  esac
done

as_root() {
  if ((EUID == 0)); then "$@"; else sudo "$@"; fi
}

# python3-pip: bench/fetch_arrow.sh downloads pyarrow's C++ libraries with it.
packages=(cmake ninja-build g++ ccache python3 python3-pip libhwy-dev libxxhash-dev libgtest-dev
          libbenchmark-dev)
# The module's build needs Python's headers; Debian's Python needs python3-venv for a venv.
((with_python)) && packages+=(python3-dev python3-venv)
# Spark runs in a JVM. (The JDK of --flink contains this runtime.)
((with_spark && !with_flink)) && packages+=(openjdk-17-jre-headless)
# javac, jar and jni.h for the Flink operator's jars and JNI library; JUnit 5's console launcher
# (junit-platform-console-standalone.jar) runs its tests.
((with_flink)) && packages+=(openjdk-17-jdk-headless junit5)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# Thrust's headers, where no CUDA toolkit brings them: the tests then run the CUDA backend's
# algorithms on Thrust's host backend (tests/CMakeLists.txt). Optional: a distribution without the
# package builds and tests everything else.
if [[ ! -e /usr/local/cuda/include/cccl/thrust/version.h && ! -e /usr/local/cuda/include/thrust/version.h ]] &&
   ! dpkg-query -W -f='${Status}' libthrust-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "installing: libthrust-dev"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libthrust-dev ||
    echo "libthrust-dev not installed: the CUDA backend's host-side tests will not be built" >&2
fi

if ((with_python)); then
  # A virtual environment, so that neither a system Python that forbids pip installs (PEP 668)
  # nor the packages of another Python stand in the way.
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -r python/requirements-dev.txt
fi

if ((with_flink)); then
  bash scripts/fetch-flink.sh >/dev/null
fi
