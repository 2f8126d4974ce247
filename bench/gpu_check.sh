#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (no network needed), configures a Release build
# with the CUDA backend, builds it, runs the test suite (the GPU tests included) and the GPU
# benchmark, and prints the benchmark's summary table last. Between them: compute-sanitizer's
# memcheck on a few GPU tests, and mutation checks (bench/gpu_mutations.sh) showing that the GPU
# tests fail when the kernels are broken. Meant to finish within 8 minutes on
# an H200 with 16 cores.
#
# usage: bench/gpu_check.sh [DEPS_DIR] [LOG_DIR]
#   DEPS_DIR  folder of .deb files from bench/fetch_gpu_deps.sh (default .deps); they are unpacked
#             into a private temporary prefix, never into /. Absent or empty: the system's packages.
#   LOG_DIR   where to copy the logs (default build/gpu-check)
set -euo pipefail
cd "$(dirname "$0")/.."
deps_dir=${1:-.deps}
build_dir=build/gpu-check
log_dir=${2:-$build_dir}
jobs=$(nproc)
started=$(date +%s)
say() { echo "[gpu_check +$(($(date +%s) - started))s] $*"; }

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
say "machine: $(nproc) cores; $(nvcc --version | tail -1); $(cmake --version | head -1)"
say "host compiler: $(c++ --version 2>/dev/null | head -1 || echo none)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

configure_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBULKBLOOM_CUDA=ON)
if compgen -G "$deps_dir/*.deb" >/dev/null; then
  prefix=$(mktemp -d /tmp/bulkbloom-deps.XXXXXX)
  for deb in "$deps_dir"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix"
    else
      (cd "$prefix" && ar p "$OLDPWD/$deb" "$(ar t "$OLDPWD/$deb" | grep '^data.tar')" | tar -x)
    fi
  done
  libdir=$prefix/usr/lib/x86_64-linux-gnu
  # The environment variable also reaches the consumer test's nested CMake run.
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  configure_args+=(-Dhwy_DIR="$libdir/cmake/hwy" -DGTest_DIR="$libdir/cmake/GTest"
                   -Dbenchmark_DIR="$libdir/cmake/benchmark"
                   -DCMAKE_INCLUDE_PATH="$prefix/usr/include")
  say "dependencies unpacked from $deps_dir into $prefix"
fi

mkdir -p "$log_dir"
say "configure"
cmake -S . -B "$build_dir" "${configure_args[@]}" >"$log_dir/configure.log" 2>&1 ||
  { tail -40 "$log_dir/configure.log"; exit 1; }
grep -E "CUDA backend|CUDA compiler" "$log_dir/configure.log" || true

say "build"
# The GPU targets first: a failure elsewhere (other components) must not hide GPU results.
gpu_targets=(bulkbloom bulkbloom_cuda_tests bulkbloom_gpu_bench)
cmake --build "$build_dir" -j "$jobs" --target "${gpu_targets[@]}" >"$log_dir/build.log" 2>&1 ||
  { tail -60 "$log_dir/build.log"; exit 1; }
if ! cmake --build "$build_dir" -j "$jobs" >>"$log_dir/build.log" 2>&1; then
  say "WARNING: building everything failed (see $log_dir/build.log); continuing with GPU targets"
  tail -20 "$log_dir/build.log"
fi

say "GPU tests"
gpu_tests_ok=yes
timeout 180 "$build_dir/tests/bulkbloom_cuda_tests" --gtest_brief=1 2>&1 | tee "$log_dir/gpu_tests.log" ||
  gpu_tests_ok=no
# Without a device every GPU test skips (one no-device test runs instead): that is no GPU result.
if grep -q "no CUDA device" "$log_dir/gpu_tests.log"; then
  say "NO USABLE GPU: the GPU tests skipped; nothing below measures a GPU"
  gpu_tests_ok=skipped
fi
# Out-of-bounds and misaligned accesses, on a few small GPU tests (compute-sanitizer slows
# kernels many times over). Skipped where the tool is missing or no device is usable.
memcheck_ok=skipped
if [[ $gpu_tests_ok != skipped ]] && command -v compute-sanitizer >/dev/null; then
  say "compute-sanitizer memcheck"
  memcheck_ok=yes
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$build_dir/tests/bulkbloom_cuda_tests" --gtest_brief=1 \
    --gtest_filter='*ContainsGivesTheOracleFlags/sb512:*UserKernels*/sb512x16:*CopiesWithinOneWarp*/sb256x4:*ConcurrentStreams*/sb512' \
    >"$log_dir/memcheck.log" 2>&1 || memcheck_ok=no
  tail -3 "$log_dir/memcheck.log"
elif [[ $gpu_tests_ok != skipped ]]; then
  say "compute-sanitizer not found: memcheck not run"
fi
say "whole test suite (default backend: CUDA when a device is present)"
suite_ok=yes
timeout 150 ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure \
  -E '^Shapes/Cuda\.|^CudaBackend\.' >"$log_dir/ctest.log" 2>&1 || suite_ok=no
tail -5 "$log_dir/ctest.log"

# GPU_CHECK_MUTATIONS=0 skips this step (about a minute and a half on an H200 machine).
mutations_ok=skipped
if [[ $gpu_tests_ok != skipped && ${GPU_CHECK_MUTATIONS:-1} != 0 ]]; then
  say "mutations: can the GPU tests fail?"
  mutations_ok=yes
  timeout 150 bench/gpu_mutations.sh "$build_dir/mutations" "$log_dir/mutations.log" \
    "${configure_args[@]}" || mutations_ok=no
fi

say "GPU benchmark"
bench_ok=yes
timeout 180 "$build_dir/bench/gpu/bulkbloom_gpu_bench" >"$log_dir/gpu_bench.log" 2>&1 || bench_ok=no
sed -n '/== summary/q;p' "$log_dir/gpu_bench.log"

verdict() { [[ $1 == yes ]] && echo "$2" || { [[ $1 == skipped ]] && echo SKIPPED || echo FAILED; }; }
say "done: GPU tests $(verdict $gpu_tests_ok passed), test suite $(verdict $suite_ok passed)," \
  "memcheck $(verdict $memcheck_ok clean), mutations $(verdict $mutations_ok caught)," \
  "benchmark $(verdict $bench_ok ran)"
echo
sed -n '/== summary/,$p' "$log_dir/gpu_bench.log"
[[ $gpu_tests_ok == yes && $suite_ok == yes && $memcheck_ok != no && $mutations_ok != no &&
  $bench_ok == yes ]]
