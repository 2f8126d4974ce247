"""Keys from the Arrow PyCapsule interface (__arrow_c_array__ / __arrow_c_stream__), read through
the C data interface in place: the same keys give the same answers and bytes as the same keys in
a Python list, and as the pyarrow array itself, for every key type, sliced and chunked."""

import tracemalloc
import uuid

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom


class ArrayOnly:
    """Exposes nothing but an Arrow array's __arrow_c_array__, as nanoarrow or a new library
    would: the package cannot take the pyarrow path."""

    def __init__(self, array):
        self._array = array

    def __arrow_c_array__(self, requested_schema=None):
        return self._array.__arrow_c_array__(requested_schema)


class StreamOnly:
    def __init__(self, chunked):
        self._chunked = chunked

    def __arrow_c_stream__(self, requested_schema=None):
        return self._chunked.__arrow_c_stream__(requested_schema)


rng = np.random.default_rng(7)
INTS = rng.integers(-(2**63), 2**63 - 1, size=3000, dtype=np.int64)
INTS = np.concatenate([INTS, INTS[:500], [0, -1, 2**63 - 1]])
# Short strings (inline in a view) and long ones (in a data buffer), with repeats and "".
WORDS = [("k%d" % i) * (1 + i % 9) for i in range(2500)]
WORDS = WORDS + WORDS[:400] + ["", "x" * 40]

TYPES = {
    "int8": (pa.int8(), lambda: (INTS % 100).tolist()),
    "int16": (pa.int16(), lambda: (INTS % 30000).tolist()),
    "int32": (pa.int32(), lambda: (INTS % 2**31).tolist()),
    "int64": (pa.int64(), lambda: INTS.tolist()),
    "uint8": (pa.uint8(), lambda: (INTS.view(np.uint64) % 250).tolist()),
    "uint16": (pa.uint16(), lambda: (INTS.view(np.uint64) % 60000).tolist()),
    "uint32": (pa.uint32(), lambda: (INTS.view(np.uint64) % 2**32).tolist()),
    "uint64": (pa.uint64(), lambda: INTS.view(np.uint64).tolist()),
    "string": (pa.string(), lambda: WORDS),
    "large_string": (pa.large_string(), lambda: WORDS),
    "binary": (pa.binary(), lambda: [w.encode() for w in WORDS]),
    "large_binary": (pa.large_binary(), lambda: [w.encode() for w in WORDS]),
    "string_view": (pa.string_view(), lambda: WORDS),
    "binary_view": (pa.binary_view(), lambda: [w.encode() for w in WORDS]),
    "fixed_size_binary": (pa.binary(16), lambda: [w.encode().ljust(16, b"-")[:16] for w in WORDS]),
    "uuid": (pa.uuid(), lambda: [uuid.UUID(int=hash(w) % 2**128) for w in WORDS]),
}


def answers(keys):
    """(insert_if_absent's flags, contains' flags afterwards, the filter's bytes)."""
    f = bulkbloom.Filter(20_000, 0.001)
    fresh = f.insert_if_absent(keys)
    return fresh.tolist(), f.contains(keys).tolist(), f.to_bytes()


def reference(array):
    """The answers for the same keys as a Python list (a uuid as its 16 bytes)."""
    values = [v.bytes if isinstance(v, uuid.UUID) else v for v in array.to_pylist()]
    return answers(values)


@pytest.mark.parametrize("name", TYPES)
def test_each_type_as_pyarrow_reads_it(name):
    kind, values = TYPES[name]
    array = pa.array(values(), kind)
    expected = reference(array)
    assert answers(array) == expected
    assert answers(ArrayOnly(array)) == expected
    assert answers(StreamOnly(pa.chunked_array([array]))) == expected
    # Chunked: three chunks, the middle one empty; then sliced (non-zero offsets in the chunks).
    cut = len(array) // 3
    chunked = pa.chunked_array([array.slice(0, cut), array.slice(cut, 0), array.slice(cut)])
    assert answers(StreamOnly(chunked)) == expected
    sliced = array.slice(17, len(array) - 40)
    assert answers(ArrayOnly(sliced)) == reference(sliced)
    assert answers(StreamOnly(chunked.slice(17, len(array) - 40))) == reference(sliced)


def test_fixed_size_and_view_arrays_are_one_piece_in_place():
    # Their keys are read where the array holds them, however many chunk_keys they span.
    for kind in (pa.string_view(), pa.binary(16)):
        values = WORDS if kind == pa.string_view() else TYPES["fixed_size_binary"][1]()
        array = pa.array(values * (bulkbloom.chunk_keys // len(values) + 1), kind)
        pieces = bulkbloom._keys.key_pieces(ArrayOnly(array))
        assert [type(p) for p in pieces] == [bulkbloom._keys.ArrowBytesPiece]
        assert answers(ArrayOnly(array.slice(3, 5000))) == reference(array.slice(3, 5000))


@pytest.mark.parametrize("name", ["int64", "uint8", "string", "large_binary", "string_view",
                                  "fixed_size_binary"])
def test_nulls_are_named_by_position_in_the_whole_stream(name):
    kind, values = TYPES[name]
    plain = values()[:10]
    with_null = pa.array(plain[:3] + [None] + plain[4:], kind)
    chunked = pa.chunked_array([pa.array(plain[:5], kind), with_null.slice(1)])
    f = bulkbloom.Filter(1000, 0.001)
    for batch, position in ((ArrayOnly(with_null), 3), (StreamOnly(chunked), 7)):
        for call in (f.insert, f.contains, f.insert_if_absent):
            with pytest.raises(ValueError, match=f"nulls/NA in the keys at position {position}:"):
                call(batch)
    assert f.popcount() == 0  # the chunk before the null was not inserted either


def test_unsupported_types_name_themselves():
    f = bulkbloom.Filter(1000, 0.001)
    for array, message in (
        (pa.array([1.5]), "not float64"),
        (pa.array([True]), "not bool"),
        (pa.array([[1]]), "not list"),
        (pa.array(["a"]).dictionary_encode(), "dictionary-encoded"),
        (pa.record_batch({"k": [1], "v": [2]}), "a table or record batch: pass one column"),
    ):
        with pytest.raises(TypeError, match=message):
            f.insert(ArrayOnly(array))


def test_strings_are_read_in_place():
    strings = pa.array([str(i) for i in range(300_000)])
    f = bulkbloom.Filter(300_000, 0.01)
    for batch in (ArrayOnly(strings), StreamOnly(pa.chunked_array([strings, strings]))):
        tracemalloc.start()
        try:
            f.insert(batch)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 100_000  # 2 MB of strings and 1.2 MB of offsets: a copy would show
    assert f.contains(strings).all()


def test_the_chunk_outlives_its_producer():
    f = bulkbloom.Filter(1000, 0.001)
    pieces = bulkbloom._keys.key_pieces(ArrayOnly(pa.array(["abc", "de"])))
    import gc

    gc.collect()  # the pyarrow array is gone; the views keep the moved C array alive
    offsets, data = pieces[0]
    f._core.insert_bytes(offsets, data)
    assert "abc" in f and "de" in f


def test_nanoarrow():
    na = pytest.importorskip("nanoarrow")
    words = WORDS[:100]
    assert answers(na.c_array(words, na.string())) == reference(pa.array(words))
    assert answers(na.c_array([1, 2, 3], na.int32())) == reference(pa.array([1, 2, 3]))


def test_polars():
    pl = pytest.importorskip("polars")
    assert answers(pl.Series(WORDS)) == reference(pa.array(WORDS))
    assert answers(pl.Series(INTS)) == reference(pa.array(INTS))
    with pytest.raises(ValueError, match="nulls/NA in the keys at position 1:"):
        bulkbloom.Filter(100, 0.01).insert(pl.Series([1, None, 3]))


def test_a_table_of_one_column_is_its_keys():
    keys = pa.array(WORDS)
    table = pa.table({"key": keys})
    assert answers(StreamOnly(table.slice(5))) == reference(keys.slice(5))
    batch = pa.record_batch({"key": keys}).slice(3, 100)
    assert answers(ArrayOnly(batch)) == reference(keys.slice(3, 100))


def test_duckdb():
    duckdb = pytest.importorskip("duckdb")
    keys = ["k%d" % (i % 700) for i in range(3000)]
    result = duckdb.sql("select 'k' || (i % 700) as key from range(3000) t(i) order by i")
    assert answers(result) == reference(pa.array(keys))
    with pytest.raises(ValueError, match="nulls/NA in the keys at position 2:"):
        bulkbloom.Filter(100, 0.01).insert(duckdb.sql("select unnest([1, 2, null]) as key"))


def test_pandas_through_the_capsule():
    pd = pytest.importorskip("pandas")
    series = pd.Series(WORDS, dtype="string[pyarrow]")
    assert answers(series) == reference(pa.array(WORDS))
    frame = pd.DataFrame({"key": INTS})
    assert answers(frame["key"]) == reference(pa.array(INTS))


def test_arrow_backed_pandas_and_polars_series_are_read_in_their_buffers():
    # Passed as they are, without the caller's pa.array(...): the piece's bytes are the
    # Series' own Arrow buffer (a conversion through Python strings would have new ones).
    pd = pytest.importorskip("pandas")
    series = pd.Series(WORDS, dtype="string[pyarrow]")
    (piece,) = bulkbloom._keys.key_pieces(series)
    (chunk,) = pa.chunked_array(pa.array(series)).chunks
    assert piece.data.ctypes.data == chunk.buffers()[2].address
    pl = pytest.importorskip("polars")
    (piece,) = bulkbloom._keys.key_pieces(pl.Series(WORDS))
    assert isinstance(piece, bulkbloom._keys.ArrowBytesPiece)  # polars' views, in place


def test_update_takes_an_arrow_column_as_one_batch():
    words = pa.array(WORDS)
    f = bulkbloom.Filter(20_000, 0.001)
    f.update(StreamOnly(pa.chunked_array([words])), ArrayOnly(words.slice(5)))
    g = bulkbloom.Filter(20_000, 0.001)
    g.insert(WORDS)
    assert f == g


def lazy_stream(batches, watch=None):
    """A RecordBatchReader of one key column made batch by batch as it is read (as a DuckDB query
    or a dataset scan makes them): `batches` yields pyarrow arrays; `watch` is called before each
    one is made."""
    def made():
        for keys in batches:
            if watch is not None:
                watch()
            yield pa.record_batch({"key": keys})
    return pa.RecordBatchReader.from_batches(pa.schema({"key": pa.string()}), made())


def odd_batches(words, size=9_973):
    """`words` cut into string arrays of `size` (odd) keys."""
    return (pa.array(words[at : at + size]) for at in range(0, len(words), size))


LONG = [f"key {i % 170_000} of a long stream" for i in range(bulkbloom._keys.READ_AHEAD_KEYS * 3)]


def test_a_long_stream_gives_the_answers_of_its_keys_as_one_array():
    expected = answers(pa.array(LONG))
    f = bulkbloom.Filter(20_000, 0.001)
    fresh = f.insert_if_absent(lazy_stream(odd_batches(LONG)))
    found = f.contains(lazy_stream(odd_batches(LONG)))
    assert (fresh.tolist(), found.tolist(), f.to_bytes()) == expected
    g = bulkbloom.Filter(20_000, 0.001)
    g.insert(lazy_stream(odd_batches(LONG)))
    assert g.to_bytes() == expected[2]
    assert bulkbloom.Filter(20_000, 0.001).insert_if_absent(lazy_stream(iter([]))).shape == (0,)


def test_a_long_stream_is_read_as_it_is_used_not_held_whole():
    batch_bytes = pa.array(LONG[:9_973]).nbytes
    held = []
    watch = lambda: held.append(pa.total_allocated_bytes())  # noqa: E731
    before = pa.total_allocated_bytes()
    f = bulkbloom.Filter(len(LONG), 0.001)
    for call in (f.insert, f.contains, f.insert_if_absent):
        held.clear()
        call(lazy_stream(odd_batches(LONG), watch))
        assert len(held) == len(LONG) // 9_973 + 1
        # The batches read ahead (READ_AHEAD_KEYS keys) and the one being used, not all 20.
        assert max(held) - before < batch_bytes * (bulkbloom._keys.READ_AHEAD_KEYS // 9_973 + 3)


def test_a_null_past_the_read_ahead_is_named_when_its_batch_is_read():
    with_null = LONG[:-5] + [None] + LONG[-4:]
    f = bulkbloom.Filter(len(LONG), 0.001)
    with pytest.raises(bulkbloom.StreamNullError,
                       match=f"nulls/NA in the keys at position {len(LONG) - 5}:") as raised:
        f.insert_if_absent(lazy_stream(odd_batches(with_null)))
    # The batches before the null's were applied, and their answers came with the error; its own
    # batch was not applied.
    last_batch = (len(LONG) - 5) // 9_973 * 9_973
    assert (raised.value.position, raised.value.applied) == (len(LONG) - 5, last_batch)
    prefix = pa.array(LONG[:last_batch])
    expected = bulkbloom.Filter(len(LONG), 0.001)
    assert raised.value.flags.tolist() == expected.insert_if_absent(prefix).tolist()
    assert f.to_bytes() == expected.to_bytes()
    with pytest.raises(bulkbloom.StreamNullError) as raised:
        bulkbloom.Filter(len(LONG), 0.001).insert(lazy_stream(odd_batches(with_null)))
    assert (raised.value.applied, raised.value.flags) == (last_batch, None)
    # Within the read-ahead, nothing is applied.
    g = bulkbloom.Filter(len(LONG), 0.001)
    early = LONG[:10] + [None] + LONG[11:]
    with pytest.raises(ValueError, match="nulls/NA in the keys at position 10:"):
        g.insert(lazy_stream(odd_batches(early)))
    assert g.popcount() == 0


def test_a_duckdb_relation_is_read_as_a_stream():
    duckdb = pytest.importorskip("duckdb")
    table = pa.table({"key": pa.array(LONG)})
    relation = duckdb.connect().from_arrow(table).select("key")
    assert answers(relation) == answers(table.column(0))
