"""First row of each key of a Parquet directory, four ways, side by side (issue #36's target):
``bulkbloom.dedup`` of the directory, the command line's ``dedup -f csv:1`` on the
same rows as one CSV file, DuckDB (``QUALIFY row_number()`` by file and row) and polars
(``unique(keep="first", maintain_order=True)`` streamed to Parquet).

Each way runs in a child process of its own, so its peak resident memory (``ru_maxrss``) is its
own; rounds alternate the ways. Prints one table: wall seconds (median over rounds), rows/s, peak
RSS, rows kept, and whether the kept rows are exactly the command line's (bulkbloom and the CLI
use the same filter layout, so they keep the same rows, false drops included; DuckDB and polars
are exact, so they keep the CLI's rows plus its false drops).

    .venv/bin/python bench/python/dedup_parquet.py --gigabytes 5 --dir /tmp/dedup-parquet

The data (kept under --dir between runs): --gigabytes of rows of a decimal string ``key`` (10 % of
rows repeat an earlier key) and a 100-letter ``payload``, in uncompressed Parquet files of 4M rows
(row groups of 1M rows), and the same rows as CSV.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROWS_PER_FILE = 4 << 20
PAYLOAD_BYTES = 100
FPR = 0.001

# Each way as a child program: argv[1] the data directory, argv[2] the output, argv[3] the rows.
# It prints a JSON object with "kept" (rows written) and "peak" (ru_maxrss in KiB) last.
CHILD_PREFIX = """
import json, resource, sys
data, out, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
"""
CHILD_SUFFIX = """
print(json.dumps({"kept": kept,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""
WRITE_KEPT = """
kept = 0
with pq.ParquetWriter(out, reader.schema) as writer:
    for batch in reader:
        writer.write_batch(batch)
        kept += batch.num_rows
"""
WAYS = {
    "bulkbloom.dedup": """
import pyarrow.parquet as pq, bulkbloom
# The directory's *.parquet files in name order, read a batch at a time.
reader = bulkbloom.dedup(data, key="key", capacity=rows, fpr=%(fpr)r)
""" + WRITE_KEPT,
    "bulkbloom.dedup of a dataset scan": """
import pyarrow.dataset as ds, pyarrow.parquet as pq, bulkbloom
files = sorted(str(p) for p in __import__("pathlib").Path(data).glob("*.parquet"))
# As little read-ahead as the scanner allows; it still reads whole row groups, some ahead.
source = ds.dataset(files, format="parquet").scanner(
    batch_size=1 << 18, batch_readahead=1, fragment_readahead=1).to_reader()
reader = bulkbloom.dedup(source, key="key", capacity=rows, fpr=%(fpr)r)
""" + WRITE_KEPT,
    "DuckDB QUALIFY": """
import duckdb
con = duckdb.connect()
con.execute("SET preserve_insertion_order = true")
con.execute(f\"\"\"COPY (SELECT key, payload FROM read_parquet('{data}/*.parquet',
    filename = true, file_row_number = true)
  QUALIFY row_number() OVER (PARTITION BY key ORDER BY filename, file_row_number) = 1
  ORDER BY filename, file_row_number) TO '{out}' (FORMAT parquet)\"\"\")
kept = con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]
""",
    "polars unique": """
import polars as pl
pl.scan_parquet(f"{data}/*.parquet").unique(subset="key", keep="first",
    maintain_order=True).sink_parquet(out)
kept = pl.scan_parquet(out).select(pl.len()).collect().item()
""",
}


def generate(directory: Path, rows: int) -> None:
    """Rows of unique keys with 10 % of them replaced by an earlier row's key, as Parquet files
    and as one CSV file of the same rows (data.csv) for the command line. Skipped when already
    there."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as csv
    import pyarrow.parquet as pq

    done = directory / "done"
    if done.exists() and done.read_text() == str(rows):
        return
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.parquet"):
        old.unlink()
    rng = np.random.default_rng(36)
    keys = rng.permutation(np.arange(rows, dtype=np.int64)) * 7919 + 13
    repeats = rng.random(rows) < 0.10
    earlier = (rng.random(rows) * np.arange(rows)).astype(np.int64)
    keys[repeats] = keys[earlier[repeats]]
    options = csv.WriteOptions(include_header=False)
    with open(directory / "data.csv", "wb") as text:
        for start in range(0, rows, ROWS_PER_FILE):
            part = keys[start : start + ROWS_PER_FILE]
            letters = rng.integers(ord("a"), ord("z") + 1, len(part) * PAYLOAD_BYTES, np.uint8)
            offsets = np.arange(len(part) + 1, dtype=np.int32) * PAYLOAD_BYTES
            payload = pa.StringArray.from_buffers(len(part), pa.py_buffer(offsets),
                                                  pa.py_buffer(letters))
            # The key as text, as the command line's csv:1 reads it (and hashes its bytes).
            table = pa.table({"key": pa.array(part).cast(pa.string()), "payload": payload})
            pq.write_table(table, directory / f"part-{start // ROWS_PER_FILE:05d}.parquet",
                           compression="none")
            csv.write_csv(table, text, options)
    done.write_text(str(rows))


def run_way(name: str, directory: Path, out: Path, rows: int) -> dict:
    if name == "bulkbloom dedup (CLI)":
        cli = REPO / "build/release/bulkbloom"
        command = [str(cli), "dedup", "-f", "csv:1", "--capacity", str(rows), "--fpr", str(FPR),
                   "--stats", "none", "-o", str(out), str(directory / "data.csv")]
        start = time.perf_counter()
        child = subprocess.Popen(command)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise subprocess.CalledProcessError(child.returncode, command)
        with open(out, "rb") as kept_lines:
            kept = sum(1 for _ in kept_lines)
        return {"wall": wall, "kept": kept, "peak": usage.ru_maxrss}
    program = CHILD_PREFIX + WAYS[name] % {"fpr": FPR} + CHILD_SUFFIX
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", program, str(directory), str(out), str(rows)],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


def same_keys_as_cli(parquet: Path, cli_output: Path) -> bool:
    import numpy as np
    import pyarrow.parquet as pq

    import pyarrow.csv as csv

    kept = pq.read_table(parquet, columns=["key"]).column("key")
    options = csv.ReadOptions(column_names=["key", "payload"])
    types = csv.ConvertOptions(column_types={"key": "string"})
    return kept.equals(csv.read_csv(cli_output, options, convert_options=types).column("key"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=5.0, help="data size (default 5)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bulkbloom-dedup-parquet"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", default="", help="comma-separated subset of the ways after "
                        "the CLI (default: all)")
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = int(args.gigabytes * 1e9 / (8 + PAYLOAD_BYTES))
    if args.generate_only:
        generate(args.dir, rows)
        return
    # A child's peak RSS includes what its parent held when it forked, so this process imports
    # nothing heavy (numpy, pyarrow) before the ways have run: the data is made by a child too.
    subprocess.run([sys.executable, __file__, "--generate-only", "--gigabytes",
                    str(args.gigabytes), "--dir", str(args.dir)], check=True)
    ways = ["bulkbloom dedup (CLI)", *(args.ways.split(",") if args.ways else WAYS)]
    results: dict = {way: [] for way in ways}
    outputs = {way: args.dir / f"out-{i}" for i, way in enumerate(ways)}
    for _ in range(args.rounds):
        for way in ways:
            results[way].append(run_way(way, args.dir, outputs[way], rows))
    load = os.getloadavg()
    print(f"{rows:,} rows ({args.gigabytes} GB of Parquet), {args.rounds} rounds, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    cli_wall = statistics.median(r["wall"] for r in results[ways[0]])
    print("| way | wall s (median) | rows/s | vs CLI | peak RSS MiB | rows kept | = CLI's rows |")
    print("|---|---|---|---|---|---|---|")
    for way in ways:
        wall = statistics.median(r["wall"] for r in results[way])
        peak = max(r["peak"] for r in results[way]) / 1024
        kept = results[way][-1]["kept"]
        same = "(itself)" if way == ways[0] else (
            "yes" if way.startswith("bulkbloom.dedup") and same_keys_as_cli(outputs[way],
                                                                            outputs[ways[0]])
            else "no" if way.startswith("bulkbloom.dedup") else "exact (no false drops)")
        print(f"| {way} | {wall:.1f} | {rows / wall / 1e6:.2f} M | {cli_wall / wall:.2f}× | "
              f"{peak:.0f} | {kept:,} | {same} |")


if __name__ == "__main__":
    main()
