"""Contiguous uint64 / int64 arrays and Arrow buffers reach the C++ core without a copy: the call
allocates nothing but its answers."""

import tracemalloc

import numpy as np
import pyarrow as pa

import bulkbloom

N = 2_000_000  # 16 MB of keys: a copy would show as 16 MB


def peak_bytes(call):
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_numpy_keys_are_not_copied():
    keys = np.arange(N, dtype=np.uint64)
    f = bulkbloom.Filter(N, 0.01)
    for batch in (keys, keys.view(np.int64), keys[N // 2 :]):
        assert peak_bytes(lambda: f.insert(batch)) < 100_000
        # contains and insert_if_absent allocate exactly their bool answers
        assert peak_bytes(lambda: f.contains(batch)) < len(batch) + 100_000
        assert peak_bytes(lambda: f.insert_if_absent(batch)) < len(batch) + 100_000
    # A strided array must be copied: the measurement sees copies.
    assert peak_bytes(lambda: f.insert(keys[::2])) >= N // 2 * 8


def test_arrow_buffers_are_not_copied():
    f = bulkbloom.Filter(N, 0.01)
    ints = pa.array(np.arange(N, dtype=np.int64))
    strings = pa.array([str(i) for i in range(200_000)])
    pool_before = pa.total_allocated_bytes()
    assert peak_bytes(lambda: f.insert(ints)) < 100_000
    assert peak_bytes(lambda: f.insert(ints.slice(10))) < 100_000
    assert peak_bytes(lambda: f.insert(pa.chunked_array([ints, ints]))) < 100_000
    assert peak_bytes(lambda: f.insert(strings)) < 100_000
    assert pa.total_allocated_bytes() == pool_before
    assert f.contains(strings).all() and f.contains(ints).all()

