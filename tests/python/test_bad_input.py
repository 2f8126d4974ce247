"""Every bad input gives a Python exception with a message, never a crash, and leaves the filter
as it was."""

import errno
import pickle

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom


@pytest.fixture
def f():
    f = bulkbloom.Filter(1000, 0.01)
    f.insert(np.arange(10))
    return f


@pytest.mark.parametrize(
    "batch, error, message",
    [
        (np.zeros((2, 3), dtype=np.uint64), ValueError, "1-D"),
        (np.zeros((), dtype=np.uint64), ValueError, "1-D"),
        (np.uint64(5), TypeError, "single uint64"),
        (np.zeros(3, dtype=np.float64), TypeError, "float64"),
        (np.zeros(3, dtype=np.bool_), TypeError, "bool"),
        (np.zeros(3, dtype=np.complex64), TypeError, "complex64"),
        (np.array([1.5, "a"], dtype=object), TypeError, "int, str or bytes"),
        (pa.array([1, None, 3]), ValueError, "null"),
        (pa.array(["a", None]), ValueError, "null"),
        (pa.array([1.0, 2.0]), TypeError, "double"),
        (pa.array([[1], [2]]), TypeError, "list"),
        (b"abc", TypeError, "single bytes"),
        ("abc", TypeError, "single str"),
        ([1, "a"], TypeError, "int, str"),
        ([b"a", "a"], TypeError, "bytes, str"),
        ([1, 2.0], TypeError, "float"),
        ([True, 1], TypeError, "bool"),
        ([[1, 2], [3, 4]], TypeError, "list"),
        (object(), TypeError, "single object"),
        ({1, 2}, TypeError, "a sequence of keys .* not a set: pass list"),
        ((k for k in (1, 2)), TypeError, "not a generator: pass list"),
        ({1: 2}, TypeError, "not a dict"),
    ],
)
def test_bad_batches_raise_and_change_nothing(f, batch, error, message):
    before = f.to_bytes()
    for call in (f.insert, f.contains, f.insert_if_absent):
        with pytest.raises(error, match=message):
            call(batch)
    assert f.to_bytes() == before


@pytest.mark.parametrize(
    "key, error",
    [(2**64, ValueError), (-(2**63) - 1, ValueError), (1.5, TypeError), (None, TypeError),
     (True, TypeError), ([1], TypeError)],
)
def test_bad_single_keys(f, key, error):
    with pytest.raises(error):
        f.add(key)
    with pytest.raises(error):
        key in f  # noqa: B015


def test_bad_parameters():
    with pytest.raises(ValueError, match="capacity"):
        bulkbloom.Filter(0, 0.01)
    for fpr in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(ValueError):
            bulkbloom.Filter(100, fpr)
    with pytest.raises(ValueError, match="capacity"):
        bulkbloom.Filter(-5, 0.01)
    with pytest.raises(TypeError):
        bulkbloom.Filter("100", 0.01)
    with pytest.raises(ValueError, match="sb256"):
        bulkbloom.Filter.from_layout("sb1024", 10)
    with pytest.raises(ValueError):
        bulkbloom.Filter.from_layout("sb512", 0)
    with pytest.raises(ValueError):
        bulkbloom.Filter.from_layout("sb512", 2**32)
    with pytest.raises(ValueError, match="hash"):
        bulkbloom.Filter.from_layout("sb512", 10, hash="md5")
    with pytest.raises(ValueError, match="high32"):
        bulkbloom.Filter.from_layout("sb512", 10, index="low16")
    with pytest.raises(ValueError, match="unknown backend 'tpu': expected auto, cpu or cuda"):
        bulkbloom.Filter(100, 0.01, backend="tpu")
    with pytest.raises(bulkbloom.BackendUnavailable):
        bulkbloom.Filter(100, 0.01, implementation="cpu/NOPE")
    with pytest.raises(ValueError):
        bulkbloom.WindowedFilter.for_records(100, 0.01, generations=1)
    with pytest.raises(ValueError, match="clock"):
        bulkbloom.WindowedFilter("days", 10, "sb512", 8)


def test_bad_options_and_saved_state_are_named_when_given(tmp_path, f):
    """Not nanobind's "incompatible function arguments", and not first at save()."""
    sizing_record = f.metadata  # what Filter(capacity, fpr) starts with
    calls = [
        (lambda: bulkbloom.Filter(10, threads=-1), ValueError,
         r"threads must be in \[0, 2\*\*32\)"),
        (lambda: bulkbloom.Filter(10, threads=2**32), ValueError, "threads must be in"),
        (lambda: bulkbloom.FilterShard(f, 0, 1, threads="2"), TypeError, "threads must be an int"),
        (lambda: bulkbloom.Filter(10, backend=None), TypeError, "backend must be a str"),
        (lambda: bulkbloom.Filter.map(tmp_path / "f.bbf", verify=1), TypeError,
         "verify must be a bool"),
        (lambda: bulkbloom.WindowedFilter.for_records(10).advance_to(2**64), ValueError,
         "time = 18446744073709551616 is outside int64"),
        (lambda: setattr(f, "keys_inserted", -1), ValueError, "keys_inserted must be in"),
        (lambda: setattr(f, "keys_inserted", "3"), TypeError, "keys_inserted must be an int"),
        (lambda: setattr(f, "metadata", "offset 5"), TypeError, "metadata must be bytes, not str"),
        (lambda: setattr(f, "metadata", 5), TypeError, "metadata must be bytes, not int"),
    ]
    for call, error, message in calls:
        with pytest.raises(error, match=message):
            call()
    assert (f.keys_inserted, f.metadata) == (0, sizing_record)
    f.metadata = bytearray(b"offset 5")
    assert f.metadata == b"offset 5" and type(f.metadata) is bytes


def test_too_large_a_filter_is_a_memory_error():
    with pytest.raises(MemoryError):
        bulkbloom.Filter.from_layout("sb512", 2**32 - 1, backend="cpu")  # 256 GiB


def test_damaged_files_and_images(tmp_path, f):
    image = f.to_bytes()
    with pytest.raises(bulkbloom.FormatError, match="truncated"):
        bulkbloom.Filter.from_bytes(image[:50])
    corrupt = bytearray(image)
    corrupt[-1] ^= 1
    with pytest.raises(bulkbloom.FormatError):
        bulkbloom.Filter.from_bytes(corrupt)
    assert issubclass(bulkbloom.FormatError, ValueError)
    assert issubclass(bulkbloom.IoError, OSError)
    assert issubclass(bulkbloom.FormatError, bulkbloom.Error)
    (tmp_path / "bad.bbf").write_bytes(bytes(corrupt))
    with pytest.raises(bulkbloom.FormatError, match="bad.bbf"):
        bulkbloom.Filter.load(tmp_path / "bad.bbf")
    with pytest.raises(bulkbloom.IoError, match="missing"):
        bulkbloom.Filter.load(tmp_path / "missing.bbf")
    with pytest.raises(bulkbloom.IoError):
        bulkbloom.Filter.map(tmp_path / "missing.bbf")
    with pytest.raises(bulkbloom.IoError):
        f.save(tmp_path / "no" / "such" / "dir" / "f.bbf")
    with pytest.raises(TypeError):
        bulkbloom.Filter.from_bytes(12)
    with pytest.raises(bulkbloom.FormatError):
        bulkbloom.Filter.from_parquet_bytes(b"\x00" * 40)


def test_io_errors_carry_errno_and_filename_as_python_s_own_do(tmp_path):
    missing = tmp_path / "missing.bbf"
    with pytest.raises(FileNotFoundError) as caught:
        bulkbloom.Filter.load(missing)
    error = caught.value
    assert isinstance(error, bulkbloom.IoError) and isinstance(error, bulkbloom.Error)
    assert error.errno == errno.ENOENT and error.filename == str(missing)
    assert f"cannot open {missing}" in str(error)
    # Pickled (a worker process sending it back) it is the same kind, errno and file.
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and again.errno == errno.ENOENT
    assert again.filename == str(missing)

    (tmp_path / "plain").write_bytes(b"")
    with pytest.raises(NotADirectoryError) as caught:
        bulkbloom.Filter(100).save(tmp_path / "plain" / "f.bbf")
    assert caught.value.errno == errno.ENOTDIR and isinstance(caught.value, bulkbloom.IoError)


def test_window_bad_calls():
    w = bulkbloom.WindowedFilter.for_records(100, 0.01)
    with pytest.raises(ValueError, match="event_time clock"):
        w.insert_if_absent([1, 2], times=[1, 2])
    with pytest.raises(ValueError):
        w.advance_to(5)
    t = bulkbloom.WindowedFilter.for_event_time(10, 100, 0.01)
    with pytest.raises(ValueError, match="records clock|counts records|times"):
        t.insert_if_absent([1, 2])
    with pytest.raises(ValueError, match="2 times for 3 keys"):
        t.insert_if_absent([1, 2, 3], times=[1, 2])
    with pytest.raises(TypeError, match="times"):
        t.insert_if_absent([1, 2], times=[1.5, 2.5])
    with pytest.raises(ValueError, match="1-D"):
        t.insert_if_absent([1, 2], times=[[1, 2]])
    assert t.records_seen == 0


def test_the_core_checks_what_the_python_layer_hands_it(f):
    core = f._core
    before = f.to_bytes()
    data = np.frombuffer(b"abcdef", dtype=np.uint8)
    for offsets in ([0, 7], [0, 3, 2], [-1, 2], [4, 6]):
        bad = np.array(offsets, dtype=np.int64)
        if offsets == [4, 6]:
            core.insert_bytes(bad, data)  # a key may start past 0: fine
            continue
        with pytest.raises(ValueError, match="offset"):
            core.insert_bytes(bad, data)
    with pytest.raises(ValueError, match="int32 or int64"):
        core.insert_bytes(np.array([0, 1], dtype=np.uint16), data)
    with pytest.raises(ValueError, match="3 elements for 2 keys"):
        core.contains(np.zeros(2, dtype=np.uint64), np.zeros(3, dtype=np.uint8))
    with pytest.raises(TypeError):  # no silent conversion of a wrong dtype or layout
        core.insert(np.zeros(2, dtype=np.int64))
    with pytest.raises(TypeError):
        core.insert(np.zeros(4, dtype=np.uint64)[::2])
    g = bulkbloom.Filter(1000, 0.01)
    g.insert(np.arange(10))
    g.add(b"ef")
    assert f.to_bytes() == g.to_bytes() != before
