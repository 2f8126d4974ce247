"""Bytes a `dedup --checkpoint` run's checkpoints write (bench/RESULTS.md, "Incremental
checkpoints"): the same run with and without --checkpoint, each measured as the bytes the process
dirtied (rusage ru_oublock, 512-byte units); the difference is what the checkpoints wrote.

    python3 measure_checkpoint_bytes.py BULKBLOOM DIR RECORDS WINDOW_RECORDS CHECKPOINT_EVERY
"""
import os
import shutil
import subprocess
import sys
import time

BIN, DIR = sys.argv[1], sys.argv[2]
RECORDS, WINDOW, EVERY = int(sys.argv[3]), sys.argv[4], sys.argv[5]
INPUT = os.path.join(DIR, "in.u64")
CHECKPOINTS = os.path.join(DIR, "ck")


def bytes_written(extra):
    """Runs dedup over INPUT with `extra` options; returns (bytes written, seconds)."""
    shutil.rmtree(CHECKPOINTS, ignore_errors=True)
    command = [BIN, "dedup", INPUT, "-o", os.path.join(DIR, "out"), "--window-records", WINDOW,
               "--generations", "4", "--fpr", "0.001", "--stats", "none"] + extra
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.execv(BIN, command)
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(command)} failed: status {status}")
    return usage.ru_oublock * 512, time.monotonic() - started


if not os.path.exists(INPUT) or os.path.getsize(INPUT) != 8 * RECORDS:
    subprocess.run([BIN, "gen", "--count", str(RECORDS), "--seed", "7", "-o", INPUT], check=True)
without, plain_s = bytes_written([])
with_checkpoints, checkpoint_s = bytes_written(["--checkpoint", CHECKPOINTS,
                                                "--checkpoint-every", EVERY])
held = sum(os.path.getsize(os.path.join(CHECKPOINTS, n)) for n in os.listdir(CHECKPOINTS))
print(f"{RECORDS} records, window {WINDOW} records, a checkpoint every {EVERY}: "
      f"{without / 2**20:.0f} MiB written in {plain_s:.1f} s without checkpoints, "
      f"{with_checkpoints / 2**20:.0f} MiB in {checkpoint_s:.1f} s with them: the checkpoints "
      f"wrote {(with_checkpoints - without) / 2**20:.0f} MiB; the directory holds "
      f"{held / 2**20:.0f} MiB in {sorted(os.listdir(CHECKPOINTS))}")
