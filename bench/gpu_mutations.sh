#!/usr/bin/env bash
# Shows that the GPU tests can fail: builds the GPU tests from a copy of the sources with one
# deliberate bug at a time and expects the named tests to fail. Called by gpu_check.sh (needs a
# GPU; without one every GPU test skips and every mutation survives).
#
# usage: bench/gpu_mutations.sh WORK_DIR LOG_FILE [cmake configure arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$1 log=$2
shift 2
src=$work/src-copy build=$work/build
rm -rf "$src" && mkdir -p "$src"
cp -rp CMakeLists.txt CMakePresets.json cmake include src tests examples "$src"/
mkdir -p "$src/bench"
cmake -S "$src" -B "$build" "$@" -DBULKBLOOM_BUILD_BENCH=OFF -DBULKBLOOM_BUILD_EXAMPLES=OFF \
  >"$log" 2>&1
survived=0
# name | file | sed expression | tests expected to fail
mutations=(
  "no lock in insert_if_absent|src/cuda/kernels.cuh|s/while (word.fetch_or(bit, ::cuda::memory_order_acquire) \& bit) __nanosleep(64);//|*ZeroLeaks*"
  "one bit moved in the pattern|src/cuda/kernels.cuh|s/std::memcpy(&out, &pattern, sizeof(out));/&\n  out.lane[0] <<= 1;/|*InsertGivesTheOracleBytes*"
  "last copy in a warp wins|src/cuda/kernels.cuh|s/return wants_lock \&\& (same \& lower) != 0;/return wants_lock \&\& (same \& ~lower \& ~(lower + 1)) != 0;/|*CopiesWithinOneWarp*"
  "contains always true|src/cuda/kernels.cuh|s/out\[i\] = covers<G>.*/out[i] = 1;/|*ContainsGivesTheOracleFlags*"
  "last chunk's flags dropped|src/cuda/cuda_engine.cu|s/^    finish(1);$//|*StreamsBatchesLargerThanOneChunk*"
)
for m in "${mutations[@]}"; do
  IFS='|' read -r name file expression tests <<<"$m"
  # Restore every mutated file with a fresh time stamp, so the build recompiles it.
  cp -p src/cuda/kernels.cuh "$src/src/cuda/kernels.cuh"
  cp -p src/cuda/cuda_engine.cu "$src/src/cuda/cuda_engine.cu"
  touch "$src/src/cuda/kernels.cuh" "$src/src/cuda/cuda_engine.cu"
  sed -i "$expression" "$src/$file"
  if cmp -s "$file" "$src/$file"; then
    echo "mutation '$name': the edit did not apply to $file"
    survived=$((survived + 1))
    continue
  fi
  echo "== mutation: $name" >>"$log"
  cmake --build "$build" --target bulkbloom_cuda_tests >>"$log" 2>&1
  if "$build/tests/bulkbloom_cuda_tests" --gtest_filter="$tests" --gtest_brief=1 >>"$log" 2>&1; then
    echo "mutation '$name': SURVIVED ($tests passed)"
    survived=$((survived + 1))
  else
    echo "mutation '$name': caught by $tests"
  fi
done
exit $((survived > 0))
