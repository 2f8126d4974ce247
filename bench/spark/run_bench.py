"""Dedups one Parquet dump (bench/spark/gen_dump.py) with bulkbloom.spark.dedup and with Spark's
df.dropDuplicates(["event_id"]) in the same local Spark application, alternating, each writing
Parquet, and reports per run: wall time, shuffle bytes, peak memory and the rows kept.

    python bench/spark/run_bench.py --dump /tmp/dump-5M --rounds 3 --json out.json
    python bench/spark/run_bench.py --dump /tmp/dump-5M-uuid --variants window,dropDuplicates
    python bench/spark/run_bench.py --dump /tmp/dump-5M-uuid --variants ordered,row_number

Variants: bulkbloom (dedup), window (dedup_and_write into a new sliding window of a day, which
writes the output itself), dropDuplicates, ordered (dedup with order="ts": the first row by ts)
and row_number (Spark's window function: row_number() over each event_id by ts, the rows
numbered 1), and copy (--floor). The ratios compare the first variant with the second.

What is measured, per run (each run is one Spark job group):
  wall          seconds from the call to the written output (bulkbloom: routing, i.e. the
                dedup() call, then the filtering scan and the write).
  shuffle       shuffle write and shuffle read bytes summed over the run's completed stages, from
                Spark's REST API (/api/v1/applications/<id>/stages); checked against the
                shuffle_*.data files the run left in spark.local.dir, which hold what was written.
  memory        (a) Spark's own per-stage peaks (peakExecutorMetrics: JVM heap used, execution
                memory, the process tree's JVM and Python RSS); (b) this script's sampler every
                0.1 s of /proc: the JVM's RSS and the summed PSS of the Python worker processes
                under it (where bulkbloom's shards live; PSS so forked workers are not counted
                twice).
  rows          rows of each output (Parquet footers). dropDuplicates keeps one row per distinct
                event_id, which the dump's _dump.json gives exactly; bulkbloom's false drops are
                the distinct keys it dropped, compared with what is expected: a filter's, the
                model's sum over n < distinct of expected_fpr(n) of the layout it chose; a
                window's, the library's own (the run's window shards' expected_false_drops,
                each at its generations' rates as its records came, which the manifest
                records), not that model: the window's layout is one generation's, sized for a
                period, not for every key. The summary gives how many spreads (sqrt of the
                expected count) the false drops lie from it: one run is one draw, and the same
                keys in another order (Spark reads the dump's files in an order of its own) are
                another.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import bulkbloom


VARIANTS = ["bulkbloom", "window", "dropDuplicates", "ordered", "row_number"]


def process_tree(root: int) -> list[int]:
    """`root` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory_kib(pid: int, field: str) -> int:
    """A field ("Rss:", "Pss:") of /proc/<pid>/smaps_rollup in KiB, 0 for a process gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def is_python(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"python" in cmdline.read().split(b"\0")[0]
    except OSError:
        return False


def busy_cpu_seconds() -> float:
    """CPU seconds this machine's cores have spent busy since boot (/proc/stat: user, nice,
    system, irq, softirq; not idle, iowait or time the hypervisor stole). Over a run with nothing
    else running, the CPU time of the JVM and its Python workers together."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds spent by `root`'s process tree: each live process's own user and system time
    and that of the children it has reaped (Spark's Python workers, forked by its daemon). Other
    processes' load stretches wall times several-fold but CPU time far less, so it compares runs
    taken under load."""
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


class MemorySampler(threading.Thread):
    """Peaks of the JVM's RSS and of its Python workers' summed PSS since the last reset()."""

    def __init__(self, jvm_pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.jvm_pid, self.interval = jvm_pid, interval
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.jvm_rss = self.python_pss = self.python_workers = 0

    def peaks(self) -> dict:
        with self.lock:
            return {"jvm_rss": self.jvm_rss * 1024, "python_pss": self.python_pss * 1024,
                    "python_processes": self.python_workers}

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            pids = process_tree(self.jvm_pid)
            workers = [p for p in pids[1:] if is_python(p)]
            jvm = memory_kib(self.jvm_pid, "Rss:")
            python = sum(memory_kib(p, "Pss:") for p in workers)
            with self.lock:
                self.jvm_rss = max(self.jvm_rss, jvm)
                self.python_pss = max(self.python_pss, python)
                self.python_workers = max(self.python_workers, len(workers))


class Rest:
    """Spark's monitoring REST API of the running application."""

    def __init__(self, spark) -> None:
        self.base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"

    def get(self, path: str):
        with urllib.request.urlopen(f"{self.base}/{path}", timeout=600) as answer:
            return json.load(answer)

    def group(self, tag: str) -> dict:
        """Shuffle bytes, peaks and stage times of the completed stages of job group `tag`."""
        for _ in range(100):  # the listener bus reports a job's end a little after the action
            jobs = [j for j in self.get("jobs") if j.get("jobGroup") == tag]
            if jobs and all(j["status"] != "RUNNING" for j in jobs):
                break
            time.sleep(0.2)
        stage_ids = {s for j in jobs for s in j["stageIds"]}
        stages = [s for s in self.get("stages") if s["stageId"] in stage_ids
                  and s["status"] == "COMPLETE"]
        peaks: dict = {}
        for stage in stages:
            for name, value in (stage.get("peakExecutorMetrics") or {}).items():
                peaks[name] = max(peaks.get(name, 0), value)
        return {
            "jobs": len(jobs),
            "failed_jobs": sum(j["status"] == "FAILED" for j in jobs),
            "shuffle_write": sum(s["shuffleWriteBytes"] for s in stages),
            "shuffle_read": sum(s["shuffleReadBytes"] for s in stages),
            "shuffle_write_records": sum(s["shuffleWriteRecords"] for s in stages),
            "input_bytes": sum(s["inputBytes"] for s in stages),
            "spill_disk": sum(s["diskBytesSpilled"] for s in stages),
            "peak_execution_memory_sum": sum(s.get("peakExecutionMemory", 0) for s in stages),
            "peaks": peaks,
            "stages": [
                {"id": s["stageId"], "name": s["name"].split(" at ")[0], "tasks": s["numTasks"],
                 "run_s": s["executorRunTime"] / 1000,
                 "cpu_s": s["executorCpuTime"] / 1e9, "gc_s": s["jvmGcTime"] / 1000,
                 "wall_s": stage_seconds(s),
                 "shuffle_write": s["shuffleWriteBytes"], "shuffle_read": s["shuffleReadBytes"]}
                for s in sorted(stages, key=lambda s: s["stageId"])
            ],
        }


def stage_seconds(stage: dict) -> float:
    from datetime import datetime

    def at(text: str) -> float:
        return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    if not stage.get("submissionTime") or not stage.get("completionTime"):
        return 0.0
    return at(stage["completionTime"]) - at(stage["submissionTime"])


def shuffle_files(local_dir: Path) -> dict:
    """The shuffle data files under spark.local.dir and their sizes."""
    return {p: p.stat().st_size for p in local_dir.rglob("shuffle_*.data")}


def parquet_rows(path: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(path.glob("*.parquet")))


def missing(values: np.ndarray, sorted_set: np.ndarray) -> int:
    """How many of `values` are not in `sorted_set` (np.setdiff1d's unique is slow here)."""
    if len(sorted_set) == 0:
        return len(values)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return int(np.count_nonzero(sorted_set[at] != values))


def expected_false_drops(state, distinct: int) -> float:
    """The never-seen keys the run that made `state` (a bulkbloom.spark.ShardedFilter) is
    expected to have dropped, of `distinct` keys: a window's own figure, else the filter model's."""
    if state.window is not None:
        if state.expected_false_drops is None:
            raise ValueError(f"{state.root}: the window's manifest records no expected_false_drops")
        return state.expected_false_drops
    return filter_expected_false_drops(state.layout, distinct)


def filter_expected_false_drops(layout: bulkbloom.Layout, distinct: int) -> float:
    """Sum over the distinct keys of the model's false-positive rate when each arrives."""
    model = bulkbloom.Filter.from_layout(layout.shape, layout.num_blocks, layout.seed,
                                         layout.hash, layout.index)
    points = np.unique(np.linspace(0, distinct, 2001).astype(np.int64))
    rates = np.array([model.expected_fpr(int(n)) for n in points])
    return float(np.trapezoid(rates, points))


def false_drops_sigmas(measured: float, expected: float) -> float:
    """How many spreads of a run's false drops `measured` lies from `expected`. A false drop is a
    rare event (a first occurrence whose bits its block already holds), nearly independent of the
    others, so the count spreads about as a Poisson count does, by sqrt(expected) (simulated runs:
    0.8 to 0.9 of it); which count a run draws depends on the order of its rows (#34: 179 false
    drops at 2M rows in Spark's order of the files, 149 for the same keys in the dump's, 150.2
    expected)."""
    return (measured - expected) / math.sqrt(expected) if expected > 0 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each (alternating)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/bulkbloom-spark-bench"))
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--master", default="local[2]",
                        help="Spark's master: local[N] runs N executor cores in the driver's JVM")
    parser.add_argument("--num-shards", type=int, default=None,
                        help="bulkbloom's shards (default: the module's own choice)")
    parser.add_argument("--fpr", type=float, default=0.001)
    parser.add_argument("--only", choices=VARIANTS, default=None)
    parser.add_argument("--variants", default="bulkbloom,dropDuplicates",
                        help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--floor", action="store_true",
                        help="also time `copy`: the dump read and written as it is, without a "
                             "dedup, the least any dedup that writes its output can take")
    parser.add_argument("--broadcast-drops", type=int, default=None,
                        help="bulkbloom's broadcast_drops (default: the module's)")
    parser.add_argument("--check-keys", action="store_true",
                        help="also compare the outputs' key sets (reads both outputs' event_ids; "
                             "int64 keys only)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()

    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    from bulkbloom import spark as bbspark

    variants = [args.only] if args.only else args.variants.split(",")
    if not set(variants) <= set(VARIANTS):
        parser.error(f"--variants {args.variants}: not of {', '.join(VARIANTS)}")

    info = json.loads((args.dump / "_dump.json").read_text())
    if args.scratch.exists():
        shutil.rmtree(args.scratch)
    local_dir = args.scratch / "local"
    local_dir.mkdir(parents=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = {
        "spark.master": args.master,
        "spark.driver.memory": args.driver_memory,
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.shuffle.partitions": "200",
        "spark.local.dir": str(local_dir),
        "spark.ui.showConsoleProgress": "false",
        "spark.executor.processTreeMetrics.enabled": "true",
        "spark.executor.metrics.pollingInterval": "100ms",
    }
    builder = SparkSession.builder.appName("bulkbloom-spark-bench")
    for name, value in settings.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    rest = Rest(spark)
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    sampler = MemorySampler(jvm_pid)
    sampler.start()

    if args.floor:
        variants.append("copy")
    # Warm-up, not measured: both on one file, so that neither pays for the JIT or the start of
    # the Python workers.
    spark.sparkContext.setJobGroup("warm-up", "warm-up")
    one_file = spark.read.parquet(str(sorted(args.dump.glob("*.parquet"))[0]))

    def output_of(variant: str, df, filter_dir: Path, out: Path):
        """What `variant` writes for input `df` (bulkbloom runs its routing job here), or None
        where it wrote `out` itself (window)."""
        if variant in ("bulkbloom", "ordered"):
            # The run's filter in a new directory in filter_dir (dedup's scratch=).
            filter_dir.mkdir(parents=True, exist_ok=True)
            return bbspark.dedup(df, "event_id", num_shards=args.num_shards, fpr=args.fpr,
                                 scratch=str(filter_dir), broadcast_drops=args.broadcast_drops,
                                 order="ts" if variant == "ordered" else None)
        if variant == "window":
            bbspark.dedup_and_write(df, "event_id", str(out), filter=str(filter_dir / "window"),
                                    window=86_400, time=1_795_996_800, fpr=args.fpr,
                                    num_shards=args.num_shards,
                                    broadcast_drops=args.broadcast_drops)
            return None
        if variant == "dropDuplicates":
            return df.dropDuplicates(["event_id"])
        if variant == "row_number":
            first = Window.partitionBy("event_id").orderBy("ts")
            return df.withColumn("_n", F.row_number().over(first)).where("_n = 1").drop("_n")
        return df  # copy

    for variant in variants:
        out = args.scratch / "warm-up"
        result = output_of(variant, one_file, args.scratch / f"warm-up-{variant}", out)
        if result is not None:
            result.write.parquet(str(out))
        shutil.rmtree(out)
    runs = []
    for round_number in range(args.rounds):
        order = variants if round_number % 2 == 0 else variants[::-1]
        for variant in order:
            tag = f"{variant}-{round_number}"
            out = args.scratch / f"out-{variant}"
            shutil.rmtree(out, ignore_errors=True)
            filter_dir = args.scratch / f"filter-{variant}-{round_number}"
            before = shuffle_files(local_dir)
            spark.sparkContext.setJobGroup(tag, tag)
            sampler.reset()
            phases = {}
            busy_before = busy_cpu_seconds()
            tree_before = tree_cpu_seconds(jvm_pid)
            started = time.monotonic()
            load = os.getloadavg()[0]
            result = output_of(variant, spark.read.parquet(str(args.dump)), filter_dir, out)
            if variant in ("bulkbloom", "ordered"):
                phases["routing_s"] = time.monotonic() - started
            if result is not None:
                result.write.parquet(str(out))
            if variant in ("bulkbloom", "ordered"):
                plan = result._jdf.queryExecution().executedPlan().toString()
                phases["filtering"] = ("broadcast join" if "BroadcastHashJoin" in plan
                                       else "bitmap in the plan" if "UnsafeArrayData" in plan
                                       else "row-id UDF")
            wall = time.monotonic() - started
            cpu = busy_cpu_seconds() - busy_before
            app_cpu = tree_cpu_seconds(jvm_pid) - tree_before
            memory = sampler.peaks()
            spark.sparkContext.setJobGroup("idle", "idle")
            metrics = rest.group(tag)
            after = shuffle_files(local_dir)
            written_files = sum(size for p, size in after.items() if p not in before)
            run = {"variant": variant, "round": round_number, "wall_s": wall, "cpu_s": cpu,
                   "app_cpu_s": app_cpu,
                   "load_before": load, "load_after": os.getloadavg()[0],
                   **phases, "rows_out": parquet_rows(out), "sampled": memory, **metrics,
                   "shuffle_files_bytes": written_files}
            if variant in ("bulkbloom", "ordered", "window"):
                [run_filter] = filter_dir.iterdir()
                state = bbspark.open_filter(run_filter)
                run["num_shards"] = state.num_shards
                run["layout"] = str(state.layout)
                run["expected_false_drops"] = expected_false_drops(state, info["distinct"])
                shutil.rmtree(filter_dir, ignore_errors=True)
            if args.check_keys and round_number == 0 and variant != "copy":
                keys = np.sort(pq.read_table(out, columns=["event_id"])["event_id"].to_numpy())
                run["distinct_in_output"] = int(np.count_nonzero(np.diff(keys)) + (len(keys) > 0))
                np.save(args.scratch / f"keys-{variant}.npy", keys)
            runs.append(run)
            print(f"{tag}: {wall:.1f} s ({cpu:.1f} CPU s, Spark's {app_cpu:.1f}, load {load:.1f}), "
                  "shuffle write "
                  f"{metrics['shuffle_write'] / 2**20:.1f} MiB "
                  f"(files {written_files / 2**20:.1f} MiB) read "
                  f"{metrics['shuffle_read'] / 2**20:.1f} MiB, JVM RSS "
                  f"{memory['jvm_rss'] / 2**20:.0f} MiB, Python PSS "
                  f"{memory['python_pss'] / 2**20:.0f} MiB, rows {run['rows_out']:,}", flush=True)
    sampler.stopped.set()
    spark.stop()

    key_check = None
    if args.check_keys and len(variants) > 1:
        kept = np.load(args.scratch / f"keys-{variants[0]}.npy")
        exact = np.load(args.scratch / f"keys-{variants[1]}.npy")
        key_check = {"bulkbloom_keys_not_in_exact": missing(kept, exact),
                     "exact_keys_not_in_bulkbloom": missing(exact, kept)}
    report = {"dump": info, "settings": settings, "num_shards_arg": args.num_shards,
              "fpr": args.fpr, "runs": runs, "key_check": key_check,
              "summary": summarize(runs, info, variants)}
    print(json.dumps(report["summary"], indent=1))
    if key_check:
        print(json.dumps(key_check))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(args.scratch, ignore_errors=True)


def summarize(runs: list, info: dict, variants: list) -> dict:
    def median(variant: str, get) -> float:
        values = [get(r) for r in runs if r["variant"] == variant]
        return statistics.median(values) if values else float("nan")

    figures = {
        "wall_s": lambda r: r["wall_s"],
        "shuffle_bytes": lambda r: r["shuffle_write"] + r["shuffle_read"],
        "shuffle_write": lambda r: r["shuffle_write"],
        "jvm_rss": lambda r: r["sampled"]["jvm_rss"],
        "jvm_heap_peak": lambda r: r["peaks"].get("JVMHeapMemory", 0),
        "execution_memory_peak": lambda r: r["peaks"].get("OnHeapExecutionMemory", 0)
        + r["peaks"].get("OffHeapExecutionMemory", 0),
        "python_pss": lambda r: r["sampled"]["python_pss"],
        "rows_out": lambda r: r["rows_out"],
    }
    figures["app_cpu_s"] = lambda r: r.get("app_cpu_s", float("nan"))
    figures["load"] = lambda r: r["load_before"]
    summary: dict = {"rows": info["rows"], "distinct": info["distinct"]}
    ours, theirs = (variants + variants)[:2]
    for name, get in figures.items():
        bb, dd = median(ours, get), median(theirs, get)
        summary[name] = {ours: bb, theirs: dd, "ratio": bb / dd if dd else None}
    copies = [r["wall_s"] for r in runs if r["variant"] == "copy"]
    if copies:
        summary["copy_wall_s"] = statistics.median(copies)
    bb_runs = [r for r in runs if r["variant"] == ours and "num_shards" in r]
    if bb_runs:
        if "routing_s" in bb_runs[0]:
            summary["routing_s"] = statistics.median(r["routing_s"] for r in bb_runs)
        summary["false_drops"] = info["distinct"] - statistics.median(r["rows_out"] for r in bb_runs)
        summary["expected_false_drops"] = bb_runs[0]["expected_false_drops"]
        summary["false_drops_sigmas"] = false_drops_sigmas(summary["false_drops"],
                                                           summary["expected_false_drops"])
        summary["num_shards"] = bb_runs[0]["num_shards"]
        summary["layout"] = bb_runs[0]["layout"]
    return summary


if __name__ == "__main__":
    main()
