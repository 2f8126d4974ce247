"""The Filter API: keys of every kind, single keys, set operations, estimates, persistence."""

import array
import copy
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom


class DLPackOnly:
    """An object that offers its keys only through DLPack, as torch or jax arrays do."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def reference_bytes(keys):
    f = bulkbloom.Filter(10_000, 0.01)
    f.insert(np.asarray(keys, dtype=np.uint64))
    return f.to_bytes()


def test_every_integer_batch_kind_gives_the_same_filter():
    values = np.array([0, 1, 5, 2**63 - 1, 2**63, 2**64 - 1, 12345678901234], dtype=np.uint64)
    expected = reference_bytes(values)
    signed = values.view(np.int64)
    batches = {
        "int64 with negatives": signed,
        "list of python ints": [int(v) for v in signed],
        "array.array('Q')": array.array("Q", values.tolist()),
        "memoryview": memoryview(values),
        "dlpack": DLPackOnly(values),
        "big-endian": values.astype(">u8"),
        "strided": np.repeat(values, 2)[::2],
        "arrow uint64": pa.array(values),
        "arrow int64 sliced": pa.array(np.concatenate([[9], signed, [9]]))[1:-1],
        "arrow chunked": pa.chunked_array([pa.array(signed[:3]), pa.array(signed[3:])]),
        "object array of python ints": np.array([int(v) for v in values], dtype=object),
        "object array, negative and past 2**63": np.array([int(v) for v in signed][:4]
                                                          + [int(v) for v in values][4:],
                                                          dtype=object),
    }
    pd = pytest.importorskip("pandas")
    batches["pandas object series"] = pd.Series([int(v) for v in values], dtype=object)
    for name, batch in batches.items():
        f = bulkbloom.Filter(10_000, 0.01)
        f.insert(batch)
        assert f.to_bytes() == expected, name
        assert f.contains(batch).all(), name


def test_narrow_integers_are_widened_by_value():
    small = np.array([-3, -1, 0, 7, 127], dtype=np.int8)
    f = bulkbloom.Filter(10_000, 0.01)
    f.insert(small)
    assert f.to_bytes() == reference_bytes(small.astype(np.int64).view(np.uint64))
    assert f.contains(pa.array(small)).all()
    assert f.contains(small.astype(np.int16)).all()
    assert -1 in f and (2**64 - 1) in f  # one key: the same 64-bit pattern


def test_single_keys_match_the_bulk_calls():
    f = bulkbloom.Filter(1000, 0.001)
    f.add(42)
    f.add(-1)
    f.add("héllo")
    f.add(b"raw")
    assert 42 in f and np.uint64(42) in f and 2**64 - 1 in f
    assert "héllo" in f and "héllo".encode() in f and b"raw" in f and bytearray(b"raw") in f
    assert 43 not in f and "hello" not in f
    g = bulkbloom.Filter(1000, 0.001)
    g.insert([42, -1])
    g.insert(["héllo", "raw"])
    assert f.to_bytes() == g.to_bytes()
    # Bytes keys are taken whole, trailing NULs included (numpy's "S" arrays drop those).
    h = bulkbloom.Filter(1000, 0.001)
    h.insert([b"nul\x00"])
    assert b"nul\x00" in h and b"nul" not in h


def test_insert_if_absent_is_the_sequential_loop(keys):
    f = bulkbloom.Filter(len(keys), 0.01)
    is_new = f.insert_if_absent(keys)
    reference = bulkbloom.Filter(len(keys), 0.01)
    expected = np.array([reference_new(reference, int(k)) for k in keys[:5000]])
    assert (is_new[:5000] == expected).all()
    assert is_new.dtype == np.bool_ and is_new.shape == keys.shape
    _, first = np.unique(keys, return_index=True)
    assert not is_new[np.setdiff1d(np.arange(len(keys)), first)].any()  # zero leaks


def reference_new(f, key):
    new = key not in f
    f.add(key)
    return new


def test_empty_batches():
    f = bulkbloom.Filter(100, 0.01)
    for empty in ([], np.zeros(0, dtype=np.uint64), pa.array([], type=pa.string()),
                  np.array([], dtype="U3"), pa.chunked_array([], type=pa.int64())):
        assert f.contains(empty).shape == (0,)
        assert f.insert_if_absent(empty).shape == (0,)
        f.insert(empty)
    assert f.popcount() == 0


def test_lists_of_numpy_scalars_and_bytearrays_are_keys():
    f, expected = bulkbloom.Filter(1000), bulkbloom.Filter(1000)
    expected.insert(["a", "bc"])
    expected.insert([b"x", b"yz"])
    f.insert([np.str_("a"), "bc"])
    f.update([np.bytes_(b"x"), bytearray(b"yz")])
    assert f.to_bytes() == expected.to_bytes()
    assert f.insert_if_absent([np.str_("bc"), np.str_("a")]).tolist() == [False, False]
    assert f.contains([bytearray(b"yz"), np.bytes_(b"x")]).all()


def test_update_takes_batches_and_iterables():
    f = bulkbloom.Filter(100_000, 0.001)
    f.update(range(1000), (str(i) for i in range(10)), np.arange(5, dtype=np.int64),
             [2**64 - 1, -5])
    assert f.contains(np.arange(1000)).all()
    assert all(str(i) in f for i in range(10))
    assert 2**64 - 1 in f and -5 in f


def test_set_operations_and_copy():
    a = bulkbloom.Filter.from_layout("sb512", 64)
    b = bulkbloom.Filter.from_layout("sb512", 64)
    a.insert(np.arange(0, 300))
    b.insert(np.arange(200, 500))
    union = a | b
    assert union.contains(np.arange(500)).all()
    both = bulkbloom.Filter.from_layout("sb512", 64)
    both.insert(np.arange(500))
    assert union.to_bytes() == both.to_bytes()
    inter = a & b
    assert inter.contains(np.arange(200, 300)).all()
    assert inter.popcount() <= min(a.popcount(), b.popcount())
    c = a.copy()
    c |= b
    assert c.to_bytes() == union.to_bytes()
    assert a.to_bytes() != c.to_bytes()  # the copy is independent
    d = copy.deepcopy(a)
    d &= d  # with itself: unchanged
    d |= d
    assert d.to_bytes() == a.to_bytes()
    with pytest.raises(ValueError, match="layout"):
        a |= bulkbloom.Filter.from_layout("sb512", 65)
    with pytest.raises(TypeError):
        a |= {1, 2}
    a.clear()
    assert a.popcount() == 0 and not a.contains(np.arange(300)).any()


def test_estimates_and_layout():
    f = bulkbloom.Filter(1_000_000, 0.001)
    assert f.layout.shape in ("sb256", "sb256x4", "sb512", "sb512x16")
    assert f.expected_fpr(1_000_000) <= 0.001
    assert f.current_fpr() == 0.0
    f.insert(np.arange(100_000, dtype=np.uint64))
    assert abs(f.estimated_count() - 100_000) < 2_000
    assert 0 < f.current_fpr() < f.expected_fpr(1_000_000)
    assert str(f.layout) == f.layout.description
    g = bulkbloom.Filter.from_layout("sb256", 10, seed=3, hash="identity", index="full64")
    assert tuple(g.layout)[:6] == ("sb256", 10, "identity", 3, "full64", 320)
    assert bulkbloom.Filter.from_bytes(g.to_bytes()).layout == g.layout
    assert f.implementation in ["cpu/" + n.split("/", 1)[1] for n in
                                bulkbloom.available_implementations()] or \
        f.implementation.startswith("cuda")
    assert f.threads >= 1


def test_layouts_sized_at_the_promise_and_at_the_first_generations_target():
    """Layout.promising is Filter(capacity, fpr)'s layout, sized at three quarters of fpr (what
    the command line's --capacity --fpr and bulkbloom.spark make); Layout.for_capacity is sized
    at fpr itself; a layout's model is its filter's."""
    promised = bulkbloom.Layout.promising(24_000, 0.2)
    assert promised == bulkbloom.Filter(24_000, 0.2).layout
    at_rate = bulkbloom.Layout.for_capacity(24_000, 0.2)
    assert (at_rate.num_blocks, promised.num_blocks) == (344, 391)
    assert promised.expected_fpr(24_000) <= 0.15 < at_rate.expected_fpr(24_000) <= 0.2
    f = bulkbloom.Filter(24_000, 0.2)
    assert [promised.expected_fpr(n) for n in (0, 1, 24_000, 10**9)] == [
        f.expected_fpr(n) for n in (0, 1, 24_000, 10**9)]


def test_save_load_map_and_bytes(tmp_path, keys):
    f = bulkbloom.Filter(len(keys), 0.001)
    f.insert(keys)
    f.keys_inserted = 123
    f.metadata = b"offset=77"
    path = tmp_path / "f.bbf"
    f.save(path)
    assert path.read_bytes() == f.to_bytes()
    for g in (bulkbloom.Filter.load(path), bulkbloom.Filter.map(path),
              bulkbloom.Filter.map(str(path), verify=False),
              bulkbloom.Filter.from_bytes(f.to_bytes()),
              bulkbloom.Filter.from_bytes(memoryview(f.to_bytes())),
              bulkbloom.Filter.from_bytes(np.frombuffer(f.to_bytes(), dtype=np.uint8))):
        assert g.to_bytes() == f.to_bytes()
        assert (g.keys_inserted, g.metadata) == (123, b"offset=77")
        assert g.contains(keys).all()
    mapped = bulkbloom.Filter.map(path)
    mapped.add(-12345)  # a private mapping: the file does not change
    assert path.read_bytes() == f.to_bytes()


def test_pickle_round_trip_across_processes(tmp_path, keys):
    f = bulkbloom.Filter(len(keys), 0.001)
    f.insert(keys)
    probe = np.arange(50_000, dtype=np.uint64)
    (tmp_path / "f.pickle").write_bytes(pickle.dumps(f))
    np.save(tmp_path / "probe.npy", probe)
    script = (
        "import pickle, sys, numpy as np\n"
        "f = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "np.save(sys.argv[2], f.contains(np.load(sys.argv[3])))\n"
        "sys.stdout.write(f.to_bytes().hex())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "f.pickle"), str(tmp_path / "answers.npy"),
         str(tmp_path / "probe.npy")],
        capture_output=True, text=True, check=True,
    )
    assert bytes.fromhex(out.stdout) == f.to_bytes()
    assert (np.load(tmp_path / "answers.npy") == f.contains(probe)).all()
    assert pickle.loads(pickle.dumps(f)).to_bytes() == f.to_bytes()


def test_pickles_and_reprs_name_the_package_not_its_modules():
    # A pickle names the class it rebuilds; one written today must load after the package's
    # private modules are rearranged, so every public class is bulkbloom.NAME.
    f = bulkbloom.Filter(1000, 0.01)
    w = bulkbloom.WindowedFilter.for_records(1000, 0.01)
    objects = [f, bulkbloom.GrownFilter(1000, 0.01), w, *bulkbloom.split(f, 2),
               *bulkbloom.split(w, 2)]
    for obj in objects:
        data = pickle.dumps(obj)
        for module in ("_filter", "_window", "_shards", "_common"):
            assert b"bulkbloom." + module.encode() not in data, (type(obj).__name__, module)
        assert type(pickle.loads(data)) is type(obj)
        assert type(obj).__module__ == "bulkbloom"
    for public in (bulkbloom.Layout, bulkbloom.WindowConfig, bulkbloom.shard_of, bulkbloom.split,
                   bulkbloom.concat, bulkbloom.reshard):
        assert public.__module__ == "bulkbloom"


def test_calls_longer_than_a_chunk_answer_as_short_ones():
    rng = np.random.default_rng(4)
    count = 2 * bulkbloom.chunk_keys + 12_345
    keys = rng.integers(0, count // 2, size=count, dtype=np.uint64)  # repeats across chunks
    whole = bulkbloom.Filter(count, 0.001)
    is_new = whole.insert_if_absent(keys)
    pieces = bulkbloom.Filter(count, 0.001)
    expected = np.concatenate([pieces.insert_if_absent(p) for p in np.array_split(keys, 40)])
    assert (is_new == expected).all()
    assert whole.to_bytes() == pieces.to_bytes()
    probe = rng.integers(0, count, size=count, dtype=np.uint64)
    assert (whole.contains(probe) == np.concatenate(
        [whole.contains(p) for p in np.array_split(probe, 40)])).all()
    text = pa.array(np.char.mod("k%d", keys[: bulkbloom.chunk_keys + 999] % 50_000))
    text_whole, text_pieces = bulkbloom.Filter(60_000, 0.001), bulkbloom.Filter(60_000, 0.001)
    flags = text_whole.insert_if_absent(text)
    expected = np.concatenate([text_pieces.insert_if_absent(text.slice(at, 100_000))
                               for at in range(0, len(text), 100_000)])
    assert (flags == expected).all() and text_whole.to_bytes() == text_pieces.to_bytes()


def test_set_operators_with_another_type_return_not_implemented():
    f = bulkbloom.Filter(1_000, 0.01)
    with pytest.raises(TypeError, match="unsupported operand"):
        f | 5
    with pytest.raises(TypeError, match="unsupported operand"):
        f & "x"


def test_a_subclass_copy_keeps_its_class():
    class Mine(bulkbloom.Filter):
        pass

    m = Mine(1_000, 0.01)
    m.add(1)
    assert type(m.copy()) is Mine and type(m | m) is Mine and 1 in m.copy()


def test_save_through_a_link_replaces_the_file_it_names(tmp_path):
    f = bulkbloom.Filter(1_000, 0.01)
    f.add(7)
    (tmp_path / "v3.bbf").write_bytes(b"old")
    (tmp_path / "current.bbf").symlink_to("v3.bbf")
    f.save(tmp_path / "current.bbf")
    assert (tmp_path / "current.bbf").is_symlink()
    assert 7 in bulkbloom.Filter.load(tmp_path / "v3.bbf")
