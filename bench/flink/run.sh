#!/usr/bin/env bash
# Runs the Flink dedup benchmark (FlinkDedupBench): for each size, REPS rounds, each round every
# mode once in turn (so the ratios of a round come from the same minutes of a shared machine), one
# JVM at a time; then prints the medians and the ratios against ttl-rocksdb (summarize.py).
#
#   bench/flink/run.sh BUILD_DIR OUT_FILE [--sizes "1e6 1e7"] [--reps 3] [--modes "bloom ttl-rocksdb"]
#                                         [--heap 4g] [--shards S] [--capacity N]
#                                         [--checkpoint-intervals "0 2000"]
#
# BUILD_DIR is a CMake build with the Flink operator (cmake --build BUILD_DIR --target
# bulkbloom_flink_bench); OUT_FILE receives one line per run. A mode whose JVM fails (say, the
# hashmap backend out of heap) is recorded as failed, its stderr kept beside OUT_FILE, and the
# others go on. --capacity sizes every window for N records per window length (default: the
# stream's); each --checkpoint-intervals entry (ms, 0: none) runs every mode with periodic
# exactly-once checkpoints that often; such a run's stderr is kept beside OUT_FILE, for
# bench/flink/checkpoints.py (per checkpoint: bytes moved into keyed state against bytes uploaded).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if (($# < 2)); then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2
shift 2
sizes="1e6 1e7"
reps=3
modes="bloom ttl-hashmap ttl-rocksdb"
heap=4g
shards=0
capacity=
intervals=0
while (($#)); do
  case $1 in
    --sizes) sizes=$2 ;;
    --reps) reps=$2 ;;
    --modes) modes=$2 ;;
    --heap) heap=$2 ;;
    --shards) shards=$2 ;;
    --capacity) capacity=$2 ;;
    --checkpoint-intervals) intervals=$2 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
flink_lib=$(grep -s '^BULKBLOOM_FLINK_HOME:' "$build/CMakeCache.txt" | cut -d= -f2-)/lib
jars=("$build/bench/flink/bulkbloom-flink-bench.jar" "$build/flink/bulkbloom-flink.jar"
      "$flink_lib/flink-dist-2.3.0.jar")
for jar in "${jars[@]}"; do
  [[ -f $jar ]] || { echo "run.sh: missing $jar; build the target bulkbloom_flink_bench" >&2; exit 1; }
done
classpath=$(IFS=:; echo "${jars[*]}"):$flink_lib/*
work=$(mktemp -d "${TMPDIR:-/tmp}/flinkbench.XXXXXX")
trap 'rm -rf "$work"' EXIT
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(uname -n), $(nproc) cores, heap $heap; sizes $sizes; reps $reps"
  echo "# git $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+dirty')"
} >"$out"
for size in $sizes; do
  for ((rep = 1; rep <= reps; ++rep)); do
    for interval in $intervals; do
      for mode in $modes; do
        run=$mode-$size-$rep-$interval
        extra=()
        [[ -z $capacity ]] || extra+=(--capacity "$capacity")
        [[ $interval == 0 ]] || extra+=(--checkpoint-interval-ms "$interval")
        echo "run.sh: $mode, $size records, checkpoints every ${interval} ms, round $rep" >&2
        if line=$(java "-Xmx$heap" -XX:+UseG1GC --add-opens=java.base/java.lang=ALL-UNNAMED \
            --add-opens=java.base/java.util=ALL-UNNAMED \
            "-Dlog4j.configurationFile=$here/log4j2.properties" -cp "$classpath" \
            org.bulkbloom.flink.bench.FlinkDedupBench --mode "$mode" --records "$size" \
            --shards "$shards" "${extra[@]}" --work-dir "$work/$run" 2>"$work/stderr"); then
          echo "$line rep=$rep" | tee -a "$out"
          # Per checkpoint: what the dedup moved and what Flink uploaded (bench/flink/checkpoints.py).
          [[ $interval == 0 ]] || cp "$work/stderr" "$out.$run.stderr"
        else
          cp "$work/stderr" "$out.$run.stderr"
          echo "mode=$mode records=$(python3 -c "print(int(float('$size')))") rep=$rep checkpoint_interval_ms=$interval failed=$(
            grep -m1 -oE '(OutOfMemoryError|Exception)[^ ]*: .{0,80}' "$work/stderr" | tr ' =' '_:' || echo unknown)" |
            tee -a "$out"
        fi
        rm -rf "${work:?}/$run"
      done
    done
  done
done
python3 "$here/summarize.py" "$out"
