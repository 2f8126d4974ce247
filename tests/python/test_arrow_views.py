"""Arrow string/binary view arrays (string_view, binary_view: what polars holds) read in place:
16-byte views, a key of up to 12 bytes inline, a longer one in one of several data buffers at an
offset. The views are the keys: the hashing loop reads them where the producer put them, so a
batch becomes one piece however long it is, and a view that points outside its buffer is a
ValueError before any key is used."""

import struct
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom
from bulkbloom import _keys
from test_arrow_capsule import ArrayOnly, StreamOnly, answers, reference


def view_array(entries, buffers, kind=pa.binary_view(), validity=None):
    """An Arrow view array made by hand: `entries` are (key, buffer, offset), a key longer than 12
    bytes read from data buffer `buffer` at `offset` (where the caller put it), a shorter one
    inline."""
    views = bytearray()
    for key, buffer, offset in entries:
        if len(key) <= 12:
            views += struct.pack("<i", len(key)) + key.ljust(12, b"\0")
        else:
            views += struct.pack("<i4sii", len(key), key[:4], buffer, offset)
    return pa.Array.from_buffers(
        kind, len(entries), [validity, pa.py_buffer(bytes(views))] + list(map(pa.py_buffer, buffers))
    )


def spread_keys(count, buffers=3):
    """`count` keys, a third inline (<= 12 bytes) and the rest spread over `buffers` data
    buffers, each after some bytes no key uses, with repeats and an empty key; and the buffers."""
    data = [bytearray(b"#" * (7 + b)) for b in range(buffers)]
    entries = []
    for i in range(count):
        key = (b"k%d" % (i % (count // 2 + 1))) * (1 if i % 3 == 0 else 4)
        if i == 5:
            key = b""
        if len(key) <= 12:
            entries.append((key, 0, 0))
            continue
        buffer = i % buffers
        entries.append((key, buffer, len(data[buffer])))
        data[buffer] += key + b"|"
    return entries, [bytes(d) for d in data]


ENTRIES, BUFFERS = spread_keys(3000)
KEYS = [key for key, _, _ in ENTRIES]


@pytest.mark.parametrize("kind", [pa.binary_view(), pa.string_view()])
def test_inline_and_out_of_line_keys_in_several_buffers(kind):
    array = view_array(ENTRIES, BUFFERS, kind)
    array.validate(full=True)
    assert len(array.buffers()) == 2 + len(BUFFERS)
    expected = answers(KEYS)
    assert answers(array) == expected  # pyarrow's own array, through its capsule
    assert answers(ArrayOnly(array)) == expected
    # Sliced: the views start at an offset; the data buffers are the same.
    assert answers(ArrayOnly(array.slice(7, 2000))) == answers(KEYS[7:2007])
    # Chunked, a slice of each (a chunk with no key too).
    chunked = pa.chunked_array([array.slice(3, 1000), array.slice(0, 0), array.slice(1500)])
    assert answers(StreamOnly(chunked)) == answers(KEYS[3:1003] + KEYS[1500:])


def test_a_batch_of_views_is_one_piece_read_in_place():
    # One piece over the array's own buffers, however many chunk_keys it spans: no offsets are
    # made and no key is copied (the old path made int64 offsets and a copy of each slice).
    array = pa.array([b"key number %d of many" % i for i in range(3 * bulkbloom.chunk_keys // 2)],
                     pa.binary_view())
    pieces = _keys.key_pieces(ArrayOnly(array))
    assert [type(p) for p in pieces] == [_keys.ArrowBytesPiece]
    assert len(pieces[0].keys) == len(array)
    assert pieces[0].keys.key(1) == b"key number 1 of many"
    f = bulkbloom.Filter(len(array), 0.01)
    tracemalloc.start()
    try:
        fresh = f.insert_if_absent(ArrayOnly(array))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(array)  # the flags (1 byte a key); offsets alone would be 8
    same = bulkbloom.Filter(len(array), 0.01)
    assert (fresh == same.insert_if_absent(array.to_pylist())).all() and f == same


def test_the_keys_hold_the_producers_buffers_until_the_last_piece_goes():
    import gc

    array = pa.array([b"a key of more than twelve bytes %d" % i for i in range(20_000)],
                     pa.binary_view())
    gc.collect()  # earlier tests' unreachable Arrow buffers go now, not inside the measurement
    held = pa.total_allocated_bytes()
    pieces = _keys.key_pieces(ArrayOnly(array))
    del array
    gc.collect()
    assert pa.total_allocated_bytes() >= held  # the moved C array keeps the buffers
    f = bulkbloom.Filter(20_000, 0.001)
    f._core.insert_bytes(*_keys.bytes_args(pieces[0]))
    assert b"a key of more than twelve bytes 19999" in f
    del pieces
    gc.collect()
    assert pa.total_allocated_bytes() < held  # released with the last piece


def bad_view(length, buffer, offset):
    return struct.pack("<i4sii", length, b"abcd", buffer, offset)


@pytest.mark.parametrize(
    "view, message",
    [
        (bad_view(20, 0, 90), r"Arrow view 2 \(20 bytes at offset 90 of data buffer 0\) is not "
                              r"inside that buffer's 100 bytes"),
        (bad_view(20, 0, 81), r"Arrow view 2 \(20 bytes at offset 81 .* is not inside"),
        (bad_view(13, 0, 88), r"Arrow view 2 \(13 bytes at offset 88 .* is not inside"),
        (bad_view(20, 1, 0), r"Arrow view 2 .* names a buffer the array does not have \(it has 1\)"),
        (bad_view(20, -1, 0), r"names a buffer the array does not have"),
        (bad_view(20, 0, -4), r"is not inside that buffer's"),
        (struct.pack("<i12s", -3, b""), r"Arrow view 2 has a negative length \(-3\)"),
    ],
)
def test_a_view_outside_its_buffer_is_refused_before_any_key_is_used(view, message):
    good = struct.pack("<i12s", 3, b"abc") + bad_view(20, 0, 0)
    array = pa.Array.from_buffers(pa.binary_view(), 4, [None, pa.py_buffer(good + view + good[:16]),
                                                         pa.py_buffer(b"x" * 100)])
    f = bulkbloom.Filter(1000, 0.001)
    for call in (f.insert, f.contains, f.insert_if_absent):
        with pytest.raises(ValueError, match=message):
            call(ArrayOnly(array))
    with pytest.raises(ValueError, match=message):
        bulkbloom.shard_of(f.layout, ArrayOnly(array), 3)
    assert f.popcount() == 0


def test_nulls_are_named_by_position():
    validity = pa.array([i != 4 for i in range(10)]).buffers()[1]
    array = view_array(ENTRIES[:10], BUFFERS, validity=validity)
    chunked = pa.chunked_array([view_array(ENTRIES[:6], BUFFERS), array.slice(2)])
    f = bulkbloom.Filter(100, 0.01)
    for batch, position in ((ArrayOnly(array), 4), (StreamOnly(chunked), 8), (array, 4)):
        with pytest.raises(ValueError, match=f"nulls/NA in the keys at position {position}:"):
            f.insert(batch)
    assert f.popcount() == 0


def test_windows_shards_and_routing_read_views_as_their_bytes():
    array = view_array(ENTRIES, BUFFERS)
    layout = bulkbloom.Filter(5000, 0.01).layout
    assert (bulkbloom.shard_of(layout, ArrayOnly(array), 5) == bulkbloom.shard_of(layout, KEYS, 5)).all()
    windows = [bulkbloom.WindowedFilter("records", 2000, "sb512", 64, generations=2) for _ in "ab"]
    assert (windows[0].insert_if_absent(ArrayOnly(array)) == windows[1].insert_if_absent(KEYS)).all()
    shard = bulkbloom.FilterShard(layout, 0, 2)
    position = int(bulkbloom.shard_of(layout, KEYS, 2).argmax())  # the first key of shard 1
    # One piece is checked by the library, two (a chunked array) by the package first.
    for batch in (ArrayOnly(array), StreamOnly(pa.chunked_array([array[:1], array[1:]]))):
        with pytest.raises(ValueError, match=r"belongs to shard 1") as raised:
            shard.insert(batch)
        named = f"the byte key at position {position} ({len(KEYS[position])} bytes)"
        assert named in str(raised.value)


def test_polars_strings_are_views_read_in_place():
    pl = pytest.importorskip("polars")
    words = [w.decode() for w in KEYS]
    series = pl.Series(words)
    pieces = _keys.key_pieces(series)
    assert {type(p) for p in pieces} == {_keys.ArrowBytesPiece}  # polars exports views
    assert answers(series) == reference(pa.array(words))
    # Several chunks (concatenated without a rechunk), one of them sliced.
    chunked = pl.concat([series[:1000], series[1200:]], rechunk=False)
    assert chunked.n_chunks() == 2
    assert answers(chunked) == reference(pa.array(words[:1000] + words[1200:]))
    assert answers(series[10:2010]) == reference(pa.array(words[10:2010]))
    with pytest.raises(ValueError, match="nulls/NA in the keys at position 2:"):
        bulkbloom.Filter(100, 0.01).insert(pl.Series(["a" * 20, "b", None]))


def adversarial_keys(count, seed):
    """`count` keys of every length from 0 to 40 in a random order, lengths 12 and 13 (the last
    inline one and the first in a buffer) most often, some of them repeats, and inline keys
    whose bytes 4 to 12 (where an out-of-line view has its buffer index and offset) are 0xFF or
    0x00."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice(np.r_[0:41, [12] * 20, [13] * 20], size=count)
    fill = [b"\xff", b"\x00", b"k"]
    keys = [(fill[i % 3] * n)[:4] + b"%d" % i + fill[i % 3] * n for i, n in enumerate(lengths)]
    keys = [key[:n] for key, n in zip(keys, lengths)]
    for i in rng.integers(0, count, size=count // 10):  # repeats
        keys[i] = keys[(i * 7) % count]
    return keys


@pytest.mark.parametrize("buffers", [1, 2, 57])
def test_views_give_the_bytes_and_flags_of_the_same_keys_as_plain_binary(buffers):
    keys = adversarial_keys(5000, buffers)
    # Each out-of-line key in one of `buffers` data buffers, put there in a shuffled order.
    order = np.random.default_rng(buffers).permutation(len(keys))
    data = [bytearray(b"-" * 3) for _ in range(buffers)]
    where = {}
    for i in order:
        if len(keys[i]) > 12:
            b = int(i) % buffers
            where[int(i)] = (b, len(data[b]))
            data[b] += keys[i]
    entries = [(key, *where.get(i, (0, 0))) for i, key in enumerate(keys)]
    array = view_array(entries, [bytes(d) for d in data])
    array.validate(full=True)
    plain = pa.array(keys, pa.binary())  # read as offsets + data
    assert answers(ArrayOnly(array)) == answers(plain)
    for begin, end in ((1, 4999), (13, 2000), (4000, 4000), (4999, 5000)):
        assert answers(ArrayOnly(array.slice(begin, end - begin))) == answers(plain[begin:end])
    assert answers(StreamOnly(pa.chunked_array([array.slice(0, 7), array.slice(7)]))) == answers(
        plain)

