# Bytes a dedup run writes (rusage ru_oublock, 512-byte units: pages the process dirtied), with
# and without --checkpoint; the difference is what the checkpoints wrote.
import os, subprocess, sys, time, shutil
BIN, D = sys.argv[1], sys.argv[2]
records, window, every = int(sys.argv[3]), sys.argv[4], sys.argv[5]
inp = os.path.join(D, "in.u64")
if not os.path.exists(inp) or os.path.getsize(inp) != 8 * records:
    subprocess.run([BIN, "gen", "--count", str(records), "--seed", "7", "-o", inp], check=True)
def run(extra):
    shutil.rmtree(os.path.join(D, "ck"), ignore_errors=True)
    for n in ("out",):
        if os.path.exists(os.path.join(D, n)): os.remove(os.path.join(D, n))
    t = time.monotonic()
    p = subprocess.Popen([BIN, "dedup", inp, "-o", os.path.join(D, "out"), "--window-records", window,
                          "--generations", "4", "--fpr", "0.001", "--stats", "json"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    _, status, ru = os.wait4(p.pid, 0) if False else (None, p.returncode, None)
    return out, err, time.monotonic() - t
def measured(extra):
    pid = os.fork()
    if pid == 0:
        os.execv(BIN, [BIN, "dedup", inp, "-o", os.path.join(D, "out"), "--window-records", window,
                       "--generations", "4", "--fpr", "0.001", "--stats", "none"] + extra)
    t = time.monotonic()
    _, status, ru = os.wait4(pid, 0)
    assert status == 0, status
    return ru.ru_oublock * 512, time.monotonic() - t
for n in ("out",):
    pass
shutil.rmtree(os.path.join(D, "ck"), ignore_errors=True)
base, t0 = measured([])
shutil.rmtree(os.path.join(D, "ck"), ignore_errors=True)
ck, t1 = measured(["--checkpoint", os.path.join(D, "ck"), "--checkpoint-every", every])
print(f"records {records} window {window} every {every}: without checkpoints {base/2**20:.0f} MiB written "
      f"in {t0:.1f} s; with {ck/2**20:.0f} MiB in {t1:.1f} s; checkpoints wrote {(ck-base)/2**20:.0f} MiB")
print("ck:", sorted(os.listdir(os.path.join(D, "ck"))), sum(os.path.getsize(os.path.join(D, "ck", n)) for n in os.listdir(os.path.join(D, "ck")))/2**20, "MiB held")
