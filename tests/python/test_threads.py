"""Concurrent calls on one filter from Python threads: the GIL is released, calls on one filter
take turns chunk by chunk, and the answers keep the C++ contract (zero leaks; the bytes of the
sequential build). Ctrl-C stops a long call between chunks without a half-applied chunk."""

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np

import bulkbloom


def test_four_threads_dedup_one_filter_with_zero_leaks():
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 400_000, size=1_200_000, dtype=np.uint64)  # heavy overlap
    batches = np.array_split(keys, 48)
    f = bulkbloom.Filter(len(keys), 0.001)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        flags = list(pool.map(f.insert_if_absent, batches))
    new_keys = np.concatenate([b[fl] for b, fl in zip(batches, flags)])
    # Each key reported new at most once over all threads; every distinct key is now present.
    assert len(np.unique(new_keys)) == len(new_keys)
    distinct = np.unique(keys)
    assert len(distinct) - len(new_keys) < 0.002 * len(distinct)  # only false positives missing
    sequential = bulkbloom.Filter(len(keys), 0.001)
    sequential.insert(keys)
    assert f.to_bytes() == sequential.to_bytes()


def test_readers_and_writers_at_once():
    keys = np.arange(2_000_000, dtype=np.uint64)
    f = bulkbloom.Filter(len(keys), 0.001)
    f.insert(keys[:1_000_000])
    g = bulkbloom.Filter(len(keys), 0.001)

    def read(_):
        return f.contains(keys[:1_000_000]).all()

    def write(part):
        f.insert(keys[1_000_000:][part::2])
        g.insert(keys[part::2])
        return True

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(read, range(6))) + list(pool.map(write, range(2)))
        merged = [pool.submit(f.__ior__, g) for _ in range(2)] + \
                 [pool.submit(g.__ior__, f) for _ in range(2)]
        for m in merged:
            m.result()
    assert all(results)
    assert f.contains(keys).all() and g.contains(keys).all()
    assert f.to_bytes() == g.to_bytes()


def test_bulk_calls_release_the_gil():
    keys = np.arange(20_000_000, dtype=np.uint64)
    f = bulkbloom.Filter(len(keys), 0.01, implementation="cpu/scalar", threads=1)
    started = threading.Event()

    def insert():
        started.set()
        f.insert(keys)

    spins = 0
    # Forced switches between Python threads every 50 ms only, so that this thread runs during
    # the call only if the call itself lets go of the GIL.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.05)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(insert)
            started.wait()
            while not future.done():
                spins += 1
            future.result()
    finally:
        sys.setswitchinterval(interval)
    # Holding the GIL, the call would let this loop run only before it starts or after it ends.
    assert spins > 100_000


def test_keyboard_interrupt_between_chunks_leaves_whole_chunks(tmp_path):
    script = textwrap.dedent(
        """
        import os, signal, sys, threading, time
        import numpy as np
        import bulkbloom
        keys = np.arange(24 * bulkbloom.chunk_keys, dtype=np.uint64)
        f = bulkbloom.Filter(len(keys), 0.01, implementation="cpu/scalar", threads=1)
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            f.insert(keys)
            print("finished")
        except KeyboardInterrupt:
            present = f.contains(keys)
            chunks = present.reshape(-1, bulkbloom.chunk_keys)
            done = int(chunks.all(axis=1).sum())
            reference = bulkbloom.Filter(len(keys), 0.01)
            reference.insert(keys[: done * bulkbloom.chunk_keys])
            print("interrupted", done, f.to_bytes() == reference.to_bytes())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[0] == "interrupted", out.stdout
    assert 0 <= int(words[1]) < 24 and words[2] == "True", out.stdout



def test_four_writers_on_a_small_filter_lose_no_key():
    # Four threads dedup their own keys again and again into one filter, so that their writes
    # meet on the same cache lines. Each key is reported new at most once
    # (the first time, unless a false positive hid it) and is present at the end: no write of one
    # thread may overwrite another's.
    rng = np.random.default_rng(13)
    own_keys = [rng.integers(0, 2**64, size=250_000, dtype=np.uint64) for _ in range(4)]
    f = bulkbloom.Filter.from_layout("sb512", 1 << 16, threads=1)

    def dedup(keys):
        return sum(f.insert_if_absent(keys).astype(np.int64) for _ in range(20))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        times_new = list(pool.map(dedup, own_keys))
    for keys, counts in zip(own_keys, times_new):
        assert counts.max() <= 1
        assert f.contains(keys).all()
