#!/usr/bin/env python3
"""bulkbloom from Python beside the Python Bloom filters users would pick instead (rbloom,
fastbloom-rs, pybloom-live, pyprobables) and exact dedup (set, numpy.unique,
pandas.drop_duplicates), on the same keys, in one run.

    .venv/bin/python -m pip install -r bench/python/requirements.txt
    .venv/bin/python bench/python/bench_python.py [--keys 10M] [--slow-keys 1M] [--big 1e8]

Keys: 64-bit integers below 2**63 (fastbloom-rs takes int64) of which 10% repeat an earlier one;
the probe is half keys that were inserted, half keys that were not. Every filter is sized for the
key count at 0.1% false positives; bulkbloom runs on one thread unless the row says otherwise.
Each case runs in its own process: keys/s is the count over the fastest of --repeats runs, memory
is the peak resident memory the operation added to the process (the keys, already loaded, not
counted; for a probe, nothing is built, so the build's figure is the structure's size). Each
package gets its fastest documented way in: batch calls where it has them, else a Python loop over
a list prepared beforehand (not timed). The pure-Python packages run on --slow-keys keys.

Then the batch comparison: the same insert / contains / insert_if_absent calls on --batch-keys
batches from Python and from C++ (bulkbloom_batch_call, built from the same library), and, with
--big, bulkbloom's insert_if_absent against numpy.unique on one array of that many keys.

Then string keys where data engineers hold them (--string-keys, 0 to skip; --strings-only for
just this table): insert_if_absent of the same decimal strings (18-19 bytes, so out of line in
an Arrow view) given as a pyarrow string and string_view array, a pandas ``str`` Series, a polars
String Series, a DuckDB relation and a list of str, each in its own process, with rbloom's loop on
the list beside them: ns per key and the peak memory the call added. The DuckDB relation's row
holds DuckDB's query and Arrow export; two more rows give the sound comparison: DuckDB's own
export (``rel.to_arrow_table()``) alone, and with the insert of its column. On a loaded machine,
--string-rounds R alternates the cases R times (each row the median) and --cpu-time reports
process CPU time (every thread's) rather than wall time. The pandas, polars and DuckDB rows need
those packages (bench/python/requirements.txt); a row whose package is missing says so.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
FPR = 0.001


def make_keys(count: int, with_probe: bool = True, seed: int = 19) -> tuple:
    """`count` keys of which 10% repeat an earlier one, and a probe of as many (or None)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**63, size=count, dtype=np.uint64)
    repeats = rng.choice(count, size=count // 10, replace=False)
    keys[repeats] = keys[rng.integers(0, count - count // 10, size=len(repeats))]
    if not with_probe:
        return keys, None
    probe = rng.integers(0, 2**63, size=count, dtype=np.uint64)
    present = rng.choice(count, size=count // 2, replace=False)
    probe[present] = keys[present]
    return keys, probe


def as_list(array):
    return [] if array is None else array.tolist()


# -- the cases: prepare(keys, probe) -> state (untimed); op(state) -> result (timed) ------------


def bulkbloom_case(threads):
    import bulkbloom

    def prepare(op, keys, probe):
        f = bulkbloom.Filter(len(keys), FPR, threads=threads)
        if op == "probe":
            f.insert(keys)
        return f, keys, probe

    ops = {
        "build": lambda s: s[0].insert(s[1]),
        "probe": lambda s: s[0].contains(s[2]),
        "dedup": lambda s: s[1][s[0].insert_if_absent(s[1])],
    }
    return prepare, ops


def rbloom_case():
    import rbloom

    def prepare(op, keys, probe):
        bloom = rbloom.Bloom(len(keys), FPR)
        if op == "probe":
            bloom.update(keys.tolist())
        return bloom, keys.tolist(), as_list(probe)

    def dedup(s):
        bloom, keys, _ = s
        out = []
        for k in keys:  # no batch test-and-insert: the documented loop
            if k not in bloom:
                bloom.add(k)
                out.append(k)
        return out

    ops = {
        "build": lambda s: s[0].update(s[1]),
        "probe": lambda s: list(map(s[0].__contains__, s[2])),
        "dedup": dedup,
    }
    return prepare, ops


def fastbloom_case():
    from fastbloom_rs import BloomFilter

    def prepare(op, keys, probe):
        bloom = BloomFilter(len(keys), FPR)
        if op == "probe":
            bloom.add_int_batch(keys.tolist())
        return bloom, keys.tolist(), as_list(probe)

    def dedup(s):
        bloom, keys, _ = s
        out = []
        for k in keys:  # contains_int_batch cannot see repeats within its batch
            if not bloom.contains_int(k):
                bloom.add_int(k)
                out.append(k)
        return out

    ops = {
        "build": lambda s: s[0].add_int_batch(s[1]),
        "probe": lambda s: s[0].contains_int_batch(s[2]),
        "dedup": dedup,
    }
    return prepare, ops


def pybloom_live_case():
    from pybloom_live import BloomFilter

    def prepare(op, keys, probe):
        bloom = BloomFilter(capacity=len(keys), error_rate=FPR)
        if op == "probe":
            for k in keys.tolist():
                bloom.add(k)
        return bloom, keys.tolist(), as_list(probe)

    def build(s):
        for k in s[1]:
            s[0].add(k)

    ops = {
        "build": build,
        "probe": lambda s: list(map(s[0].__contains__, s[2])),
        # add() returns whether the key was there: the test-and-insert in one call.
        "dedup": lambda s: [k for k in s[1] if not s[0].add(k)],
    }
    return prepare, ops


def pyprobables_case():
    from probables import BloomFilter

    def prepare(op, keys, probe):
        bloom = BloomFilter(est_elements=len(keys), false_positive_rate=FPR)
        keys_text, probe_text = list(map(str, keys.tolist())), list(map(str, as_list(probe)))
        if op == "probe":
            for k in keys_text:
                bloom.add(k)
        return bloom, keys_text, probe_text

    def build(s):
        for k in s[1]:
            s[0].add(k)

    def dedup(s):
        bloom, keys, _ = s
        out = []
        for k in keys:
            if not bloom.check(k):
                bloom.add(k)
                out.append(k)
        return out

    ops = {"build": build, "probe": lambda s: list(map(s[0].check, s[2])), "dedup": dedup}
    return prepare, ops


def set_case():
    def prepare(op, keys, probe):
        keys_list = keys.tolist()
        return (set(keys_list) if op == "probe" else None), keys_list, as_list(probe)

    ops = {
        "build": lambda s: set(s[1]),
        "probe": lambda s: list(map(s[0].__contains__, s[2])),
        "dedup": lambda s: list(dict.fromkeys(s[1])),  # insertion-ordered: first sightings
    }
    return prepare, ops


def numpy_case():
    def prepare(op, keys, probe):
        return None, keys, probe

    ops = {"probe": lambda s: np.isin(s[2], s[1]), "dedup": lambda s: np.unique(s[1])}
    return prepare, ops


def numpy_sort_case():
    def prepare(op, keys, probe):
        return None, keys, probe

    def dedup(s):
        ordered = np.sort(s[1])
        return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]

    return prepare, {"dedup": dedup}


def pandas_case():
    import pandas as pd

    def prepare(op, keys, probe):
        return None, pd.Series(keys), pd.Series(probe)

    ops = {"probe": lambda s: s[2].isin(s[1]), "dedup": lambda s: s[1].drop_duplicates()}
    return prepare, ops


def string_keys(count: int):
    """make_keys' keys as decimal strings: a pyarrow string array."""
    import pyarrow as pa

    return pa.array(make_keys(count, with_probe=False)[0]).cast(pa.string())


def pandas_str(base):
    import pandas as pd

    return pd.Series(base.to_numpy(zero_copy_only=False), dtype="str")


def polars_string(base):
    import polars as pl

    return pl.from_arrow(base)


def duckdb_relation(base):
    import duckdb
    import pyarrow as pa

    table = pa.table({"key": base})
    return duckdb.connect().from_arrow(table).select("key")


def bulkbloom_dedup(batch_of):
    """A string case: bulkbloom's insert_if_absent on `batch_of(state)`, timed with the call."""
    import bulkbloom

    def prepare(given):
        return bulkbloom.Filter(len(given[1]), FPR, threads=1), given

    return prepare, lambda s: s[0].insert_if_absent(batch_of(s[1][0]))


def duckdb_exported(batch_of):
    """A DuckDB case: `batch_of(relation)` as DuckDB itself exports it to Arrow, timed with the
    call (its memory is the whole result's)."""
    import bulkbloom

    def prepare(given):
        return bulkbloom.Filter(len(given[1]), FPR, threads=1), given

    def op(s):
        table = s[1][0].to_arrow_table()
        return None if batch_of is None else s[0].insert_if_absent(batch_of(table))

    return prepare, op


def rbloom_dedup_strings():
    import rbloom

    def prepare(given):
        return rbloom.Bloom(len(given[1]), FPR), given

    def dedup(s):
        bloom, (keys, _) = s
        out = []
        for k in keys:
            if k not in bloom:
                bloom.add(k)
                out.append(k)
        return out

    return prepare, dedup


def arrow_of(series):
    import pyarrow as pa

    return pa.array(series)


# name: (what the keys are given as, made from the pyarrow string array untimed; the case).
STRING_CASES = {
    "pyarrow string": (lambda b: b, lambda: bulkbloom_dedup(lambda k: k)),
    "pyarrow string_view": (lambda b: b.cast("string_view"), lambda: bulkbloom_dedup(lambda k: k)),
    "pandas str Series": (pandas_str, lambda: bulkbloom_dedup(lambda k: k)),
    "pandas str Series, pa.array(s)": (pandas_str, lambda: bulkbloom_dedup(arrow_of)),
    "polars String Series": (polars_string, lambda: bulkbloom_dedup(lambda k: k)),
    "polars String Series, s.to_arrow()": (polars_string,
                                           lambda: bulkbloom_dedup(lambda k: k.to_arrow())),
    "DuckDB relation": (duckdb_relation, lambda: bulkbloom_dedup(lambda k: k)),
    # The sound comparison for the row above: DuckDB's own export of the relation to a pyarrow
    # table, alone, then with the insert of its column (what a user would do without the
    # PyCapsule path): the relation's row holds DuckDB's query and export too.
    "DuckDB relation, rel.to_arrow_table() alone": (duckdb_relation,
                                                    lambda: duckdb_exported(None)),
    "DuckDB relation, rel.to_arrow_table() then its column": (
        duckdb_relation, lambda: duckdb_exported(lambda t: t.column(0))),
    "list[str]": (lambda b: b.to_pylist(), lambda: bulkbloom_dedup(lambda k: k)),
    "list[str], rbloom loop": (lambda b: b.to_pylist(), rbloom_dedup_strings),
}


def run_string_case(name: str, count: int, repeats: int) -> dict:
    given_as, case = STRING_CASES[name]
    base = string_keys(count)
    try:
        keys = given_as(base)
    except ImportError as error:
        return {"missing": str(error)}
    del base
    prepare, op = case()
    best, best_cpu, peak = float("inf"), float("inf"), 0
    for _ in range(repeats):
        state = prepare((keys, range(count)))
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        before = resident_kib("VmRSS")
        start, start_cpu = time.perf_counter(), time.process_time()
        result = op(state)
        # Process CPU time (every thread's, DuckDB's workers too): what a loaded machine
        # disturbs least.
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
        best = min(best, time.perf_counter() - start)
        peak = max(peak, resident_kib("VmHWM") - before)
        del result, state
    return {"seconds": best, "cpu_seconds": best_cpu, "peak_bytes": peak * 1024, "keys": count,
            "type": type(keys).__module__ + "." + type(keys).__name__
            + (f" ({keys.dtype})" if hasattr(keys, "dtype") else "")}


def string_table(count: int, repeats: int, rounds: int = 1, cpu: bool = False) -> None:
    """The table; with `rounds` > 1 every case runs once a round, the cases alternated, and a row
    gives the median of its rounds; `cpu`: process CPU time rather than wall time."""
    what = "process CPU time" if cpu else "wall time"
    alternated = f", median of {rounds} alternated rounds" if rounds > 1 else ""
    print(f"\ninsert_if_absent of {count:,} string keys (decimal, 18-19 bytes, 10% repeats), one "
          f"thread, fastest of {repeats}{alternated}, {what}; memory: the peak the call added")
    print("| keys given as | type | ns/key | × pyarrow string | peak extra memory |")
    print("|---|---|---|---|---|")
    runs: dict = {name: [] for name in STRING_CASES}
    for _ in range(rounds):
        for name in STRING_CASES:
            runs[name].append(in_subprocess("--string-case", name, str(count), str(repeats)))
    reference = None
    for name, rows in runs.items():
        if "missing" in rows[0]:
            print(f"| {name} | not installed: {rows[0]['missing']} | — | — | — |", flush=True)
            continue
        seconds = statistics.median(r["cpu_seconds" if cpu else "seconds"] for r in rows)
        ns = seconds / count * 1e9
        reference = reference or ns
        peak = max(r["peak_bytes"] for r in rows)
        print(f"| {name} | {rows[0]['type']} | {ns:,.1f} | {ns / reference:,.2f} | "
              f"{mib(peak)} |", flush=True)


CASES = {
    "bulkbloom (1 thread)": (lambda: bulkbloom_case(1), "numpy uint64 array"),
    "bulkbloom (2 threads)": (lambda: bulkbloom_case(0), "numpy uint64 array"),
    "rbloom": (rbloom_case, "list; update() to build, a loop to test"),
    "fastbloom-rs": (fastbloom_case, "list; *_int_batch calls, a loop to dedup"),
    "pybloom-live": (pybloom_live_case, "list, a loop (pure Python)"),
    "pyprobables": (pyprobables_case, "list of str, a loop (pure Python)"),
    "set / dict.fromkeys": (set_case, "list (exact)"),
    "numpy isin / unique": (numpy_case, "numpy array (exact; unique sorts)"),
    "numpy sort + mask": (numpy_sort_case, "numpy array (exact, sorted)"),
    "pandas isin / drop_duplicates": (pandas_case, "Series (exact)"),
}
SLOW = {"pybloom-live", "pyprobables"}


# -- one case in its own process ------------------------------------------------------------------


def resident_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def run_case(name: str, op: str, count: int, repeats: int) -> dict:
    prepare, ops = CASES[name][0]()
    keys, probe = make_keys(count, with_probe=op == "probe")
    best, peak = float("inf"), 0
    for _ in range(repeats):
        state = prepare(op, keys, probe)
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the peak (VmHWM) to what is resident now
        before = resident_kib("VmRSS")
        start = time.perf_counter()
        result = ops[op](state)
        best = min(best, time.perf_counter() - start)
        peak = max(peak, resident_kib("VmHWM") - before)
        del result, state
    return {"seconds": best, "peak_bytes": peak * 1024, "keys": count}


def in_subprocess(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


# -- batch calls from Python and C++ --------------------------------------------------------------


def python_batches(keys_path: str, batch: int, repeats: int) -> dict:
    import bulkbloom

    keys = np.fromfile(keys_path, dtype=np.uint64)
    batches = [keys[at : at + batch] for at in range(0, len(keys), batch)]
    results = {}
    for op in ("insert", "contains", "insert_if_absent"):
        best = float("inf")
        for _ in range(repeats):
            f = bulkbloom.Filter(len(keys), FPR, threads=1)
            if op == "contains":
                f.insert(keys)
            call = getattr(f, op)
            start = time.perf_counter()
            for b in batches:
                call(b)
            best = min(best, time.perf_counter() - start)
        results[op] = best
    return results


def cpp_batches(keys_path: str, batch: int, repeats: int) -> dict:
    builds = sorted(glob.glob(str(REPO / "build/python/*/build.ninja")))
    if not builds:
        raise RuntimeError("no build/python/*: run `pip install .` (or scripts/test.sh) first")
    build_dir = Path(builds[-1]).parent
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "bulkbloom_batch_call"],
                   check=True, capture_output=True)
    out = subprocess.run([str(build_dir / "python/bulkbloom_batch_call"), keys_path, str(batch),
                          str(repeats)], check=True, capture_output=True, text=True)
    return {line.split()[0]: float(line.split()[1]) for line in out.stdout.splitlines()}


# -- report ---------------------------------------------------------------------------------------


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def rate(result: dict | None) -> str:
    if result is None:
        return "—"
    per_second = result["keys"] / result["seconds"]
    return f"{per_second / 1e6:,.2f} M/s" if per_second >= 1e6 else f"{per_second / 1e3:,.0f} k/s"


def count_arg(text: str) -> int:
    """10M, 64K, 1e8 or a plain number."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if scale != 1 else text) * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=count_arg, default=10_000_000)
    parser.add_argument("--slow-keys", type=count_arg, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-keys", type=int, default=65536)
    parser.add_argument("--big", type=count_arg, default=0,
                        help="also dedup this many keys against np.unique")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--string-keys", type=count_arg, default=10_000_000,
                        help="string keys of the string table (0: no string table)")
    parser.add_argument("--strings-only", action="store_true", help="only the string table")
    parser.add_argument("--string-rounds", type=int, default=1,
                        help="string table: alternated rounds, each row the median of its rounds")
    parser.add_argument("--cpu-time", action="store_true",
                        help="string table: process CPU time rather than wall time")
    parser.add_argument("--string-case", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--case", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--batches", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        name, op, count, repeats = args.case
        print(json.dumps(run_case(name, op, int(count), int(repeats))))
        return
    if args.batches:
        side, path, batch, repeats = args.batches
        run = python_batches if side == "python" else cpp_batches
        print(json.dumps(run(path, int(batch), int(repeats))))
        return
    if args.string_case:
        name, count, repeats = args.string_case
        print(json.dumps(run_string_case(name, int(count), int(repeats))))
        return
    if args.strings_only:
        string_table(int(args.string_keys), args.repeats, args.string_rounds, args.cpu_time)
        return

    import bulkbloom

    count, slow = int(args.keys), int(args.slow_keys)
    names = args.only.split(",") if args.only else list(CASES)
    print(f"bulkbloom {bulkbloom.__version__} on {bulkbloom.Filter(10, 0.1).implementation}; "
          f"{count:,} keys ({slow:,} for pure-Python packages); fastest of {args.repeats}; "
          f"python {sys.version.split()[0]}\n")
    print("| package | keys given as | build | probe | dedup | memory (build; dedup) |")
    print("|---|---|---|---|---|---|")
    table = {}
    for name in names:
        n = slow if name in SLOW else count
        repeats = 1 if name in SLOW else args.repeats
        ops = CASES[name][0]()[1]
        row = {op: (in_subprocess("--case", name, op, str(n), str(repeats)) if op in ops else None)
               for op in ("build", "probe", "dedup")}
        table[name] = row
        memory = "; ".join(mib(row[op]["peak_bytes"]) if row[op] else "—"
                           for op in ("build", "dedup"))
        keys_note = CASES[name][1] + ("" if n == count else f", {n:,} keys")
        print(f"| {name} | {keys_note} | {rate(row['build'])} | {rate(row['probe'])} | "
              f"{rate(row['dedup'])} | {memory} |", flush=True)

    ours = table.get("bulkbloom (1 thread)")
    others = [n for n in names if n in ("rbloom", "fastbloom-rs", "pybloom-live", "pyprobables")]
    if ours and others:
        print("\nbulkbloom (1 thread) over the fastest other Bloom filter package, per operation:")
        for op in ("build", "probe", "dedup"):
            speeds = {n: table[n][op]["keys"] / table[n][op]["seconds"] for n in others}
            best = max(speeds, key=speeds.get)
            ratio = ours[op]["keys"] / ours[op]["seconds"] / speeds[best]
            print(f"  {op}: {ratio:,.1f}x ({best})")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "keys.u64")
        make_keys(count, with_probe=False)[0].tofile(path)
        py = in_subprocess("--batches", "python", path, str(args.batch_keys), str(args.repeats))
        cpp = in_subprocess("--batches", "cpp", path, str(args.batch_keys), str(args.repeats))
    print(f"\n{args.batch_keys:,}-key batches over {count:,} keys, one thread: Python / C++ time")
    for op in py:
        print(f"  {op}: {py[op] / cpp[op]:.3f} (Python {count / py[op] / 1e6:,.1f} M keys/s, "
              f"C++ {count / cpp[op] / 1e6:,.1f} M keys/s)")

    if args.big:
        big = int(args.big)
        ours_big = in_subprocess("--case", "bulkbloom (1 thread)", "dedup", str(big), "1")
        print(f"\n{big:,} keys dedup'd (memory includes the unique keys returned):")
        print(f"  bulkbloom (1 thread): {ours_big['seconds']:.2f} s, {mib(ours_big['peak_bytes'])}")
        for name in ("numpy sort + mask", "numpy isin / unique"):
            other = in_subprocess("--case", name, "dedup", str(big), "1")
            print(f"  {name}: {other['seconds']:.2f} s, {mib(other['peak_bytes'])}: bulkbloom "
                  f"{other['seconds'] / ours_big['seconds']:.2f}x the speed in "
                  f"{ours_big['peak_bytes'] / other['peak_bytes']:.2f} of the memory")

    if args.string_keys:
        string_table(int(args.string_keys), args.repeats, args.string_rounds, args.cpu_time)


if __name__ == "__main__":
    main()
