#!/usr/bin/env bash
# bench/gpu_check.sh rehearsed on a machine without a GPU, so that a defect of the device check
# shows here and not in scarce device time (ctest runs this as gpu_check_rehearsal):
#   1. a prepared folder from BUILD_DIR's binaries (bench/prepare_gpu_check.sh --from, no mutants)
#   2. the dry run passes: the prebuilt binaries start, the mutations apply, `bulkbloom bench`
#      says why its GPU section is absent, and it writes at most the 8 files the device tool
#      brings back; with the manifest naming other sources, it fails at once
#   3. the real run without a device fails, at once (under 60 s) and at the probe: no false green
#   4. the GPU tests with BULKBLOOM_REQUIRE_GPU=1 fail without a device instead of skipping
# Steps 3 and 4 are left out where a GPU answers (the real run is the check there).
#
# usage: bench/gpu_check_rehearsal.sh BUILD_DIR WORK_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/gpu_check_rehearsal.sh BUILD_DIR WORK_DIR} work=${2:?}
rm -rf "$work"
mkdir -p "$work"
failures=0
fail() {
  echo "REHEARSAL FAILED: $*"
  failures=$((failures + 1))
}

echo "== 1. prepare from $build"
bench/prepare_gpu_check.sh --no-mutants --from "$build" "$work/prepared" >"$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log"; fail "prepare_gpu_check.sh --from $build"; exit 1; }
grep '^== ' "$work/prepare.log"

echo "== 2. dry run"
if bench/gpu_check.sh --dry-run "$work/dry" "$work/prepared"; then
  echo "dry run: passed"
else
  fail "the dry run failed"
fi
grep -qP '^cli-bench\tok\twithout a device: .+' "$work/dry/summary.txt" ||
  fail "the dry run's bulkbloom bench did not say why its GPU section is absent"
written=$(find "$work/dry" -type f | wc -l)
((written <= 8)) || fail "the dry run wrote $written files; the device tool brings back 8"

echo "== 2b. binaries prepared from other sources"
cp -r "$work/prepared" "$work/stale"
sed -i 's/^source: .*/source: 0000000000000000/' "$work/stale/manifest.txt"
if bench/gpu_check.sh --dry-run "$work/stale-dry" "$work/stale" >"$work/stale.out" 2>&1; then
  fail "the dry run passed with binaries prepared from other sources"
fi
grep -qE '^binaries +FAILED .*built from sources 0000000000000000' "$work/stale.out" ||
  fail "the stale binaries were not named as such: $(grep -m1 '^binaries' "$work/stale.out")"
rm -rf "$work/stale"

if nvidia-smi -L >/dev/null 2>&1; then
  echo "== 3, 4: a GPU answers here; the real run is the check"
else
  echo "== 3. the real run without a device"
  started=$(date +%s)
  bench/gpu_check.sh "$work/real" "$work/prepared" >"$work/real.out" 2>&1
  status=$?
  elapsed=$(($(date +%s) - started))
  tail -8 "$work/real.out"
  ((status != 0)) || fail "the real run passed without a device (false green)"
  ((elapsed < 60)) || fail "the real run took ${elapsed} s to fail without a device"
  grep -qE '^probe +FAILED' "$work/real.out" || fail "the real run did not fail at its probe"

  echo "== 4. BULKBLOOM_REQUIRE_GPU=1 without a device"
  if BULKBLOOM_REQUIRE_GPU=1 "$work/prepared/bin/bulkbloom_cuda_tests" \
    --gtest_filter='Shapes/Cuda.ContainsGivesTheOracleFlags/*' >"$work/require.out" 2>&1; then
    fail "the GPU tests passed without a device under BULKBLOOM_REQUIRE_GPU=1"
  fi
  grep -q 'BULKBLOOM_REQUIRE_GPU=1' "$work/require.out" ||
    fail "the failure does not say why (BULKBLOOM_REQUIRE_GPU=1)"
  tail -2 "$work/require.out"
fi

((failures == 0)) && echo "rehearsal: every step as expected"
exit $((failures > 0))
