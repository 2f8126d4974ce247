#!/usr/bin/env python3
"""Per-checkpoint accounting of a FlinkDedupBench run with periodic checkpoints, from its stderr.

    bench/flink/checkpoints.py STDERR [RECORDS]

Pairs each checkpoint's DEBUG line of the dedup ("moved N bytes into keyed state ...: L of logs,
B of bases, M of manifests"; bench/flink/log4j2.properties enables it) with what Flink says the
checkpoint uploaded ("bench: checkpoint ID STATUS checkpointed_bytes=U state_bytes=S"), prints one
row each and the totals. A checkpoint whose upload is at least 90 % of the full state it refers to
is counted as a rewrite of the state (a RocksDB compaction into the level holding all of it).
With RECORDS (the run's), also the bytes uploaded per record.
"""
import re
import sys

MOVED = re.compile(
    r"checkpoint (\d+) moved (\d+) bytes into keyed state in \d+ ms: (\d+) of logs, (\d+) of"
    r" bases, (\d+) of manifests")
FLINK = re.compile(r"bench: checkpoint (\d+) (\w+) checkpointed_bytes=(-?\d+) state_bytes=(-?\d+)")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    records = None
    if len(sys.argv) == 3:
        try:
            records = float(sys.argv[2])
        except ValueError:
            sys.exit(f"checkpoints.py: RECORDS must be a number, got {sys.argv[2]}")
        if not records > 0:
            sys.exit(f"checkpoints.py: RECORDS must be positive, got {sys.argv[2]}")
    moved, flink = {}, {}
    try:
        f = open(sys.argv[1], encoding="utf-8", errors="replace")
    except OSError as e:
        sys.exit(f"checkpoints.py: cannot read {sys.argv[1]}: {e.strerror}")
    with f:
        for line in f:
            m = MOVED.search(line)
            if m:
                moved[int(m[1])] = tuple(int(x) for x in m.groups()[1:])
            m = FLINK.search(line)
            if m and m[2] == "COMPLETED":
                flink[int(m[1])] = (int(m[3]), int(m[4]))
    if not flink:
        sys.exit(f"checkpoints.py: no 'bench: checkpoint' lines in {sys.argv[1]}")
    if not moved:
        sys.exit(f"checkpoints.py: no 'moved N bytes' lines in {sys.argv[1]}; is the"
                 " org.bulkbloom.flink logger at DEBUG?")
    print("id moved logs bases manifests uploaded full_state rewrite")
    total = [0] * 6
    rewrites = rewrite_bytes = 0
    for cid in sorted(flink):
        up, state = flink[cid]
        mv = moved.get(cid, (0, 0, 0, 0))
        rewrite = up >= 0.9 * state and cid > 1
        rewrites += rewrite
        rewrite_bytes += up if rewrite else 0
        print(cid, *mv, up, state, "yes" if rewrite else "")
        for i, v in enumerate(mv + (up, state)):
            total[i] += v
    n = len(flink)
    print(f"checkpoints {n}: moved {total[0]} (logs {total[1]}, bases {total[2]}, manifests"
          f" {total[3]}), uploaded {total[4]} ({total[4] / max(total[0], 1):.2f}x moved),"
          f" {rewrites} uploads of >= 90 % of the state ({rewrite_bytes} bytes),"
          f" the others {total[4] - rewrite_bytes}")
    if records:
        print(f"per record: moved {total[0] / records:.2f} B, uploaded {total[4] / records:.2f} B,"
              f" uploaded without the rewrites {(total[4] - rewrite_bytes) / records:.2f} B")


if __name__ == "__main__":
    main()
