#!/usr/bin/env bash
# Builds here everything bench/gpu_check.sh runs on a GPU machine, which has no package registry
# and no Highway: the GPU tests, the GPU benchmark and the GPU-test mutants, for sm_90, into one
# folder small enough to carry to that machine (the device tool carries ignored paths of at most
# 64 MiB in all; this stays under 60 MiB). The binaries link the CUDA runtime statically; every
# other shared library they need but the C library is copied into lib/.
#
# usage: bench/prepare_gpu_check.sh [--no-mutants] [--from BUILD_DIR] [PREPARED_DIR]
#   PREPARED_DIR    default build/gpu-prepared (ignored by git; name it in the device call's carry)
#   --from BUILD_DIR  take the binaries of an existing build with the CUDA backend instead of
#                   configuring and building build/gpu-check (the ctest rehearsal does this);
#                   the manifest names this tree's sources, so build BUILD_DIR from them first
#   --no-mutants    leave the mutants out (bench/gpu_mutations.sh builds them otherwise)
#
# Then, on the GPU machine: bash bench/gpu_check.sh "$OUT" (see that script).
set -euo pipefail
cd "$(dirname "$0")/.."
mutants=yes
from=""
while [[ ${1:-} == --* ]]; do
  case $1 in
    --no-mutants) mutants=no ;;
    --from)
      from=$2
      shift
      ;;
    *)
      echo "prepare_gpu_check.sh: unknown option $1" >&2
      exit 2
      ;;
  esac
  shift
done
prepared=${1:-build/gpu-prepared}
limit_mib=60
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}

# Only the library, its tests and the benchmarks; no CLI, Flink, Python or examples. Machine code
# for sm_90 alone: the device is an H200, and one architecture keeps the binaries small.
configure_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBULKBLOOM_CUDA=ON
                -DCMAKE_CUDA_ARCHITECTURES=90-real -DBULKBLOOM_BUILD_CLI=OFF
                -DBULKBLOOM_BUILD_EXAMPLES=OFF -DBULKBLOOM_INSTALL=OFF -DBULKBLOOM_FLINK=OFF
                -DBULKBLOOM_BUILD_PYTHON=OFF)
# The CLI too, for `bulkbloom bench`'s GPU section (the mutants' builds leave it out).
targets=(bulkbloom_cuda_tests bulkbloom_gpu_bench bulkbloom_cli)
if [[ -z $from ]]; then
  from=build/gpu-check
  echo "== configure and build ${targets[*]} in $from"
  cmake -S . -B "$from" "${configure_args[@]}" -DBULKBLOOM_BUILD_CLI=ON >/dev/null
  cmake --build "$from" -j 2 --target "${targets[@]}"
fi
tests_bin=$from/tests/bulkbloom_cuda_tests
bench_bin=$from/bench/gpu/bulkbloom_gpu_bench
cli_bin=$from/bulkbloom
for f in "$tests_bin" "$bench_bin" "$cli_bin"; do
  [[ -x $f ]] || { echo "prepare_gpu_check.sh: $f is missing (build with the CUDA backend)" >&2; exit 1; }
done

rm -rf "$prepared"
mkdir -p "$prepared/bin" "$prepared/lib"
cp "$tests_bin" "$bench_bin" "$cli_bin" "$prepared/bin/"
# Shared libraries beside the binaries, except the C library and the loader (the machine's own
# must be used) and the driver's libcuda (never copied: it must match the machine's driver).
copy_libraries() {
  ldd "$1" | awk '/=> \//{print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so.* | libm.so.* | ld-linux* | libcuda.so.* | libdl.so.* | libpthread.so.* | librt.so.*) ;;
      *) cp -L -n "$lib" "$prepared/lib/" ;;
    esac
  done
}
for f in "$prepared"/bin/*; do copy_libraries "$f"; done

if [[ $mutants == yes ]]; then
  echo "== mutants"
  bench/gpu_mutations.sh --build build/gpu-mutations "$prepared/mutants" "${configure_args[@]}"
fi
strip --strip-unneeded "$prepared"/bin/* "$prepared"/mutants/*.bin 2>/dev/null || true

{
  echo "prepared: $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
  echo "source: $(bench/gpu_source_fingerprint.sh)"
  echo "build: $from"
  nvcc --version | tail -1
  (cd "$prepared" && find . -type f -printf '%s %p\n' | sort -k2)
} >"$prepared/manifest.txt"
size_mib=$(du -sm "$prepared" | cut -f1)
echo "== $prepared: ${size_mib} MiB"
cat "$prepared/manifest.txt"
if ((size_mib >= limit_mib)); then
  echo "prepare_gpu_check.sh: $prepared is ${size_mib} MiB, over the ${limit_mib} MiB that may be carried" >&2
  exit 1
fi
