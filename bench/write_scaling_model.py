#!/usr/bin/env python3
"""Predicted write scaling to many cores, from the per-key costs `write_plans` measures (#37).

    bench/write_scaling_model.py WRITE_PLANS_OUTPUT... [--threads 1,2,4,...,64]
        [--socket-lines-per-s 2.0e9] [--batch 65536]

Each input is the markdown table `bench/write_plans` prints (several files: their medians are
pooled as a median of medians). From it, per filter size and per operation:

  c1  CPU ns a key of the one-thread kernel ("1T", "insert_if_absent 1T");
  wr  CPU ns a key of the routed plan's two tasks run on one thread ("2 tasks on 1T, routed"):
      each key is hashed and listed once by its slice's task and written once by its block's
      owner, so this work per key does not grow with the thread count, but for merging
      insert_if_absent's flags, whose cost a key grows with the tasks up to 8 (on AVX2 from 0.35
      ns at 2 to 1.28 at 8, then 1.4-1.7 whatever the count), not counted here;
  wb  the same for block ranges: every task hashes every key and writes its own blocks' keys, so
      its work is c1 + (T - 1) h with h = wb - c1 the hashing a task repeats;
  j   wall ns of one pool run() of two tasks (the "four empty run()s" row, per call).

Predicted wall time of one call of B keys (--batch; write_plans' calls are 65,536) on T
threads, memory not a limit:
  routed        wr B / T + r j (T / 2)     (r run()s a call: one a chunk of 65,536 keys and one
                                            more, and for insert_if_absent another, which merges
                                            the last chunk's flags; a run()'s cost taken as linear
                                            in T, the conservative end: the pool wakes each worker)
  block ranges  (c1 + (T - 1) h) B / T + j (T / 2)
and the keys/s of the faster plan (the engine times the two and keeps the faster, DESIGN §8),
capped by the memory system: every key is one random 64-byte line read-modify-write, so keys/s
<= the socket's random line rate. One thread is not capped (its kernel already runs at this
host's random-line probe at 32 and 512 MiB: RESULTS.md). The socket's rate is a parameter; the
default assumes a 64-core server socket with 12 DDR5-4800 channels (460.8 GB/s peak, 128 bytes
moved per random line RMW, ~55 % of peak reached by random lines: ~2.0e9 lines/s), and applies
it to a 32 MiB filter too, which on such a socket is written from every core complex and so
lives in no one L3. The model's two-thread prediction is printed beside the measured two-thread
wall speed-up of the same input, to judge the model where it can be checked.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict

WRITE_PLANS_BATCH = 65536
ROUTED_CHUNK_KEYS = 65536  # RoutedScratch::kChunkKeys

ROW = re.compile(r"^\| (\S+) \| ([^|]+?) \| ([\d.]+) \([^|]*\) \| ([\d.]+)× \([^|]*\) \| ([\d.]+) \(")


def read_tables(paths: list[str]) -> dict[tuple[str, str], dict[str, float]]:
    """(size, plan) -> {"wall_gain": ..., "cpu": ...}, medians pooled over the files."""
    pooled: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = ROW.match(line)
                if not m:
                    continue
                size, plan = m.group(1), m.group(2).strip()
                pooled[(size, plan)]["wall"].append(float(m.group(3)))
                pooled[(size, plan)]["wall_gain"].append(float(m.group(4)))
                pooled[(size, plan)]["cpu"].append(float(m.group(5)))
    if not pooled:
        sys.exit("no write_plans table rows found in " + ", ".join(paths))
    return {k: {f: statistics.median(v) for f, v in d.items()} for k, d in pooled.items()}


def routed_runs(op: str, batch: int) -> int:
    """The pool run()s of one routed call of `batch` keys."""
    chunks = -(-batch // ROUTED_CHUNK_KEYS)
    return chunks + (2 if op == "insert_if_absent" else 1)


def predict(c1: float, wr: float, wb: float, j: float, threads: int, batch: int,
            runs: int) -> dict[str, float]:
    """ns a key of each plan on `threads` threads, the memory not being a limit; `runs` is the
    routed call's run()s."""
    join = j * threads / 2 / batch  # ns a key of one run() at this width
    h = max(wb - c1, 0.0)
    routed = wr / threads + runs * join if threads > 1 else c1
    ranges = (c1 + (threads - 1) * h) / threads + join if threads > 1 else c1
    return {"routed": routed, "block ranges": ranges}


def empty_runs(rows: dict, size: str) -> dict:
    """The "four empty run()s" row, under its name before and after the in-place plan went."""
    for name in ("2T four empty run()s", "2T four empty run()s (in place's joins)"):
        if (size, name) in rows:
            return rows[(size, name)]
    raise KeyError((size, "2T four empty run()s"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", help="write_plans outputs")
    parser.add_argument("--threads", default="1,2,4,8,16,32,64")
    parser.add_argument("--socket-lines-per-s", type=float, default=2.0e9)
    parser.add_argument("--batch", type=int, default=WRITE_PLANS_BATCH, help="keys a call")
    args = parser.parse_args()
    rows = read_tables(args.tables)
    threads = [int(t) for t in args.threads.split(",")]
    sizes = sorted({size for size, _ in rows}, key=lambda s: float(re.sub(r"\D", "", s) or 0))
    for size in sizes:
        def cpu(plan: str) -> float:
            return rows[(size, plan)]["cpu"]

        def gain(plan: str) -> float:
            return rows[(size, plan)]["wall_gain"]

        try:
            j = empty_runs(rows, size)["wall"] * WRITE_PLANS_BATCH / 4
            ops = {
                "insert": (cpu("1T"), cpu("2 tasks on 1T, routed"),
                           cpu("2 tasks on 1T, block ranges"),
                           max(gain("2T routed"), gain("2T block ranges"))),
                "insert_if_absent": (cpu("insert_if_absent 1T"),
                                     cpu("insert_if_absent 2 tasks on 1T, routed"),
                                     cpu("insert_if_absent 2 tasks on 1T, block ranges"),
                                     max(gain("insert_if_absent 2T routed"),
                                         gain("insert_if_absent 2T block ranges"))),
            }
        except KeyError as missing:
            print(f"{size}: no row {missing} (the partitioned plan's sizes are not modelled)")
            continue
        print(f"\n{size}: one run() of two tasks {j / 1000:.1f} µs, calls of {args.batch} keys")
        print("| operation | c1 | routed work | block ranges work | "
              + " | ".join(f"{t}T" for t in threads) + " |")
        print("|---|---|---|---|" + "---|" * len(threads))
        for op, (c1, wr, wb, measured_2t) in ops.items():
            cells = []
            for t in threads:
                ns = min(predict(c1, wr, wb, j, t, args.batch,
                                 routed_runs(op, args.batch)).values())
                keys_per_s = min(1e9 / ns, args.socket_lines_per_s) if t > 1 else 1e9 / c1
                speedup = keys_per_s * c1 / 1e9
                cells.append(f"{speedup:.1f}× ({keys_per_s / 1e9:.2f} G/s)")
            print(f"| {op} | {c1:.2f} | {wr:.2f} | {wb:.2f} | " + " | ".join(cells) + " |")
            two = min(predict(c1, wr, wb, j, 2, WRITE_PLANS_BATCH,
                              routed_runs(op, WRITE_PLANS_BATCH)).values())
            print(f"|   measured 2T wall speed-up: {measured_2t:.2f}×; the model's, compute only: "
                  f"{c1 / two:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
