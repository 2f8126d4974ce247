"""Shards from Python: shard_of routes as DESIGN §9's formula says, and S shards fed the routed keys
give the one filter's flags and, concatenated, its bytes."""

import json
import pickle

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom
from conftest import run_cli

SHARD_COUNTS = (1, 3, 7)


def formula_shards(keys: np.ndarray, num_blocks: int, num_shards: int, index: str) -> np.ndarray:
    """DESIGN §9 for an identity-hash layout, in Python integers."""
    out = []
    for h in map(int, keys):
        if index == "high32":
            block = ((h >> 32) * num_blocks) >> 32
        else:
            block = ((h >> 32) * num_blocks + (((h & 0xFFFFFFFF) * num_blocks) >> 32)) >> 32
        out.append(((block + 1) * num_shards - 1) // num_blocks)
    return np.array(out, dtype=np.uint32)


@pytest.mark.parametrize("index", ["high32", "full64"])
def test_shard_of_is_the_formula(index):
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64, size=5_000, dtype=np.uint64)
    keys = np.concatenate([keys, np.array([0, 1, 2**32 - 1, 2**63, 2**64 - 1], dtype=np.uint64)])
    for num_blocks in (7, 130, 1_000_003):
        layout = bulkbloom.Layout.of("sb256", num_blocks, hash="identity", index=index)
        for num_shards in (1, 2, 3, 7, num_blocks):
            got = bulkbloom.shard_of(layout, keys, num_shards)
            assert got.dtype == np.uint32
            np.testing.assert_array_equal(
                got, formula_shards(keys, num_blocks, num_shards, index), err_msg=str(num_shards)
            )


def test_shard_of_takes_every_key_batch_the_filter_takes():
    layout = bulkbloom.Filter(50_000, 0.01).layout
    ints = np.random.default_rng(4).integers(-(2**63), 2**63, size=3_000, dtype=np.int64)
    expected = bulkbloom.shard_of(layout, ints.view(np.uint64), 7)
    for batch in (ints, pa.array(ints), pa.chunked_array([ints[:100], ints[100:]]), list(ints)):
        np.testing.assert_array_equal(bulkbloom.shard_of(layout, batch, 7), expected)
    words = [f"k{i}" for i in range(3_000)]
    expected = bulkbloom.shard_of(layout, words, 7)
    assert len(set(expected.tolist())) == 7
    for batch in (np.array(words), pa.array(words), pa.array(words, pa.large_string()),
                  [w.encode() for w in words]):
        np.testing.assert_array_equal(bulkbloom.shard_of(layout, batch, 7), expected)
    f = bulkbloom.Filter.from_layout(layout.shape, layout.num_blocks)
    np.testing.assert_array_equal(bulkbloom.shard_of(f, words, 7), expected)


def test_shard_of_rejects_bad_counts():
    layout = bulkbloom.Layout.of("sb512", 5)
    with pytest.raises(ValueError, match="shard count 6"):
        bulkbloom.shard_of(layout, np.arange(3, dtype=np.uint64), 6)
    with pytest.raises(ValueError):
        bulkbloom.shard_of(layout, np.arange(3, dtype=np.uint64), 0)
    with pytest.raises(TypeError, match="Layout"):
        bulkbloom.shard_of("sb512", np.arange(3, dtype=np.uint64), 1)


def routed_shards(layout, keys, num_shards):
    """S shards each given, in order, the keys it owns; and their insert_if_absent flags."""
    owners = bulkbloom.shard_of(layout, keys, num_shards)
    shards = [bulkbloom.FilterShard(layout, i, num_shards) for i in range(num_shards)]
    flags = np.zeros(len(keys), dtype=bool)
    for i, shard in enumerate(shards):
        where = np.flatnonzero(owners == i)
        flags[where] = shard.insert_if_absent(keys[where])
    return shards, flags


@pytest.mark.parametrize("num_shards", SHARD_COUNTS)
@pytest.mark.parametrize("shape", ["sb256", "sb512", "sb512x16"])
def test_routed_shards_are_the_one_filter(keys, shape, num_shards):
    # 1000 blocks: 3 and 7 do not divide it; 1001 = 7 * 11 * 13: 3 does not.
    for num_blocks in (1000, 1001):
        whole = bulkbloom.Filter.from_layout(shape, num_blocks)
        expected = whole.insert_if_absent(keys)
        shards, flags = routed_shards(whole.layout, keys, num_shards)
        np.testing.assert_array_equal(flags, expected)
        assert bulkbloom.concat(shards[::-1]).to_bytes() == whole.to_bytes()
        for shard, piece in zip(shards, bulkbloom.split(whole, num_shards)):
            assert piece.blocks == shard.blocks
            assert piece.bits() == shard.bits()
        for other in (1, 2, 5):
            recut = bulkbloom.reshard(shards, other)
            assert [s.index for s in recut] == list(range(other))
            assert bulkbloom.concat(recut).to_bytes() == whole.to_bytes()


def test_a_shard_refuses_another_shards_key_and_changes_nothing():
    layout = bulkbloom.Filter(10_000, 0.01).layout
    keys = np.arange(1_000, dtype=np.uint64)
    owners = bulkbloom.shard_of(layout, keys, 3)
    shard = bulkbloom.FilterShard(layout, 0, 3)
    mine = keys[owners == 0]
    stranger = int(keys[owners == 2][0])
    with pytest.raises(ValueError, match=str(stranger)):
        shard.insert_if_absent(np.append(mine, np.uint64(stranger)))
    assert shard.popcount() == 0
    with pytest.raises(ValueError):
        shard.contains([stranger])
    shard.insert(mine)
    assert shard.contains(mine).all()


def test_a_batch_of_several_calls_is_checked_whole_before_any_is_applied():
    # Identity hash: key k < 2**32 lies in block 0 (shard 0 of 2), 2**64 - 1 in the last block.
    layout = bulkbloom.Layout.of("sb256", 1000, hash="identity")
    last = np.uint64(2**64 - 1)
    mine = np.arange(bulkbloom.chunk_keys + 1, dtype=np.uint64)
    words = np.array([f"k{i}" for i in range(1_000)])
    word_layout = bulkbloom.Layout.of("sb256", 1000)
    owners = bulkbloom.shard_of(word_layout, words, 2)
    my_words = words[owners == 0]
    cases = [
        (layout, pa.chunked_array([mine[:100], [last]]),
         "key 18446744073709551615 at position 100 belongs to shard 1 of 2"),
        (layout, np.append(mine, last), f"at position {len(mine)} belongs to shard 1 of 2"),
        (word_layout, pa.chunked_array([my_words, words[owners == 1][:1]]),
         f"byte key at position {len(my_words)} .* belongs to shard 1 of 2"),
    ]
    for shard_layout, keys, message in cases:
        shard = bulkbloom.FilterShard(shard_layout, 0, 2)
        for call in (shard.insert, shard.insert_if_absent):
            with pytest.raises(ValueError, match=message):
                call(keys)
            assert shard.popcount() == 0
    config = bulkbloom.WindowConfig.of("event_time", 100, layout)
    window_shard = bulkbloom.WindowShard(config, 0, 2)
    with pytest.raises(ValueError, match="at position 100 belongs to shard 1"):
        window_shard.insert_if_absent(pa.chunked_array([mine[:100], [last]]), np.arange(101))
    assert (window_shard.records_seen, window_shard.clock_time) == (0, None)
    assert not window_shard.contains(mine[:100]).any()


def test_shard_files_pickles_and_whole_filter_files(tmp_path, keys):
    whole = bulkbloom.Filter.from_layout("sb512", 3001, seed=9)
    whole.insert(keys)
    shards = bulkbloom.split(whole, 3)
    for shard in shards:
        shard.keys_inserted = shard.index + 10
        shard.metadata = b"meta"
        path = tmp_path / f"shard{shard.index}.bbf"
        shard.save(path)
        for read in (bulkbloom.FilterShard.load(path), bulkbloom.FilterShard.map(path)):
            assert (read.index, read.num_shards, read.blocks) == (shard.index, 3, shard.blocks)
            assert read.layout == whole.layout
            assert read.bits() == shard.bits()
            assert (read.keys_inserted, read.metadata) == (shard.index + 10, b"meta")
        assert shard.to_bytes() == path.read_bytes()
        for copy in (pickle.loads(pickle.dumps(shard)),
                     bulkbloom.FilterShard.from_bytes(memoryview(path.read_bytes()))):
            assert (copy.index, copy.layout, copy.bits()) == (shard.index, shard.layout,
                                                              shard.bits())
            assert (copy.keys_inserted, copy.metadata) == (shard.index + 10, b"meta")
    whole.save(tmp_path / "whole.bbf")
    for as_shard in (bulkbloom.FilterShard.load(tmp_path / "whole.bbf"),
                     bulkbloom.FilterShard.from_bytes(whole.to_bytes())):
        assert (as_shard.index, as_shard.num_shards, as_shard.blocks) == (0, 1, (0, 3001))
        assert as_shard.contains(keys).all()
    (tmp_path / "bad.bbf").write_bytes((tmp_path / "shard1.bbf").read_bytes()[:-1])
    with pytest.raises(bulkbloom.FormatError):
        bulkbloom.FilterShard.load(tmp_path / "bad.bbf")
    with pytest.raises(bulkbloom.FormatError, match="shard bytes"):
        bulkbloom.FilterShard.from_bytes((tmp_path / "bad.bbf").read_bytes())


def test_reading_a_shard_as_a_whole_names_the_python_readers(tmp_path):
    bulkbloom.split(bulkbloom.Filter.from_layout("sb256", 100), 2)[1].save(tmp_path / "s.bbf")
    for read in (bulkbloom.Filter.load, bulkbloom.Filter.map,
                 lambda path: bulkbloom.Filter.from_bytes(path.read_bytes())):
        with pytest.raises(bulkbloom.FormatError, match=r"shard 1 of 2") as raised:
            read(tmp_path / "s.bbf")
        assert "bulkbloom.FilterShard.load, .map or .from_bytes" in str(raised.value)
        assert "load_shard" not in str(raised.value)
    bulkbloom.split(bulkbloom.WindowedFilter.for_records(1000), 2)[1].save(tmp_path / "s.bbw")
    with pytest.raises(bulkbloom.FormatError, match="bulkbloom.WindowShard.load or .from_bytes"):
        bulkbloom.WindowedFilter.load(tmp_path / "s.bbw")


def test_split_concat_and_reshard_carry_keys_inserted_and_metadata():
    whole = bulkbloom.Filter.from_layout("sb256", 100)
    window = bulkbloom.WindowedFilter.for_records(1000)
    for one in (whole, window):
        one.keys_inserted, one.metadata = 42, b"offset 7"
        shards = bulkbloom.split(one, 3)
        assert [(s.keys_inserted, s.metadata) for s in shards] == [(42, b"offset 7"),
                                                                   (0, b"offset 7"),
                                                                   (0, b"offset 7")]
        again = bulkbloom.concat(shards[::-1])
        assert (again.keys_inserted, again.metadata) == (42, b"offset 7")
        assert again.to_bytes() == one.to_bytes()
        recut = bulkbloom.reshard(shards, 2)
        assert [(s.keys_inserted, s.metadata) for s in recut] == [(42, b"offset 7"),
                                                                  (0, b"offset 7")]
        # Shards that each counted their own keys and kept their own offsets: the counts add up,
        # and no one offset stands for all.
        for i, shard in enumerate(shards):
            shard.keys_inserted, shard.metadata = 10 * i, b"offset %d" % i
        joined = bulkbloom.concat(shards)
        assert (joined.keys_inserted, joined.metadata) == (30, b"")


def test_concat_needs_every_shard_once():
    whole = bulkbloom.Filter.from_layout("sb256", 100)
    shards = bulkbloom.split(whole, 4)
    with pytest.raises(ValueError):
        bulkbloom.concat(shards[:3])
    with pytest.raises(ValueError):
        bulkbloom.concat(shards + shards[:1])
    with pytest.raises(TypeError):
        bulkbloom.concat([whole])


def routed_window(config, batches, num_shards):
    """S window shards given each batch's keys with the batch's time as the window's clock, and
    every shard moved to it after each batch; their flags."""
    shards = [bulkbloom.WindowShard(config, i, num_shards) for i in range(num_shards)]
    all_flags = []
    for keys, time in batches:
        owners = bulkbloom.shard_of(config.generation, keys, num_shards)
        flags = np.zeros(len(keys), dtype=bool)
        for i, shard in enumerate(shards):
            where = np.flatnonzero(owners == i)
            flags[where] = shard.insert_if_absent(keys[where], np.full(len(where), time))
            shard.advance_to(time)
        all_flags.append(flags)
    return shards, all_flags


@pytest.mark.parametrize("num_shards", SHARD_COUNTS)
def test_routed_window_shards_are_the_one_window(num_shards):
    rng = np.random.default_rng(8)
    whole = bulkbloom.WindowedFilter.for_event_time(2_000, 100, 0.05, generations=4)
    config = whole.config
    # Batches a third of a period to several periods apart: some keys come back inside the
    # window, some after it, and one gap clears every generation.
    times = [1_000, 1_010, 1_050, 1_090, 1_300, 1_330]
    batches = [(rng.integers(0, 5_000, size=3_000).astype(np.uint64), t) for t in times]
    expected = [whole.insert_if_absent(keys, np.full(len(keys), t)) for keys, t in batches]
    shards, flags = routed_window(config, batches, num_shards)
    for got, want in zip(flags, expected):
        np.testing.assert_array_equal(got, want)
    assert bulkbloom.concat(shards[::-1]).to_bytes() == whole.to_bytes()
    # (A split shard's records_seen differs from a routed one's: shard 0 takes the whole count.)
    assert bulkbloom.concat(bulkbloom.split(whole, num_shards)).to_bytes() == whole.to_bytes()
    assert bulkbloom.concat(bulkbloom.reshard(shards, 5)).to_bytes() == whole.to_bytes()


@pytest.mark.parametrize("num_shards", [1, 2, 3, 5, 16])
def test_sized_window_shards_given_the_window_keys_are_the_one_window(num_shards):
    """Shards of a shardable window size their generations per period as the window does, when
    every shard is given the whole window's keys (the sum of the shards' filter_keys()) and the
    window's sizing before each dump (docs/WINDOW.md "Sizing shards")."""
    rng = np.random.default_rng(9)
    config = bulkbloom.WindowConfig.for_event_time(20, 100, 0.01).shardable_by(240)
    assert config.block_multiple == 240 and config.generation.num_blocks % 240 == 0
    whole = bulkbloom.WindowedFilter.from_config(config)
    assert whole.config == config
    shards = [bulkbloom.WindowShard(config, i, num_shards) for i in range(num_shards)]
    assert all(shard.sizes_per_period for shard in shards)
    # Dumps of one time each, 40 apart (a period is 34): 10x more keys, then fewer.
    for day, count in enumerate([500, 5_000, 50_000, 800]):
        time = 1_000 + 40 * day
        keys = rng.integers(0, 4 * count, size=count).astype(np.uint64)
        window_keys = [sum(counts) for counts in zip(*(s.filter_keys() for s in shards))]
        whole.set_sizing(count)
        for shard in shards:
            shard.set_window_keys(window_keys)
            shard.set_sizing(count)
        want = whole.insert_if_absent(keys, np.full(count, time))
        owners = bulkbloom.shard_of(config.generation, keys, num_shards)
        flags = np.zeros(count, dtype=bool)
        for i, shard in enumerate(shards):
            where = np.flatnonzero(owners == i)
            flags[where] = shard.insert_if_absent(keys[where], np.full(len(where), time))
            shard.advance_to(time)
        np.testing.assert_array_equal(flags, want)
        assert bulkbloom.concat(shards).to_bytes() == whole.to_bytes()
    blocks = shards[0].filter_blocks()
    assert max(blocks) > config.generation.num_blocks and len(blocks) > config.generations
    assert all(b % num_shards == 0 for b in blocks)
    assert bulkbloom.concat(bulkbloom.split(whole, num_shards)).to_bytes() == whole.to_bytes()
    assert bulkbloom.concat(bulkbloom.reshard(shards, 16)).to_bytes() == whole.to_bytes()
    copy = pickle.loads(pickle.dumps(shards[-1]))
    assert (copy.filter_blocks(), copy.to_bytes()) == (shards[-1].filter_blocks(),
                                                       shards[-1].to_bytes())
    with pytest.raises(ValueError, match="one per filter_keys"):
        shards[0].set_window_keys([1, 2])
    with pytest.raises(ValueError, match="block multiple"):
        bulkbloom.split(whole, 7)


def test_window_shard_files_and_pickles(tmp_path):
    whole = bulkbloom.WindowedFilter.for_event_time(500, 60, 0.01)
    keys = np.arange(2_000, dtype=np.uint64)
    whole.insert_if_absent(keys, np.arange(2_000) // 20)
    for shard in bulkbloom.split(whole, 3):
        shard.keys_inserted, shard.metadata = 7, b"offset"
        shard.save(tmp_path / "w.bbw")
        for copy in (bulkbloom.WindowShard.load(tmp_path / "w.bbw"),
                     pickle.loads(pickle.dumps(shard))):
            assert copy.to_bytes() == shard.to_bytes()
            assert (copy.keys_inserted, copy.metadata) == (7, b"offset")
            assert (copy.index, copy.num_shards, copy.config) == (shard.index, 3, whole.config)
            assert (copy.clock_time, copy.rotations) == (whole.clock_time, whole.rotations)
    again = pickle.loads(pickle.dumps(whole))
    assert again.to_bytes() == whole.to_bytes()
    assert again.contains(keys).tolist() == whole.contains(keys).tolist()
    with pytest.raises(ValueError):
        bulkbloom.concat([bulkbloom.split(whole, 2)[0], bulkbloom.split(whole, 3)[1]])
    with pytest.raises(TypeError):
        bulkbloom.concat([bulkbloom.split(whole, 2)[0],
                          bulkbloom.FilterShard(whole.config.generation, 1, 2)])


def test_cli_info_describes_shard_files(cli, tmp_path):
    """`bulkbloom info` names a shard's place in the whole filter or window it is part of."""
    f = bulkbloom.Filter(50_000, 0.01)
    f.insert(np.arange(20_000, dtype=np.uint64))
    window = bulkbloom.WindowedFilter.for_event_time(500, 60, 0.01)
    window.insert_if_absent(np.arange(2_000, dtype=np.uint64), np.arange(2_000) // 20)
    for whole, name in ((f, "f.bbf"), (window, "w.bbw")):
        shard = bulkbloom.split(whole, 3)[2]
        shard.save(tmp_path / name)
        info = json.loads(run_cli(cli, "info", "--json", str(tmp_path / name)).stdout)
        assert (info["shard"], info["num_shards"]) == (2, 3), info
        assert info["blocks"] == "[%d, %d)" % shard.blocks, info
        assert info["kind"].endswith("shard"), info
