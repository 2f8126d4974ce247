#!/usr/bin/env python3
"""End-to-end tests of the bulkbloom command-line tool: each case drives the real binary.

usage: test_cli.py BULKBLOOM_BINARY CASE   (CASE is a function name below without "case_")
Exact answers are computed here in Python, on small generated inputs.
"""
import fcntl
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

BIN = None
WORK = None


def run(args, stdin=None, input_bytes=None, expect_rc=0, stdout=subprocess.PIPE):
    proc = subprocess.run([BIN] + args, input=input_bytes, stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, cwd=WORK)
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError(f"bulkbloom {' '.join(args)}: exit {proc.returncode}, expected "
                             f"{expect_rc}\nstderr: {proc.stderr.decode(errors='replace')}")
    return proc


def path(name):
    return os.path.join(WORK, name)


def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data)
    return path(name)


def read(name):
    with open(path(name), "rb") as f:
        return f.read()


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def kill_after_a_checkpoint(command, checkpoint="ck"):
    """Runs `command` (with --checkpoint) killed at the first fault point (BULKBLOOM_FAULT_INJECT)
    by which an incomplete checkpoint is in place: a run that died mid-way, however many points
    its loading and saves take. Returns that point."""
    for point in range(1, 400):
        env = dict(os.environ, BULKBLOOM_FAULT_INJECT=f"{point}:kill")
        proc = subprocess.run([BIN] + command, cwd=WORK, env=env, stderr=subprocess.PIPE)
        check(proc.returncode == -signal.SIGKILL,
              f"the run was not killed at fault point {point}: {proc.returncode}, "
              f"{proc.stderr.decode(errors='replace')}")
        manifest = os.path.join(checkpoint, "MANIFEST")
        if os.path.exists(path(manifest)) and b"complete=0" in read(manifest):
            return point
    check(False, "no fault point left an incomplete checkpoint")


def split_records(data, fmt):
    if fmt == "u64":
        return [data[i:i + 8] for i in range(0, len(data), 8)]
    return data.splitlines(keepends=True)


def record_key(record, fmt):
    if fmt == "u64":
        return record
    line = record.rstrip(b"\n")
    if line.endswith(b"\r"):
        line = line[:-1]
    if fmt in ("lines",):
        return line
    if fmt == "dec":
        return int(line.strip(b" \t"), 10)
    if fmt == "hex":
        return int(line.strip(b" \t"), 16)
    kind, column = fmt.split(":")
    if kind == "tsv":
        return line.split(b"\t")[int(column) - 1]
    # csv as the generator writes it: the key column is never quoted, quotes only in the note.
    fields, field, quoted = [], b"", False
    for ch in line:
        c = bytes([ch])
        if c == b'"':
            quoted = not quoted
        elif c == b"," and not quoted:
            fields.append(field)
            field = b""
            continue
        field += c
    fields.append(field)
    return fields[int(column) - 1]


def exact_dedup(records, fmt):
    seen, unique = set(), []
    for r in records:
        k = record_key(r, fmt)
        if k not in seen:
            seen.add(k)
            unique.append(r)
    return unique


def stats_of(proc):
    return json.loads(proc.stderr.decode().strip().splitlines()[-1])


def check_dedup_output(inp, out, dups, fmt, stats):
    """Output is an in-order subsequence of the exact dedup, never holds a key twice, misses at
    most a few records beyond the modelled false-positive count, and output + dups = input."""
    records = split_records(inp, fmt)
    exact = exact_dedup(records, fmt)
    got = split_records(out, fmt)
    keys = [record_key(r, fmt) for r in got]
    check(len(set(keys)) == len(keys), f"{fmt}: a key was written twice (a leak)")
    it = iter(exact)
    check(all(any(r == e for e in it) for r in got),
          f"{fmt}: output is not an in-order subsequence of the exact dedup")
    missing = len(exact) - len(got)
    expected = stats["expected_wrongly_dropped"]
    limit = expected + 4 * math.sqrt(expected) + 5
    check(0 <= missing <= limit,
          f"{fmt}: {missing} unique records dropped, model expects {expected:.1f} (limit {limit:.1f})")
    check(stats["unique_written"] == len(got), f"{fmt}: summary unique count is wrong")
    check(stats["records_read"] == len(records), f"{fmt}: summary record count is wrong")
    if dups is not None:
        check(sorted(got + split_records(dups, fmt)) == sorted(records),
              f"{fmt}: output and dups together are not the input")


def roundtrip(fmt, count=30000, extra=(), dedup_extra=()):
    name = "in." + fmt.replace(":", "")
    run(["gen", "--count", str(count), "--dup-fraction", "0.3", "--format", fmt, "-o", name]
        + list(extra))
    # A small filter (high FPR) so that false positives actually occur and are counted.
    proc = run(["dedup", "-f", fmt, name, "-o", "out", "--dups", "dups", "--fpr", "0.02",
                "--stats", "json"] + list(dedup_extra))
    check_dedup_output(read(name), read("out"), read("dups"), fmt, stats_of(proc))


def case_roundtrip_u64():
    roundtrip("u64")


def case_roundtrip_lines():
    roundtrip("lines")


def case_roundtrip_dec():
    roundtrip("dec")


def case_roundtrip_hex():
    roundtrip("hex")


def case_roundtrip_csv():
    roundtrip("csv:2")


def case_roundtrip_tsv():
    roundtrip("tsv:3")


def case_roundtrip_zipf():
    roundtrip("u64", extra=["--zipf", "1.1"])


def case_small_chunks():
    # Hundreds of read chunks, so that records straddle chunk ends in every format.
    for fmt in ("u64", "lines", "dec", "csv:2", "tsv:3"):
        roundtrip(fmt, count=20000, dedup_extra=["--buffer-size", "4096"])


def case_small_chunks_stdin():
    # Many small chunks from a pipe, whose reads come in pieces.
    pipe_dedup("u64", 20000, "--buffer-size 4096")


def case_gen_counts():
    proc = run(["gen", "--count", "10000", "--dup-fraction", "0.25", "-f", "lines", "-o", "g"])
    records = split_records(read("g"), "lines")
    check(len(records) == 10000, "gen wrote the wrong number of records")
    check(len(set(records)) == 7500, f"gen wrote {len(set(records))} distinct keys, not 7500")
    check(b"7500 distinct" in proc.stderr, "gen does not report its distinct count")
    # Records wider than gen's write buffer: tsv:400000 rows are 5.2 MB each.
    proc = run(["gen", "--count", "2", "-f", "tsv:400000", "-o", "wide"], expect_rc=None)
    check(proc.returncode == 0, f"gen -f tsv:400000: exit {proc.returncode}")
    rows = read("wide").split(b"\n")
    check(len(rows) == 3 and rows[2] == b"" and all(len(r.split(b"\t")) == 400000 for r in rows[:2]),
          f"gen -f tsv:400000 wrote {len(rows) - 1} rows of {[len(r) for r in rows]} bytes")


def pipe_dedup(fmt, count, options=""):
    """cat FILE | bulkbloom dedup | cat: stdin to stdout through pipes."""
    run(["gen", "--count", str(count), "-f", fmt, "-o", "in"])
    proc = subprocess.run(f"cat in | '{BIN}' dedup -f {fmt} --capacity {count} {options} "
                          "--stats json | cat", shell=True, cwd=WORK, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    check(proc.returncode == 0, f"pipe failed: {proc.stderr.decode()}")
    check_dedup_output(read("in"), proc.stdout, None, fmt, stats_of(proc))


def case_stdin_to_stdout():
    pipe_dedup("dec", 20000)


def case_live_stdin():
    # A pipe that stays open, as from `tail -f`: records come out as they arrive, and a bad
    # record ends the run at once rather than when the writer closes the pipe.
    import select
    proc = subprocess.Popen([BIN, "dedup", "-f", "dec", "--capacity", "1000", "-o", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=WORK)
    try:
        proc.stdin.write(b"1\n2\n1\n3\n")
        proc.stdin.flush()
        out = b""
        deadline = time.time() + 10
        while out != b"1\n2\n3\n" and time.time() < deadline:
            if select.select([proc.stdout], [], [], 0.1)[0]:
                out += os.read(proc.stdout.fileno(), 100)
        check(out == b"1\n2\n3\n", f"records held back while the pipe is open: got {out!r}")
        proc.stdin.write(b"4\nabc\n")
        proc.stdin.flush()
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError("a bad record did not end the run while the pipe stayed open")
        err = proc.stderr.read()
        check(rc == 1 and b"stdin:6: not a dec integer: 'abc'" in err, f"exit {rc}, stderr {err!r}")
    finally:
        proc.kill()
        proc.stdin.close()
        proc.wait()


def case_several_inputs():
    a = write("a", b"x\ny\n")
    b = write("b", b"y\nz")  # no final newline: the output still ends each record
    run(["dedup", "-f", "lines", a, b, "--capacity", "10", "-o", "out", "--stats", "none"])
    check(read("out") == b"x\ny\nz\n", f"got {read('out')!r}")


def case_crlf():
    write("crlf", b"a\r\nb\r\na\r\nc\r\n")
    write("lf", b"a\nb\n")
    run(["dedup", "-f", "lines", "crlf", "--capacity", "10", "-o", "out", "--stats", "none"])
    check(read("out") == b"a\r\nb\r\nc\r\n", f"CRLF records not reproduced: {read('out')!r}")
    # The key excludes the CR: the same keys with LF endings are duplicates.
    run(["dedup", "-f", "lines", "lf", "crlf", "--capacity", "10", "-o", "out", "--stats", "none"])
    check(read("out") == b"a\nb\nc\r\n", f"CRLF keys differ from LF keys: {read('out')!r}")
    write("crlf_dec", b"12\r\n 12 \r\n0x10\r\n")
    run(["dedup", "-f", "dec", "crlf_dec", "--capacity", "10", "-o", "out", "--skip-bad",
         "--stats", "none"])
    check(read("out") == b"12\r\n", f"dec with CRLF: {read('out')!r}")


def case_long_line():
    # Several times the 2 MiB read chunk: there is no hidden line-length limit.
    long_line = b"k" * (9 << 20) + b"\n"
    write("long", b"a\n" + long_line + b"b\n" + long_line + b"a\n")
    run(["dedup", "-f", "lines", "long", "--capacity", "10", "-o", "out", "--stats", "none"])
    check(read("out") == b"a\n" + long_line + b"b\n", "long line not deduplicated intact")


def no_outputs_left(before):
    after = set(os.listdir(WORK))
    check(after == before, f"partial output left behind: {sorted(after - before)}")


def expect_failure(args, message, rc=1, input_bytes=None):
    before = set(os.listdir(WORK))
    proc = run(args + ["-o", "out"], input_bytes=input_bytes, expect_rc=rc)
    err = proc.stderr.decode()
    check(message in err, f"bulkbloom {' '.join(args)}: message {message!r} not in {err!r}")
    no_outputs_left(before)
    return err


def case_bad_inputs():
    expect_failure(["dedup", "missing-file"], "cannot open input missing-file")
    os.mkdir(path("dir"))
    expect_failure(["dedup", "dir"], "is a directory")
    write("odd.u64", b"\0" * 12)
    expect_failure(["dedup", "odd.u64"], "not a multiple of 8")
    expect_failure(["dedup", "--capacity", "10"], "not a multiple of 8", input_bytes=b"\0" * 13)
    write("empty", b"")
    expect_failure(["dedup", "-f", "lines", "empty"], "input empty is empty")
    expect_failure(["dedup", "-f", "lines", "--capacity", "5"], "stdin is empty", input_bytes=b"")
    write("bad.dec", b"1\n2\n3x\n4\n")
    expect_failure(["dedup", "-f", "dec", "bad.dec"], "bad.dec:3: not a dec integer")
    write("bad.csv", b"a,1\nb\n")
    expect_failure(["dedup", "-f", "csv:2", "bad.csv"], "bad.csv:2: no column 2")
    write("unclosed.csv", b'a,1\nb,"two\nlines\n')
    expect_failure(["dedup", "-f", "csv:2", "unclosed.csv"],
                   "unclosed.csv:2: a quoted field is not closed before the end of the input")
    write("over.dec", b"18446744073709551616\n")
    expect_failure(["dedup", "-f", "dec", "over.dec"], "over.dec:1:")
    if os.geteuid() != 0:  # root reads any file
        write("locked", b"1\n")
        os.chmod(path("locked"), 0)
        expect_failure(["dedup", "-f", "dec", "locked"], "cannot open input locked")


def case_skip_bad():
    write("bad.dec", b"1\n2\n3x\n\n2\n")
    proc = run(["dedup", "-f", "dec", "bad.dec", "--skip-bad", "-o", "out", "--stats", "json"])
    check(read("out") == b"1\n2\n", f"got {read('out')!r}")
    check(stats_of(proc)["bad_records_skipped"] == 2, "bad records not counted")
    # --skip-bad also skips empty inputs, with a note.
    write("empty", b"")
    proc = run(["dedup", "-f", "dec", "empty", "bad.dec", "empty", "--skip-bad", "-o", "out"])
    check(read("out") == b"1\n2\n" and b"skipping empty input empty" in proc.stderr,
          proc.stderr.decode())
    # Only empty text inputs: nothing to size the filter by, nothing to write.
    run(["dedup", "-f", "dec", "empty", "--skip-bad", "-o", "none", "--stats", "none"])
    check(read("none") == b"", "dedup of an empty input wrote records")
    run(["build", "-f", "dec", "empty", "--skip-bad", "-o", "none.bbf", "--stats", "none"])
    info = json.loads(run(["info", "--json", "none.bbf"]).stdout)
    check(info["keys_inserted"] == 0, f"build of an empty input: {info}")


def case_binary_shown_escaped():
    """A binary file read as text is named with its control bytes escaped: a NUL does not cut
    the message, and nothing raw reaches the terminal."""
    write("bin", b"\x05\x00\x1b[31m\n")
    err = expect_failure(["dedup", "-f", "dec", "bin"],
                         "not a dec integer: '\\x05\\x00\\x1b[31m'")
    check("--skip-bad" in err and "\x1b" not in err, err)


def case_usage_errors():
    write("in", b"1\n")
    for args, message in [(["dedup", "-f", "yaml", "in"], "unknown format 'yaml'"),
                          (["dedup", "-f", "csv:0", "in"], "column must be a number"),
                          (["dedup", "--frobnicate", "in"], "unknown option '--frobnicate'"),
                          (["dedup", "--capacity", "lots", "in"], "is not a count"),
                          (["dedup", "--fpr", "2", "in"], "must be in (0, 1), got 2"),
                          (["dedup", "-f", "csv:1", "--window", "1h", "--time-field", "2",
                            "-"], "give --capacity")]:
        err = expect_failure(args, message, rc=2, input_bytes=b"x\n")
        check("--help" in err, "usage errors should point at --help")
    proc = run(["frobnicate"], expect_rc=2)
    check(b"unknown command" in proc.stderr and b"dedup" in proc.stderr, "no command list")
    proc = run(["dedup", "--help"])
    check(b"--capacity" in proc.stdout and b"--dups" in proc.stdout, "help lacks options")


def case_full_disk():
    run(["gen", "--count", "100000", "-o", "in"])
    proc = run(["dedup", "in", "-o", "/dev/full"], expect_rc=1)
    check(b"No space left on device" in proc.stderr, proc.stderr.decode())
    with open("/dev/full", "wb") as full:
        proc = run(["dedup", "in"], stdout=full, expect_rc=1)
    check(b"cannot write stdout" in proc.stderr, proc.stderr.decode())


def case_closed_stdout():
    run(["gen", "--count", "1000000", "-o", "in"])
    proc = subprocess.Popen([BIN, "dedup", "in"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=WORK)
    proc.stdout.close()  # the reader goes away before anything is written
    err = proc.stderr.read()
    rc = proc.wait()
    # As `... | head` does: quiet, and the status a SIGPIPE death gives (nothing was committed).
    check(rc == 141 and err == b"", f"exit {rc}, stderr {err!r}")
    # A run that carries a filter commits nothing when its reader goes away.
    proc = subprocess.Popen([BIN, "dedup", "in", "--filter", "f.bbf"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=WORK)
    proc.stdout.close()
    err = proc.stderr.read()
    check(proc.wait() == 141 and not os.path.exists(path("f.bbf")), f"stderr {err!r}")


def case_interrupt_leaves_nothing():
    before = set(os.listdir(WORK))
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Input from a pipe that stays open: the run is mid-way when the signal comes.
        proc = subprocess.Popen([BIN, "dedup", "--capacity", "1000", "-o", "out", "--dups", "d"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=WORK)
        proc.stdin.write(b"\1" * 8000)
        proc.stdin.flush()
        deadline = time.time() + 10
        while len(set(os.listdir(WORK)) - before) < 2 and time.time() < deadline:
            time.sleep(0.01)  # until both temporary outputs exist
        check(len(set(os.listdir(WORK)) - before) == 2, "temporary outputs never appeared")
        proc.send_signal(sig)
        rc = proc.wait()
        proc.stdin.close()
        check(rc == -sig, f"exit status {rc} after signal {sig}")
        no_outputs_left(before)


def case_dead_runs_temporaries_whatever_their_pid():
    """A run holds a lock on its temporary outputs until they are renamed; the next run into the
    same path removes the unlocked ones a killed run left, also when their names' pid is a live
    process's (an unreaped zombie, or a container restarted with the same pids), and keeps a
    locked one and one too new to be judged."""
    proc = subprocess.Popen([BIN, "dedup", "--capacity", "1000", "-o", "out"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=WORK)
    proc.stdin.write(b"\1" * 8000)
    proc.stdin.flush()
    deadline = time.time() + 10
    while not [n for n in os.listdir(WORK) if n.startswith(".out.bulkbloom-")]:
        check(time.time() < deadline, "the temporary output never appeared")
        time.sleep(0.01)
    (own,) = [n for n in os.listdir(WORK) if n.startswith(".out.bulkbloom-")]
    with open(path(own), "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            check(False, "a live run's temporary output is not locked")
        except BlockingIOError:
            pass
    proc.stdin.close()
    check(proc.wait() == 0, proc.stderr.read().decode())

    alive = os.getpid()  # the name's pid is this live process, as after a pid is reused
    names = {kind: f".out.bulkbloom-{alive}-{kind}" for kind in ("STALE1", "HELD01", "FRESH1")}
    for name in names.values():
        write(name, b"left by a killed run")
    hour_ago = time.time() - 3600
    for kind in ("STALE1", "HELD01"):
        os.utime(path(names[kind]), (hour_ago, hour_ago))
    write("in", b"\2" * 80)
    with open(path(names["HELD01"]), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        run(["dedup", "in", "-o", "out", "--stats", "none"])
        left = set(os.listdir(WORK))
        check(names["STALE1"] not in left, "an unlocked temporary of a live pid was kept")
        check(names["HELD01"] in left, "a temporary a live run holds was removed")
        check(names["FRESH1"] in left, "a temporary younger than the grace was removed")
    run(["dedup", "in", "-o", "out", "--stats", "none"])
    check(names["HELD01"] not in os.listdir(WORK), "a temporary whose lock was freed was kept")
    check(read("out") == b"\2" * 8, "the output")


def case_filter_across_runs():
    run(["gen", "--count", "40000", "-f", "hex", "--seed", "1", "-o", "day1"])
    run(["gen", "--count", "40000", "-f", "hex", "--seed", "2", "-o", "fresh"])
    records1 = split_records(read("day1"), "hex")
    write("day2", b"".join(records1[: len(records1) // 2]) + read("fresh"))  # half seen before
    run(["dedup", "-f", "hex", "day1", "--filter", "f.bbf", "--fpr", "0.01", "-o", "out1",
         "--stats", "none"])
    proc = run(["dedup", "-f", "hex", "day2", "--filter", "f.bbf", "-o", "out2", "--stats",
                "json"])
    # Day 2's output is what an exact dedup of both days writes for day 2's records.
    records2 = split_records(read("day2"), "hex")
    exact = exact_dedup(records1 + records2, "hex")[len(exact_dedup(records1, "hex")):]
    got = split_records(read("out2"), "hex")
    seen1 = {record_key(r, "hex") for r in records1}
    check(not any(record_key(r, "hex") in seen1 for r in got), "a key of day 1 leaked on day 2")
    stats = stats_of(proc)
    missing = len(exact) - len(got)
    limit = stats["expected_wrongly_dropped"] * 1.5 + 10
    check(0 <= missing <= limit, f"day 2 dropped {missing} unique records (limit {limit:.0f})")
    info = json.loads(run(["info", "--json", "f.bbf"]).stdout)
    written = len(split_records(read("out1"), "hex")) + len(got)
    check(info["keys_inserted"] == written, f"saved key count {info['keys_inserted']} != {written}")


def check_model_matches(missing, expected, what):
    """The expected count of wrongly dropped records is a Poisson-like mean: the measured count
    must lie within a few standard deviations of it, above and below."""
    slack = 4 * math.sqrt(expected) + 10
    check(abs(missing - expected) <= slack,
          f"{what}: {missing} unique records dropped, the summary expected {expected:.1f}")


def case_filter_grows():
    """A carried filter sized too small grows instead of filling up: every run stays under the
    promised rate, the expected false drops match the measured ones, --on-full error refuses
    and leaves the filter as it was."""
    for seed in (1, 2, 3):
        run(["gen", "--count", "40000", "-f", "hex", "--seed", str(seed), "-o", f"fresh{seed}"])
    day1 = split_records(read("fresh1"), "hex")
    write("day2", b"".join(day1[: len(day1) // 2]) + read("fresh2"))
    common = ["-f", "hex", "--filter", "f.bbf", "--buffer-size", "64K", "--stats", "json"]
    proc = run(["dedup", "fresh1", "-o", "out1", "--capacity", "5000", "--fpr", "0.01"] + common)
    stats1 = stats_of(proc)
    check(stats1["growths"] >= 1 and stats1["generations"] >= 2, f"no growth: {stats1}")
    check(stats1["final_fpr"] <= 0.01, f"day 1 ends past its promise: {stats1}")
    exact1 = exact_dedup(day1, "hex")
    got1 = split_records(read("out1"), "hex")
    check_model_matches(len(exact1) - len(got1), stats1["expected_wrongly_dropped"], "day 1")

    proc = run(["dedup", "day2", "-o", "out2"] + common)
    stats2 = stats_of(proc)
    got2 = split_records(read("out2"), "hex")
    seen1 = {record_key(r, "hex") for r in day1}
    check(not any(record_key(r, "hex") in seen1 for r in got2), "a key of day 1 leaked on day 2")
    exact2 = exact_dedup(split_records(read("fresh2"), "hex"), "hex")
    check_model_matches(len(exact2) - len(got2), stats2["expected_wrongly_dropped"], "day 2")
    check(stats2["final_fpr"] <= 0.01 and stats2["promised_fpr"] == 0.01, f"day 2: {stats2}")
    info = json.loads(run(["info", "--json", "f.bbf"]).stdout)
    check(info["generations"] == stats2["generations"] and info["key_format"] == "hex", f"{info}")
    check(len(info["generation_list"]) == info["generations"], f"{info['generation_list']}")

    # Every key of both days is seen by the grown filter, whatever its generation.
    run(["query", "--filter", "f.bbf", "-f", "hex", "out1", "out2", "-o", "seen", "--unseen",
         "unseen", "--stats", "none"])
    check(read("unseen") == b"", "the grown filter lost a key")

    # A filter sized for day 1 alone refuses day 3's new keys under --on-full error.
    common = ["-f", "hex", "--filter", "g.bbf", "--buffer-size", "64K", "--stats", "none"]
    run(["dedup", "fresh1", "-o", "out1", "--capacity", "40000", "--fpr", "0.01"] + common)
    before = read("g.bbf")
    proc = run(["dedup", "fresh3", "-o", "out3", "--on-full", "error"] + common, expect_rc=1)
    check(b"g.bbf is full" in proc.stderr, proc.stderr.decode())
    check(read("g.bbf") == before and not os.path.exists(path("out3")),
          "a refused run changed the filter or left an output")


def case_filter_grows_only_past_its_target():
    """A filter grows only when a batch's new keys would take it past its target, not when its
    records not held would: 20,000 keys, each three times, fit a filter sized for 20,000 keys
    (--on-full error passes), and the run is decided alike in one batch or in many, as one filter
    of its layout (or a Spark filter directory's shards) decides it."""
    rng = random.Random(5)
    keys = [rng.getrandbits(64) for _ in range(20000)]
    write("thrice", b"".join(k.to_bytes(8, "little") for k in keys * 3))
    sizing = ["-f", "u64", "--capacity", "20000", "--fpr", "0.2", "--stats", "json"]
    outputs = []
    for name, chunks in (("one", []), ("many", ["--buffer-size", "64K"])):
        proc = run(["dedup", "thrice", "-o", f"out-{name}", "--filter", f"{name}.bbf",
                    "--on-full", "error"] + sizing + chunks)
        stats = stats_of(proc)
        check(stats["growths"] == 0 and stats["generations"] == 1, f"{name}: grew: {stats}")
        # The filter file's metadata records the run (its options), so its keys are compared.
        info = json.loads(run(["info", "--json", f"{name}.bbf"]).stdout)
        outputs.append((read(f"out-{name}"), info["keys_inserted"], info["current_fpr"]))
    check(outputs[0] == outputs[1], "one batch and many decided the run differently")


def case_legacy_filter():
    """A filter file of an older bulkbloom (no sizing record: tests/cli/data/legacy_overfull.bbf,
    built from `gen --count 20000 -f dec --seed 9` with --capacity 5000 --fpr 0.01, so far past
    its rate) still loads; the run warns that it was past its promise, the expected false drops
    come from its bits and match the measured ones, and --on-full error refuses it."""
    legacy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                          "legacy_overfull.bbf")
    with open(legacy, "rb") as f:
        write("f.bbf", f.read())
    run(["gen", "--count", "20000", "-f", "dec", "--seed", "9", "-o", "old"])
    run(["gen", "--count", "20000", "-f", "dec", "--seed", "10", "-o", "fresh"])
    before = read("f.bbf")
    proc = run(["dedup", "-f", "dec", "fresh", "--filter", "f.bbf", "-o", "out", "--on-full",
                "error"], expect_rc=1)
    check(b"already past its false-positive rate" in proc.stderr, proc.stderr.decode())
    check(read("f.bbf") == before and not os.path.exists(path("out")), "a refused run wrote")

    proc = run(["dedup", "-f", "dec", "fresh", "--filter", "f.bbf", "-o", "out", "--stats",
                "json"])
    check(b"warning" in proc.stderr and b"already past" in proc.stderr, proc.stderr.decode())
    stats = stats_of(proc)
    got = split_records(read("out"), "dec")
    exact = exact_dedup(split_records(read("fresh"), "dec"), "dec")
    check_model_matches(len(exact) - len(got), stats["expected_wrongly_dropped"], "legacy filter")
    check(stats["growths"] >= 1, f"the full legacy filter did not grow: {stats}")
    # The keys the legacy filter was built from are still never new.
    proc = run(["dedup", "-f", "dec", "old", "--filter", "f.bbf", "-o", "again", "--stats",
                "json"])
    check(read("again") == b"", "a key of the legacy filter's dump was taken for new")


def case_resume_identity():
    """--resume refuses a checkpoint whose input was replaced by one of the same size and time,
    and after a completed run checks that the outputs are still the ones it wrote."""
    run(["gen", "--count", "100000", "--seed", "1", "-o", "in"])
    command = ["dedup", "in", "-o", "out", "--checkpoint", "ck", "--checkpoint-every", "10000",
               "--buffer-size", "64K", "--stats", "none", "--resume"]
    kill_after_a_checkpoint(command)
    stat = os.stat(path("in"))
    run(["gen", "--count", "100000", "--seed", "2", "-o", "in"])  # same size, other keys
    os.utime(path("in"), ns=(stat.st_atime_ns, stat.st_mtime_ns))
    proc = run(command, expect_rc=2)
    check(b"inputs that changed since" in proc.stderr, proc.stderr.decode())
    check(not os.path.exists(path("out")), "a refused resume wrote its output")

    subprocess.run(["rm", "-rf", path("ck"), path("out.partial")], check=True)
    run(command)
    completed = read("out")
    check(run(command).returncode == 0 and read("out") == completed, "a completed resume changed")
    os.remove(path("out"))
    proc = run(command, expect_rc=1)
    check(b"completed earlier" in proc.stderr and b"out is missing" in proc.stderr,
          proc.stderr.decode())
    # A checkpoint cut short is diagnosed as such: its manifest, or a file it names.
    named = [n for n in os.listdir(path("ck")) if n != "MANIFEST"]
    check(named != [], "the checkpoint directory holds no file besides its manifest")
    with open(path("ck/" + named[0]), "r+b") as f:
        f.truncate(8)
    proc = run(command, expect_rc=1)
    check(named[0].encode() in proc.stderr and b"8 bytes, the manifest records" in proc.stderr,
          proc.stderr.decode())
    with open(path("ck/MANIFEST"), "r+b") as f:
        f.truncate(150)
    proc = run(command, expect_rc=1)
    check(b"MANIFEST" in proc.stderr and b"corrupt" in proc.stderr, proc.stderr.decode())


def read_state(name):
    """The bytes of the state `name`: a file's, or the file `bulkbloom convert` makes of a state
    directory (docs/FORMAT.md "State directories"), the file the same runs with --filter FILE
    leave."""
    if not os.path.isdir(path(name)):
        return read(name)
    with tempfile.TemporaryDirectory(prefix="bulkbloom-convert-") as scratch:
        converted = os.path.join(scratch, "state")
        run(["convert", name, converted])
        with open(converted, "rb") as f:
            return f.read()


def walk_fault_points(command, reset, outputs, resume_extra=()):
    """Runs `command` with BULKBLOOM_FAULT_INJECT at each fault point in turn (1, 2, ... until a
    run completes with no point left to fail), as an I/O error, a SIGKILL and a SIGTERM, each time
    from the state `reset()` restores, then reruns the command (plus `resume_extra`) without a
    fault. The rerun's `outputs` (outputs and state) must equal an uninterrupted run's, byte for
    byte, and no temporary file may remain (after a SIGKILL, once the rerun is done). A SIGTERM
    fails the run until it has committed, and once it has (its outputs are the uninterrupted
    run's), the run exits 0. Returns {mode: points}."""
    reset()
    run(command)
    reference = [read_state(name) for name in outputs]
    matrix = {}

    def debris():
        """Temporary files of saves and outputs (a checkpoint's .partial outputs are kept on
        purpose), also in the checkpoint and state directories."""
        names = os.listdir(WORK)
        for sub in list(names):
            if os.path.isdir(path(sub)):
                names += os.listdir(path(sub))
        return [n for n in names if ".bulkbloom-" in n or ".tmp." in n]

    for mode in ("error", "kill", "signal"):
        point = 0
        while True:
            point += 1
            reset()
            env = dict(os.environ, BULKBLOOM_FAULT_INJECT=f"{point}:{mode}")
            proc = subprocess.run([BIN] + command, cwd=WORK, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
            if mode == "signal":
                # The same points as the I/O errors met: a deferred signal does not change the path.
                if point > matrix["error"]:
                    break
                committed = [read_state(name) if os.path.exists(path(name)) else None
                             for name in outputs] == reference
                check((proc.returncode == 0) == committed,
                      f"signal at point {point}: exit {proc.returncode}, but the run "
                      f"{'had' if committed else 'had not'} committed: {proc.stderr.decode()}")
            elif proc.returncode == 0:
                break  # past the last point: the run never met a fault
            expected_rc = {"error": 1, "kill": -signal.SIGKILL, "signal": -signal.SIGTERM}[mode]
            check(proc.returncode in (expected_rc, 0),
                  f"{mode} at point {point}: exit {proc.returncode}: {proc.stderr.decode()}")
            if mode == "error":
                check(b"injected fault at point" in proc.stderr, proc.stderr.decode())
            if mode != "kill":  # only SIGKILL may leave temporary files, for the rerun to remove
                check(debris() == [], f"{mode} at point {point} left {debris()}")
            run(command + list(resume_extra))
            check(debris() == [], f"the rerun after {mode} at point {point} left {debris()}")
            got = [read_state(name) for name in outputs]
            for name, a, b in zip(outputs, got, reference):
                check(a == b, f"{mode} at point {point}: {name} differs after the rerun")
        matrix[mode] = point - 1
        check(point > 5, f"only {point - 1} fault points: the hook is not reached")
    print("fault points walked:", matrix)
    return matrix


def case_commit_faults():
    """A failed or killed write, flush or rename anywhere in a run with a carried filter, then a
    rerun: outputs and filter are those of an uninterrupted run (docs/FORMAT.md, "Committing a
    run"), with and without a checkpoint."""
    run(["gen", "--count", "30000", "-f", "dec", "--seed", "1", "-o", "day1"])
    run(["gen", "--count", "20000", "-f", "dec", "--seed", "2", "--dup-fraction", "0.3",
         "-o", "day2"])
    run(["dedup", "-f", "dec", "day1", "-o", "out1", "--filter", "base.bbf", "--capacity",
         "20000", "--fpr", "0.01", "--stats", "none"])
    base = read("base.bbf")

    def reset():
        write("f.bbf", base)
        for name in ("out", "dups"):
            if os.path.exists(path(name)):
                os.remove(path(name))
        subprocess.run(["rm", "-rf", path("ck")], check=True)

    command = ["dedup", "-f", "dec", "day2", "-o", "out", "--dups", "dups", "--filter", "f.bbf",
               "--buffer-size", "64K", "--stats", "none"]
    walk_fault_points(command, reset, ["out", "dups", "f.bbf"])
    walk_fault_points(command + ["--checkpoint", "ck", "--checkpoint-every", "8000"], reset,
                      ["out", "dups", "f.bbf"], resume_extra=["--resume"])


def case_checkpoint_faults_window():
    """The same walk with a sliding window whose checkpoints are incremental (docs/FORMAT.md,
    "State directories"): rotations and per-period growth fall between checkpoints, so commits
    write logs, new bases and sealed generations. Every failure, then a resume, gives the outputs
    and the saved window of an uninterrupted run; the checkpoint directory holds only what its
    manifest names."""
    run(["gen", "--count", "30000", "-f", "dec", "--seed", "3", "--dup-fraction", "0.3",
         "-o", "day"])

    def reset():
        for name in ("out", "dups", "w.bbw"):
            if os.path.exists(path(name)):
                os.remove(path(name))
        subprocess.run(["rm", "-rf", path("ck")], check=True)

    command = ["dedup", "-f", "dec", "day", "-o", "out", "--dups", "dups", "--filter", "w.bbw",
               "--window-records", "9000", "--generations", "3", "--fpr", "0.01",
               "--capacity", "2000", "--buffer-size", "64K", "--stats", "none",
               "--checkpoint", "ck", "--checkpoint-every", "3000"]
    walk_fault_points(command, reset, ["out", "dups", "w.bbw"], resume_extra=["--resume"])
    reset()
    run(command)
    names = sorted(os.listdir(path("ck")))
    check("MANIFEST" in names and all(n == "MANIFEST" or n.endswith((".part", ".base", ".log"))
                                      for n in names), f"unexpected files in ck: {names}")


def state_written(proc):
    """The bytes the run's commit wrote to its --filter state, from its JSON summary."""
    return stats_of(proc)["state_bytes_written"]


def case_filter_directory_days():
    """dedup --filter DIR/ carries a window or a grown filter in a state directory (docs/FORMAT.md
    "State directories"): day after day, its outputs and its state (converted into a file) are
    byte for byte those of --filter FILE, each run writing what changed: a day that brings few
    new keys writes a small part of what the file path rewrites. convert moves a state between
    the forms both ways; info describes a directory; a rerun is recognised through it."""
    days = []
    for day in range(4):
        # Day 3 is mostly day 2's keys again, within the window's period: few new keys reach
        # it, and no generation is sealed.
        count = 600 if day == 3 else 24000
        run(["gen", "--count", str(count), "-f", "dec", "--seed", str(day + 1),
             "--dup-fraction", "0.3", "-o", f"day{day}"])
        days.append(f"day{day}")
    write("day3", b"".join(read("day2").splitlines(keepends=True)[:200]) + read("day3"))
    # Periods of 25,000 records: days 0 to 2 seal generations, day 3 falls within a period.
    window = ["--window-records", "100000", "--generations", "4", "--fpr", "0.01"]
    for kind, options in (("window", window), ("grown filter", ["--capacity", "20000"])):
        results = {}
        for state in ("state.bbx", "state.d/"):
            outputs, written = [], []
            for day in days:
                for name in ("out", "dups"):
                    if os.path.exists(path(name)):
                        os.remove(path(name))
                proc = run(["dedup", "-f", "dec", day, "-o", "out", "--dups", "dups", "--filter",
                            state, "--stats", "json"] + options)
                outputs.append((read("out"), read("dups")))
                written.append(state_written(proc))
            results[state] = (outputs, written, read_state(state.rstrip("/")))
        (file_outputs, file_written, file_state) = results["state.bbx"]
        (dir_outputs, dir_written, dir_state) = results["state.d/"]
        check(file_outputs == dir_outputs, f"{kind}: the outputs of --filter DIR/ differ")
        check(file_state == dir_state, f"{kind}: the state directory converts to other bytes")
        check(all(w == len(file_state) for w in file_written[1:]),
              f"{kind}: --filter FILE wrote {file_written}, not the whole file each run")
        # Day 3 brings about 400 new keys, and a window takes day 2's keys again into its open
        # generation: their log (8 B each) and a manifest, not the state.
        check(dir_written[3] < len(file_state) // 10,
              f"{kind}: day 3 wrote {dir_written[3]} bytes to the directory, the file is "
              f"{len(file_state)}")
        print(f"{kind}: bytes written per day: file {file_written}, directory {dir_written}")
        info = json.loads(run(["info", "--json", "state.d"]).stdout)
        check(info["kind"] == ("sliding window" if kind == "window" else
                               "grown filter (a key may be in any generation)") and
              info["directory"] == "state.d", f"info: {info}")
        # A rerun of the last day is recognised through the directory, which it leaves alone.
        manifest = read("state.d/MANIFEST")
        proc = run(["dedup", "-f", "dec", days[-1], "-o", "out", "--dups", "dups", "--filter",
                    "state.d", "--stats", "none"] + options)
        check(b"this run was committed earlier" in proc.stderr and
              read("state.d/MANIFEST") == manifest, proc.stderr.decode())
        # File -> directory -> file gives the file's bytes; the directory goes on as the file.
        run(["convert", "state.bbx", "moved.d/"])
        run(["convert", "moved.d", "back.bbx"])
        check(read("back.bbx") == file_state, f"{kind}: convert both ways changed the bytes")
        expect = run(["convert", "state.bbx", "moved.d"], expect_rc=1).stderr
        check(b"moved.d exists" in expect, expect.decode())
        for name in ("state.bbx", "state.bbx.lock", "state.d.lock", "moved.d.lock",
                     "back.bbx", "back.bbx.lock"):
            os.remove(path(name))
        for name in ("state.d", "moved.d"):
            subprocess.run(["rm", "-rf", path(name)], check=True)


def case_filter_directory_faults():
    """A failed or killed write, flush or rename anywhere in a run carrying its window in a state
    directory (with and without a checkpoint), then a rerun: outputs and state are those of an
    uninterrupted run, and the directory holds only what its manifest names."""
    run(["gen", "--count", "20000", "-f", "dec", "--seed", "3", "--dup-fraction", "0.3",
         "-o", "day1"])
    run(["gen", "--count", "20000", "-f", "dec", "--seed", "4", "--dup-fraction", "0.3",
         "-o", "day2"])
    window = ["--window-records", "9000", "--generations", "3", "--fpr", "0.01",
              "--capacity", "2000", "--buffer-size", "64K", "--stats", "none"]
    run(["dedup", "-f", "dec", "day1", "-o", "out1", "--filter", "base.d/"] + window)

    def reset():
        for name in ("out", "dups"):
            if os.path.exists(path(name)):
                os.remove(path(name))
        subprocess.run(["rm", "-rf", path("ck"), path("w.d")], check=True)
        subprocess.run(["cp", "-a", path("base.d"), path("w.d")], check=True)

    command = ["dedup", "-f", "dec", "day2", "-o", "out", "--dups", "dups", "--filter", "w.d"]
    command += window
    walk_fault_points(command, reset, ["out", "dups", "w.d"])
    walk_fault_points(command + ["--checkpoint", "ck", "--checkpoint-every", "3000"], reset,
                      ["out", "dups", "w.d"], resume_extra=["--resume"])
    reset()
    run(command)
    names = sorted(os.listdir(path("w.d")))
    check("MANIFEST" in names and all(n == "MANIFEST" or n.endswith((".part", ".base", ".log"))
                                      for n in names), f"unexpected files in w.d: {names}")
    # A damaged manifest is named, and nothing is written.
    with open(path("w.d/MANIFEST"), "r+b") as f:
        f.truncate(100)
    before = sorted(os.listdir(path("w.d")))
    proc = run(command, expect_rc=1)
    check(b"w.d/MANIFEST" in proc.stderr and b"corrupt" in proc.stderr, proc.stderr.decode())
    check(sorted(os.listdir(path("w.d"))) == before, "a failed load changed the directory")


def case_filter_directory_locks():
    """A --filter state directory is locked and reached through links as a --filter file is: the
    lock is beside its real name, runs through a link and the real name take turns, --wait-lock
    waits; a name ending in '/' that is a file, and a directory holding other files, are
    refused with nothing written."""
    os.mkdir(path("real"))
    run(["gen", "--count", "5000", "-f", "dec", "--seed", "1", "-o", "day1"])
    run(["gen", "--count", "5000", "-f", "dec", "--seed", "2", "-o", "day2"])
    os.symlink("real/w.d", path("link.d"))
    base = ["dedup", "-f", "dec", "--stats", "none", "--window-records", "4000"]
    run(base + ["day1", "-o", "out1", "--filter", "real/w.d/"])
    check(os.path.isdir(path("real/w.d")) and os.path.exists(path("real/w.d.lock")),
          f"no state directory with its lock: {os.listdir(path('real'))}")
    # Through the link (with or without a '/'): the real directory, locked under its real name.
    for name, out in (("link.d", "out2"), ("link.d/", "out3")):
        with open(path("real/w.d.lock")) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            manifest = read("real/w.d/MANIFEST")
            proc = run(base + ["day2", "-o", out, "--filter", name], expect_rc=1)
            check(b"is in use by another bulkbloom run" in proc.stderr and
                  b"--wait-lock" in proc.stderr, proc.stderr.decode())
            check(read("real/w.d/MANIFEST") == manifest and not os.path.exists(path(out)),
                  "a refused run wrote")
            waiter = subprocess.Popen([BIN] + base + ["day2", "-o", out, "--filter", name,
                                                      "--wait-lock"],
                                      stderr=subprocess.PIPE, cwd=WORK)
            time.sleep(0.5)
            check(waiter.poll() is None, "--wait-lock did not wait")
        _, err = waiter.communicate()
        check(waiter.returncode == 0 and b"waiting" in err, err.decode())
        check(os.path.islink(path("link.d")) and not os.path.exists(path("link.d.lock")),
              "the link was replaced or locked apart")
    check(b"this run was committed earlier" in
          run(base + ["day2", "-o", "out3", "--filter", "real/w.d"]).stderr,
          "the run through the link is not the real directory's last run")
    # Refused before anything is written.
    run(base + ["day1", "-o", "out4", "--filter", "f.bbw"])
    before = sorted(os.listdir(WORK))
    proc = run(base + ["day1", "-o", "out5", "--filter", "f.bbw/"], expect_rc=2)
    check(b"ends in '/'" in proc.stderr, proc.stderr.decode())
    os.mkdir(path("notes"))
    write("notes/todo.txt", b"x")
    before = sorted(os.listdir(WORK))
    proc = run(base + ["day1", "-o", "out5", "--filter", "notes"], expect_rc=2)
    check(b"holds no bulkbloom state but other files" in proc.stderr, proc.stderr.decode())
    check(sorted(os.listdir(WORK)) == before and os.listdir(path("notes")) == ["todo.txt"],
          "a refused run wrote")


def case_state_locks():
    """A second run on a --filter file that another run holds stops with a clear message and
    changes nothing, or with --wait-lock waits for it and then sees its keys; a checkpoint
    directory is locked the same way."""
    first_keys = b"".join(b"%d\n" % k for k in range(1000))
    run(["gen", "--count", "3000", "-f", "dec", "--seed", "4", "-o", "in"])
    write("in2", read("in") + first_keys)
    # The first run reads a pipe that stays open: it holds the filter until the pipe closes.
    first = subprocess.Popen([BIN, "dedup", "-f", "dec", "--capacity", "10000", "-o", "out1",
                              "--filter", "f.bbf", "--stats", "none"],
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, cwd=WORK)
    first.stdin.write(first_keys)
    first.stdin.flush()
    deadline = time.time() + 20
    while not os.path.exists(path("f.bbf.lock")) and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    second = ["dedup", "-f", "dec", "in2", "-o", "out2", "--stats", "none", "--filter", "f.bbf"]
    proc = run(second, expect_rc=1)
    check(b"f.bbf is in use by another bulkbloom run" in proc.stderr and
          b"--wait-lock" in proc.stderr, proc.stderr.decode())
    check(not os.path.exists(path("out2")), "a refused run wrote its output")
    waiter = subprocess.Popen([BIN] + second + ["--wait-lock"], stderr=subprocess.PIPE, cwd=WORK)
    time.sleep(0.5)
    check(waiter.poll() is None, "--wait-lock did not wait")
    first.stdin.close()
    check(first.wait() == 0, first.stderr.read().decode())
    _, err = waiter.communicate()
    check(waiter.returncode == 0 and b"waiting" in err, err.decode())
    # The waiting run loaded the filter after the first run saved it: none of the first run's
    # keys are new to it.
    got = set(split_records(read("out2"), "dec"))
    check(not got & set(split_records(first_keys, "dec")), "the first run's keys leaked")

    # A checkpoint directory another process holds.
    os.mkdir(path("ck"))
    holder = os.open(path("ck"), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    checkpointed = ["dedup", "-f", "dec", "in", "-o", "out3", "--stats", "none", "--checkpoint",
                    "ck"]
    proc = run(checkpointed, expect_rc=1)
    check(b"ck is in use by another bulkbloom run" in proc.stderr, proc.stderr.decode())
    check(os.listdir(path("ck")) == [] and not os.path.exists(path("out3")), "refused run wrote")
    waiter = subprocess.Popen([BIN] + checkpointed + ["--wait-lock"], stderr=subprocess.PIPE,
                              cwd=WORK)
    time.sleep(0.5)
    check(waiter.poll() is None, "--wait-lock did not wait for the checkpoint directory")
    os.close(holder)
    _, err = waiter.communicate()
    check(waiter.returncode == 0 and os.path.exists(path("out3")), err.decode())


def case_exact_numbers():
    """Seeds are 64-bit identities: taken exactly (decimal or hex, up to 2^64 - 1), saved exactly
    and printed exactly, also in JSON."""
    run(["gen", "--count", "1000", "-f", "dec", "-o", "in"])
    for text, value in [("18446744073709551615", 2**64 - 1), ("9007199254740993", 2**53 + 1),
                        ("0xfedcba9876543211", 0xfedcba9876543211)]:
        run(["build", "-f", "dec", "in", "-o", "f.bbf", "--seed", text, "--stats", "none"])
        info = json.loads(run(["info", "--json", "f.bbf"]).stdout)
        check(info["seed"] == value, f"--seed {text}: info says {info['seed']}")
    err = run(["build", "-f", "dec", "in", "-o", "f.bbf", "--seed", "18446744073709551616"],
              expect_rc=2).stderr
    check(b"is not a count" in err, err.decode())


def case_path_collisions():
    """A file a command writes may not be another file it names: caught before any work."""
    run(["gen", "--count", "1000", "-f", "dec", "-o", "in"])
    run(["build", "-f", "dec", "in", "-o", "f.bbf", "--stats", "none"])
    before = {name: read(name) for name in ("in", "f.bbf")}
    os.symlink("in", path("alias"))
    for args, message in [
            (["dedup", "-f", "dec", "in", "-o", "x", "--dups", "x"], "x is both the output and"),
            (["dedup", "-f", "dec", "in", "-o", "f.bbf", "--filter", "f.bbf"], "f.bbf is both"),
            (["dedup", "-f", "dec", "in", "-o", "in"], "in is both the input and the output"),
            (["dedup", "-f", "dec", "in", "-o", "alias"], "alias is both the input"),
            (["query", "-f", "dec", "in", "--filter", "f.bbf", "-o", "f.bbf"], "f.bbf is both"),
            (["build", "-f", "dec", "in", "-o", "in"], "in is both"),
            (["merge", "f.bbf", "f.bbf", "-o", "f.bbf"], "f.bbf is both"),
            (["build", "-f", "dec", "in", "-o", "-"], "-o -: a filter file is committed"),
            (["merge", "f.bbf", "f.bbf", "-o", "-"], "-o -: a filter file is committed"),
            (["dedup", "-f", "dec", "in", "-o", "x", "--filter", "-"], "--filter -: a filter"),
            (["dedup", "-f", "dec", "in", "-o", "-", "--dups", "-"], "would interleave"),
            (["dedup", "-f", "dec", "-o", "x", "--checkpoint", "ck"], "needs file inputs")]:
        err = run(args, expect_rc=2).stderr
        check(message.encode() in err, f"{args}: {err.decode()}")
        for name, data in before.items():
            check(read(name) == data, f"{args} changed {name}")
    for name in ("x", "-", "-.lock", "ck"):
        check(not os.path.exists(path(name)), f"{name} was left behind")


def case_piped_default_capacity():
    """From a pipe without --capacity the filter starts at a default size, says so, and grows."""
    run(["gen", "--count", "300000", "-f", "dec", "--dup-fraction", "0.2", "-o", "in"])
    proc = run(["dedup", "-f", "dec", "-o", "out", "--stats", "json", "--fpr", "0.01"],
               input_bytes=read("in"))
    check(b"grows as the keys come" in proc.stderr, proc.stderr.decode())
    check_dedup_output(read("in"), read("out"), None, "dec", stats_of(proc))


def case_many_inputs():
    """More inputs than the process may have open files: each is opened only while read."""
    import resource
    names = []
    for i in range(600):
        names.append(write(f"in{i}", b"%d\n%d\n" % (i, i % 7)))
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    proc = subprocess.run([BIN, "dedup", "-f", "dec", "-o", "out", "--stats", "none"] + names,
                          cwd=WORK, preexec_fn=limit, stderr=subprocess.PIPE)
    check(proc.returncode == 0, proc.stderr.decode())
    expected = exact_dedup(b"".join(read(f"in{i}") for i in range(600)).splitlines(True), "dec")
    check(split_records(read("out"), "dec") == expected, "wrong output from many inputs")


def case_window_future_time():
    """One event time far in the future is bad input: it stops the run, or under --skip-bad is
    skipped and counted, and does not pin the clock (later keys are still forgotten)."""
    now = int(time.time())
    rows = [(b"a", now - 20 * 3600), (b"x", now + 10 * 86400), (b"b", now - 10 * 3600),
            (b"b", now - 2 * 3600)]
    write("in.csv", b"".join(b"%s,%d\n" % row for row in rows))
    common = ["dedup", "-f", "csv:1", "--window", "1h", "--time-field", "2", "in.csv",
              "--capacity", "100"]
    err = run(common + ["-o", "out"], expect_rc=1).stderr
    check(b"in.csv:2: event time" in err and b"--max-future" in err, err.decode())
    proc = run(common + ["-o", "out", "--skip-bad", "--stats", "json"])
    check(read("out") == b"a,%d\nb,%d\nb,%d\n" % (rows[0][1], rows[2][1], rows[3][1]),
          f"the future time pinned the clock: {read('out')!r}")
    check(stats_of(proc)["bad_records_skipped"] == 1, "the future record was not counted")
    run(common + ["-o", "out", "--max-future", "30d"])  # allowed when the bound says so


def case_capacity_holds_its_keys():
    """A filter sized for N keys takes N distinct keys without growing: larger capacities never
    give smaller filters, and --on-full error accepts the input the filter was sized for."""
    run(["gen", "--count", "20000", "--dup-fraction", "0", "-o", "keys"])
    sizes = []
    for capacity in (20000, 25000, 40000):
        run(["build", "keys", "-o", f"f{capacity}.bbf", "--capacity", str(capacity),
             "--stats", "none"])
        info = json.loads(run(["info", "--json", f"f{capacity}.bbf"]).stdout)
        check(info["capacity"] == capacity and info["keys_inserted"] >= 19990, f"{info}")
        sizes.append(info["file_bytes"])
    check(sizes == sorted(sizes), f"file sizes {sizes} for growing capacities")
    proc = run(["dedup", "keys", "-o", "out", "--filter", "n.bbf", "--capacity", "20000",
                "--on-full", "error", "--stats", "json"])
    stats = stats_of(proc)
    check(stats["generations"] == 1 and stats["growths"] == 0 and stats["final_fpr"] <= 0.001,
          f"{stats}")
    # The same dump again: all repeats, so the full filter neither grows nor refuses.
    before = read("n.bbf")
    proc = run(["dedup", "keys", "-o", "again", "--filter", "n.bbf", "--on-full", "error",
                "--stats", "json"])
    stats = stats_of(proc)
    check(read("again") == b"" and stats["generations"] == 1, f"{stats}")
    check(len(read("n.bbf")) == len(before), "the filter was resized for repeats")


def case_filter_key_format():
    """A carried filter refuses keys that hash differently from its own (integers against byte
    strings): its keys would pass again as new. Formats of the same kind share it, and sizing
    options it cannot honour are named in a warning."""
    run(["gen", "--count", "2000", "-f", "dec", "-o", "in"])
    run(["dedup", "-f", "dec", "in", "-o", "out", "--filter", "f.bbf", "--stats", "none"])
    before = read("f.bbf")
    err = expect_failure(["dedup", "-f", "lines", "in", "--filter", "f.bbf"],
                         "f.bbf holds dec keys, which hash differently from the lines keys")
    check(read("f.bbf") == before, "a refused run changed the filter")
    write("hex", b"".join(b"%x\n" % int(r) for r in split_records(read("in"), "dec")))
    proc = run(["dedup", "-f", "hex", "hex", "-o", "again", "--filter", "f.bbf", "--seed", "7",
                "--stats", "json"])
    check(read("again") == b"" and stats_of(proc)["records_read"] == 2000,
          "hex keys passed again")
    check(b"--seed ignored: f.bbf exists" in proc.stderr, proc.stderr.decode())


def case_window_key_format():
    """A carried window, like a filter, refuses keys that hash differently from those it holds
    (integers against byte strings), as a file or a state directory; formats of the same kind
    share it, and a rate it cannot honour is named in a warning."""
    run(["gen", "--count", "2000", "-f", "dec", "-o", "in"])
    write("hex", b"".join(b"%x\n" % int(r) for r in split_records(read("in"), "dec")))
    for state in ("w.bbw", "wd/"):
        window = ["--window-records", "100000", "--filter", state, "--stats", "none"]
        run(["dedup", "-f", "dec", "in", "-o", "first"] + window)
        before = state_bytes(state)
        name = state.rstrip("/")
        expect_failure(["dedup", "-f", "lines", "in"] + window,
                       f"{name} holds a window of dec keys, which hash differently from the "
                       "lines keys")
        check(state_bytes(state) == before, "a refused run changed the window")
        run(["dedup", "-f", "hex", "hex", "-o", "again"] + window)
        check(read("again") == b"", "hex keys passed again through the window")
        proc = run(["dedup", "-f", "dec", "in", "-o", "again2", "--fpr", "0.2"] + window)
        check(b"--fpr ignored: " + name.encode() + b" exists" in proc.stderr,
              proc.stderr.decode())


def case_checkpoint_directory_of_its_own():
    """A checkpoint removes the files of its earlier saves: --checkpoint refuses a directory that
    holds other files, or one that holds the run's own inputs, outputs or state, and a state
    directory never takes a user's files for its own, whatever their names end in."""
    run(["gen", "--count", "5000", "-o", "in"])
    os.mkdir(path("ck"))
    write("ck/app.log", b"user log\n")
    write("ck/notes.part", b"user notes\n")
    expect_failure(["dedup", "in", "--checkpoint", "ck"], "holds files other than a checkpoint",
                   rc=2)
    check(read("ck/app.log") == b"user log\n" and read("ck/notes.part") == b"user notes\n",
          "a refused checkpoint touched the user's files")
    # A directory holding only a name an older checkpoint used, which here is the carried
    # window itself: the first checkpoint would have removed it.
    os.mkdir(path("old"))
    window = ["--window-records", "100000", "--stats", "none"]
    run(["dedup", "in", "-o", "first", "--filter", "old/window.bbw"] + window)
    kept = read("old/window.bbw")
    os.remove(path("old/window.bbw.lock"))  # else it is a file other than a checkpoint's
    expect_failure(["dedup", "in", "--filter", "old/window.bbw", "--checkpoint", "old"] + window,
                   "--filter file old/window.bbw is inside the --checkpoint directory", rc=2)
    check(read("old/window.bbw") == kept, "the carried window changed")
    write("afile", b"x")
    expect_failure(["dedup", "in", "--checkpoint", "afile"], "--checkpoint afile is a file", rc=2)
    # A --filter state directory full of a user's logs is not taken as its own debris.
    os.mkdir(path("logs"))
    write("logs/1-p0-0-b64.logx", b"a user's file\n")
    write("logs/server.log", b"a user's log\n")
    expect_failure(["dedup", "in", "--filter", "logs/"], "holds no bulkbloom state but other files",
                   rc=2)
    check(sorted(os.listdir(path("logs"))) == ["1-p0-0-b64.logx", "server.log"],
          "the refused run touched the directory")
    # Made by bulkbloom, a checkpoint directory is taken again, and a user's file put in a state
    # directory later survives its commits.
    run(["dedup", "in", "-o", "out", "--checkpoint", "ck2", "--checkpoint-every", "1000",
         "--filter", "state/", "--stats", "none"])
    write("state/README.log", b"mine\n")
    run(["dedup", "in", "-o", "out2", "--checkpoint", "ck2", "--filter", "state/", "--stats",
         "none"])
    check(read("state/README.log") == b"mine\n", "a commit removed a user's file")
    # Another job's state directory is not a checkpoint's, whatever it holds.
    before = state_bytes("state/")
    expect_failure(["dedup", "in", "--checkpoint", "state"],
                   "holds a bulkbloom state that is not a dedup checkpoint", rc=2)
    check(state_bytes("state/") == before, "a refused run changed another state directory")
    # "ck3/" names ck3, also before it exists.
    expect_failure(["dedup", "in", "--checkpoint", "ck3/", "--dups", "ck3/dups"],
                   "--dups file ck3/dups is inside the --checkpoint directory", rc=2)
    # An older bulkbloom's checkpoint, with the temporary file of a save it was killed in.
    os.mkdir(path("old2"))
    write("old2/checkpoint.bbf", b"an older checkpoint")
    write("old2/checkpoint.bbf.tmp.x1y2z3", b"half of one")
    run(["dedup", "in", "-o", "out3", "--checkpoint", "old2", "--checkpoint-every", "1000",
         "--stats", "none"])


def state_bytes(state):
    """The bytes of a state file, or of each file of a state directory (a name ending in '/')."""
    if not state.endswith("/"):
        return read(state)
    return {name: read(state + name) for name in sorted(os.listdir(path(state)))}


def case_resume_after_another_commit():
    """A checkpoint is built on the --filter state as the run found it: resuming it after another
    run committed to that state would replace that commit and let its keys through again, so it
    is refused; resuming a run that committed itself says so and changes nothing."""
    for seed in (1, 2, 3):
        run(["gen", "--count", "100000", "--seed", str(seed), "-o", f"in{seed}"])
    for state in ("f.bbf", "fd/"):
        a = ["dedup", "in1", "-o", "o1", "--filter", state, "--checkpoint", "ck",
             "--checkpoint-every", "10000", "--buffer-size", "64K", "--stats", "none", "--resume",
             "--capacity", "200000"]
        kill_after_a_checkpoint(a)
        run(["dedup", "in2", "-o", "o2", "--filter", state, "--stats", "none"])
        before = state_bytes(state)
        # --capacity, which the state made by that other run overrides, is not noted on the way to
        # the refusal.
        proc = run(a, expect_rc=1)
        check(b"was committed by another run after the checkpoint in" in proc.stderr and
              len(proc.stderr.splitlines()) == 1, proc.stderr.decode())
        check(state_bytes(state) == before and not os.path.exists(path("o1")),
              "a refused resume changed the state or wrote its output")

        # The run completed and committed: resumed again, it is done, also after another
        # commit since (the state recalls the runs before its last).
        subprocess.run(["rm", "-rf", path("ck"), path("o1.partial")], check=True)
        run(a)
        done = read("o1")
        proc = run(a)
        check(b"this run was committed earlier" in proc.stderr and read("o1") == done,
              proc.stderr.decode())
        run(["dedup", "in3", "-o", "o3", "--filter", state, "--stats", "none"])
        before = state_bytes(state)
        proc = run(a)
        check(b"this run was committed earlier" in proc.stderr and read("o1") == done,
              proc.stderr.decode())
        check(state_bytes(state) == before, "a recognised resume changed the state")
        proc = run(["dedup", "in3", "-o", "o3b", "--filter", state, "--stats", "json"])
        check(read("o3b") == b"", "the keys of the commit after the checkpoint passed again")
        subprocess.run(["rm", "-rf", path("ck"), path("o1"), path("o2"), path("o3"), path("o3b")],
                       check=True)
    # The state the checkpoint was made from, removed since: resuming would put it back.
    run(["dedup", "in2", "-o", "o2", "--filter", "r.bbf", "--stats", "none"])
    a = ["dedup", "in1", "-o", "o1", "--filter", "r.bbf", "--checkpoint", "ck",
         "--checkpoint-every", "10000", "--buffer-size", "64K", "--stats", "none", "--resume"]
    kill_after_a_checkpoint(a)
    os.remove(path("r.bbf"))
    proc = run(a, expect_rc=1)
    check(b"was removed after the checkpoint" in proc.stderr, proc.stderr.decode())
    check(not os.path.exists(path("r.bbf")), "a refused resume made the state again")


def case_merge_keeps_sizing():
    """merge keeps what its parts promise and the key format they hold, refuses parts it cannot
    join, and names them."""
    for seed in (1, 2):
        run(["gen", "--count", "3000", "-f", "dec", "--seed", str(seed), "-o", f"in{seed}"])
        run(["build", "-f", "dec", f"in{seed}", "-o", f"{seed}.bbf", "--capacity", "6000",
             "--fpr", "0.01", "--stats", "none"])
    run(["merge", "1.bbf", "2.bbf", "-o", "m.bbf"])
    info = json.loads(run(["info", "--json", "m.bbf"]).stdout)
    check(info["promised_fpr"] == 0.01 and info["key_format"] == "dec", f"{info}")
    proc = run(["dedup", "-f", "dec", "in1", "in2", "-o", "out", "--filter", "m.bbf",
                "--stats", "json"])
    check(stats_of(proc)["promised_fpr"] == 0.01 and read("out") == b"", "merged promise lost")
    write("words", b"a\nb\n")
    run(["build", "-f", "lines", "words", "-o", "words.bbf", "--capacity", "6000", "--fpr",
         "0.01", "--stats", "none"])
    for part in ("in1", "in2"):  # sized for the first, grown by the second
        run(["dedup", "-f", "dec", part, "-o", f"out-{part}", "--filter", "grown.bbf", "--stats",
             "none"])
    write("w.csv", b"k1,1000\nk2,1001\n")
    run(["dedup", "-f", "csv:1", "--window", "1h", "--time-field", "2", "w.csv", "--filter",
         "w.bbw", "-o", "out", "--stats", "none"])
    for parts, message in [(["1.bbf", "words.bbf"], "words.bbf holds lines keys"),
                           (["1.bbf", "grown.bbf"], "grown.bbf has grown to"),
                           (["w.bbw", "1.bbf"], "w.bbw is a sliding window's file")]:
        err = run(["merge"] + parts + ["-o", "x.bbf"], expect_rc=1).stderr
        check(message.encode() in err and not os.path.exists(path("x.bbf")), err.decode())
    for args in (["query", "--filter", "w.bbw", "-f", "dec", "in1", "-o", "q"],
                 ["dedup", "--filter", "w.bbw", "-f", "dec", "in1", "-o", "q"]):
        err = run(args, expect_rc=1).stderr
        check(b"w.bbw is a sliding window's file" in err and not os.path.exists(path("q")),
              err.decode())


def case_tiny_rates_shown():
    """A nearly empty filter's rate is reported as the tiny number it is, not as 0."""
    run(["gen", "--count", "100", "-f", "dec", "-o", "in"])
    run(["build", "-f", "dec", "in", "-o", "f.bbf", "--capacity", "1M", "--fpr", "1e-6",
         "--stats", "none"])
    proc = run(["query", "--filter", "f.bbf", "-f", "dec", "in", "-o", "seen", "--stats", "json"])
    info = json.loads(run(["info", "--json", "f.bbf"]).stdout)
    rate = stats_of(proc)["filter_fpr"]
    check(0 < rate and abs(rate - info["current_fpr"]) <= 1e-3 * info["current_fpr"],
          f"query {rate}, info {info['current_fpr']}")


def case_file_modes():
    """Filter files get the permissions a plain create would give, and a replaced one keeps
    its own, as -o outputs do."""
    os.umask(0o022)
    run(["gen", "--count", "1000", "-f", "dec", "-o", "in"])
    run(["build", "-f", "dec", "in", "-o", "f.bbf", "--stats", "none"])
    check(os.stat(path("f.bbf")).st_mode & 0o777 == 0o644, oct(os.stat(path("f.bbf")).st_mode))
    os.chmod(path("f.bbf"), 0o640)
    run(["dedup", "-f", "dec", "in", "-o", "out", "--filter", "f.bbf", "--stats", "none"])
    check(os.stat(path("f.bbf")).st_mode & 0o777 == 0o640, oct(os.stat(path("f.bbf")).st_mode))


def case_merge_saturated():
    """The union of saturated filters (every bit set: tests/cli/data/legacy_saturated.bbf, from
    an older bulkbloom) keeps a key count, not 0."""
    saturated = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                             "legacy_saturated.bbf")
    run(["merge", saturated, saturated, "-o", "m.bbf"])
    info = json.loads(run(["info", "--json", "m.bbf"]).stdout)
    check(info["keys_inserted"] >= 86, f"saved count {info['keys_inserted']}")


def case_csv_header():
    """--header: each input's first line is not a record (never hashed, never a duplicate); the
    first input's is written once at the top of each output."""
    write("a.csv", b"id,name\n1,x\n2,y\n1,z\n")
    write("b.csv", b"id,name\n2,w\n3,v\nid,name\n")
    run(["dedup", "-f", "csv:1", "--header", "a.csv", "b.csv", "-o", "out", "--dups", "dups",
         "--buffer-size", "8K"])
    check(read("out") == b"id,name\n1,x\n2,y\n3,v\nid,name\n", f"out: {read('out')!r}")
    check(read("dups") == b"id,name\n1,z\n2,w\n", f"dups: {read('dups')!r}")
    err = run(["dedup", "--header", "a.csv", "-o", "out"], expect_rc=2).stderr
    check(b"--header applies to csv" in err, err.decode())


def case_version_and_help():
    proc = run(["--version"])
    check(proc.stdout.startswith(b"bulkbloom ") and proc.stdout.count(b".") == 2, proc.stdout)
    check(b"dedup" in run(["help"]).stdout, "help lists no commands")
    check(b"--capacity" in run(["help", "dedup"]).stdout, "help dedup shows no options")


def case_filter_files_outputs():
    """build and merge write their filter where dedup --filter would read it: through symbolic
    links, under the lock a dedup run holds, refused before reading any input when the place
    cannot take a file; build keeps an exact --num-blocks layout or stops; query's two outputs
    cannot both be stdout."""
    run(["gen", "--count", "1000", "--dup-fraction", "0.1", "-o", "in"])
    os.symlink("real.bbf", path("link.bbf"))
    run(["build", "in", "-o", "link.bbf", "--stats", "none"])
    check(os.path.islink(path("link.bbf")) and os.path.isfile(path("real.bbf")),
          "build replaced the link instead of writing the file it names")
    run(["build", "in", "-o", "other.bbf", "--stats", "none"])
    run(["merge", "other.bbf", "other.bbf", "-o", "link.bbf"])
    check(os.path.islink(path("link.bbf")), "merge replaced the link")
    proc = run(["merge", "other.bbf", "real.bbf", "-o", "link.bbf"], expect_rc=2)
    check(b"real.bbf is both the output filter and the input" in proc.stderr,
          proc.stderr.decode())
    # What a save killed mid-write left beside the filter goes with the next save; a user's file
    # of a like name stays.
    write("real.bbf.tmp.k1lled", b"x" * 100)
    write("real.bbf.tmp.csv", b"x" * 100)
    run(["build", "in", "-o", "link.bbf", "--stats", "none"])
    check(not os.path.exists(path("real.bbf.tmp.k1lled")), "a dead save's temporary file stayed")
    check(os.path.exists(path("real.bbf.tmp.csv")), "a user's file beside the filter was removed")

    # Under the lock of a dedup run that carries the filter: refused, nothing written.
    with open(path("held.bbf.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for args in (["build", "in", "-o", "held.bbf", "--stats", "none"],
                     ["merge", "real.bbf", "real.bbf", "-o", "held.bbf"]):
            proc = run(args, expect_rc=1)
            check(b"held.bbf is in use by another bulkbloom run" in proc.stderr,
                  proc.stderr.decode())
            check(not os.path.exists(path("held.bbf")), f"{args[0]} wrote under the lock")

    # A place that cannot take the file, refused with a usage error before the input is read
    # (a fifo nobody writes would hang a run that read it).
    os.mkfifo(path("fifo"))
    os.mkdir(path("dir.bbf"))
    for output, message, rc in (("dir.bbf", b"-o dir.bbf is a directory", 2),
                                ("new/", b"-o new/ is a directory", 2),
                                ("missing/f.bbf", b"its directory missing does not exist", 1)):
        proc = run(["build", "fifo", "-o", output, "--capacity", "10", "--stats", "none"],
                   expect_rc=rc)
        check(message in proc.stderr, proc.stderr.decode())

    # --num-blocks: exactly that layout, or a refusal; never a filter of another layout.
    proc = run(["build", "in", "-o", "exact.bbf", "--shape", "sb256", "--num-blocks", "1",
                "--stats", "none"], expect_rc=1)
    check(b"--num-blocks fixes its layout" in proc.stderr and
          not os.path.exists(path("exact.bbf")), proc.stderr.decode())
    run(["build", "in", "-o", "exact.bbf", "--shape", "sb256", "--num-blocks", "64",
         "--index", "full64", "--stats", "none"])
    info = json.loads(run(["info", "--json", "exact.bbf"]).stdout)
    check(info["layout"].startswith("sb256 x 64 blocks") and "full64" in info["layout"],
          f"{info['layout']}")

    # Seen and unseen records both on stdout would be mixed.
    proc = run(["query", "in", "--filter", "real.bbf", "--unseen", "-"], expect_rc=2)
    check(b"would both go to stdout" in proc.stderr, proc.stderr.decode())


def case_build_query_info_merge():
    run(["gen", "--count", "30000", "-f", "dec", "--seed", "1", "-o", "a"])
    run(["gen", "--count", "30000", "-f", "dec", "--seed", "2", "-o", "b"])
    run(["build", "-f", "dec", "a", "-o", "a.bbf", "--capacity", "60000", "--stats", "none"])
    run(["build", "-f", "dec", "b", "-o", "b.bbf", "--capacity", "60000", "--stats", "none"])
    # Every record of a is seen (no false negatives); of b only false positives are.
    proc = run(["query", "--filter", "a.bbf", "-f", "dec", "b", "a", "-o", "seen", "--unseen",
                "unseen", "--stats", "json"])
    a, b = split_records(read("a"), "dec"), split_records(read("b"), "dec")
    seen, unseen = split_records(read("seen"), "dec"), split_records(read("unseen"), "dec")
    check(sorted(seen + unseen) == sorted(a + b), "seen + unseen is not the input")
    check(set(a) <= set(seen), "a record of the filter's own dump was reported unseen")
    false_positives = len(set(seen) - set(a))
    check(false_positives <= 60000 * stats_of(proc)["filter_fpr"] * 3 + 5, "too many seen")
    info = json.loads(run(["info", "--json", "a.bbf"]).stdout)
    # The saved count is the number of keys build found new: the distinct keys less the few
    # false positives.
    check(0 <= len(set(a)) - info["keys_inserted"] <= 10, f"keys_inserted {info['keys_inserted']}")
    check(abs(info["estimated_keys"] - len(set(a))) < 0.05 * len(set(a)), "estimate is off")
    check(info["version"] == 1 and info["file_bytes"] == os.path.getsize(path("a.bbf")), "info")
    # The union holds both dumps.
    run(["merge", "a.bbf", "b.bbf", "-o", "ab.bbf"])
    run(["query", "--filter", "ab.bbf", "-f", "dec", "a", "b", "-o", "seen", "--unseen",
         "unseen", "--stats", "none"])
    check(read("unseen") == b"", "the merged filter lost a key")
    # Bad filters and mismatched layouts are clear errors.
    run(["build", "-f", "dec", "a", "-o", "small.bbf", "--capacity", "10", "--stats", "none"])
    proc = run(["merge", "a.bbf", "small.bbf", "-o", "x.bbf"], expect_rc=1)
    check(b"different layouts" in proc.stderr and not os.path.exists(path("x.bbf")),
          proc.stderr.decode())
    proc = run(["info", "a"], expect_rc=1)
    check(b"not a bulkbloom filter" in proc.stderr, proc.stderr.decode())
    write("cut.bbf", read("a.bbf")[:-100])
    proc = run(["query", "--filter", "cut.bbf", "-f", "dec", "a", "-o", "q"], expect_rc=1)
    check(b"cut.bbf" in proc.stderr and not os.path.exists(path("q")), proc.stderr.decode())


def case_golden_grown_file():
    """A grown filter file (tests/golden/grown.bbf, written by an earlier bulkbloom from the same
    input and options) comes out byte for byte the same today, and still loads."""
    golden_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden",
                               "grown.bbf")
    with open(golden_path, "rb") as f:
        golden = f.read()
    run(["gen", "--count", "4000", "-f", "hex", "--seed", "3", "-o", "small"])
    # Through a pipe, so that the input's size is unknown and the filter grows.
    run(["build", "-f", "hex", "-o", "g.bbf", "--capacity", "300", "--fpr", "0.01",
         "--buffer-size", "16K", "--stats", "none", "--threads", "1"], input_bytes=read("small"))
    written = read("g.bbf")
    first_difference = next((i for i, (a, b) in enumerate(zip(written, golden)) if a != b),
                            min(len(written), len(golden)))
    check(written == golden, f"g.bbf differs from the golden file first at byte "
                             f"{first_difference} ({len(written)} and {len(golden)} bytes)")
    info = json.loads(run(["info", "--json", golden_path]).stdout)
    check(info["generations"] == 3 and info["key_format"] == "hex", f"{info}")
    run(["query", "--filter", golden_path, "-f", "hex", "small", "-o", "seen", "--unseen",
         "unseen", "--stats", "none"])
    check(read("unseen") == b"", "the golden grown filter lost a key")


def kill_and_resume(common, state_suffix, checkpoint_file, kills_wanted, seed):
    """Runs `common` uninterrupted, then with --checkpoint ck --resume: SIGKILLed at random moments
    until `kills_wanted` kills, then to completion. Every finished run's outputs and saved state
    (--filter out.<state_suffix>) must equal the uninterrupted run's. Returns how many runs resumed
    from a mid-run checkpoint."""
    import random
    rng = random.Random(seed)
    state = "out." + state_suffix
    # The saved state records the run's outputs by name: the reference writes the same names.
    started = time.monotonic()
    run(common + ["-o", "out", "--dups", "out.dups", "--filter", state])
    # Kills land anywhere in a run as long as this machine takes for one now, however loaded.
    max_sleep = time.monotonic() - started
    reference = (read("out"), read("out.dups"), read(state))
    for name in ("out", "out.dups", state):
        os.remove(path(name))
    resumable = common + ["-o", "out", "--dups", "out.dups", "--filter", state,
                          "--checkpoint", "ck", "--checkpoint-every", "20000", "--resume"]
    kills = completions = mid_run_resumes = 0
    while kills < kills_wanted or completions == 0:
        if os.path.exists(path(checkpoint_file)) and b"complete=0" in read(checkpoint_file):
            mid_run_resumes += 1
        proc = subprocess.Popen([BIN] + resumable, cwd=WORK, stderr=subprocess.PIPE)
        if kills < kills_wanted:
            time.sleep(rng.uniform(0.0, max_sleep))
            proc.kill()
        _, err = proc.communicate()
        if proc.returncode == -signal.SIGKILL:
            kills += 1
            continue
        check(proc.returncode == 0, f"resumed run failed: {err.decode()}")
        check((read("out"), read("out.dups"), read(state)) == reference,
              f"outputs differ from the uninterrupted run after {kills} kills")
        completions += 1
        for name in ("out", "out.dups", state):
            os.remove(path(name))
        subprocess.run(["rm", "-rf", path("ck")], check=True)
    return mid_run_resumes


def case_checkpoint_kill_resume():
    """SIGKILL a checkpointing dedup at random moments, resume each time; every finished run's
    outputs and saved filter are byte-identical to an uninterrupted run's."""
    run(["gen", "--count", "400000", "-f", "dec", "--dup-fraction", "0.2", "-o", "in"])
    common = ["dedup", "-f", "dec", "in", "--fpr", "0.01", "--buffer-size", "64K", "--stats",
              "none"]
    mid_run_resumes = kill_and_resume(common, "bbf", "ck/MANIFEST", 20, 7)
    check(mid_run_resumes >= 10, f"only {mid_run_resumes} runs resumed from a mid-run checkpoint")


def window_model(records, length, generations, lateness, by_records):
    """The window of docs/WINDOW.md with exact sets for generations: True for each record kept.
    `records` are (key, time) pairs; the clock is the record index or the largest time seen."""
    period = -(-(length + lateness) // (generations - 1))
    gens = [set() for _ in range(generations)]  # gens[0] is the newest
    newest = clock = None
    kept = []
    for i, (key, t) in enumerate(records):
        clock = i if by_records else (t if clock is None else max(clock, t))
        epoch = clock // period
        if newest is None:
            newest = epoch
        for _ in range(min(epoch - newest, generations)):
            gens = [set()] + gens[:-1]
        newest = max(newest, epoch)
        kept.append(not any(key in g for g in gens))
        gens[0].add(key)
    return kept


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)).encode()


def window_records(count, seed, lateness):
    """(key, time) pairs: keys repeat at short and long distances, times advance by 0-40 s a
    record and a quarter of the records trail the latest time by up to `lateness` seconds."""
    import random
    rng = random.Random(seed)
    base, records = 1_764_000_000, []
    for i in range(count):
        base += rng.randrange(41)
        back = rng.choice([1, 2, 50, 400, 1000, 1500, 2000, 3000])
        key = records[i - back][0] if i >= back and rng.random() < 0.5 else b"k%d" % rng.getrandbits(40)
        late = rng.randrange(lateness + 1) if rng.random() < 0.25 else 0
        records.append((key, base - late))
    return records


def case_window_event_time():
    """--window over ISO-8601 and plain-seconds event times: the output is exactly the window
    model's (no false positive at this size), and every repeat within the window is dropped."""
    length, lateness = 6 * 3600, 600
    records = window_records(12000, 5, lateness)
    lines = [b"%s,%s,payload\n" % (k, iso(t) if i % 2 else str(t).encode())
             for i, (k, t) in enumerate(records)]
    write("in.csv", b"".join(lines))
    run(["dedup", "-f", "csv:1", "--window", "6h", "--lateness", "10m", "--time-field", "2",
         "--fpr", "1e-7", "in.csv", "-o", "out", "--dups", "dups", "--stats", "none"])
    kept = window_model(records, length, 4, lateness, by_records=False)
    expected = b"".join(line for line, k in zip(lines, kept) if k)
    check(read("out") == expected, "window output differs from the model")
    check(len(read("out")) + len(read("dups")) == len(b"".join(lines)), "records lost")
    latest = {}
    for i, (key, t) in enumerate(records):
        if key in latest and t - latest[key] <= length:
            check(not kept[i], f"record {i} repeats its key within the window but was kept")
        latest[key] = max(t, latest.get(key, t))
    check(0 < sum(kept) < len(records), "no records dropped or none kept")


def case_window_time_formats():
    """Event times in every accepted form: zone offsets, fractions (rounded down), a space for T,
    dates, plain and negative seconds. Expected decisions follow from the times as UTC seconds."""
    lines = [b"a,2026-11-29T10:00:00+02:00\n",    # 08:00:00Z: new
             b"a,2026-11-29T09:00:00+0100\n",     # the same instant: dropped
             b"b,2026-11-29 08:30:00.75Z\n",      # 08:30:00Z: new
             b"b,1795944600\n",                   # 09:30:00Z, exactly 1 h later: dropped
             b"c,2026-11-29\n",                   # 00:00:00Z, late: checked at the clock, new
             b"c,-1.5\n",                         # 1969: late again, dropped
             b"a,2026-11-29T11:30:00.999Z\n"]     # 3.5 h after a's last arrival (> 2 h): new
    write("in.csv", b"".join(lines))
    run(["dedup", "-f", "csv:1", "--window", "1h", "--generations", "2", "--time-field", "2",
         "--fpr", "1e-6", "in.csv", "-o", "out", "--stats", "none"])
    expected = [lines[i] for i in (0, 2, 4, 6)]
    check(read("out") == b"".join(expected), f"got {read('out')!r}")


def case_window_records():
    """--window-records counts records: the output is exactly the window model's."""
    records = window_records(20000, 6, 0)
    lines = [k + b"\n" for k, _ in records]
    write("in", b"".join(lines))
    run(["dedup", "-f", "lines", "--window-records", "1500", "--generations", "3", "--fpr",
         "1e-7", "in", "-o", "out", "--stats", "none"])
    kept = window_model(records, 1500, 3, 0, by_records=True)
    check(read("out") == b"".join(l for l, k in zip(lines, kept) if k), "output differs")


def case_window_errors():
    write("in.csv", b"a,2026-11-29T00:00:00Z\nb,yesterday\n")
    for args, message in [(["--window", "6h"], "needs --time-field"),
                          (["--window", "6x", "--time-field", "2"], "is not a duration"),
                          (["--window", "6h", "--window-records", "5"], "exclude each other"),
                          (["--time-field", "2"], "needs --window"),
                          (["--window", "1h", "--time-field", "2", "--generations", "1"],
                           "outside [2, 64]"),
                          (["--window", "1h", "--time-field", "2", "--shape", "sb256"],
                           "--shape does not apply"),
                          (["--window-records", "5", "--index", "high32"],
                           "--index does not apply")]:
        expect_failure(["dedup", "-f", "csv:1", "in.csv"] + args, message, rc=2)
    expect_failure(["dedup", "-f", "dec", "in.csv", "--window", "1h", "--time-field", "2"],
                   "needs a csv:N or tsv:N format", rc=2)
    proc = run(["dedup", "-f", "csv:1", "in.csv", "--window", "1h", "--time-field", "2"],
               expect_rc=1)
    check(b"in.csv:2: no event time" in proc.stderr, proc.stderr.decode())
    # A saved window is reused only with the same window options.
    run(["dedup", "-f", "csv:1", "in.csv", "--window", "1h", "--time-field", "2", "--skip-bad",
         "--filter", "w.bbw", "--stats", "none", "-o", "out"])
    expect_failure(["dedup", "-f", "csv:1", "in.csv", "--window", "2h", "--time-field", "2",
                    "--filter", "w.bbw"], "holds another window", rc=2)


def case_info_window_file():
    """info reads the window files dedup --window --filter writes."""
    write("in.csv", b"".join(b"k%d,%d\n" % (i % 50, 1000 + i) for i in range(200)))
    run(["dedup", "-f", "csv:1", "--window", "1h", "--time-field", "2", "in.csv", "--filter",
         "w.bbw", "-o", "out", "--stats", "none"])
    info = json.loads(run(["info", "--json", "w.bbw"]).stdout)
    check(info["kind"] == "sliding window" and info["records_seen"] == 200 and
          info["clock_time"] == 1199 and "event_time window 3600" in info["window"], f"{info}")
    # The promise beside the rate now (issue 33); the text form says both on one line.
    check(info["promised_fpr"] == 0.001 and 0 < info["current_fpr"] < 0.001, f"{info}")
    text = run(["info", "w.bbw"]).stdout.decode()
    check("(promised 0.001)" in text, text)


def case_window_kill_resume():
    """The same with a sliding window: outputs and the saved window file equal an uninterrupted
    run's."""
    records = window_records(300000, 7, 300)
    write("in.csv", b"".join(b"%s,%d\n" % (k, t) for k, t in records))
    common = ["dedup", "-f", "csv:1", "--window", "3h", "--lateness", "5m", "--time-field", "2",
              "in.csv", "--fpr", "0.01", "--buffer-size", "64K", "--stats", "none"]
    mid_run_resumes = kill_and_resume(common, "bbw", "ck/MANIFEST", 20, 11)
    check(mid_run_resumes >= 5, f"only {mid_run_resumes} runs resumed from a mid-run checkpoint")


def case_rerun_recognised():
    """A rerun of a committed run whose inputs look different but hold the bytes it read
    (re-fetched with cp + mv, touched, named by another path, --capacity dropped) is recognised as
    that run: it says so, exits 0 and changes neither its output nor the filter (docs/FORMAT.md,
    "Reruns")."""
    run(["gen", "--count", "20000", "--seed", "1", "-o", "day.u64"])
    command = ["dedup", "day.u64", "--filter", "f.bbf", "-o", "out.u64", "--stats", "none"]
    run(command + ["--capacity", "50000"])
    committed, state = read("out.u64"), read("f.bbf")
    check(len(committed) > 0, "the first run wrote nothing")

    def recognised(args, what):
        proc = run(args)
        check(b"this run was committed earlier" in proc.stderr,
              f"{what}: not recognised: {proc.stderr.decode()}")
        check(read("out.u64") == committed and read("f.bbf") == state, f"{what}: files changed")

    recognised(command + ["--capacity", "50000"], "the same command")
    write("fetched", read("day.u64"))
    os.replace(path("fetched"), path("day.u64"))  # a new inode and modification time
    recognised(command + ["--capacity", "50000"], "re-fetched input")
    os.utime(path("day.u64"), (1, 1))
    recognised(command + ["--capacity", "50000"], "touched input")
    recognised(["dedup", "./day.u64", "--filter", "f.bbf", "-o", path("out.u64"), "--stats",
                "none", "--capacity", "50000"], "other paths to the input and output")
    recognised(command, "--capacity dropped")
    # An output that is no longer the one committed cannot be made again from the filter.
    write("out.u64", committed[:-8])
    proc = run(command, expect_rc=1)
    check(b"already holds this run" in proc.stderr and
          b"not the %d committed" % len(committed) in proc.stderr, proc.stderr.decode())


def case_rerun_after_other_commits():
    """A run retried after other runs committed to its state (a crash after its commit, a
    scheduler's retry that comes late) or run again later (a backfill) is recognised from the
    runs the state recalls, through a resumed run's commit too; run over the state, it would
    replace its output with nearly nothing. Another run to such an output is refused. The state
    recalls the last 100 runs."""
    for seed in (1, 2, 3):
        run(["gen", "--count", "100000", "--seed", str(seed), "-o", f"in{seed}"])
    for state in ("f.bbf", "fd/"):
        a = ["dedup", "in1", "-o", "o1", "--filter", state, "--stats", "none",
             "--capacity", "400000"]
        run(a)
        committed = read("o1")
        run(["dedup", "in2", "-o", "o2", "--filter", state, "--stats", "none"])
        # A run resumed from its checkpoint commits what the state recalled when it began.
        c = ["dedup", "in3", "-o", "o3", "--filter", state, "--checkpoint", "ck",
             "--checkpoint-every", "10000", "--buffer-size", "64K", "--stats", "none", "--resume"]
        kill_after_a_checkpoint(c)
        run(c)
        # A run whose output cannot be recorded is not recognised, but keeps what is recalled.
        run(["dedup", "in2", "-o", "/dev/null", "--filter", state, "--stats", "none"])
        before = state_bytes(state)
        for args, what in ((a, "the same command"),
                           (["dedup", "./in1", "-o", path("o1"), "--filter", state, "--stats",
                             "none"], "other paths, --capacity dropped")):
            proc = run(args)
            check(b"this run was committed earlier" in proc.stderr, f"{what}: not recognised: "
                  f"{proc.stderr.decode()}")
            check(read("o1") == committed and state_bytes(state) == before,
                  f"{what}: files changed")
        proc = run(["dedup", "in2", "-o", "o1", "--filter", state, "--stats", "none"],
                   expect_rc=1)
        check(b"holds the output of a run committed to " in proc.stderr and
              b" 3 runs before the last" in proc.stderr, proc.stderr.decode())
        check(read("o1") == committed and state_bytes(state) == before, "a refused run wrote")
        # A recalled run whose outputs are gone cannot be made again; --force runs it anyway.
        os.remove(path("o1"))
        proc = run(a, expect_rc=1)
        check(b"already holds this run" in proc.stderr and b"3 runs before the last" in
              proc.stderr and b"o1 is missing" in proc.stderr, proc.stderr.decode())
        check(state_bytes(state) == before, "a refused run changed the state")
        run(a + ["--force"])
        check(len(read("o1")) < len(committed) // 100, "the keys of a committed run passed again")
        # Inputs of the bytes a run read whose outputs a later run wrote again (a file
        # delivered twice) make a new run, not an error.
        keys = b"".join(k.to_bytes(8, "little") for k in (1, 2, 3))
        write("e1", keys)
        write("e2", keys)
        hourly = ["-o", "h", "--filter", state, "--stats", "none", "--force"]
        for hour, written in (("e1", keys), ("in2", b""), ("e2", b"")):
            run(["dedup", hour] + hourly)
            check(read("h") == written, f"{hour}: wrong h")
        os.rename(path("h"), path("h.1"))
        proc = run(["dedup", "e1"] + hourly[:-1], expect_rc=1)
        check(b"already holds this run" in proc.stderr and b"h is missing" in proc.stderr and
              b"--force" in proc.stderr, proc.stderr.decode())
        run(["dedup", "e1"] + hourly)
        check(read("h") == b"", "an empty input wrote records")
        subprocess.run(["rm", "-rf", path("ck"), path("o2"), path("o3"), path("h"), path("h.1")],
                       check=True)
    # The last 100: a run is recalled until 100 more have committed after it.
    run(["gen", "--count", "10", "-o", "tiny"])
    a = ["dedup", "tiny", "-o", "t0", "--filter", "r.bbf", "--stats", "none", "--capacity",
         "100000"]
    run(a)
    for i in range(1, 100):
        write(f"in{i}", i.to_bytes(8, "little"))
        run(["dedup", f"in{i}", "-o", f"t{i}", "--filter", "r.bbf", "--stats", "none"])
    check(b"this run was committed earlier" in run(a).stderr, "the 99th run back was forgotten")
    check(read("r.bbf").count(b"\nearlier=") == 99, "not 99 earlier runs recalled")
    run(["dedup", "in1", "-o", "t100", "--filter", "r.bbf", "--stats", "none"])
    check(read("r.bbf").count(b"\nearlier=") == 99, "more than 99 earlier runs recalled")


def case_rerun_refused():
    """A run that would overwrite the output of the last committed run with inputs whose content
    differs from that run's (or cannot be compared: stdin) refuses, saying how to go on, and
    changes nothing; -o elsewhere or --force go on."""
    run(["gen", "--count", "20000", "--seed", "1", "-o", "day.u64"])
    command = ["dedup", "day.u64", "--filter", "f.bbf", "-o", "out.u64", "--dups", "dups.u64",
               "--stats", "none"]
    run(command)
    committed, state = read("out.u64"), read("f.bbf")
    run(["gen", "--count", "1000", "--seed", "2", "-o", "more.u64"])

    def refused(args, reason, input_bytes=None):
        before = sorted(os.listdir(WORK))
        proc = run(args, input_bytes=input_bytes, expect_rc=1)
        err = proc.stderr.decode()
        check(reason in err and "--force" in err and "-o" in err and "already" in err, err)
        check(read("out.u64") == committed and read("f.bbf") == state, f"{reason}: files changed")
        check(sorted(os.listdir(WORK)) == before, f"{reason}: left {os.listdir(WORK)}")

    with open(path("day.u64"), "ab") as f:
        f.write(read("more.u64"))  # the input grew after the run
    refused(command, "day.u64 has 168000 bytes; the committed run read 160000")
    same_size = bytearray(read("day.u64")[:160000])
    same_size[100] ^= 1
    write("day.u64", bytes(same_size))
    refused(command, "day.u64 holds other bytes than the committed run read")
    refused(["dedup", "-", "--filter", "f.bbf", "-o", "out.u64", "--stats", "none"],
            "stdin cannot be compared", input_bytes=committed)
    refused(["dedup", "more.u64", "--filter", "f.bbf", "-o", "dups2.u64", "--dups", "dups.u64",
             "--stats", "none"], "dups.u64")
    # Another output keeps the committed one; --force replaces it.
    run(["dedup", "more.u64", "--filter", "f.bbf", "-o", "out2.u64", "--stats", "none"])
    check(len(read("out2.u64")) > 0 and read("out.u64") == committed, "-o elsewhere")
    run(["gen", "--count", "500", "--seed", "3", "-o", "third.u64"])
    run(["dedup", "third.u64", "--filter", "f.bbf", "-o", "out2.u64", "--stats", "none",
         "--force"])
    third = set(split_records(read("third.u64"), "u64"))
    forced = split_records(read("out2.u64"), "u64")
    check(set(forced) <= third and len(forced) >= 0.95 * len(third),
          "--force did not replace the output")
    # An output that is gone or was emptied has nothing to lose: the run goes on.
    os.remove(path("out2.u64"))
    run(["gen", "--count", "500", "--seed", "4", "-o", "fourth.u64"])
    run(["dedup", "fourth.u64", "--filter", "f.bbf", "-o", "out2.u64", "--stats", "none"])
    check(os.path.getsize(path("out2.u64")) > 0, "a run over a removed output was refused")


def case_rerun_input_grew_during_run():
    """The record holds the bytes a run read, not the size it saw at the start: a run whose input
    grew while it read it is recognised by a rerun on that input; one whose input grew after it
    read it is refused."""
    run(["gen", "--count", "3000000", "--seed", "1", "-o", "base.u64"])
    run(["gen", "--count", "1000", "--seed", "2", "-o", "tail.u64"])
    base, tail = read("base.u64"), read("tail.u64")
    command = ["dedup", "day.u64", "--filter", "f.bbf", "-o", "out.u64", "--buffer-size", "64K",
               "--threads", "1", "--stats", "json"]

    def fresh_start():
        for name in ("f.bbf", "out.u64"):
            if os.path.exists(path(name)):
                os.remove(path(name))
        write("day.u64", base)

    # The filter's size shows the input size the run saw when it started (it sizes for it).
    fresh_start()
    blocks_for_base = stats_of(run(command))["num_blocks"]
    outcomes = set()
    for attempt in range(40):
        fresh_start()
        proc = subprocess.Popen([BIN] + command, cwd=WORK, stderr=subprocess.PIPE)
        time.sleep(0.005 * attempt)
        with open(path("day.u64"), "ab") as f:
            f.write(tail)
        err = proc.communicate()[1]
        check(proc.returncode == 0, err.decode())
        stats = json.loads(err.decode().strip().splitlines()[-1])
        if stats["num_blocks"] != blocks_for_base:
            continue  # it grew before the run looked at it
        grew_during = stats["records_read"] == (len(base) + len(tail)) // 8
        rerun = run(command, expect_rc=0 if grew_during else 1)
        expected = b"this run was committed earlier" if grew_during else b"the committed run read"
        check(expected in rerun.stderr, rerun.stderr.decode())
        outcomes.add(grew_during)
        if grew_during:
            break
    check(True in outcomes, f"the input never grew while the run read it ({outcomes}): the "
          "case is untested")


def case_input_shrinks_while_read():
    """An input cut short while a run reads it fails the run, naming the input and its sizes, with
    the carried filter untouched and no output or temporary file left: whether the cut pages were
    mapped and in flight (the engine would read them as zeros) or still to be read."""
    run(["gen", "--count", "2000", "--seed", "1", "-o", "first.u64"])
    run(["dedup", "first.u64", "--filter", "base.bbf", "--capacity", "3000000", "-o", "first.out",
         "--stats", "none"])
    base = read("base.bbf")
    # Four 64000-byte windows and a tail that read() takes (the last chunk's worth is never mapped).
    run(["gen", "--count", "36000", "--seed", "2", "--dup-fraction", "0", "-o", "whole.u64"])
    whole = read("whole.u64")

    def attempt(inputs, output, between, cut):
        """Runs dedup on `inputs` into `output` with --dups dups.u64 and calls `between(proc, cut)`
        while the run waits on a FIFO; the run must fail and leave nothing behind."""
        write("f.bbf", base)
        write("day.u64", whole)
        # The run locks its state through f.bbf.lock, which stays.
        before = set(os.listdir(WORK)) | {"f.bbf.lock"}
        proc = subprocess.Popen([BIN, "dedup"] + inputs + ["-o", output, "--dups", "dups.u64",
                                "--filter", "f.bbf", "--buffer-size", "64K", "--threads", "1",
                                "--stats", "none"], cwd=WORK, stderr=subprocess.PIPE)
        between(proc, cut)
        err = proc.communicate()[1].decode()
        check(proc.returncode == 1, f"exit {proc.returncode}: {err}")
        check(f"input day.u64 shrank from {len(whole)} to {cut} bytes while it was read" in err,
              err)
        check(read("f.bbf") == base, "the carried filter changed")
        no_outputs_left(before)

    # Cut under a mapped window after the reader has read the whole file, so that only the window
    # can tell. The output is a FIFO the test opens but does not read yet, of 64 KiB: the first
    # chunk's records fill it and the second's stop the writer; with both of the writer's
    # batches taken, the run waits holding the fourth window, not yet read, the reader's last.
    # Cut at 800, its pages are gone (a SIGBUS for whoever reads them); cut inside its last page,
    # that page reads zeros past the cut, with no fault.
    os.mkfifo(path("out.fifo"))

    def cut_while_mapped(proc, cut):
        with open(path("out.fifo"), "rb") as out:
            fcntl.fcntl(out, 1031, 1 << 16)  # F_SETPIPE_SZ
            deadline = time.monotonic() + 20
            def windows():
                with open(f"/proc/{proc.pid}/maps") as maps:
                    return [line for line in maps if line.rstrip().endswith(path("day.u64"))]

            while True:
                before = windows()
                fds = []
                for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                    try:
                        fds.append(os.readlink(f"/proc/{proc.pid}/fd/{fd}"))
                    except FileNotFoundError:
                        pass  # closed since listed
                # Each window holds a descriptor of its own from before it is mapped to after it
                # is unmapped: one window mapped all along and one descriptor is the window's,
                # the reader's closed (read to the end).
                if len(before) == 1 and windows() == before and fds.count(path("day.u64")) == 1:
                    break
                check(time.monotonic() < deadline, "the run never waited holding a window of a "
                      "file it had read to the end: the case is untested")
                time.sleep(0.01)
            os.truncate(path("day.u64"), cut)
            while out.read(1 << 16):
                pass

    for cut in (800, 4 * 64000 - 1000):
        attempt(["day.u64"], "out.fifo", cut_while_mapped, cut)

    # Cut before it is opened: the first input is a FIFO, and day.u64 is read after it.
    os.mkfifo(path("in.fifo"))

    def cut_before_open(proc, cut):
        with open(path("in.fifo"), "wb") as first:
            os.truncate(path("day.u64"), cut)
            first.write(read("first.u64"))

    attempt(["in.fifo", "day.u64"], "second.out", cut_before_open, 800)


def case_stdin_file_at_an_offset():
    """A regular file as stdin is read from where stdin stands (`{ read -r header; bulkbloom
    ...; } < file` leaves it after the first line), small or large, not from the file's start."""
    run(["gen", "--count", "40000", "--seed", "3", "--dup-fraction", "0.2", "-o", "all.u64"])
    run(["gen", "--count", "4000", "--seed", "4", "--dup-fraction", "0.2", "-o", "small.u64"])
    # Five bytes before the records: the rest is a u64 input, sized from there.
    write("skewed.u64", b"head\n" + read("all.u64"))
    for name, skip in (("all.u64", 8000), ("small.u64", 8000), ("skewed.u64", 5)):
        write("rest.u64", read(name)[skip:])
        options = ["--buffer-size", "64K", "--stats", "json"]
        expected = run(["dedup", "rest.u64", "-o", "-"] + options)
        with open(path(name), "rb") as stdin:
            stdin.seek(skip)
            got = run(["dedup", "-", "-o", "-"] + options, stdin=stdin)
        check(got.stdout == expected.stdout, f"{name}: stdin from byte {skip}: "
              f"{len(got.stdout)} bytes out, expected {len(expected.stdout)}")
        check(stats_of(got)["num_blocks"] == stats_of(expected)["num_blocks"],
              f"{name}: stdin from byte {skip} sized for bytes before it")


def case_state_through_links():
    """--filter through a symbolic link updates the file it points to (the link stays) and locks
    it under its real name, so that runs through two names take turns; a state file with a second
    hard link is refused, as a commit (a rename) would leave the other name behind; a checkpoint
    directory named through a link is the directory it points to."""
    os.mkdir(path("real"))
    run(["gen", "--count", "5000", "-f", "dec", "--seed", "1", "-o", "day1"])
    run(["gen", "--count", "5000", "-f", "dec", "--seed", "2", "-o", "day2"])
    os.symlink("real/f.bbf", path("link.bbf"))  # dangling until the first run makes the file
    run(["dedup", "-f", "dec", "day1", "-o", "out1", "--filter", "link.bbf", "--stats", "none"])
    check(os.path.islink(path("link.bbf")) and os.path.isfile(path("real/f.bbf")),
          "the link was replaced by a file")
    check(os.path.exists(path("real/f.bbf.lock")) and not os.path.exists(path("link.bbf.lock")),
          "the lock is not beside the real file")
    # Day 1's keys again, through the real name: the filter already holds them.
    run(["dedup", "-f", "dec", "day1", "day2", "-o", "out2", "--filter", "real/f.bbf",
         "--stats", "none"])
    day1_keys = {record_key(r, "dec") for r in split_records(read("day1"), "dec")}
    check(not any(record_key(r, "dec") in day1_keys for r in split_records(read("out2"), "dec")),
          "a key of day 1 passed again through the real name")
    state = read("real/f.bbf")
    check(read("link.bbf") == state, "the link does not show the state")

    # Two runs through the two names: the second stops with the lock message.
    # (--wait-lock: the probe below may hold the lock for an instant.)
    first = subprocess.Popen([BIN, "dedup", "-f", "dec", "-o", "out3", "--filter", "link.bbf",
                              "--stats", "none", "--wait-lock"], stdin=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=WORK)
    first.stdin.write(b"1\n2\n")
    first.stdin.flush()
    deadline = time.time() + 20
    with open(path("real/f.bbf.lock")) as lock:
        while time.time() < deadline:  # until the first run holds the lock
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(lock, fcntl.LOCK_UN)
                time.sleep(0.01)
            except BlockingIOError:
                break
    probe = run(["dedup", "-f", "dec", "day2", "-o", "out4", "--filter", "real/f.bbf",
                 "--stats", "none"], expect_rc=None)
    check(probe.returncode == 1 and b"is in use by another bulkbloom run" in probe.stderr,
          probe.stderr.decode())
    check(not os.path.exists(path("out4")), "the refused run wrote its output")
    first.stdin.close()
    check(first.wait() == 0, first.stderr.read().decode())

    # A second hard link: refused, nothing changed, through either name.
    os.link(path("real/f.bbf"), path("hard.bbf"))
    state = read("real/f.bbf")
    for name, shown in (("hard.bbf", b"hard.bbf has 2 hard links"),
                        ("link.bbf", b"link.bbf (real/f.bbf) has 2 hard links")):
        proc = run(["dedup", "-f", "dec", "day2", "-o", "out5", "--filter", name, "--stats",
                    "none"], expect_rc=1)
        check(shown in proc.stderr and b"--force" not in proc.stderr, proc.stderr.decode())
        check(read("real/f.bbf") == state and not os.path.exists(path("out5")), "changed")
    os.remove(path("hard.bbf"))

    # A checkpoint directory through a link: the checkpoint goes into the real directory.
    os.mkdir(path("real/ck"))
    os.symlink("real/ck", path("ck"))
    run(["dedup", "-f", "dec", "day2", "-o", "out6", "--checkpoint", "ck", "--stats", "none"])
    check(os.path.islink(path("ck")) and os.listdir(path("real/ck")), "checkpoint not in real/ck")


def case_duration_units():
    """Every duration option reads its units the same way: 0 with or without a unit is zero
    (--lateness, --max-future), and a zero window is refused by name."""
    write("in.csv", b"a,1000\nb,1001\na,1002\n")
    infos = []
    for lateness in ("0", "0s", "0m", "0h", "0d"):
        name = f"w{len(infos)}.bbw"
        run(["dedup", "-f", "csv:1", "in.csv", "--window", "1h", "--time-field", "2",
             "--lateness", lateness, "--filter", name, "-o", name + ".out", "--stats", "none"])
        infos.append(json.loads(run(["info", "--json", name]).stdout)["window"])
    check(len(set(infos)) == 1, f"--lateness 0 in units gave different windows: {infos}")
    run(["dedup", "-f", "csv:1", "in.csv", "--window", "1h", "--time-field", "2", "--lateness",
         "90s", "-o", "late", "--stats", "none"])
    proc = run(["dedup", "-f", "csv:1", "in.csv", "--window", "1h", "--time-field", "2",
                "--max-future", "0s", "-o", "now", "--stats", "none"])
    check(read("now") == b"a,1000\nb,1001\n", f"--max-future 0s: {read('now')!r}")
    for zero in ("0", "0s"):
        expect_failure(["dedup", "-f", "csv:1", "in.csv", "--window", zero, "--time-field", "2"],
                       "--window must be longer than 0", rc=2)
    expect_failure(["dedup", "-f", "csv:1", "in.csv", "--window", "1h", "--time-field", "2",
                    "--lateness", "-1s"], "is not a duration", rc=2)


def case_negative_dec():
    """dec reads a negative integer as its two's-complement 64-bit pattern, as the Python package
    takes one: -1 and 18446744073709551615 are one key; below -2^63 is refused."""
    write("in", b"-1\n18446744073709551615\n-9223372036854775808\n9223372036854775808\n-0\n0\n")
    run(["dedup", "-f", "dec", "in", "-o", "out", "--stats", "none"])
    check(read("out") == b"-1\n-9223372036854775808\n-0\n", f"got {read('out')!r}")
    # The same key as hex ffffffffffffffff.
    run(["build", "-f", "dec", "in", "-o", "f.bbf", "--stats", "none"])
    write("in.hex", b"ffffffffffffffff\n8000000000000000\n")
    run(["query", "-f", "hex", "in.hex", "--filter", "f.bbf", "-o", "seen", "--stats", "none"])
    check(read("seen") == read("in.hex"), f"hex keys not seen: {read('seen')!r}")
    write("low", b"-9223372036854775809\n")
    expect_failure(["dedup", "-f", "dec", "low"], "low:1: not a dec integer")
    write("signs", b"- 1\n--1\n")
    expect_failure(["dedup", "-f", "dec", "signs"], "signs:1: not a dec integer")


def case_build_counts():
    """build's summary counts what it says: the keys the filter took as new (as dedup writes
    them), and the distinct keys estimated from them and the expected false positives."""
    run(["gen", "--count", "40000", "--dup-fraction", "0.25", "-o", "in"])
    distinct = len(set(split_records(read("in"), "u64")))
    common = ["in", "--capacity", "2000", "--fpr", "0.2", "--on-full", "grow", "--stats", "json"]
    built = stats_of(run(["build", "-o", "f.bbf"] + [a for a in common if a not in
                                                       ("--on-full", "grow")]))
    deduped = stats_of(run(["dedup", "-o", "out"] + common))
    check(built["new_keys"] == deduped["unique_written"] < distinct,
          f"new keys {built['new_keys']} vs dedup's {deduped['unique_written']} ({distinct})")
    check_model_matches(distinct - built["new_keys"], built["distinct_keys"] - built["new_keys"],
                        "build's distinct-key estimate")


def case_empty_lines():
    """An empty line is no record in any text format: an error naming file:line, or skipped and
    counted with --skip-bad; an empty field is an empty key."""
    for fmt, data in [("lines", b"a\n\nb\n"), ("csv:1", b"a,1\n\nb,2\n"),
                      ("csv:2", b"a,1\n\r\nb,2\n"), ("tsv:1", b"a\t1\n\nb\t2\n"),
                      ("dec", b"1\n\n2\n")]:
        write("in", data)
        expect_failure(["dedup", "-f", fmt, "in"], "in:2: empty line")
        proc = run(["dedup", "-f", fmt, "in", "--skip-bad", "-o", "out", "--stats", "json"])
        stats = stats_of(proc)
        check(stats["records_read"] == 2 and stats["bad_records_skipped"] == 1,
              f"{fmt}: {stats}")
    write("in", b",1\n,2\nx,3\n")
    run(["dedup", "-f", "csv:1", "in", "-o", "out", "--stats", "none"])
    check(read("out") == b",1\nx,3\n", f"an empty field is not one key: {read('out')!r}")


def rfc4180_records(count, seed):
    """`count` CSV records (raw text, key of column 2 as an RFC 4180 reader gives it): quoted
    fields with line breaks (LF and CRLF), commas and doubled quotes before, in and after the key
    column, keys drawn from a small pool so that they repeat."""
    import random
    rng = random.Random(seed)
    pool = ["k%d" % i for i in range(count // 3)] + ['q"q', 'two\nlines', 'a,b', '', 'cr\r\nlf',
                                                      '"', 'x""y']
    records = []
    for i in range(count):
        key = rng.choice(pool)
        quoted = any(c in key for c in '",\r\n') or rng.random() < 0.3
        key_text = '"' + key.replace('"', '""') + '"' if quoted else key
        before = rng.choice(["%d" % i, '"id\n%d"' % i, '"say ""hi"", %d"' % i])
        after = rng.choice(["plain", '"multi\nline\nnote"', '"x,y"', '""', ''])
        ending = rng.choice(["\n", "\r\n"])
        records.append(((before + "," + key_text + "," + after + ending).encode(), key.encode()))
    return records


def case_csv_rfc4180():
    """csv:N reads RFC 4180: a quoted field spanning lines is part of one record wherever it
    stands, also across read-buffer boundaries, and a doubled quote is one quote in the key; the
    keys equal those Python's csv module reads from the same file."""
    import csv
    import io
    records = rfc4180_records(6000, 3)
    data = b"".join(r for r, _ in records)
    parsed = list(csv.reader(io.StringIO(data.decode(), newline="")))
    check([row[1].encode() for row in parsed] == [k for _, k in records],
          "the generator's keys are not what an RFC 4180 reader reads")
    write("in.csv", data)
    proc = run(["dedup", "-f", "csv:2", "in.csv", "-o", "out", "--dups", "dups", "--capacity",
                "100000", "--fpr", "1e-7", "--buffer-size", "4096", "--stats", "json"])
    seen, expected_out, expected_dups = set(), [], []
    for raw, key in records:
        (expected_dups if key in seen else expected_out).append(raw)
        seen.add(key)
    check(read("out") == b"".join(expected_out), "unique records differ from the exact dedup")
    check(read("dups") == b"".join(expected_dups), "dropped records differ from the exact dedup")
    check(stats_of(proc)["records_read"] == len(records), f"{stats_of(proc)}")
    # Line numbers count the lines inside quoted fields.
    write("bad.csv", b'a,"one\ntwo",x\nb\n')
    expect_failure(["dedup", "-f", "csv:2", "bad.csv"], "bad.csv:3: no column 2")
    write("open.csv", b'a,1\nb,"never closed\nc,3\n')
    expect_failure(["dedup", "-f", "csv:2", "open.csv"],
                   "open.csv:2: a quoted field is not closed before the end of the input")
    write("after.csv", b'a,"x"y,1\n')
    expect_failure(["dedup", "-f", "csv:2", "after.csv"], "after.csv:1: text after the closing")


def day_of_keys(first, count, start):
    """`count` new distinct keys, one a line as key,payload,time, spread over the day from
    `start` (seconds)."""
    return b"".join(b"d%d,x,%d\n" % (first + i, start + i * 86400 // count) for i in range(count))


def case_window_sized_per_period():
    """Issue 33, defects 1 and 2: a window carried across daily dumps sizes each generation for
    its period. Day 2 brings 10x the keys of day 1 (all new): at least 99.7 % of them are kept
    (today's fixed sizing kept 24 %). A generation that still goes over its size is refused
    under --on-full error with nothing changed, and reported by default."""
    day1, day2, start = 100_000, 1_000_000, 1_764_000_000
    write("day1.csv", day_of_keys(0, day1, start))
    write("day2.csv", day_of_keys(day1, day2, start + 86400))
    window = ["dedup", "-f", "csv:1", "--window", "36h", "--time-field", "3", "--stats", "json"]
    stats = stats_of(run(window + ["--filter", "W.bbw", "day1.csv", "-o", "out1"]))
    check(stats["unique_written"] >= 0.997 * day1, f"day 1 kept {stats['unique_written']}")
    check(stats["promised_fpr"] == 0.001, f"no promised rate in {stats}")
    with open(path("W.bbw"), "rb") as f:
        after_day1 = f.read()
    write("W_refused.bbw", after_day1)
    write("W_warned.bbw", after_day1)
    # With the generations held to --max-capacity, day 2's periods overflow them.
    write("W_refused.bbw.lock", b"")  # the state's lock file, which stays
    before = set(os.listdir(WORK))
    proc = run(window + ["--filter", "W_refused.bbw", "--max-capacity", "1000", "--on-full",
                         "error", "day2.csv", "-o", "refused"], expect_rc=1)
    message = proc.stderr.decode()
    check("sized for" in message and "took" in message and "--capacity" in message, message)
    check(read("W_refused.bbw") == after_day1, "a refused run changed the window file")
    no_outputs_left(before)
    proc = run(window + ["--filter", "W_warned.bbw", "--max-capacity", "1000", "day2.csv", "-o",
                         "warned"])
    check(b"warning:" in proc.stderr and b"sized for" in proc.stderr, proc.stderr.decode())
    check(stats_of(proc)["overfull_generations"] >= 1, proc.stderr.decode())
    # Unbounded, day 2's generations are sized for its dump and keep the promise.
    stats = stats_of(run(window + ["--filter", "W.bbw", "day2.csv", "-o", "out2"]))
    kept = len(split_records(read("out2"), "csv:1"))
    check(kept == stats["unique_written"], "summary and output disagree")
    check(kept >= 0.997 * day2, f"day 2 kept {kept} of {day2} unique records")
    check(stats["overfull_generations"] == 0, f"{stats}")
    # --capacity on a carried window applies to the generations a run starts, and says so.
    write("day3.csv", day_of_keys(day1 + day2, 1000, start + 2 * 86400))
    proc = run(window + ["--filter", "W.bbw", "--capacity", "5000000", "day3.csv", "-o", "out3"])
    check(b"--capacity 5000000 sizes the generations this run starts" in proc.stderr,
          proc.stderr.decode())


def window_stream(seed, count, idle_tail):
    """(key, time) pairs with repeats near and far, ~1 record a second; with `idle_tail`, one
    last record ten days later, so that the window is empty (its rate ~0) at the end."""
    records = window_records(count, seed, 0)
    if idle_tail:
        records.append((b"tail", records[-1][1] + 10 * 86400))
    return records


def case_window_expected_drops():
    """Issue 33, defect 3: a window's "expected unique wrongly dropped" is summed over the run at
    the rate each record met, within 10 % of the false drops measured against an exact window
    (thousands of them, so 10 % is many Poisson deviations), also when the stream ends in an
    idle tail that leaves the window empty; the summary gives the promised rate."""
    for seed, idle_tail in [(21, False), (22, True), (23, False)]:
        records = window_stream(seed, 150_000, idle_tail)
        write("in.csv", b"".join(b"%s,%d\n" % (k, t) for k, t in records))
        stats = stats_of(run(["dedup", "-f", "csv:1", "--window", "2d", "--time-field", "2",
                              "--fpr", "0.1", "--capacity", "8640", "in.csv", "-o", "out",
                              "--stats", "json"]))
        exact = sum(window_model(records, 2 * 86400, 4, 0, by_records=False))
        dropped = exact - stats["unique_written"]
        expected = stats["expected_wrongly_dropped"]
        check(dropped > 1000, f"seed {seed}: only {dropped} false drops; the test needs more")
        check(abs(expected - dropped) <= 0.1 * dropped,
              f"seed {seed}: {dropped} unique records wrongly dropped, summary expected "
              f"{expected:.1f}")
        check(stats["promised_fpr"] == 0.1, f"{stats}")
        if idle_tail:
            check(stats["final_fpr"] < 1e-3, f"the idle tail left rate {stats['final_fpr']}")


def case_num_blocks():
    """--num-blocks gives exactly the layout asked for (to reproduce another tool's), and is
    refused without --shape, out of range, and for a window."""
    write("in.dec", b"".join(b"%d\n" % i for i in range(5000)))
    run(["build", "-f", "dec", "in.dec", "-o", "a.bbf", "--shape", "sb256", "--num-blocks", "777",
         "--seed", "42", "--index", "full64"])
    info = json.loads(run(["info", "--json", "a.bbf"]).stdout)
    check((info["shape"], info["num_blocks"], info["seed"]) == ("sb256", 777, 42), f"{info}")
    check(info["layout"].endswith("index full64"), info["layout"])
    expect_failure(["build", "-f", "dec", "in.dec", "--num-blocks", "9"],
                   "--num-blocks needs --shape", rc=2)
    expect_failure(["build", "-f", "dec", "in.dec", "--shape", "sb512", "--num-blocks", "0"],
                   "--num-blocks: 0 is outside 1 to 4294967295", rc=2)
    write("in.csv", b"a,1\n")
    expect_failure(["dedup", "-f", "csv:1", "in.csv", "--window-records", "5", "--shape", "sb512",
                    "--num-blocks", "9"], "does not apply to a window", rc=2)


def case_bench_smoke():
    proc = run(["bench", "--sizes", "1", "--keys", "20000", "--json"])
    rows = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    check(len(rows) >= 1, "bench printed no rows")
    for row in rows:
        for field in ("random_reads_per_s", "random_rmw_per_s", "sequential_bytes_per_s",
                      "insert_per_s", "contains_per_s", "insert_if_absent_per_s"):
            check(row[field] > 0, f"bench field {field} is not positive: {row}")


def case_window_refused():
    """dedup --refused R: a record without an event time, one ten years ahead and one 2 h late
    (lateness 10 min) go to R unchanged, in input order, are counted, and are neither inserted
    nor move the clock: -o and --dups equal those of the run on the input without them. Without
    --refused a missing time stays an error and a late record is decided. A rerun with --filter
    treats R as an output, and a fault anywhere in its commit is repaired by a rerun
    (docs/WINDOW.md "Refused records")."""
    import random
    rng = random.Random(33)
    base = int(time.time()) - 2 * 86400
    # Out of order by at most 5 min, within the lateness; keys repeat within the 1 h window.
    rows = [b"k%d,%d\n" % (rng.randrange(400), base + 10 * i - rng.randrange(300))
            for i in range(3000)]
    # Each refused record's key first comes later: had it been inserted, that one would drop.
    for at, key in ((2100, b"late-key"), (2200, b"bad-key"), (2300, b"future-key")):
        rows[at] = b"%s,%d\n" % (key, base + 10 * at)
    refused = {1000: b"future-key,%d\n" % (base + 10 * 365 * 86400),
               2000: b"late-key,%d\n" % (base + 10 * 2000 - 7200),
               2050: b"bad-key,noon\n"}
    full = list(rows)
    for at in sorted(refused, reverse=True):
        full.insert(at, refused[at])
    write("in.csv", b"".join(full))
    write("clean.csv", b"".join(rows))
    common = ["dedup", "-f", "csv:1", "--window", "1h", "--time-field", "2", "--lateness", "10m",
              "--capacity", "5000", "--stats", "json"]
    clean = stats_of(run(common + ["clean.csv", "-o", "clean.out", "--dups", "clean.dups"]))
    proc = run(common + ["in.csv", "-o", "out", "--dups", "dups", "--refused", "R"])
    check(read("R") == b"".join(refused[at] for at in sorted(refused)), f"R: {read('R')!r}")
    check(read("out") == read("clean.out"), "the kept records differ from the run without them")
    check(read("dups") == read("clean.dups"), "the dropped records differ")
    stats = stats_of(proc)
    expected = {"records_read": 3003, "unique_written": clean["unique_written"],
                "duplicates_dropped": clean["duplicates_dropped"], "refused_missing_time": 1,
                "refused_future": 1, "refused_late": 1}
    check({k: stats.get(k) for k in expected} == expected, f"counts: {stats}")
    check(0 < clean["duplicates_dropped"] < 3000 - 3, f"a weak stream: {clean}")
    # Without --refused: a missing time is an error naming its line, a late record is decided.
    err = run(common + ["in.csv", "-o", "plain", "--max-future", "3650d"], expect_rc=1).stderr
    check(b"in.csv:2053: no event time" in err, err.decode())
    proc = run(common + ["in.csv", "-o", "plain", "--skip-bad"])
    check(stats_of(proc)["bad_records_skipped"] == 2 and b"late-key" in read("plain"),
          f"without --refused: {stats_of(proc)}")
    run(common + ["in.csv", "-o", "x", "--refused", "R2", "--window-records", "10"],
        expect_rc=2)
    err = run(["dedup", "-f", "csv:1", "in.csv", "-o", "x", "--refused", "R2"], expect_rc=2).stderr
    check(b"--refused needs an event-time window" in err, err.decode())
    # With --filter, R is one of the run's outputs: a rerun recognises it, another R is refused.
    stateful = common + ["in.csv", "-o", "out", "--dups", "dups", "--filter", "w.bbw"]
    run(stateful + ["--refused", "R"])
    committed = read("R")
    proc = run(stateful + ["--refused", "R"])
    check(b"this run was committed earlier" in proc.stderr and read("R") == committed,
          proc.stderr.decode())
    err = run(stateful + ["--refused", "R3"], expect_rc=1).stderr
    check(b"other outputs" in err and b"--refused another" in err and
          not os.path.exists(path("R3")) and read("R") == committed, err.decode())

    # A fault or kill anywhere in the commit, then a rerun: R, like -o and --dups, is the
    # uninterrupted run's.
    def reset():
        for name in ("out", "dups", "R", "w.bbw"):
            if os.path.exists(path(name)):
                os.remove(path(name))

    walk_fault_points(stateful + ["--refused", "R", "--buffer-size", "64K"], reset,
                      ["out", "dups", "R", "w.bbw"])


def main():
    global BIN, WORK
    BIN = os.path.abspath(sys.argv[1])
    case = globals().get("case_" + sys.argv[2])
    if case is None:
        names = [n[5:] for n in globals() if n.startswith("case_")]
        print("cases: " + " ".join(names))
        return 2
    with tempfile.TemporaryDirectory(prefix="bulkbloom-cli-") as work:
        WORK = work
        case()
    return 0


if __name__ == "__main__":
    sys.exit(main())
