#!/usr/bin/env bash
# Shows that the GPU tests can fail: the GPU tests built with one deliberate bug at a time must
# fail the tests named for it. The mutants are built where nvcc is (bench/prepare_gpu_check.sh
# calls --build) and run on the GPU machine (bench/gpu_check.sh calls --run): without a device
# every GPU test skips and every mutant would survive, so --run sets BULKBLOOM_REQUIRE_GPU=1.
#
# usage: bench/gpu_mutations.sh --dry-run
#          checks that every edit still applies to the sources
#        bench/gpu_mutations.sh --build WORK_DIR MUTANTS_DIR [cmake configure arguments...]
#          builds bulkbloom_cuda_tests from a copy of the sources in WORK_DIR once, then once per
#          mutation (only what the edit touches is rebuilt), into MUTANTS_DIR/<n>.bin with
#          MUTANTS_DIR/list.txt naming each mutant and the tests expected to fail
#        bench/gpu_mutations.sh --run MUTANTS_DIR LOG_FILE
#          runs each mutant's tests; exits 1 if one survives (passes) or cannot start
set -euo pipefail
cd "$(dirname "$0")/.."

# name | file | sed expression | tests expected to fail
mutations=(
  "last chunk's flags dropped|src/cuda/device_engine.cpp|s/^ *finish(1);$//|*StreamsBatchesLargerThanOneChunk*"
  "kernel does not wait for its keys|src/cuda/device_engine.cpp|s/rt_->wait(stream_, slot.copied);//|*StreamsBatchesLargerThanOneChunk*"
  "a run's prefix from earlier tiles dropped|src/cuda/exact_insert_if_absent.hpp|s/return reinterpret_cast<const typename G::Pattern\*>(scratch.tile_carries)\[t - 1\];/return typename G::Pattern{};/|*InsertIfAbsent*"
  "radix sort short of the top block-index bit|src/cuda/radix_sort_by_block.cuh|s/const int end_bit = block_index_bits(num_blocks);/const int end_bit = block_index_bits(num_blocks) - 1;/|*InsertIfAbsent*"
  "one bit moved in the pattern|src/cuda/kernels.cuh|s/std::memcpy(&out, &pattern, sizeof(out));/&\n  out.lane[0] <<= 1;/|*InsertGivesTheOracleBytes*"
  "contains always true|src/cuda/kernels.cuh|s/out\[i\] = covers<G>.*/out[i] = 1;/|*ContainsGivesTheOracleFlags*"
)

# Applies mutation `$1` (an entry above) to the copy under `$2`; fails if the edit changes nothing.
apply() {
  local name file expression tests
  IFS='|' read -r name file expression tests <<<"$1"
  sed -i "$expression" "$2/$file"
  if cmp -s "$file" "$2/$file"; then
    echo "mutation '$name': the edit did not apply to $file" >&2
    return 1
  fi
}

mode=${1:-}
case $mode in
  --dry-run)
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    failed=0
    for m in "${mutations[@]}"; do
      IFS='|' read -r name file _ _ <<<"$m"
      mkdir -p "$scratch/$(dirname "$file")"
      cp "$file" "$scratch/$file"
      if apply "$m" "$scratch"; then echo "mutation '$name': applies"; else failed=1; fi
    done
    exit $failed
    ;;
  --build)
    work=$2 out=$3
    shift 3
    src=$work/src-copy
    rm -rf "$src" "$out" && mkdir -p "$src" "$out"
    cp -rp CMakeLists.txt CMakePresets.json cmake include src tests bench "$src"/
    # The build at the same depth below the copy as build/gpu-check below the tree, so that
    # ccache (with CCACHE_BASEDIR above both) finds the unmutated objects compiled already.
    build=$src/build/gpu-check
    cmake -S "$src" -B "$build" "$@" >"$work/configure.log"
    : >"$out/list.txt"
    index=0
    previous=""
    for m in "${mutations[@]}"; do
      IFS='|' read -r name file _ tests <<<"$m"
      # Only the file the previous mutant changed is restored (with a fresh time stamp, so that
      # ninja rebuilds what includes it); the rest of the build stays as it is.
      if [[ -n $previous ]]; then
        cp "$previous" "$src/$previous"
        touch "$src/$previous"
      fi
      apply "$m" "$src"
      previous=$file
      index=$((index + 1))
      echo "== mutant $index: $name (rebuilding what includes $file)"
      cmake --build "$build" -j 2 --target bulkbloom_cuda_tests >>"$work/build.log" 2>&1 || {
        tail -20 "$work/build.log"
        exit 1
      }
      cp "$build/tests/bulkbloom_cuda_tests" "$out/$index.bin"
      printf '%s|%s|%s\n' "$index" "$name" "$tests" >>"$out/list.txt"
    done
    ;;
  --run)
    dir=$2 log=$3
    survived=0
    # Each mutant's own output, outside LOG's folder: a run stopped part-way (gpu_check.sh bounds
    # this step) must not leave a file there beside the ones the device tool brings back.
    one=$(mktemp)
    trap 'rm -f "$one"' EXIT
    while IFS='|' read -r index name tests; do
      echo "== mutant $index: $name; expected to fail: $tests" >>"$log"
      if BULKBLOOM_REQUIRE_GPU=1 timeout -k 5 60 "$dir/$index.bin" --gtest_filter="$tests" \
        --gtest_brief=1 >"$one" 2>&1; then
        echo "mutation '$name': SURVIVED ($tests passed)"
        survived=$((survived + 1))
      elif grep -q '\[  FAILED  \]' "$one"; then
        echo "mutation '$name': caught by $tests"
      else
        # A mutant that did not run its tests shows nothing about them.
        echo "mutation '$name': DID NOT RUN (exit without a failed test; see the log)"
        survived=$((survived + 1))
      fi
      cat "$one" >>"$log"
    done <"$dir/list.txt"
    exit $((survived > 0))
    ;;
  *)
    echo "usage: bench/gpu_mutations.sh --dry-run | --build WORK_DIR MUTANTS_DIR [cmake args...] | --run MUTANTS_DIR LOG_FILE" >&2
    exit 2
    ;;
esac
