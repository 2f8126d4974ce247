"""What a key is: a bytes-like buffer is one key in every call, a typed array a batch."""

import array

import numpy as np
import pytest

import bulkbloom


def test_a_memoryview_of_bytes_is_one_key_everywhere():
    f = bulkbloom.Filter(1000, 0.001)
    f.add(memoryview(b"abc"))
    assert memoryview(b"abc") in f and b"abc" in f
    assert f.contains([memoryview(b"abc"), b"abc", bytearray(b"abc")]).all()
    g = bulkbloom.Filter(1000, 0.001)
    g.insert([b"abc"])
    assert f.to_bytes() == g.to_bytes()
    # Not the integer keys 97, 98, 99: a bulk call refuses one key, as it does for bytes.
    for batch in (memoryview(b"abc"), array.array("B", b"abc"),
                  memoryview(np.frombuffer(b"abc", dtype=np.uint8))):
        for call in (f.insert, f.contains, f.insert_if_absent):
            with pytest.raises(TypeError, match="not a single"):
                call(batch)
    assert 97 not in f


def test_a_buffer_of_wider_integers_is_a_batch():
    values = np.array([5, 6, 2**64 - 1], dtype=np.uint64)
    f = bulkbloom.Filter(1000, 0.001)
    f.insert(memoryview(values))
    f.insert(array.array("q", [-7]))
    assert f.contains(values).all() and -7 in f
    assert f.contains(np.arange(3, dtype=np.uint8)).tolist() == [False] * 3  # numpy: a batch
    with pytest.raises(TypeError, match="batch of integer keys.*insert"):
        f.add(memoryview(values))
    with pytest.raises(TypeError, match="batch of integer keys"):
        memoryview(values) in f  # noqa: B015
