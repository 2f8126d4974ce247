#!/usr/bin/env python3
"""Checks of `bulkbloom bench`'s hardware report: the JSON and the HTML a short run writes, and
--compare.

usage: test_bench_report.py BULKBLOOM_BINARY CASE   (CASE is a function name below without "case_")
No figure is checked against a speed: only that every figure is there, consistent with its runs,
and drawn.
"""
import copy
import csv
import html as htmllib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

BIN = None
WORK = None
SIZES = [16 << 10, 64 << 10]
REPEAT = 5  # the fewest runs a side that --compare judges
OPERATIONS = ["insert", "contains", "insert_if_absent"]
SVG = "{http://www.w3.org/2000/svg}"


def run(args, expect_rc=0, env=None):
    proc = subprocess.run([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=WORK,
                          env=None if env is None else {**os.environ, **env})
    if proc.returncode != expect_rc:
        raise AssertionError(f"bulkbloom {' '.join(args)}: exit {proc.returncode}, expected "
                             f"{expect_rc}\nstderr: {proc.stderr.decode(errors='replace')}")
    return proc


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def short_run(directory):
    """A quick sweep over two small sizes; returns the report's JSON and HTML and the output."""
    proc = run(["bench", "--quick", "--sizes", "16K,64K", "--keys", "4096", "--repeat",
                str(REPEAT), "--report", directory])
    with open(os.path.join(directory, "report.json")) as f:
        report = json.load(f)
    with open(os.path.join(directory, "report.html")) as f:
        html = f.read()
    return report, html, proc.stdout.decode()


def svgs_of(html):
    """Each inline <svg> of the page, parsed."""
    blocks = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    return [ET.fromstring(block) for block in blocks]


def check_report(report):
    check(report["schema"] == "bulkbloom-bench-report", f"schema: {report.get('schema')}")
    check(report["schema_version"] == 4, f"schema_version: {report.get('schema_version')}")
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date"]), report["date"])
    check(report["command"][:2] == ["bulkbloom", "bench"] and "--quick" in report["command"],
          f"command: {report['command']}")
    machine = report["machine"]
    for field in ("cpu_model", "transparent_hugepages", "kernel", "chosen_implementation",
                  "chosen_because", "compiler", "bulkbloom_version"):
        check(isinstance(machine[field], str) and machine[field], f"machine {field}: {machine}")
    for field in ("logical_cpus", "usable_cpus", "physical_cores", "memory_bytes", "numa_nodes",
                  "threads_per_core", "cpu_mhz"):
        check(machine[field] >= 1, f"machine {field}: {machine[field]}")
    # The identity that tells two machines apart, read from /proc/cpuinfo.
    with open("/proc/cpuinfo") as f:
        cpuinfo = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines()
                       if ":" in line)
    cpuinfo = {k.strip(): v.strip() for k, v in cpuinfo.items()}
    for field, key in (("cpu_family", "cpu family"), ("cpu_model_number", "model"),
                       ("cpu_stepping", "stepping")):
        if key in cpuinfo:
            check(machine[field] == int(cpuinfo[key]), f"{field}: {machine[field]} vs {cpuinfo}")
    check(machine["virtual_machine"] == ("hypervisor" in cpuinfo.get("flags", "").split()),
          f"virtual_machine: {machine['virtual_machine']}")
    check(re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", machine["git_commit"]),
          machine["git_commit"])
    check(isinstance(machine["build_flags"], str), machine["build_flags"])
    conditions = report["conditions"]
    for when in ("before", "after"):
        check(len(conditions[f"load_average_{when}"]) == 3, conditions)
    check(0 <= conditions["steal_fraction"] <= 1 and 0 < conditions["busy_fraction"] <= 1,
          conditions)
    check(machine["caches"], "no caches described")
    for cache in machine["caches"]:
        check(cache["level"] >= 1 and cache["size_bytes"] > 0 and cache["instances"] >= 1, cache)
    check(isinstance(machine["gpus"], list), "gpus is not a list")
    check("cpu/scalar" in machine["implementations"], machine["implementations"])
    check(machine["chosen_implementation"] in machine["implementations"] or
          machine["chosen_implementation"].startswith("cuda"), machine["chosen_implementation"])

    settings = report["settings"]
    check(settings["sizes_bytes"] == SIZES, f"sizes: {settings['sizes_bytes']}")
    check(settings["repetitions"] == REPEAT, settings)
    all_threads = settings["all_threads"]
    thread_counts = sorted({1, all_threads})

    limits = {(l["filter_bytes"], l["threads"]): l for l in report["limits"]}
    check(len(limits) == len(report["limits"]), "a limit appears twice")
    for size in SIZES:
        for threads in thread_counts:
            l = limits.get((size, threads))
            check(l is not None, f"no limits for {size} bytes, {threads} threads")
            for field in ("random_read_lines_per_s", "random_rmw_lines_per_s",
                          "seq_read_bytes_per_s"):
                check(l[field] > 0, f"limit {field} not positive: {l}")
            check(l["huge_pages"] is None or 0 <= l["huge_pages"] <= 1, l)

    cases = {}
    for c in report["cases"]:
        key = (c["role"], c["operation"], c["threads"], c["filter_bytes"])
        check(key not in cases, f"case twice: {key}")
        cases[key] = c
        runs = c["runs_keys_per_s"]
        check(len(runs) == REPEAT and all(r > 0 for r in runs), f"runs: {c}")
        median = statistics.median(runs)
        check(abs(c["keys_per_s"] - median) <= 1e-9 * median, f"keys_per_s is not the median: {c}")
        noise = (max(runs) - min(runs)) / 2 / median
        check(abs(c["noise"] - noise) <= 1e-9 + 1e-9 * noise, f"noise is not the half-range: {c}")
        check(isinstance(c["remeasured"], bool) and isinstance(c["probe_failure"], bool), c)
        check(c["remeasured"] or not c["probe_failure"], f"a probe failure never remeasured: {c}")
        check(c["keys_per_call"] == 4096, c)
        if c["role"] != "gpu":
            # Read from /proc/self/smaps, which every Linux has: a fraction of the filter.
            check(0 <= c["huge_pages"] <= 1, f"huge_pages: {c}")
            check(c["limit"] == ("random_read" if c["operation"] == "contains" else "random_rmw"),
                  f"limit kind: {c}")
            # One probe per run: the one of the run's round.
            limits = c["runs_limit_lines_per_s"]
            check(len(limits) == REPEAT and all(l > 0 for l in limits), f"run limits: {c}")
            limit = statistics.median(limits)
            check(abs(c["limit_lines_per_s"] - limit) <= 1e-9 * limit, c)
            check(abs(c["fraction_of_limit"] - c["keys_per_s"] / limit) < 1e-9, c)
            # A cell above its limit is measured again, and if still above, marked as such.
            check(c["fraction_of_limit"] <= 1 or c["probe_failure"], f"above its limit: {c}")
            low, high = c["limit_quartiles"]
            check(0 < low <= min(limits) and max(limits) <= high,
                  f"a probe's median is outside the probes' quartiles: {c}")
    roles = {c["role"] for c in report["cases"]}
    check("reference" in roles, f"no scalar reference: {roles}")
    for role in roles:
        for op in OPERATIONS:
            for threads in threads_of(role, thread_counts):
                for size in SIZES:
                    check((role, op, threads, size) in cases,
                          f"missing case {role} {op} {threads} threads {size} bytes")
    # The latency of each size: the memory's dependent load and one contains(key) call.
    latency = {l["filter_bytes"]: l for l in report["latency"]}
    check(sorted(latency) == SIZES, f"latency sizes: {sorted(latency)}")
    for l in latency.values():
        check(l["dependent_load_ns"] > 0 and l["one_key_contains_ns"] > 0 and
              l["implementation"] in machine["implementations"], f"latency: {l}")
    check(isinstance(report["notes"], list), "notes is not a list")
    return cases, thread_counts


def check_gpu_section(report, html, stdout):
    """The GPU section of a real run: measured where the registry has a usable CUDA entry, else
    absent with exactly the reason the registry gives (or that the build has no CUDA backend),
    said in the output, the JSON and the page; never a figure without a device."""
    machine, gpu = report["machine"], report["gpu"]
    unusable = machine["implementations_not_usable"]
    usable = [i for i in machine["implementations"] if i.startswith("cuda")]
    if "cuda" in unusable:
        expected = unusable["cuda"]
    elif usable:
        expected = ""
    else:
        expected = "this build of bulkbloom does not include the CUDA backend"
    check(gpu["absent"] == expected, f"gpu absent: {gpu['absent']!r}, expected {expected!r}")
    check("<h2>GPU</h2>" in html, "the page has no GPU section")
    if expected:
        check(gpu["cases"] == [], f"GPU figures without a device: {gpu['cases']}")
        check(f"GPU section: not measured: {expected}" in stdout, f"output: {stdout[-600:]}")
        check(htmllib.escape(expected, quote=False) in html, "the page does not say why")
        return
    for c in gpu["cases"]:
        check(c["stand_in"] == "" and c["verified_keys"] > 0, f"gpu case: {c}")
        ops = [r["operation"] for r in c["device_resident"]]
        check(ops == OPERATIONS and [r["operation"] for r in c["host_resident_end_to_end"]] ==
              OPERATIONS, f"gpu operations: {c}")
        for r in c["device_resident"]:
            check(abs(r["fraction_of_limit"] - r["keys_per_s"] /
                      c["random_block_reads"]["keys_per_s"]) < 1e-9, f"gpu fraction: {r}")


def synthetic_gpu_case(stand_in=""):
    """A GPU section's case as a version 4 report holds it."""
    def rate(op, keys_per_s):
        return {"operation": op, "runs_keys_per_s": [keys_per_s] * 3, "keys_per_s": keys_per_s}
    device = [dict(rate(op, 1e9 * (i + 1)), fraction_of_limit=(i + 1) / 4)
              for i, op in enumerate(OPERATIONS)]
    return {"implementation": "cuda/sm_90", "stand_in": stand_in, "filter_bytes": 1 << 30,
            "block_bytes": 64, "keys_per_call": 1 << 24, "verified_keys": 4096,
            "random_block_reads": rate("random block reads", 4e9), "device_resident": device,
            "host_resident_end_to_end": [rate(op, 2e8) for op in OPERATIONS]}


def case_gpu_section():
    """A report's GPU section read back: device-resident rows beside the limit, host-resident
    rows apart and labelled end to end, a stand-in named loudly as no GPU; a version 3 report
    loads saying it predates the section; a GPU figure the CPU did not confirm is refused."""
    report = synthetic_report(lambda i, n: [1e8] * n)
    report["schema_version"] = 4
    report["gpu"] = {"absent": "", "failures": ["8 GiB: cannot allocate 8192 MiB of GPU memory"],
                     "cases": [synthetic_gpu_case(), synthetic_gpu_case("fake CUDA runtime")]}
    paths = write_reports((("gpu.json", report),))
    out = os.path.join(WORK, "gpu")
    stdout = run(["bench", "--load", paths[0], "--report", out]).stdout.decode()
    check(re.search(r"1 GiB  cuda/sm_90 +contains +\| +2\.0+ G/s \| +4\.0+ G/s +50%", stdout),
          f"no device-resident contains row beside its limit: {stdout}")
    check("keys in pinned host memory, end to end through PCIe" in stdout, stdout)
    check(re.search(r"1 GiB  cuda/sm_90 +insert_if_absent +\| +200\.0+ M/s", stdout), stdout)
    check("measured on a fake CUDA runtime, NOT a GPU" in stdout, stdout)
    check("a size not measured: 8 GiB: cannot allocate" in stdout, stdout)
    with open(os.path.join(out, "report.html")) as f:
        html = f.read()
    for said in ("pinned host memory, end to end through PCIe", "in device memory",
                 "measured on a fake CUDA runtime, not a GPU", "8 GiB: cannot allocate"):
        check(said in html, f"the page lacks {said!r}")
    with open(os.path.join(out, "report.json")) as f:
        again = json.load(f)
    check(again["gpu"] == report["gpu"], f"the GPU section changed on the way: {again['gpu']}")

    old = synthetic_report(lambda i, n: [1e8] * n)
    paths = write_reports((("v3.json", old),))
    stdout = run(["bench", "--load", paths[0]]).stdout.decode()
    check("GPU section: not measured: this report (schema version 3) predates the GPU section"
          in stdout, stdout)

    unchecked = copy.deepcopy(report)
    unchecked["gpu"]["cases"][0]["verified_keys"] = 0
    paths = write_reports((("unchecked.json", unchecked),))
    proc = run(["bench", "--load", paths[0]], expect_rc=1)
    check(b"a GPU case has no verified keys" in proc.stderr, proc.stderr.decode())


def threads_of(role, thread_counts):
    """The thread counts a role's cases run with: a GPU's cases are one series each."""
    return [1] if role == "gpu" else thread_counts


def polylines(svg):
    return {p.get("data-series"): p for p in svg.iter(SVG + "polyline")}


def check_html(report, html, thread_counts):
    check("<script" not in html.lower(), "the page has a script")
    fetched = re.findall(r"""(?:src|href)\s*=\s*["']?(?!#)[^"'\s>]+""", html)
    check(not fetched, f"the page refers to other resources: {fetched}")
    check(not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html), "the page names a URL")
    svgs = svgs_of(html)
    roles = []
    for c in report["cases"]:
        if c["role"] not in roles:
            roles.append(c["role"])
    check(len(svgs) >= len(roles), f"{len(svgs)} plots for {len(roles)} roles")
    for role, svg in zip(roles, svgs):
        lines = polylines(svg)
        expected = {f"{role}/{op}/{t}" for op in OPERATIONS for t in threads_of(role, thread_counts)}
        if role != "gpu":
            expected |= {f"limit/{kind}/{t}" for kind in ("random_read", "random_rmw")
                         for t in thread_counts}
        check(set(lines) == expected,
              f"{role} plot: series {sorted(lines)}, expected {sorted(expected)}")
        view = [float(v) for v in svg.get("viewBox").split()]
        for name, line in lines.items():
            points = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
            check(len(points) == len(SIZES), f"{name}: {len(points)} points for {len(SIZES)} sizes")
            xs = [x for x, _ in points]
            check(xs == sorted(xs) and len(set(xs)) == len(xs), f"{name}: x not increasing: {xs}")
            for x, y in points:
                check(view[0] <= x <= view[2] and view[1] <= y <= view[3],
                      f"{name}: point {x},{y} outside the plot")
    # Every case and limit point has its spread drawn as a bar.
    bars = [l for svg in svgs for l in svg.iter(SVG + "line") if l.get("class") == "spread"]
    points = sum(len(p.get("points").split()) for svg in svgs for name, p in polylines(svg).items()
                 if not name.startswith("latency/"))
    check(len(bars) == points, f"{len(bars)} spread bars for {points} points")
    # The latency plot: the dependent load, one contains(key) and the batch's time per key, in ns.
    latency = [svg for svg in svgs if any(name.startswith("latency/") for name in polylines(svg))]
    check(len(latency) == 1, f"{len(latency)} latency plots")
    lines = polylines(latency[0])
    check(set(lines) == {"latency/dependent_load", "latency/one_key_contains",
                         "latency/batch_contains"}, f"latency series: {sorted(lines)}")
    check(all(len(l.get("points").split()) == len(SIZES) for l in lines.values()),
          "a latency series lacks a size")
    check("nanoseconds" in ET.tostring(latency[0], encoding="unicode"), "latency without units")
    # Every case is in the table of figures.
    rows = re.findall(r"<tr><td class=\"n\">[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>", html)
    check(len(rows) == len(report["cases"]), f"{len(rows)} table rows, {len(report['cases'])} cases")


def case_report():
    """A short run writes a complete report.json, report.csv beside it and a self-contained
    report.html with the headline and the identity above the plots; --load alone prints it."""
    directory = os.path.join(WORK, "r")
    report, html, stdout = short_run(directory)
    check_gpu_section(report, html, stdout)
    _, thread_counts = check_report(report)
    check("comparison" not in report, "a comparison without --compare")
    check_html(report, html, thread_counts)
    headline, identity, plots = (html.find(t) for t in ("<h2>Headline", "<h2>Identity", "<svg"))
    check(0 < headline < identity < plots, f"order: headline {headline}, identity {identity}, "
          f"plots {plots}")
    notes = html.find("<h2>Reading the figures")
    check(notes == -1 or notes > plots, "the notes come before the plots")
    with open(os.path.join(directory, "report.csv")) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == len(report["cases"]), f"{len(rows)} CSV rows, {len(report['cases'])} cases")
    for row, c in zip(rows, report["cases"]):
        check(float(row["keys_per_s"]) == float(f"{c['keys_per_s']:.6g}") and
              row["operation"] == c["operation"] and
              len(row["runs_keys_per_s"].split(";")) == REPEAT and
              len(row["runs_limit_lines_per_s"].split(";")) == REPEAT, f"CSV {row} vs {c}")
    # --load alone prints what it loaded: a row per case.
    proc = run(["bench", "--load", os.path.join(directory, "report.json")])
    lines = [l for l in proc.stdout.decode().splitlines()
             if re.match(r"\s*\d+(\.\d)? [KMG]iB  ", l)]
    check(len(lines) == len(report["cases"]), f"--load printed {len(lines)} rows")


def case_compare():
    """A report against itself differs nowhere; a case made twice as fast is flagged, alone."""
    first = os.path.join(WORK, "r")
    report, _, _ = short_run(first)
    _, thread_counts = check_report(report)
    path = os.path.join(first, "report.json")
    proc = run(["bench", "--load", path, "--compare", path, "--report", os.path.join(WORK, "self")])
    check(b"cases compared: 0 changed" in proc.stdout, proc.stdout.decode())
    check(b"WARNING" not in proc.stderr, proc.stderr.decode())
    with open(os.path.join(WORK, "self", "report.json")) as f:
        again = json.load(f)
    check(again["cases"] == report["cases"], "--load changed the figures")
    differences = again["comparison"]["differences"]
    check(len(differences) == len(report["cases"]),
          f"{len(differences)} differences for {len(report['cases'])} cases")
    for d in differences:
        check(d["ratio"] == 1 and not d["flagged"] and d["verdict"] == "same",
              f"a report differs from itself: {d}")
    with open(os.path.join(WORK, "self", "report.html")) as f:
        html = f.read()
    ratio_plot = [s for s in svgs_of(html) if any(
        (p.get("data-series") or "").startswith("ratio/") for p in s.iter(SVG + "polyline"))]
    check(len(ratio_plot) == 1, f"{len(ratio_plot)} ratio plots")
    roles = {c["role"] for c in report["cases"]}
    expected = {f"ratio/{r}/{op}/{t}" for r in roles for op in OPERATIONS
                for t in threads_of(r, thread_counts)}
    check(set(polylines(ratio_plot[0])) == expected,
          f"ratio series {sorted(polylines(ratio_plot[0]))}, expected {sorted(expected)}")

    # One case twice as fast, its runs moved past each other: flagged, and no other.
    baseline = os.path.join(WORK, "baseline.json")
    with open(baseline, "w") as f:
        json.dump(report, f)
    changed = copy.deepcopy(report)
    target = changed["cases"][len(changed["cases"]) // 2]
    target["runs_keys_per_s"] = [r * 2 * max(target["runs_keys_per_s"]) / min(
        target["runs_keys_per_s"]) for r in target["runs_keys_per_s"]]
    target["keys_per_s"] = statistics.median(target["runs_keys_per_s"])
    faster = os.path.join(WORK, "faster.json")
    with open(faster, "w") as f:
        json.dump(changed, f)
    proc = run(["bench", "--load", faster, "--compare", baseline, "--report",
                os.path.join(WORK, "cmp")])
    check(b"cases compared: 1 changed" in proc.stdout, proc.stdout.decode())
    with open(os.path.join(WORK, "cmp", "report.json")) as f:
        flagged = [d for d in json.load(f)["comparison"]["differences"] if d["flagged"]]
    check(len(flagged) == 1 and flagged[0]["operation"] == target["operation"] and
          flagged[0]["filter_bytes"] == target["filter_bytes"] and
          flagged[0]["verdict"] == "faster", f"flagged: {flagged}, changed: {target}")


def synthetic_report(runs_of, implementation="cpu/AVX2", cpu="Synthetic CPU", repeat=5,
                     limits_of=lambda i, n: [1e9] * n):
    """A report of 3 operations x 2 thread counts x 8 sizes of the best implementation, each
    case's runs drawn by runs_of(case_index, repeat) and the limits of their rounds by
    limits_of(case_index, repeat)."""
    cases = []
    for size in [16 << (10 + 2 * i) for i in range(8)]:
        for threads in (1, 2):
            for op in OPERATIONS:
                limits = limits_of(len(cases), repeat)
                runs = runs_of(len(cases), repeat)
                median = statistics.median(runs)
                cases.append({
                    "implementation": implementation, "role": "best", "operation": op,
                    "threads": threads, "all_threads": threads == 2, "filter_bytes": size,
                    "keys_per_call": 4096, "runs_keys_per_s": runs, "keys_per_s": median,
                    "noise": (max(runs) - min(runs)) / 2 / median,
                    "limit": "random_read" if op == "contains" else "random_rmw",
                    "runs_limit_lines_per_s": limits,
                    "limit_quartiles": [0.9 * min(limits), 1.1 * max(limits)],
                    "remeasured": False, "probe_failure": False, "huge_pages": 1})
    return {"schema": "bulkbloom-bench-report", "schema_version": 3,
            "date": "2026-12-02T10:00:00Z", "command": ["bulkbloom", "bench"],
            "machine": {"cpu_model": cpu}, "settings": {"keys_per_call": 4096},
            "conditions": None, "warnings": [], "limits": [], "latency": [], "cases": cases,
            "notes": []}


def write_reports(named):
    """Writes each (name, report) of `named` into WORK; returns their paths."""
    paths = []
    for name, report in named:
        paths.append(os.path.join(WORK, name))
        with open(paths[-1], "w") as f:
            json.dump(report, f)
    return paths


def compare_synthetic(now, before):
    """Runs --load NOW --compare BEFORE; returns the comparison and the stderr."""
    paths = write_reports((("now.json", now), ("before.json", before)))
    out = os.path.join(WORK, "synthetic")
    shutil.rmtree(out, ignore_errors=True)
    proc = run(["bench", "--load", paths[0], "--compare", paths[1], "--report", out])
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f)["comparison"], proc.stderr.decode()


def case_compare_rule():
    """The comparison rule on synthetic reports: two reports of one distribution flag at most 5 %
    of their cases; a 20 % shift is flagged everywhere, and so is a 50 % one in cases whose runs
    spread +-15 % (noise no longer hides a change);
    fewer than 5 runs a side are not judged; unlike implementations or CPUs are warned about."""
    rng = random.Random(38)

    def drawn(scale, spread):
        return lambda i, n: [scale * (100 + i) * 1e6 * rng.uniform(1 - spread, 1 + spread)
                             for _ in range(n)]

    flagged = compared = 0
    for _ in range(10):
        comparison, _ = compare_synthetic(synthetic_report(drawn(1, 0.1)),
                                          synthetic_report(drawn(1, 0.1)))
        compared += len(comparison["differences"])
        flagged += sum(d["flagged"] for d in comparison["differences"])
    check(compared == 480 and flagged <= 0.05 * compared,
          f"one distribution twice: {flagged} of {compared} flagged")

    for scale, spread in ((1.2, 0.02), (1.2, 0.08), (1.5, 0.15)):
        comparison, _ = compare_synthetic(synthetic_report(drawn(scale, spread)),
                                          synthetic_report(drawn(1, spread)))
        verdicts = {d["verdict"] for d in comparison["differences"]}
        check(verdicts == {"faster"}, f"x{scale}, runs +-{spread}: {verdicts}")

    comparison, _ = compare_synthetic(synthetic_report(drawn(2, 0.3), repeat=3),
                                      synthetic_report(drawn(1, 0.3), repeat=3))
    check({d["verdict"] for d in comparison["differences"]} == {"too few runs"},
          "3 runs a side were judged")
    check("0 changed" in comparison["rule"] and "48 with too few runs" in comparison["rule"],
          comparison["rule"])

    comparison, stderr = compare_synthetic(
        synthetic_report(drawn(2, 0.01), implementation="cpu/AVX3", cpu="Other CPU"),
        synthetic_report(drawn(1, 0.01)))
    check({d["verdict"] for d in comparison["differences"]} == {"unlike implementations"},
          "unlike implementations were judged")
    check("WARNING: the machines differ: cpu_model Other CPU now, Synthetic CPU before" in stderr
          and "WARNING: the implementations differ in 48 cases" in stderr, stderr)
    check(len(comparison["warnings"]) == 2, comparison["warnings"])


def case_compare_limits():
    """Runs read against their rounds' limits: the machine slower on one side (case and limit
    moved together, e.g. another job took memory bandwidth) is said, not flagged; the case alone
    slower is flagged, also when the machine changed too; the limit alone moved is no change."""
    rng = random.Random(39)

    def sides(case_scale, machine_scale, limit_scale):
        """runs_of and limits_of for one report: each run and its round's probe share the
        machine's speed in that round (machine_scale, +-3 % per round); the case's own speed is
        case_scale, the probe's limit_scale."""
        machine = {}

        def speed(i, n):
            if i not in machine:
                machine[i] = [machine_scale * rng.uniform(0.97, 1.03) for _ in range(n)]
            return machine[i]

        def runs_of(i, n):
            return [case_scale * (100 + i) * 1e6 * m * rng.uniform(0.98, 1.02)
                    for m in speed(i, n)]

        def limits_of(i, n):
            return [limit_scale * 1e9 * m * rng.uniform(0.98, 1.02) for m in speed(i, n)]
        return runs_of, limits_of

    def verdicts(now, before):
        reports = []
        for scales in (now, before):
            runs_of, limits_of = sides(*scales)
            reports.append(synthetic_report(runs_of, limits_of=limits_of))
        comparison, _ = compare_synthetic(*reports)
        return comparison, {d["verdict"] for d in comparison["differences"]}

    comparison, found = verdicts((1, 0.7, 1), (1, 1, 1))
    check(found == {"moved with its limit"}, f"the machine slower: {found}")
    check("0 changed" in comparison["rule"] and "48 moved only with their limits" in
          comparison["rule"], comparison["rule"])
    check(all(abs(d["ratio_to_limit"] - 1) < 0.06 and d["ratio"] < 0.8
              for d in comparison["differences"]), comparison["differences"])
    _, found = verdicts((0.7, 1, 1), (1, 1, 1))
    check(found == {"slower"}, f"the case slower: {found}")
    _, found = verdicts((0.7, 0.7, 1), (1, 1, 1))
    check(found == {"slower"}, f"the case and the machine slower: {found}")
    # The runs moved, the limits too but less, and the runs over them overlap: unsure.
    comparison, _ = compare_synthetic(
        synthetic_report(lambda i, n: [(70 + r) * 1e6 for r in range(n)],
                         limits_of=lambda i, n: [(0.6 + 0.1 * r) * 1e9 for r in range(n)]),
        synthetic_report(lambda i, n: [(100 + r) * 1e6 for r in range(n)]))
    check({d["verdict"] for d in comparison["differences"]} == {"unsure"},
          f"overlapping against the limits: {comparison['differences'][0]}")
    check("0 changed" in comparison["rule"] and "48 unsure" in comparison["rule"],
          comparison["rule"])
    _, found = verdicts((1, 1, 1), (1, 1, 1.3))
    check(found == {"same"}, f"the limit alone moved: {found}")
    _, found = verdicts((1.3, 1, 1), (1, 1, 1))
    check(found == {"faster"}, f"the case faster: {found}")


def case_overlay():
    """--overlay draws other reports' best implementation beside this one's, a plot per
    operation, and says above them what makes the reports unlike: CPU, build, implementation."""
    def drawn(i, n):
        return [(100 + i) * 1e6 * (1 + 0.01 * r) for r in range(n)]

    here = synthetic_report(drawn)
    there = synthetic_report(drawn, implementation="cpu/AVX3", cpu="Other CPU")
    here["machine"]["build_flags"], there["machine"]["build_flags"] = "-O3", "-O2 -march=native"
    paths = write_reports((("here.json", here), ("there.json", there)))
    out = os.path.join(WORK, "overlay")
    run(["bench", "--load", paths[0], "--overlay", paths[1], "--report", out])
    with open(os.path.join(out, "report.html")) as f:
        html = f.read()
    plots = [svg for svg in svgs_of(html) if any(
        (p.get("data-series") or "").startswith("overlay/") for p in svg.iter(SVG + "polyline"))]
    check(len(plots) == len(OPERATIONS), f"{len(plots)} overlay plots")
    for op, svg in zip(OPERATIONS, plots):
        lines = polylines(svg)
        expected = {f"overlay/{k}/{op}/{t}" for k in (0, 1) for t in (1, 2)}
        check(set(lines) == expected, f"{op}: {sorted(lines)}, expected {sorted(expected)}")
        for line in lines.values():
            check(len(line.get("points").split()) == 8, f"{op}: {line.get('points')}")
    for said in ("the implementations differ: best ran cpu/AVX3 there, cpu/AVX2 here",
                 "the machines differ: cpu_model Other CPU there, Synthetic CPU here",
                 "the builds differ: build_flags '-O2 -march=native' there, '-O3' here",
                 "Other CPU, 2026-12-02", "#1 cpu/AVX3, 2 threads"):
        check(said in html, f"the page lacks {said!r}")
    proc = run(["bench", "--load", paths[0], "--overlay", paths[1]], expect_rc=2)
    check(b"--overlay draws into the page" in proc.stderr, proc.stderr.decode())
    proc = run(["bench", "--load", paths[0], "--overlay", "missing.json", "--report", out],
               expect_rc=1)
    check(b"missing.json" in proc.stderr, proc.stderr.decode())


def case_notes():
    """The notes are read from the figures: random RMWs above random reads at one size, and a case
    above its limit, are each explained; a report without them has no such note."""
    report, _, _ = short_run(os.path.join(WORK, "r"))
    for c in report["cases"]:
        # Every probe equal, every case well under it: nothing to explain.
        c["runs_limit_lines_per_s"] = [1e12] * REPEAT
    plain = os.path.join(WORK, "plain.json")
    with open(plain, "w") as f:
        json.dump(report, f)
    proc = run(["bench", "--load", plain, "--report", os.path.join(WORK, "plain")])
    with open(os.path.join(WORK, "plain", "report.json")) as f:
        notes = json.load(f)["notes"]
    check(not any("exceeds the random read limit" in n for n in notes),
          f"notes without a cause: {notes}")

    odd = copy.deepcopy(report)
    for c in odd["cases"]:
        if c["filter_bytes"] == SIZES[1] and c["threads"] == 1 and c["limit"] == "random_rmw":
            c["runs_limit_lines_per_s"] = [2e12] * REPEAT
    above = odd["cases"][0]
    above["runs_limit_lines_per_s"] = [above["keys_per_s"] / 2] * REPEAT
    above["remeasured"] = above["probe_failure"] = True
    path = os.path.join(WORK, "odd.json")
    with open(path, "w") as f:
        json.dump(odd, f)
    proc = run(["bench", "--load", path, "--report", os.path.join(WORK, "odd")])
    with open(os.path.join(WORK, "odd", "report.json")) as f:
        notes = json.load(f)["notes"]
    rmw = [n for n in notes if "exceeds the random read limit" in n]
    check(len(rmw) == 1 and "64 KiB with 1 thread (2.00x)" in rmw[0] and "16 KiB" not in
          rmw[0].split(".")[0], f"RMW note: {rmw}")
    # A case above its limit is a probe failure, marked in the data and the table, never explained.
    named = f"{above['operation']}, 1 thread at 16 KiB"
    check(not any(named in n or "above their paired limit" in n for n in notes),
          f"a probe failure explained: {notes}")
    with open(os.path.join(WORK, "odd", "report.html")) as f:
        page = f.read()
    check(rmw[0][:60] in page, "the page lacks the note")
    check(page.count("probe failure</td>") == 1, "the table does not mark the probe failure once")


def case_repeat_once():
    """One run per case has no spread: its noise is unknown (null), not 0, and the page says so.
    More threads than usable CPUs: a warning, and the cases labelled with the threads they ran.
    A run slowed on purpose says so in its warnings and settings."""
    directory = os.path.join(WORK, "once")
    threads = len(os.sched_getaffinity(0)) + 1
    proc = run(["bench", "--quick", "--sizes", "16K", "--keys", "4096", "--repeat", "1",
                "--threads", str(threads), "--report", directory],
               env={"BULKBLOOM_BENCH_SLOWDOWN": "contains:2"})
    warning = f"{threads} threads share {threads - 1} usable CPUs"
    check(f"WARNING: {warning}".encode() in proc.stderr, proc.stderr.decode())
    with open(os.path.join(directory, "report.json")) as f:
        report = json.load(f)
    cases = report["cases"]
    check(any(w.startswith(warning) for w in report["warnings"]), report["warnings"])
    check(any(w.startswith("BULKBLOOM_BENCH_SLOWDOWN: every contains call does 2x its work")
              for w in report["warnings"]), report["warnings"])
    check(report["settings"]["slowdown"] == "contains x2", report["settings"])
    check({c["threads"] for c in cases} == {1, threads}, {c["threads"] for c in cases})
    check(all(c["noise"] is None and len(c["runs_keys_per_s"]) == 1 for c in cases),
          f"noise of one run: {[c['noise'] for c in cases]}")
    with open(os.path.join(directory, "report.html")) as f:
        check(f.read().count(">unknown</td>") == len(cases), "the table does not say unknown")


def case_errors():
    """Bad options and bad reports: a message naming the problem, a failing exit, no report."""
    def failing(args, rc, text):
        proc = run(args, expect_rc=rc)
        check(text.encode() in proc.stderr, f"{args}: stderr lacks {text!r}: {proc.stderr!r}")

    failing(["bench", "--sizes", "16Q"], 2, "'16Q' is not a size")
    failing(["bench", "--sizes", "0"], 2, "at least 1K")
    failing(["bench", "--repeat", "0"], 2, "--repeat")
    failing(["bench", "--timing", "cycles"], 2, "--timing: 'cycles' is neither wall nor cpu")
    for slowdown in ("contains", "contains:0.5", "lookup:2", "insert:2x"):
        proc = run(["bench", "--sizes", "16K"], expect_rc=2,
                   env={"BULKBLOOM_BENCH_SLOWDOWN": slowdown})
        check(f"BULKBLOOM_BENCH_SLOWDOWN: '{slowdown}' is not OPERATION:FACTOR".encode() in
              proc.stderr, proc.stderr.decode())
    with open(os.path.join(WORK, "not.json"), "w") as f:
        f.write('{"schema": "something else"}')
    failing(["bench", "--load", "not.json"], 1, "not.json: not a bulkbloom bench report")
    with open(os.path.join(WORK, "broken.json"), "w") as f:
        f.write('{"schema": "bulkbloom-bench-report", "schema_version": 1, "date": ')
    failing(["bench", "--compare", "broken.json", "--load", "broken.json"], 1, "broken.json: JSON")
    with open(os.path.join(WORK, "future.json"), "w") as f:
        f.write('{"schema": "bulkbloom-bench-report", "schema_version": 99}')
    failing(["bench", "--load", "future.json", "--report", "out"], 1, "schema version 99")
    check(not os.path.exists(os.path.join(WORK, "out")), "a failed run left its report directory")
    failing(["bench", "--sizes", "16K", "--report", "no/such/dir"], 1, "no/such/dir: cannot hold")
    with open(os.path.join(WORK, "file"), "w") as f:
        f.write("x")
    failing(["bench", "--sizes", "16K", "--report", "file"], 1, "file: cannot hold")
    failing(["bench", "--load", "missing.json"], 1, "missing.json")


def main():
    global BIN, WORK
    BIN = os.path.abspath(sys.argv[1])
    case = globals().get("case_" + sys.argv[2])
    if case is None:
        print("cases: " + " ".join(n[5:] for n in globals() if n.startswith("case_")))
        return 2
    with tempfile.TemporaryDirectory(prefix="bulkbloom-bench-") as work:
        WORK = work
        case()
    return 0


if __name__ == "__main__":
    sys.exit(main())
