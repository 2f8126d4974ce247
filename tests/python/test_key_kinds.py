"""What a key is: a bytes-like buffer is one key in every call, a typed array a batch."""

import array
import tracemalloc

import numpy as np
import pyarrow as pa
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


def filter_bytes(keys):
    f = bulkbloom.Filter(10_000, 0.001)
    f.insert(keys)
    assert f.contains(keys).all()
    return f.to_bytes()


@pytest.mark.parametrize(
    "name, make",
    [
        ("pandas Int64 with NA", lambda pd, pa: pd.Series([1, None, 3], dtype="Int64")),
        ("pandas str with NaN", lambda pd, pa: pd.Series(["a", np.nan, "c"])),
        ("pandas string with NA", lambda pd, pa: pd.Series(["a", None, "c"], dtype="string")),
        ("object array with None", lambda pd, pa: np.array([b"a", None, b"c"], dtype=object)),
        ("numpy StringDType with NA", lambda pd, pa: np.array(
            ["a", None, "c"], dtype=np.dtypes.StringDType(na_object=None))),
        ("arrow chunked", lambda pd, pa: pa.chunked_array([["x"], ["a", None, "c"]]).slice(1)),
    ],
)
def test_missing_keys_are_named_by_position(name, make):
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    f = bulkbloom.Filter(1000, 0.001)
    for call in (f.insert, f.contains, f.insert_if_absent):
        with pytest.raises(ValueError, match=r"nulls/NA in the keys at position 1:"):
            call(make(pd, pa))
    assert f.popcount() == 0, name


def test_pandas_arrays_hash_their_values():
    pd = pytest.importorskip("pandas")
    ints = [1, -2, 2**62]
    strings = ["a", "héllo", ""]
    assert filter_bytes(pd.Series(ints, dtype="Int64")) == filter_bytes(ints)
    assert filter_bytes(pd.Series(strings, dtype="string")) == filter_bytes(strings)
    assert filter_bytes(pd.Series(strings, dtype="category")) == filter_bytes(strings)
    assert filter_bytes(pd.Series(strings, dtype=object)) == filter_bytes(strings)


def test_numpy_string_dtype():
    strings = ["a", "héllo", "", "x" * 100]
    assert filter_bytes(np.array(strings, dtype=np.dtypes.StringDType())) == filter_bytes(strings)


def test_fixed_size_binary_and_uuid_hash_their_bytes():
    pa = pytest.importorskip("pyarrow")
    import uuid

    ids = [uuid.UUID(int=i * 0x9E3779B97F4A7C15F39CC0605CEDC835 % 2**128) for i in range(1, 6)]
    raw = [u.bytes for u in ids]
    expected = filter_bytes(raw)
    fixed = pa.array(raw, pa.binary(16))
    assert filter_bytes(fixed) == expected
    assert filter_bytes(pa.array(ids, pa.uuid())) == expected
    assert filter_bytes(pa.chunked_array([fixed.slice(0, 2), fixed.slice(2)])) == expected
    assert filter_bytes(fixed.slice(1, 3)) == filter_bytes(raw[1:4])
    f = bulkbloom.Filter(1000, 0.001)
    f.insert(pa.array(ids, pa.uuid()))
    assert ids[0].bytes in f and str(ids[0]) not in f  # the 16 bytes, not the text


@pytest.mark.parametrize("kind", [list, tuple])
def test_a_list_of_strings_is_made_bytes_one_slice_at_a_time(monkeypatch, kind):
    # Not the whole list's bytes beside it (1.7 GB more for 10M keys): one slice's, in turn.
    monkeypatch.setattr(bulkbloom._core, "chunk_keys", 10_000, raising=False)
    words = ["a list key %d" % i for i in range(300_000)] * 2
    for keys in (kind(words), kind(w.encode() for w in words)):
        assert len(bulkbloom._keys.key_pieces(keys)) == 60
        f = bulkbloom.Filter(300_000, 0.01)
        tracemalloc.start()
        try:
            fresh = f.insert_if_absent(keys)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3_000_000  # the flags (600 KB) and a slice; the whole list's bytes: 30 MB
        same = bulkbloom.Filter(300_000, 0.01)
        assert (fresh == same.insert_if_absent(pa.array(words))).all() and f == same
        assert fresh[:300_000].sum() > 299_000 and not fresh[300_000:].any()
