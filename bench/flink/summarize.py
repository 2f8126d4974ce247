#!/usr/bin/env python3
"""Medians and same-round ratios of bench/flink/run.sh's output, as a markdown table.

Each run line is `key=value ...` with `mode`, `records` and `rep`; a line with `failed=` is a run
that did not finish. Ratios against ttl-rocksdb are taken within each round, then their median.
"""
import statistics
import sys
from collections import defaultdict

BASELINE = "ttl-rocksdb"


def parse(path):
    runs = []
    with open(path) as lines:
        for line in lines:
            if line.startswith("#") or "=" not in line:
                continue
            fields = dict(part.split("=", 1) for part in line.split())
            # Runs with periodic checkpoints are their own mode, "bloom+ckpt2000ms".
            interval = fields.get("checkpoint_interval_ms", "0")
            if interval != "0":
                fields["mode"] += f"+ckpt{interval}ms"
            runs.append(fields)
    return runs


def mib(value):
    return f"{value / 2**20:.1f}"


def main(path):
    runs = parse(path)
    by_key = defaultdict(list)
    failed = defaultdict(list)
    for run in runs:
        key = (int(run["records"]), run["mode"])
        (failed if "failed" in run else by_key)[key].append(run)
    rounds = defaultdict(dict)
    for (records, mode), group in by_key.items():
        for run in group:
            rounds[(records, run["rep"])][mode] = run

    def median(records, mode, field):
        return statistics.median(float(run[field]) for run in by_key[(records, mode)])

    def ratio(records, mode, field, invert=False):
        values = []
        for (size, _), modes in rounds.items():
            if size == records and mode in modes and BASELINE in modes:
                a, b = float(modes[mode][field]), float(modes[BASELINE][field])
                if a > 0 and b > 0:
                    values.append(b / a if invert else a / b)
        return f"{statistics.median(values):.2f}" if values else "–"

    print("| records | mode | runs | records/s | × rocksdb | state MiB | checkpoint MiB |"
          " ÷ rocksdb | checkpoint s | restore s (init) | probe job s: cold / restored |"
          " kept − expected |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for records, mode in sorted(set(by_key) | set(failed)):
        group = by_key.get((records, mode), [])
        if not group:
            reason = failed[(records, mode)][0]["failed"]
            print(f"| {records:.0e} | {mode} | 0 of {len(failed[(records, mode)])} | failed: "
                  f"{reason} | | | | | | | | |")
            continue
        extra = [int(run["kept"]) - int(run["expected_kept"]) for run in group]
        print(
            f"| {records:.0e} | {mode} | {len(group)} |"
            f" {median(records, mode, 'records_per_s'):,.0f} |"
            f" {ratio(records, mode, 'records_per_s')} |"
            f" {mib(median(records, mode, 'state_bytes'))} |"
            f" {mib(median(records, mode, 'checkpoint_bytes'))} |"
            f" {ratio(records, mode, 'checkpoint_bytes', invert=True)} |"
            f" {median(records, mode, 'checkpoint_s'):.2f} |"
            f" {median(records, mode, 'restore_init_s'):.2f} |"
            f" {median(records, mode, 'cold_probe_s'):.2f} /"
            f" {median(records, mode, 'restore_probe_s'):.2f} |"
            f" {', '.join(str(e) for e in extra)} |")

    periodic = sorted(key for key in by_key if "+ckpt" in key[1])
    if not periodic:
        return
    print()
    print("| records | mode | window MiB | records/s | ÷ same without checkpoints |"
          " checkpoints | MiB per checkpoint: mean / max | longest sink gap ms |")
    print("|---|---|---|---|---|---|---|---|")
    for records, mode in periodic:
        plain = mode.split("+ckpt")[0]
        base = (
            f"{median(records, mode, 'records_per_s') / median(records, plain, 'records_per_s'):.2f}"
            if (records, plain) in by_key else "–")
        window = median(records, mode, "state_bytes")
        print(
            f"| {records:.0e} | {mode} | {mib(window)} |"
            f" {median(records, mode, 'records_per_s'):,.0f} | {base} |"
            f" {median(records, mode, 'periodic_checkpoints'):.0f} |"
            f" {mib(median(records, mode, 'periodic_checkpoint_bytes_avg'))} /"
            f" {mib(median(records, mode, 'periodic_checkpoint_bytes_max'))} |"
            f" {median(records, mode, 'longest_sink_gap_ms'):.0f} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py RUN_OUTPUT")
    main(sys.argv[1])
