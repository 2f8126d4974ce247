"""What a window carried from run to run costs to save (bench/RESULTS.md, "Carried windows: file
or state directory"): the same runs of `bulkbloom dedup --filter` with the window in a file and
in a state directory (docs/FORMAT.md "State directories"), each run's bytes written to the state
(the summary's state_bytes_written) and wall time. An event-time window of 36 h over 4 generations sized for CAPACITY keys each; DAYS daily
dumps of RECORDS records (a tenth of them repeats of the day before), then HOURS hourly dumps of
the next day, RECORDS / 24 each. Outputs and final states of the two are compared byte for byte.

    python3 measure_carried_days.py BULKBLOOM DIR CAPACITY RECORDS DAYS HOURS
"""
import json
import os
import shutil
import subprocess
import sys
import time

BIN, DIR = sys.argv[1], sys.argv[2]
CAPACITY, RECORDS, DAYS, HOURS = (int(v) for v in sys.argv[3:7])
START = 1_764_000_000  # seconds: 2025-11-24


def dump(name, first_key, count, start, seconds, repeat_from=None):
    """`count` records key,x,time over [start, start + seconds): new keys from `first_key`, a
    tenth of them repeats of the keys from `repeat_from`."""
    path = os.path.join(DIR, name)
    if os.path.exists(path):
        return path
    with open(path, "w") as out:
        for i in range(count):
            key = repeat_from + i if repeat_from is not None and i % 10 == 0 else first_key + i
            out.write(f"k{key},x,{start + i * seconds // count}\n")
    return path


def run(inputs, state, output):
    """One dedup run; returns (the state bytes its summary says it wrote, seconds)."""
    command = [BIN, "dedup", "-f", "csv:1", "--time-field", "3", "--window", "36h",
               "--generations", "4", "--capacity", str(CAPACITY), "--filter", state,
               "-o", output, "--stats", "json", "--force"] + inputs
    started = time.monotonic()
    proc = subprocess.run(command, stderr=subprocess.PIPE)
    seconds = time.monotonic() - started
    err = proc.stderr.decode()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{err}")
    stats = json.loads(err.strip().splitlines()[-1])
    return stats["state_bytes_written"], seconds


def measure(state):
    """The DAYS daily and HOURS hourly runs carrying the window in `state`."""
    rows = []
    for day in range(DAYS):
        name = dump(f"day{day}.csv", day * RECORDS, RECORDS, START + day * 86400, 86400,
                    (day - 1) * RECORDS if day else None)
        rows.append((f"day {day + 1}", *run([name], state, os.path.join(DIR, f"out-{day}"))))
    per_hour = RECORDS // 24
    for hour in range(HOURS):
        name = dump(f"hour{hour}.csv", (DAYS + 1) * RECORDS + hour * per_hour, per_hour,
                    START + DAYS * 86400 + hour * 3600, 3600)
        rows.append((f"hour {hour + 1}",
                     *run([name], state, os.path.join(DIR, f"out-h{hour}"))))
    return rows


def outputs():
    return {n: open(os.path.join(DIR, n), "rb").read() for n in sorted(os.listdir(DIR))
            if n.startswith("out-")}


os.makedirs(DIR, exist_ok=True)
for name in ("w.bbw", "w.bbw.lock", "w.d.lock", "w2.bbw", "w2.bbw.lock"):
    if os.path.exists(os.path.join(DIR, name)):
        os.remove(os.path.join(DIR, name))
shutil.rmtree(os.path.join(DIR, "w.d"), ignore_errors=True)
file_rows = measure(os.path.join(DIR, "w.bbw"))
file_outputs = outputs()
dir_rows = measure(os.path.join(DIR, "w.d") + "/")
subprocess.run([BIN, "convert", os.path.join(DIR, "w.d"), os.path.join(DIR, "w2.bbw")],
               check=True, capture_output=True)
same_state = open(os.path.join(DIR, "w.bbw"), "rb").read() == open(
    os.path.join(DIR, "w2.bbw"), "rb").read()
print(f"window file {os.path.getsize(os.path.join(DIR, 'w.bbw')) / 2**20:.1f} MiB; outputs "
      f"{'identical' if outputs() == file_outputs else 'DIFFER'}, states "
      f"{'identical' if same_state else 'DIFFER'}; load average {os.getloadavg()}")
print("| run | file: MiB written | file: s | directory: MiB written | directory: s |")
print("|---|---|---|---|---|")
for (label, file_bytes, file_s), (_, dir_bytes, dir_s) in zip(file_rows, dir_rows):
    print(f"| {label} | {file_bytes / 2**20:.1f} | {file_s:.2f} | {dir_bytes / 2**20:.2f} | "
          f"{dir_s:.2f} |")
