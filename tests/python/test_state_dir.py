"""save_dir / load_dir: windows, window shards and grown filters kept in a state directory
(docs/FORMAT.md "State directories"), as `bulkbloom dedup --filter DIR/` keeps them. A load gives
the bytes that save() would have written, every kind; an ingestion loop saving every batch writes
what the batch changed, not the state; bulkbloom.load opens a directory as its kind; a damaged
directory is named in the error."""

import os

import numpy as np
import pytest

import bulkbloom


def batches(seed, count, size):
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64, size=count * size // 2, dtype=np.uint64)
    for _ in range(count):
        yield rng.choice(pool, size=size)  # half of each batch repeats earlier keys


def window_by_records():
    return bulkbloom.WindowedFilter.for_records(40_000, 0.01, generations=4)


def window_by_time():
    return bulkbloom.WindowedFilter.for_event_time(20, 1_000, 0.01, generations=3)


def grown_filter():
    return bulkbloom.GrownFilter(5_000, 0.01)  # grows a generation within the loop


def window_shard():
    # The last shard of 3: its own blocks, the whole window's records clock.
    return bulkbloom.split(window_by_records(), 3)[2]


def feed(state, keys, step):
    if isinstance(state, bulkbloom.WindowShard):
        # The shard's keys of the whole window's batch, each at its place in the whole stream.
        clocks = np.arange(step * len(keys), (step + 1) * len(keys), dtype=np.int64)
        mine = bulkbloom.shard_of(state.config.generation, keys, state.num_shards) == state.index
        state.insert_if_absent(keys[mine], clocks[mine])
    elif isinstance(state, bulkbloom.WindowedFilter) and state.config.clock == "event_time":
        state.insert_if_absent(keys, np.full(len(keys), 50 * step, dtype=np.int64))
    else:
        state.insert_if_absent(keys)
    state.metadata = b"after batch %d" % step


KINDS = {
    "window by records": window_by_records,
    "window by event time": window_by_time,
    "grown filter": grown_filter,
    "window shard": window_shard,
}


@pytest.mark.parametrize("kind", KINDS)
def test_every_save_loads_as_the_file_save_writes(kind, tmp_path):
    state = KINDS[kind]()
    directory = tmp_path / "state"
    for step, keys in enumerate(batches(7, 12, 2_000)):
        feed(state, keys, step)
        state.save_dir(directory)
        loaded = type(state).load_dir(directory)
        assert loaded.to_bytes() == state.to_bytes(), f"{kind}: batch {step}"
        assert loaded.metadata == state.metadata
    state.save(tmp_path / "state.file")
    assert type(state).load_dir(directory).to_bytes() == (tmp_path / "state.file").read_bytes()
    if isinstance(state, bulkbloom.GrownFilter):
        assert len(state.generations) > 1, "the filter never grew: its sealed part is untested"
    # A loaded state goes on saving into its directory, as a loop restarted from it does.
    resumed = type(state).load_dir(directory)
    feed(resumed, next(batches(8, 1, 2_000)), 99)
    feed(state, next(batches(8, 1, 2_000)), 99)
    resumed.save_dir(directory)
    assert type(state).load_dir(directory).to_bytes() == state.to_bytes()


@pytest.mark.parametrize("make", [
    lambda: bulkbloom.WindowedFilter.for_records(400_000, 0.01, generations=4),
    lambda: bulkbloom.GrownFilter(200_000, 0.01),
], ids=["window", "grown filter"])
def test_a_small_batch_writes_what_it_changed(make, tmp_path):
    """Saves after small batches write their new keys' log (8 bytes each) and a manifest: a far
    smaller part of the state than save() rewrites."""
    state = make()
    directory = tmp_path / "state"
    feed(state, next(batches(3, 1, 8_000)), 0)
    first = state.save_dir(directory)
    # The first save writes the bits the batch set: the open generation whole (an empty one
    # has no file).
    assert first >= len(state.to_bytes()) // 8, first
    for step, keys in enumerate(batches(4, 5, 100), start=1):
        feed(state, keys, step)
        written = state.save_dir(directory)
        assert written < len(state.to_bytes()) // 20, (step, written, len(state.to_bytes()))
        assert written > 8 * 50, "a save with new keys wrote no log"


def test_load_opens_a_state_directory_as_its_kind(tmp_path):
    for kind, make in KINDS.items():
        state = make()
        feed(state, next(batches(5, 1, 1_000)), 0)
        directory = tmp_path / kind.replace(" ", "_")
        state.save_dir(directory)
        opened = bulkbloom.load(directory)
        assert type(opened) is type(state), kind
        assert opened.to_bytes() == state.to_bytes(), kind


def test_a_damaged_directory_is_named(tmp_path):
    state = window_by_records()
    feed(state, next(batches(6, 1, 5_000)), 0)
    directory = tmp_path / "state"
    state.save_dir(directory)
    manifest = directory / "MANIFEST"
    good = manifest.read_bytes()
    manifest.write_bytes(good[:-3] + bytes([good[-3] ^ 1]) + good[-2:])
    with pytest.raises(bulkbloom.FormatError, match=r"state/MANIFEST.*corrupt"):
        bulkbloom.WindowedFilter.load_dir(directory)
    manifest.write_bytes(good)
    part = next(name for name in os.listdir(directory) if name.endswith((".part", ".base")))
    (directory / part).write_bytes(b"\0" * (directory / part).stat().st_size)
    with pytest.raises(bulkbloom.FormatError, match=part + ".*checksum"):
        bulkbloom.load(directory)
    with pytest.raises(bulkbloom.FormatError, match="holds a window, not a grown filter"):
        bulkbloom.GrownFilter.load_dir(directory)
    with pytest.raises(FileNotFoundError):
        bulkbloom.WindowedFilter.load_dir(tmp_path / "missing")


def test_a_sealed_generation_is_not_written_again(tmp_path):
    """A grown filter saved after every batch through its growths: each generation it seals keeps
    the base and logs the directory held, completed by its final log, so no save writes a sealed
    generation's bits (a `.part` file), and every save loads as the filter."""
    state = bulkbloom.GrownFilter(1_000, 0.01)
    directory = tmp_path / "state"
    for step, keys in enumerate(batches(11, 60, 1_000)):
        feed(state, keys, step)
        state.save_dir(directory)
        written = sorted(name for name in os.listdir(directory) if name.endswith(".part"))
        assert not written, (step, written)
        if step % 10 == 9:  # a loop restarted from the directory
            state = bulkbloom.GrownFilter.load_dir(directory)
    assert len(state.generations) >= 4, "fewer than three generations sealed"
    assert bulkbloom.GrownFilter.load_dir(directory).to_bytes() == state.to_bytes()


@pytest.mark.parametrize("kind", KINDS)
def test_a_relative_directory_after_chdir_gets_every_file(kind, tmp_path, monkeypatch):
    """save_dir("state") in one working directory, then in another: the second "state" is a new
    directory and must get the whole state, not a manifest naming the first one's files."""
    state = KINDS[kind]()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    steps = batches(11, 12, 4_000)
    monkeypatch.chdir(tmp_path / "a")
    for step in range(8):  # seals generations, kept as files of a/state
        feed(state, next(steps), step)
        state.save_dir("state")
    monkeypatch.chdir(tmp_path / "b")
    for step in range(8, 12):
        feed(state, next(steps), step)
        state.save_dir("state")
    loaded = bulkbloom.load(tmp_path / "b" / "state")
    assert loaded.to_bytes() == state.to_bytes()
