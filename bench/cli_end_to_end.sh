#!/usr/bin/env bash
# End-to-end CLI benchmark (issue 5, item 9): bulkbloom dedup beside `LC_ALL=C sort -u` on the
# same inputs, with wall time and peak memory from /usr/bin/time -v. Big files go to $WORK
# (default /tmp/bulkbloom-e2e) and are deleted at the end.
#
# usage: bench/cli_end_to_end.sh [u64|uuid|hex|all] [COUNT]
# BIN=path picks the binary; NULL_RUN=0 skips the runs that write to /dev/null, SORT_RUN=0 the
# sort -u runs.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/release/bulkbloom}
WORK=${WORK:-/tmp/bulkbloom-e2e}
what=${1:-all}
mkdir -p "$WORK"
cd "$WORK"

timed() {  # label, command...: prints wall seconds and peak RSS
  local label=$1
  shift
  /usr/bin/time -f "%e %M" -o time.txt "$@" 2> stderr.txt
  read -r wall rss < time.txt
  printf '%-44s wall %8.2f s  peak RSS %7.0f MiB\n' "$label" "$wall" "$((rss / 1024))"
  grep -E "records read|unique written|filter:|running on|throughput" stderr.txt | sed 's/^/    /' || true
}

disk_write() {  # sequential write bandwidth of $WORK's disk, 4 GiB with fdatasync
  dd if=/dev/zero of=dd.tmp bs=1M count=4096 conv=fdatasync 2>&1 | tail -1 | sed 's/^/disk write: /'
  rm -f dd.tmp
}

if [[ $what == u64 || $what == all ]]; then
  count=${2:-1000000000}
  timed "gen $count u64 keys, 10% repeats" "$BIN" gen --count "$count" --dup-fraction 0.1 -o keys.u64
  timed "bulkbloom dedup u64 -> file" "$BIN" dedup keys.u64 -o unique.u64
  [[ ${NULL_RUN:-1} == 1 ]] && timed "bulkbloom dedup u64 -> /dev/null" "$BIN" dedup keys.u64 -o /dev/null
  rm -f keys.u64 unique.u64
fi
if [[ $what == hex || $what == all ]]; then
  count=${2:-100000000}
  timed "gen $count hex keys, 10% repeats" "$BIN" gen --count "$count" --dup-fraction 0.1 -f hex -o keys.hex
  timed "bulkbloom dedup -f hex -> file" "$BIN" dedup -f hex keys.hex -o unique.hex
  [[ ${SORT_RUN:-1} == 1 ]] && timed "LC_ALL=C sort -u (hex lines) -> file" env LC_ALL=C sort -u keys.hex -o sorted.hex
  rm -f keys.hex unique.hex sorted.hex
fi
if [[ $what == uuid || $what == all ]]; then
  count=${2:-100000000}
  timed "gen $count UUID lines, 10% repeats" "$BIN" gen --count "$count" --dup-fraction 0.1 -f lines -o uuid.txt
  ls -l uuid.txt | awk '{printf "    %.2f GB of UUID lines\n", $5 / 1e9}'
  timed "bulkbloom dedup -f lines -> file" "$BIN" dedup -f lines uuid.txt -o unique.txt
  [[ ${NULL_RUN:-1} == 1 ]] && timed "bulkbloom dedup -f lines -> /dev/null" "$BIN" dedup -f lines uuid.txt -o /dev/null
  [[ ${SORT_RUN:-1} == 1 ]] && timed "LC_ALL=C sort -u (UUID lines) -> file" env LC_ALL=C sort -u uuid.txt -o sorted.txt
  rm -f uuid.txt unique.txt sorted.txt
fi
disk_write
rm -f time.txt stderr.txt
