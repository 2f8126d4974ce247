#!/usr/bin/env bash
# Shows that the GPU tests can fail: builds the GPU tests from a copy of the sources with one
# deliberate bug at a time and expects the named tests to fail. Called by gpu_check.sh (needs a
# GPU: without one every GPU test skips and every mutation survives). With --dry-run it only
# checks that every edit still applies to the sources (gpu_check.sh --rehearse).
#
# usage: bench/gpu_mutations.sh [--dry-run] WORK_DIR LOG_FILE [cmake configure arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
dry_run=no
if [[ ${1:-} == --dry-run ]]; then
  dry_run=yes
  shift
fi
work=$1 log=$2
shift 2
src=$work/src-copy build=$work/build
rm -rf "$src" && mkdir -p "$src"
cp -rp CMakeLists.txt CMakePresets.json cmake include src tests "$src"/
if [[ $dry_run == no ]]; then
  # Only the library and the GPU tests: no CLI, benchmarks or examples to configure or build.
  # Only this machine's GPU architecture: each mutation recompiles the CUDA sources.
  cmake -S "$src" -B "$build" "$@" -DBULKBLOOM_BUILD_CLI=OFF -DBULKBLOOM_BUILD_BENCH=OFF \
    -DBULKBLOOM_BUILD_EXAMPLES=OFF -DBULKBLOOM_INSTALL=OFF -DCMAKE_CUDA_ARCHITECTURES=native \
    >>"$log" 2>&1
fi
survived=0
mutated_files=(src/cuda/kernels.cuh src/cuda/exact_insert_if_absent.hpp src/cuda/device_engine.cpp)
# name | file | sed expression | tests expected to fail (quickest rebuilds first)
mutations=(
  "last chunk's flags dropped|src/cuda/device_engine.cpp|s/^ *finish(1);$//|*StreamsBatchesLargerThanOneChunk*"
  "kernel does not wait for its keys|src/cuda/device_engine.cpp|s/rt_->wait(stream_, slot.copied);//|*StreamsBatchesLargerThanOneChunk*"
  "copies after the first also new|src/cuda/exact_insert_if_absent.hpp|s/const bool fresh = !covers<G>(now, pattern);/const bool fresh = !covers<G>(before, pattern);/|*InsertIfAbsent*"
  "repeats settled as new|src/cuda/exact_insert_if_absent.hpp|s/if (repeat) is_new\[i\] = 0;/if (repeat) is_new[i] = 1;/|*InsertIfAbsent*"
  "one bit moved in the pattern|src/cuda/kernels.cuh|s/std::memcpy(&out, &pattern, sizeof(out));/&\n  out.lane[0] <<= 1;/|*InsertGivesTheOracleBytes*"
  "contains always true|src/cuda/kernels.cuh|s/out\[i\] = covers<G>.*/out[i] = 1;/|*ContainsGivesTheOracleFlags*"
)
for m in "${mutations[@]}"; do
  IFS='|' read -r name file expression tests <<<"$m"
  # Restore every mutated file with a fresh time stamp, so the build recompiles it.
  for f in "${mutated_files[@]}"; do
    cp -p "$f" "$src/$f"
    touch "$src/$f"
  done
  sed -i "$expression" "$src/$file"
  if cmp -s "$file" "$src/$file"; then
    echo "mutation '$name': the edit did not apply to $file"
    survived=$((survived + 1))
    continue
  fi
  if [[ $dry_run == yes ]]; then
    echo "mutation '$name': applies"
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
