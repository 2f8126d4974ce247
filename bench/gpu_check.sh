#!/usr/bin/env bash
# The GPU check: one unattended run on a machine with an NVIDIA GPU and no network. Within one
# global deadline (540 s) it configures a Release build with the CUDA backend, builds the GPU
# targets, then runs, most valuable first: the GPU tests (each with its own timeout), the GPU
# benchmark table, compute-sanitizer memcheck and racecheck on a few GPU tests, mutation checks
# (bench/gpu_mutations.sh: the GPU tests must fail on broken kernels), and the whole test suite
# with the CUDA backend as the default. Every log and a summary go to OUT_DIR; a short table of
# the steps is printed last. A step the deadline leaves no time for says SKIPPED.
#
# usage: bench/gpu_check.sh [--rehearse] OUT_DIR [DEPS_DIR]
#   OUT_DIR   folder for every log and summary.txt (created)
#   DEPS_DIR  folder of .deb files from bench/fetch_gpu_deps.sh (default .deps/gpu); they are
#             unpacked into a private prefix, never into /. Absent or empty: the system's packages.
#   --rehearse  on a machine without a GPU: unpack, configure and build exactly as the real run
#             does, check that every mutation still applies, and skip the steps that need a GPU,
#             so that a defect of this script never costs GPU time (ctest runs this).
set -uo pipefail
cd "$(dirname "$0")/.."
rehearse=no
if [[ ${1:-} == --rehearse ]]; then
  rehearse=yes
  shift
fi
out=${1:?usage: bench/gpu_check.sh [--rehearse] OUT_DIR [DEPS_DIR]}
deps_dir=${2:-.deps/gpu}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build_dir=${GPU_CHECK_BUILD_DIR:-build/gpu-check}
jobs=$(nproc)
started=$(date +%s)
deadline=$((started + ${GPU_CHECK_SECONDS:-540}))
summary=$out/summary.txt
: >"$summary"
say() { echo "[gpu_check +$(($(date +%s) - started))s] $*" | tee -a "$out/gpu_check.log"; }
left() { echo $((deadline - $(date +%s))); }
results=()
result() { # step verdict detail
  results+=("$(printf '%-22s %-8s %s' "$1" "$2" "$3")")
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$summary"
}
# Runs "$@" with at most `limit` seconds, and never past the deadline minus `reserve` seconds.
# Returns 124 when there was no time to start it.
bounded() {
  local limit=$1 reserve=$2
  shift 2
  local budget=$(($(left) - reserve))
  ((budget > limit)) && budget=$limit
  ((budget < 5)) && return 124
  timeout -k 5 "$budget" "$@"
}
# False, recording the step SKIPPED, when the deadline leaves under `reserve` + 5 seconds.
time_for() { # step reserve
  (($(left) - $2 >= 5)) && return 0
  result "$1" SKIPPED "no time left before the deadline"
  return 1
}
finish() {
  say "done in $(($(date +%s) - started)) s; logs in $out"
  echo
  [[ -f $out/gpu_bench.log ]] && sed -n '/== summary/,$p' "$out/gpu_bench.log"
  echo
  printf '%s\n' "${results[@]}"
  local failed=0
  for r in "${results[@]}"; do [[ $r == *" FAILED "* ]] && failed=1; done
  exit $failed
}

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
{
  echo "machine: $(nproc) cores, $(uname -r)"
  nvcc --version | tail -2
  cmake --version | head -1
  c++ --version 2>/dev/null | head -1
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1
  command -v compute-sanitizer || echo "compute-sanitizer: not found"
} >"$out/environment.log" 2>&1
cat "$out/environment.log"

configure_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBULKBLOOM_CUDA=ON)
if compgen -G "$deps_dir/*.deb" >/dev/null; then
  # At a fixed place beside the build, so that a second run rebuilds nothing.
  prefix=$(mkdir -p "$build_dir-deps" && cd "$build_dir-deps" && pwd)
  rm -rf "${prefix:?}"/*
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
  result dependencies ok "$(ls "$deps_dir"/*.deb | wc -l) .deb files unpacked from $deps_dir"
else
  result dependencies ok "no .deb files in $deps_dir: the system's packages"
fi

say "configure"
if ! bounded 120 0 cmake -S . -B "$build_dir" "${configure_args[@]}" >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"
  result configure FAILED "see configure.log"
  finish
fi
grep -E "CUDA backend|CUDA compiler identification" "$out/configure.log"
result configure ok "$build_dir"

say "build the GPU targets"
# The GPU targets first: a failure elsewhere (other components) must not hide GPU results.
gpu_targets=(bulkbloom_cuda_tests bulkbloom_cuda_host_tests bulkbloom_gpu_bench)
if ! bounded 300 60 cmake --build "$build_dir" -j "$jobs" --target "${gpu_targets[@]}" \
  >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  result build FAILED "see build.log"
  finish
fi
result build ok "${gpu_targets[*]}"

gpu=yes
gpu_why=""
if [[ $rehearse == yes ]]; then
  gpu=no
  gpu_why="rehearsal"
elif ! nvidia-smi -L >/dev/null 2>&1; then
  gpu=no
  gpu_why="nvidia-smi finds no GPU"
fi
skip_gpu_steps() {
  for step in gpu-tests benchmark memcheck racecheck mutations whole-suite; do
    result "$step" SKIPPED "$gpu_why"
  done
}

# The mutations' edits must still apply to the sources; checked without building in a rehearsal.
if [[ $rehearse == yes ]]; then
  if bench/gpu_mutations.sh --dry-run "$build_dir/mutations" "$out/mutations.log" \
    >>"$out/mutations.log" 2>&1; then
    result mutation-edits ok "every edit applies"
  else
    result mutation-edits FAILED "see mutations.log"
  fi
fi
if [[ $gpu == no ]]; then
  skip_gpu_steps
  finish
fi

say "GPU tests (60 s each)"
if ! time_for gpu-tests 240; then
  :
elif bounded 150 240 ctest --test-dir "$build_dir" -R '^Shapes/Cuda\.|^CudaBackend\.' -j 4 \
  --timeout 60 --output-on-failure --output-junit "$out/gpu_tests.xml" >"$out/gpu_tests.log" 2>&1; then
  result gpu-tests ok "$(grep -E 'tests passed' "$out/gpu_tests.log")"
else
  result gpu-tests FAILED "$(grep -E 'tests passed|Timeout|Failed' "$out/gpu_tests.log" | head -3 | tr '\n' ' ')"
fi
if grep -q "no CUDA device" "$out/gpu_tests.log"; then
  gpu_why="the GPU tests found no usable device"
  say "NO USABLE GPU: nothing below measures a GPU"
  skip_gpu_steps
  finish
fi

say "GPU benchmark"
if ! time_for benchmark 150; then
  :
elif bounded 150 150 "$build_dir/bench/gpu/bulkbloom_gpu_bench" >"$out/gpu_bench.log" 2>&1; then
  result benchmark ok "table at the end of gpu_bench.log"
else
  result benchmark FAILED "exit $? (see gpu_bench.log)"
fi

# Out-of-bounds and misaligned accesses, then shared-memory races, on a few small GPU tests
# (compute-sanitizer slows kernels many times over).
sanitized='*ContainsGivesTheOracleFlags/sb512:*UserKernels*/sb512x16:*InOneBlock*/sb256x4:*TwoStreams*/sb512'
for tool in memcheck racecheck; do
  if ! command -v compute-sanitizer >/dev/null; then
    result "$tool" SKIPPED "compute-sanitizer not found"
    continue
  fi
  say "compute-sanitizer $tool"
  if ! time_for "$tool" 90; then
    :
  elif bounded 60 90 compute-sanitizer --tool "$tool" --error-exitcode 1 \
    "$build_dir/tests/bulkbloom_cuda_tests" --gtest_brief=1 --gtest_filter="$sanitized" \
    >"$out/$tool.log" 2>&1; then
    result "$tool" ok "$(tail -1 "$out/$tool.log")"
  else
    result "$tool" FAILED "$(tail -1 "$out/$tool.log")"
  fi
done

say "mutations: can the GPU tests fail?"
if ! time_for mutations 60; then
  :
elif bounded 150 60 bench/gpu_mutations.sh "$build_dir/mutations" "$out/mutations.log" \
  "${configure_args[@]}" >"$out/mutations.out" 2>&1; then
  result mutations ok "$(grep -c caught "$out/mutations.out") caught"
else
  result mutations FAILED "$(grep -E 'SURVIVED|did not apply' "$out/mutations.out" | head -2 | tr '\n' ' ')"
fi

say "whole test suite (default backend: CUDA)"
if ! time_for whole-suite 5; then
  :
elif bounded 600 5 cmake --build "$build_dir" -j "$jobs" >>"$out/build.log" 2>&1 &&
  bounded 600 5 ctest --test-dir "$build_dir" -j "$jobs" --timeout 120 --output-on-failure \
    -E '^Shapes/Cuda\.|^CudaBackend\.' >"$out/ctest.log" 2>&1; then
  result whole-suite ok "$(grep -E 'tests passed' "$out/ctest.log")"
else
  result whole-suite FAILED "$(grep -E 'tests passed|tests failed' "$out/ctest.log" 2>/dev/null | head -1)"
fi
finish
