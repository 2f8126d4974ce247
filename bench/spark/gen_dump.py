"""Writes a Parquet dump of events for the Spark dedup benchmark, deterministically from a seed.

Rows are (event_id int64, ts int64, payload string of 80 characters), about 100 bytes each, in
files part-00000.parquet, part-00001.parquet, ... of equal row counts; with `--key uuid` the
event_id is a 36-character UUID string instead (the one of the 128 bits n * M and n * M * M2). About `--repeats` of the
rows (10 % by default) repeat the event_id of an earlier row chosen uniformly among all earlier
first occurrences, so repeats are spread over the whole dump, rarely near their original. The
other rows are first occurrences: the n-th of them has event_id = n * M mod 2^63 (M odd, so no two
collide), a scrambled but exactly known set. `_dump.json` beside the files (a name Spark and Arrow
skip) records the row count,
the distinct event_ids (the rows dropDuplicates keeps) and the arguments.

    python bench/spark/gen_dump.py --rows 5M --out /tmp/dump-5M
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PAYLOAD_CHARS = 80
# An odd multiplier: n -> n * M mod 2^63 is a bijection of [0, 2^63).
SCRAMBLE = np.uint64(0x9E3779B97F4A7C15)
LOW63 = np.uint64((1 << 63) - 1)
ALPHABET = np.frombuffer(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8
)
# Event time: microseconds from 2026-11-30T00:00:00Z, a millisecond a row plus jitter.
TS_ORIGIN_US = 1_795_996_800_000_000


def count(text: str) -> int:
    """`5M`, `1e6`, `20000000` -> an integer."""
    suffixes = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip()
    if text[-1:].upper() in suffixes:
        return int(float(text[:-1]) * suffixes[text[-1].upper()])
    return int(float(text))


def event_ids(ordinals: np.ndarray) -> np.ndarray:
    return ((ordinals.astype(np.uint64) * SCRAMBLE) & LOW63).astype(np.int64)


HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
SCRAMBLE_LOW = np.uint64(0xBF58476D1CE4E5B9)


def uuid_strings(ids: np.ndarray) -> pa.Array:
    """Distinct ids as distinct UUID strings: the 128 bits (id, id * SCRAMBLE_LOW) in hex,
    dashes after the 8th, 12th, 16th and 20th digit."""
    halves = [ids.astype(np.uint64), ids.astype(np.uint64) * SCRAMBLE_LOW]
    shifts = np.arange(60, -4, -4, dtype=np.uint64)
    digits = np.concatenate([HEX[(h[:, None] >> shifts) & np.uint64(15)] for h in halves], axis=1)
    dash = np.full((len(ids), 1), ord("-"), dtype=np.uint8)
    text = np.concatenate([digits[:, :8], dash, digits[:, 8:12], dash, digits[:, 12:16], dash,
                           digits[:, 16:20], dash, digits[:, 20:]], axis=1)
    offsets = np.arange(0, len(ids) * 36 + 1, 36, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(ids),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())])


def payloads(rng: np.random.Generator, rows: int) -> pa.Array:
    chars = ALPHABET[rng.integers(0, len(ALPHABET), size=rows * PAYLOAD_CHARS, dtype=np.uint8)]
    offsets = np.arange(0, rows * PAYLOAD_CHARS + 1, PAYLOAD_CHARS, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(chars)]
    )


def write_file(path: Path, first_row: int, rows: int, originals_before: int,
               repeat_share: float, seed: int, index: int, key: str = "int64") -> int:
    """Writes one file; returns how many first occurrences it holds."""
    rng = np.random.default_rng([seed, index])
    is_repeat = rng.random(rows) < repeat_share
    if originals_before == 0:
        is_repeat[0] = False  # the dump's first row has nothing to repeat
    originals_here = np.cumsum(~is_repeat) - (~is_repeat)  # first occurrences before each row
    available = originals_before + originals_here
    ordinals = np.where(
        is_repeat,
        (rng.random(rows) * available).astype(np.int64),
        originals_before + originals_here,
    )
    position = np.arange(first_row, first_row + rows, dtype=np.int64)
    table = pa.table(
        {
            "event_id": event_ids(ordinals) if key == "int64" else uuid_strings(
                event_ids(ordinals)),
            "ts": TS_ORIGIN_US + position * 1000 + rng.integers(0, 1000, rows),
            "payload": payloads(rng, rows),
        }
    )
    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temporary, row_group_size=256 * 1024)
    os.replace(temporary, path)
    return int(rows - np.count_nonzero(is_repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=count, required=True, help="rows in all (5M, 2e7, ...)")
    parser.add_argument("--files", type=int, default=None,
                        help="number of files (default: one per 500K rows, at least 16)")
    parser.add_argument("--repeats", type=float, default=0.10, help="share of repeated rows")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--key", choices=["int64", "uuid"], default="int64",
                        help="event_id's type: int64, or a UUID string")
    parser.add_argument("--out", type=Path, required=True, help="directory (replaced)")
    args = parser.parse_args()
    files = args.files or max(16, -(-args.rows // 500_000))
    if not 1 <= files <= args.rows:
        parser.error(f"--files {files} must be in [1, --rows]")
    started = time.monotonic()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    distinct = 0
    for index in range(files):
        first = args.rows * index // files
        rows = args.rows * (index + 1) // files - first
        distinct += write_file(args.out / f"part-{index:05d}.parquet", first, rows, distinct,
                               args.repeats, args.seed, index, args.key)
    size = sum(p.stat().st_size for p in args.out.glob("*.parquet"))
    info = {"rows": args.rows, "distinct": distinct, "files": files, "bytes": size,
            "repeats": args.repeats, "seed": args.seed, "key": args.key}
    (args.out / "_dump.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"{args.out}: {args.rows:,} rows, {distinct:,} distinct event_ids, {files} files, "
          f"{size / 2**20:,.0f} MiB, {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
