"""Prints the Markdown tables of bench/RESULTS.md's Spark section from run_bench.py --json files.

    python bench/spark/table.py 1M.json 5M.json 20M.json
    python bench/spark/table.py --scaling 5M-1.json 5M-2.json ...   # runs with different --master
"""

import json
import statistics
import sys

MIB = 2**20


def median(runs: list, variant: str, get) -> float:
    return statistics.median(get(r) for r in runs if r["variant"] == variant)


def scaling(reports: list) -> None:
    """Wall medians by executor cores, the time per row and core (wall x cores / rows), and the
    machine's busy CPU seconds (medians), which count the Python workers beside the cores."""
    print("| rows | master | bulkbloom s | dropDuplicates s | copy s | wall ratio "
          "| bulkbloom µs a row and core | dropDuplicates µs a row and core "
          "| CPU s bulkbloom / dropDuplicates / copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for report in reports:
        runs, rows = report["runs"], report["dump"]["rows"]
        master = report["settings"]["spark.master"]
        cores = int(master[len("local["):-1])
        walls = {v: median(runs, v, lambda r: r["wall_s"]) for v in ("bulkbloom", "dropDuplicates")}
        copies = [r["wall_s"] for r in runs if r["variant"] == "copy"]
        copy = f"{statistics.median(copies):.1f}" if copies else "-"
        cpu = " / ".join(
            f"{median(runs, v, lambda r: r['cpu_s']):.1f}"
            if any(r["variant"] == v and "cpu_s" in r for r in runs) else "-"
            for v in ("bulkbloom", "dropDuplicates", "copy")
        )
        print(f"| {rows / 1e6:g}M | `{master}` | {walls['bulkbloom']:.1f} "
              f"| {walls['dropDuplicates']:.1f} | {copy} "
              f"| {walls['bulkbloom'] / walls['dropDuplicates']:.2f} "
              f"| {walls['bulkbloom'] * cores / rows * 1e6:.2f} "
              f"| {walls['dropDuplicates'] * cores / rows * 1e6:.2f} | {cpu} |")


def sigmas(summary: dict) -> str:
    """" (+2.3σ)": the false drops' distance from the expected count in its spreads (run_bench's
    false_drops_sigmas), or nothing for a summary written before run_bench gave it."""
    value = summary.get("false_drops_sigmas")
    return "" if value is None else f" ({value:+.1f}σ)"


def main() -> None:
    if sys.argv[1:2] == ["--scaling"]:
        scaling([json.load(open(path)) for path in sys.argv[2:]])
        return
    reports = [json.load(open(path)) for path in sys.argv[1:]]
    print("| rows | variant | wall s (runs) | shuffle write + read MiB | JVM heap peak MiB "
          "| Spark execution memory peak MiB | JVM RSS peak MiB | Python workers PSS peak MiB "
          "| rows kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    for report in reports:
        runs = report["runs"]
        rows = report["dump"]["rows"]
        for variant in ("bulkbloom", "dropDuplicates", "copy"):
            walls = sorted(r["wall_s"] for r in runs if r["variant"] == variant)
            if not walls:
                continue
            cells = [
                f"{median(runs, variant, lambda r: r['wall_s']):.1f} "
                f"({', '.join(f'{w:.1f}' for w in walls)})",
                f"{median(runs, variant, lambda r: r['shuffle_write'] + r['shuffle_read']) / MIB:,.1f}",
                f"{median(runs, variant, lambda r: r['peaks'].get('JVMHeapMemory', 0)) / MIB:,.0f}",
                f"{median(runs, variant, lambda r: r['peaks'].get('OnHeapExecutionMemory', 0)) / MIB:,.0f}",
                f"{median(runs, variant, lambda r: r['sampled']['jvm_rss']) / MIB:,.0f}",
                f"{median(runs, variant, lambda r: r['sampled']['python_pss']) / MIB:,.0f}",
                f"{median(runs, variant, lambda r: r['rows_out']):,.0f}",
            ]
            print(f"| {rows / 1e6:g}M | {variant} | " + " | ".join(cells) + " |")
    print()
    print("| rows | wall ratio | copy / dropDuplicates | shuffle ratio | JVM heap ratio "
          "| execution memory + Python ratio | JVM heap + Python ratio | bulkbloom routing s "
          "| shards | filtering | false drops | expected | key check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for report in reports:
        runs, summary = report["runs"], report["summary"]

        def plus_python(variant: str, jvm) -> float:
            # dropDuplicates runs no Python: the workers alive during its runs are bulkbloom's,
            # idle, so they are not counted as its memory.
            python = median(runs, variant, lambda r: r["sampled"]["python_pss"])
            return median(runs, variant, jvm) + (python if variant == "bulkbloom" else 0)

        def ratio(jvm) -> float:
            return plus_python("bulkbloom", jvm) / plus_python("dropDuplicates", jvm)

        heap = lambda r: r["peaks"].get("JVMHeapMemory", 0)  # noqa: E731
        execution = lambda r: r["peaks"].get("OnHeapExecutionMemory", 0)  # noqa: E731
        copy = summary.get("copy_wall_s")
        floor = f"{copy / summary['wall_s']['dropDuplicates']:.2f}" if copy else "-"
        filtering = sorted({r.get("filtering", "row-id UDF") for r in runs
                            if r["variant"] == "bulkbloom"})
        check = report.get("key_check") or {}
        print(f"| {report['dump']['rows'] / 1e6:g}M | {summary['wall_s']['ratio']:.2f} | {floor} "
              f"| {summary['shuffle_bytes']['ratio']:.3f} | {summary['jvm_heap_peak']['ratio']:.2f} "
              f"| {ratio(execution):.2f} | {ratio(heap):.2f} | {summary['routing_s']:.1f} "
              f"| {summary['num_shards']} | {', '.join(filtering)} "
              f"| {summary['false_drops']:,.0f} | {summary['expected_false_drops']:,.1f}"
              f"{sigmas(summary)} "
              f"| {check.get('bulkbloom_keys_not_in_exact', '-')} extra, "
              f"{check.get('exact_keys_not_in_bulkbloom', '-')} missing |")


if __name__ == "__main__":
    main()
