#!/usr/bin/env bash
# The GPU check: one unattended run on a machine with an NVIDIA GPU and no network, on binaries
# that bench/prepare_gpu_check.sh built elsewhere (carry its folder, build/gpu-prepared). Within
# one deadline (420 s), most valuable first:
#   probe       the device answers (nvidia-smi, then the benchmark's --probe, which makes a filter
#               on it); without one the check FAILS at once: a run that measures nothing is red
#   gpu-tests   every GPU test with BULKBLOOM_REQUIRE_GPU=1 (a skip for want of a device fails),
#               and GTest's XML read back: no test may have skipped for want of a device
#   check       bytes and flags against the multithreaded CPU (gpu_bench --check)
#   benchmark   device-resident throughput beside the device's limits (gpu_bench)
#   cli-bench   `bulkbloom bench`'s GPU section as a user runs it (a one-size CPU sweep, then the
#               GPU at 32 MiB and 1 GiB: device-resident keys beside the device's random block
#               reads, host-resident keys end to end, answers checked against the CPU), appended
#               to bench.log
#   memcheck    compute-sanitizer memcheck on 4 GPU tests
#   mutations   the prebuilt mutants must fail their tests (bench/gpu_mutations.sh --run)
# The prebuilt binaries are rebuilt on the machine only if they do not start there (configure and
# build with the system's packages, or .deb files from bench/fetch_gpu_deps.sh in DEPS_DIR).
# Writes at most 8 files to OUT_DIR (the device tool brings back 8) and prints the table last.
#
# usage: bench/gpu_check.sh [--dry-run] OUT_DIR [PREPARED_DIR]
#   PREPARED_DIR  default build/gpu-prepared
#   --dry-run     on a machine without a GPU: check that the prepared binaries start and that the
#                 mutations apply, list the outputs, and skip every step that needs a device (the
#                 ctest rehearsal runs this; without --dry-run, no device is a failure)
# environment: GPU_CHECK_SECONDS (deadline, 420), GPU_CHECK_DEPS (.deb folder, .deps/gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
dry_run=no
if [[ ${1:-} == --dry-run ]]; then
  dry_run=yes
  shift
fi
out=${1:?usage: bench/gpu_check.sh [--dry-run] OUT_DIR [PREPARED_DIR]}
prepared=${2:-build/gpu-prepared}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ -d $prepared ]] && prepared=$(cd "$prepared" && pwd)
started=$(date +%s)
deadline=$((started + ${GPU_CHECK_SECONDS:-420}))

# The only files written to OUT_DIR (at most 8).
log=$out/gpu_check.log         # this script's steps and the machine
tests_log=$out/gpu_tests.log   # the GPU tests' output, then memcheck's
tests_xml=$out/gpu_tests.xml   # GTest's XML of the GPU tests
check_log=$out/check.log       # gpu_bench --check
bench_log=$out/bench.log       # gpu_bench
mutations_log=$out/mutations.log
build_log=$out/build.log       # only when the prebuilt binaries had to be rebuilt
summary=$out/summary.txt
outputs=("$log" "$tests_log" "$tests_xml" "$check_log" "$bench_log" "$mutations_log" "$build_log"
         "$summary")
: >"$log"
: >"$summary"

say() { echo "[gpu_check +$(($(date +%s) - started))s] $*" | tee -a "$log"; }
left() { echo $((deadline - $(date +%s))); }
results=()
result() { # step verdict detail
  results+=("$(printf '%-10s %-8s %s' "$1" "$2" "$3")")
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$summary"
}
# Runs "$@" for at most `limit` seconds, and never past the deadline minus `reserve` seconds.
# Returns 124 when there is no time to start it.
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
  local written
  written=$(find "$out" -maxdepth 1 -type f | wc -l)
  if ((written > 8)); then result outputs FAILED "$written files in $out; 8 come back"; fi
  echo
  [[ -f $bench_log ]] && sed -n '/== summary/,/== bulkbloom bench/p' "$bench_log"
  [[ -f $bench_log ]] && sed -n '/^GPU section\|^GPU, keys in device memory/,$p' "$bench_log"
  [[ -f $check_log ]] && grep -E '^(check|==)' "$check_log"
  echo
  printf '%s\n' "${results[@]}"
  local failed=0
  for r in "${results[@]}"; do [[ $r == *" FAILED "* ]] && failed=1; done
  exit $failed
}

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
{
  echo "machine: $(nproc) cores, $(uname -r), $(grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1
  command -v compute-sanitizer || echo "compute-sanitizer: not found"
  head -1 "$prepared/manifest.txt" 2>/dev/null || echo "no $prepared/manifest.txt"
} >>"$log" 2>&1
cat "$log"
if [[ $dry_run == yes ]]; then
  echo "outputs (at most 8, in $out):"
  printf '  %s\n' "${outputs[@]##*/}"
fi
if ((${#outputs[@]} > 8)); then result outputs FAILED "${#outputs[@]} outputs planned; 8 come back"; fi

# The prebuilt binaries, with the shared libraries copied beside them.
tests_bin=$prepared/bin/bulkbloom_cuda_tests
bench_bin=$prepared/bin/bulkbloom_gpu_bench
cli_bin=$prepared/bin/bulkbloom
export LD_LIBRARY_PATH="$prepared/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
starts() {
  "$tests_bin" --gtest_list_tests >/dev/null 2>&1 && [[ -x $bench_bin ]] &&
    "$cli_bin" --version >/dev/null 2>&1
}
# `bulkbloom bench` with its GPU section, its output appended to bench.log; the report's folder
# stays behind (8 files come back). Arguments: bounded's limit and reserve, then the CPU sweep's
# options (the section follows the sweep).
cli_bench() {
  local report_dir status limit=$1 reserve=$2
  shift 2
  report_dir=$(mktemp -d)
  echo "== bulkbloom bench (its GPU section last)" >>"$bench_log"
  bounded "$limit" "$reserve" "$cli_bin" bench --quick "$@" --gpu-sizes 32M,1G \
    --report "$report_dir" >>"$bench_log" 2>&1
  status=$?
  rm -rf "$report_dir"
  return $status
}
# Binaries prepared from another tree would check code that is not this one's.
built_from=$(sed -n 's/^source: //p' "$prepared/manifest.txt" 2>/dev/null)
this_tree=$(bench/gpu_source_fingerprint.sh)
if [[ -d $prepared && $built_from != "$this_tree" ]]; then
  result binaries FAILED "$prepared was built from sources ${built_from:-not recorded}, this tree's are $this_tree: run bench/prepare_gpu_check.sh again"
  finish
elif starts; then
  result binaries ok "prebuilt in $prepared from this tree's sources ($this_tree)"
elif [[ $dry_run == yes ]]; then
  result binaries FAILED "$tests_bin does not start here (run bench/prepare_gpu_check.sh)"
  finish
else
  # Rebuild on this machine: costs minutes, so only when the prebuilt ones cannot run.
  say "the prebuilt binaries do not start: rebuilding here"
  "$tests_bin" --gtest_list_tests 2>&1 | head -3 >>"$log"
  build_dir=build/gpu-check-device
  configure_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBULKBLOOM_CUDA=ON
                  -DCMAKE_CUDA_ARCHITECTURES=native -DBULKBLOOM_BUILD_CLI=ON
                  -DBULKBLOOM_BUILD_EXAMPLES=OFF -DBULKBLOOM_INSTALL=OFF -DBULKBLOOM_FLINK=OFF)
  deps_dir=${GPU_CHECK_DEPS:-.deps/gpu}
  if compgen -G "$deps_dir/*.deb" >/dev/null; then
    prefix=$(mkdir -p "$build_dir-deps" && cd "$build_dir-deps" && pwd)
    for deb in "$deps_dir"/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    libdir=$prefix/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH="$libdir:$LD_LIBRARY_PATH"
    configure_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -Dhwy_DIR="$libdir/cmake/hwy"
                     -DGTest_DIR="$libdir/cmake/GTest" -Dbenchmark_DIR="$libdir/cmake/benchmark"
                     -DCMAKE_INCLUDE_PATH="$prefix/usr/include")
  fi
  if bounded 240 120 cmake -S . -B "$build_dir" "${configure_args[@]}" >"$build_log" 2>&1 &&
    bounded 240 120 cmake --build "$build_dir" -j "$(nproc)" --target bulkbloom_cuda_tests \
      bulkbloom_gpu_bench bulkbloom_cli >>"$build_log" 2>&1; then
    tests_bin=$build_dir/tests/bulkbloom_cuda_tests
    bench_bin=$build_dir/bench/gpu/bulkbloom_gpu_bench
    cli_bin=$build_dir/bulkbloom
    result binaries ok "rebuilt here in $build_dir (the prebuilt ones did not start)"
  else
    tail -20 "$build_log"
    result binaries FAILED "the prebuilt binaries do not start and the rebuild failed (build.log)"
    finish
  fi
fi

if [[ $dry_run == yes ]]; then
  if bench/gpu_mutations.sh --dry-run >"$mutations_log" 2>&1; then
    result mutations ok "every edit applies"
  else
    result mutations FAILED "$(grep -m1 'did not apply' "$mutations_log")"
  fi
  if [[ -f $prepared/mutants/list.txt ]]; then
    while IFS='|' read -r index name _; do
      "$prepared/mutants/$index.bin" --gtest_list_tests >/dev/null 2>&1 ||
        result mutants FAILED "mutant $index ($name) does not start"
    done <"$prepared/mutants/list.txt"
  fi
  # The step as the real run takes it, here without a device: the section must say why.
  if cli_bench 60 0 --sizes 16K --repeat 1 --keys 1024 && grep -q '^GPU section: not measured: ' "$bench_log"; then
    result cli-bench ok "without a device: $(grep -m1 '^GPU section: not measured: ' "$bench_log" |
      cut -c28-)"
  else
    result cli-bench FAILED "bulkbloom bench did not say why its GPU section is absent (bench.log)"
  fi
  for step in probe gpu-tests check benchmark memcheck; do result "$step" SKIPPED "dry run"; done
  finish
fi

say "probe"
if ! nvidia-smi -L >>"$log" 2>&1; then
  result probe FAILED "nvidia-smi finds no GPU: nothing was measured"
  finish
fi
if ! bounded 60 0 "$bench_bin" --probe >>"$log" 2>&1; then
  result probe FAILED "$(tail -1 "$log")"
  finish
fi
result probe ok "$(grep -m1 '^device:' "$log" | cut -c9-)"

say "GPU tests"
# The no-device test skips wherever a device is; every other skip for want of a device fails.
if time_for gpu-tests 200; then
  BULKBLOOM_REQUIRE_GPU=1 bounded 150 200 "$tests_bin" \
    --gtest_filter='-CudaBackend.WithoutADevice*' --gtest_output="xml:$tests_xml" \
    >"$tests_log" 2>&1
  status=$?
  passed=$(grep -Eo '\[  PASSED  \] [0-9]+' "$tests_log" | grep -Eo '[0-9]+$')
  no_device=$(grep -c 'no CUDA device' "$tests_xml" 2>/dev/null)
  skipped=$(grep -c 'result="skipped"' "$tests_xml" 2>/dev/null)
  if ((status == 0)) && ((${passed:-0} > 0)) && ((no_device == 0)); then
    result gpu-tests ok "${passed} passed, ${skipped:-0} skipped for a stated reason (gpu_tests.xml)"
  else
    result gpu-tests FAILED "exit $status, ${passed:-0} passed, ${no_device:-?} without a device; $(grep -m2 '\[  FAILED  \]' "$tests_log" | tr '\n' ' ')"
  fi
fi

say "check against the CPU"
if time_for check 150; then
  # Twelve filters up to 8 GiB, each built on the CPU too: 11 of them took 120 s on a 16-core H200
  # host (2026-12-04), so the bound leaves room for the twelfth and for a slower host.
  if bounded 200 150 "$bench_bin" --check >"$check_log" 2>&1; then
    result check ok "$(grep -m1 '^== check' "$check_log" | cut -c10-)"
  else
    result check FAILED "exit $? ($(grep -m1 -E '^== check|differ' "$check_log"))"
  fi
fi

say "benchmark"
if time_for benchmark 90; then
  if bounded 150 90 "$bench_bin" >"$bench_log" 2>&1; then
    result benchmark ok "table below (bench.log)"
  else
    result benchmark FAILED "exit $? (bench.log: $(tail -1 "$bench_log"))"
  fi
fi

say "bulkbloom bench's GPU section"
if time_for cli-bench 40; then
  cli_bench 90 40 --sizes 4M --repeat 3
  status=$?
  if ((status == 0)) && grep -q '^GPU, keys in device memory' "$bench_log" &&
    ! grep -qE '^GPU section: |NOT a GPU' "$bench_log"; then
    result cli-bench ok "$(grep -c 'cuda/.*%$' "$bench_log") device-resident rows (bench.log)"
  else
    result cli-bench FAILED "exit $status, no GPU figures: $(grep -m1 -E '^GPU section: |NOT a GPU|^bulkbloom' "$bench_log")"
  fi
fi

# Out-of-bounds and misaligned accesses on a few small GPU tests (compute-sanitizer slows kernels
# many times over); appended to the GPU tests' log.
sanitized='*ContainsGivesTheOracleFlags/sb512:*UserKernels*/sb512x16:*InOneBlock*/sb256x4:*TwoStreams*/sb512'
say "compute-sanitizer memcheck"
if ! command -v compute-sanitizer >/dev/null; then
  result memcheck SKIPPED "compute-sanitizer not found"
elif time_for memcheck 40; then
  echo "== compute-sanitizer memcheck: $sanitized" >>"$tests_log"
  if BULKBLOOM_REQUIRE_GPU=1 bounded 60 40 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$tests_bin" --gtest_brief=1 --gtest_filter="$sanitized" >>"$tests_log" 2>&1 &&
    (($(tail -5 "$tests_log" | grep -Eo '\[  PASSED  \] [0-9]+' | grep -Eo '[0-9]+$' || echo 0) > 0)); then
    result memcheck ok "$(tail -1 "$tests_log")"
  else
    result memcheck FAILED "$(tail -1 "$tests_log")"
  fi
fi

say "mutants: can the GPU tests fail?"
if [[ ! -f $prepared/mutants/list.txt ]]; then
  result mutations SKIPPED "no prebuilt mutants in $prepared"
elif ! grep -qP '^gpu-tests\tok' "$summary"; then
  # The unmutated tests must pass first, or a mutant's failure shows nothing.
  result mutations SKIPPED "the GPU tests did not pass unmutated"
elif time_for mutations 0; then
  if bounded 150 0 bench/gpu_mutations.sh --run "$prepared/mutants" "$mutations_log" \
    >>"$log" 2>&1; then
    result mutations ok "$(grep -c caught "$log") of $(wc -l <"$prepared/mutants/list.txt") caught"
  else
    result mutations FAILED "$(grep -E 'SURVIVED|DID NOT RUN' "$log" | head -2 | tr '\n' ' ')"
  fi
fi
finish
