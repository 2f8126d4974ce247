"""The grown filter the command line carries across runs, read from Python: bulkbloom.load opens
every file kind the CLI writes, a CLI-grown filter answers as `bulkbloom query` does, and a
filter saved by Python's Filter(n, p) is held by the CLI to p at n keys."""

import json
import pickle

import numpy as np
import pytest

import bulkbloom
from conftest import run_cli


def write_u64(path, keys):
    np.asarray(keys, dtype="<u8").tofile(path)
    return str(path)


def dedup_stats(cli, *args):
    stderr = run_cli(cli, "dedup", *args, "--stats", "json").stderr
    return json.loads(stderr.strip().splitlines()[-1])


def test_load_opens_a_cli_grown_filter_and_answers_as_query(cli, tmp_path):
    rng = np.random.default_rng(40)
    day1, day2, never = (rng.integers(0, 2**64, size=n, dtype=np.uint64)
                         for n in (20_000, 60_000, 30_000))
    grown = tmp_path / "f.bbf"
    # Day 1 fits the filter's capacity; day 2's new keys do not, so it grows a generation.
    first = dedup_stats(cli, write_u64(tmp_path / "day1.u64", day1), "-o", str(tmp_path / "o1"),
                        "--filter", str(grown), "--capacity", "20000", "--fpr", "0.01")
    second = dedup_stats(cli, write_u64(tmp_path / "day2.u64", day2), "-o", str(tmp_path / "o2"),
                         "--filter", str(grown))
    assert first["generations"] == 1 and second["generations"] >= 2, (first, second)
    with pytest.raises(bulkbloom.FormatError, match="grown filter.*bulkbloom.GrownFilter.load"):
        bulkbloom.Filter.load(grown)

    f = bulkbloom.load(grown)
    assert isinstance(f, bulkbloom.GrownFilter)
    assert len(f.generations) == second["generations"] and f.promised_fpr == 0.01
    assert f.key_format == "u64" and f.capacity == 20_000

    probes = np.concatenate([day1, day2, never])
    run_cli(cli, "query", "--filter", str(grown), write_u64(tmp_path / "probes.u64", probes),
            "-o", str(tmp_path / "seen.u64"), "--stats", "none")
    seen = set(np.fromfile(tmp_path / "seen.u64", dtype="<u8").tolist())
    expected = np.array([k in seen for k in probes.tolist()])
    answers = f.contains(probes)
    assert (answers == expected).all()
    assert answers[: len(day1) + len(day2)].all()  # every key of both days is present
    assert answers[-len(never):].sum() < len(never) * 0.02  # never-seen keys mostly absent
    assert int(day2[0]) in f
    assert all((int(k) in f) == e for k, e in zip(never[:50], expected[-len(never):]))

    # Python goes on where the CLI stopped: the same file back, and pickling keeps it.
    f.save(tmp_path / "again.bbf")
    assert (tmp_path / "again.bbf").read_bytes() == grown.read_bytes()
    assert pickle.loads(pickle.dumps(f)).to_bytes() == f.to_bytes()
    assert not f.insert_if_absent(day1).any() and f.insert_if_absent(never[:1]).all()


def test_load_opens_every_kind_the_cli_writes(cli, tmp_path):
    keys = np.arange(5000, dtype=np.uint64)
    keys_file = write_u64(tmp_path / "k.u64", keys)
    run_cli(cli, "build", keys_file, "-o", str(tmp_path / "plain.bbf"), "--stats", "none")
    assert isinstance(bulkbloom.load(tmp_path / "plain.bbf"), bulkbloom.Filter)

    window = bulkbloom.WindowedFilter.for_records(1000, 0.01)
    window.insert_if_absent(keys)
    window.save(tmp_path / "w.bbw")
    loaded = bulkbloom.load(tmp_path / "w.bbw")
    assert isinstance(loaded, bulkbloom.WindowedFilter)
    assert loaded.to_bytes() == window.to_bytes()
    shards = bulkbloom.split(window, 3)
    shards[1].save(tmp_path / "w1.bbw")
    assert isinstance(bulkbloom.load(tmp_path / "w1.bbw"), bulkbloom.WindowShard)
    shard = bulkbloom.split(bulkbloom.load(tmp_path / "plain.bbf"), 2)[1]
    shard.save(tmp_path / "s1.bbf")
    assert isinstance(bulkbloom.load(tmp_path / "s1.bbf"), bulkbloom.FilterShard)

    (tmp_path / "junk").write_bytes(b"not a filter at all")
    with pytest.raises(bulkbloom.FormatError, match="not a file bulkbloom writes"):
        bulkbloom.load(tmp_path / "junk")
    with pytest.raises(bulkbloom.FormatError, match="it is a bulkbloom window file"):
        bulkbloom.Filter.load(tmp_path / "w.bbw")


def test_grown_filter_made_in_python_grows_and_round_trips(tmp_path):
    f = bulkbloom.GrownFilter(1000, 0.01, key_format="lines")
    words = [f"w{i}" for i in range(20_000)]
    fresh = sum(int(f.insert_if_absent(words[at:at + 2000]).sum())
                for at in range(0, 20_000, 2000))
    assert fresh > 20_000 * 0.99 and fresh == f.keys_inserted  # only false positives are lost
    assert len(f.generations) > 1 and f.current_fpr() <= 0.01
    assert f.contains(words).all() and "w7" in f and "never" not in f
    f.metadata = b"offset=9"
    f.save(tmp_path / "g.bbf")
    g = bulkbloom.GrownFilter.load(tmp_path / "g.bbf")
    assert g.metadata == b"offset=9" and g.to_bytes() == f.to_bytes()
    assert not g.insert_if_absent(words).any()


def test_the_cli_holds_a_python_filter_to_its_capacity_and_rate(cli, tmp_path):
    """Filter(1e6, 0.01) saved from Python records its sizing: the CLI takes it as promising 0.01
    at 1e6 keys and does not grow while the keys stay within that (without the record it took
    the default 0.001 and grew at once), and counts the keys it already holds from its bits."""
    rng = np.random.default_rng(41)
    keys = rng.integers(0, 2**64, size=1_300_000, dtype=np.uint64)
    f = bulkbloom.Filter(1_000_000, 0.01)
    f.insert(keys[:600_000])
    f.save(tmp_path / "py.bbf")
    run_cli(cli, "build", write_u64(tmp_path / "all.u64", keys[:1_000_000]), "-o",
            str(tmp_path / "cli.bbf"), "--capacity", "1M", "--fpr", "0.01", "--stats", "none")
    assert f.layout == bulkbloom.Filter.load(tmp_path / "cli.bbf").layout  # one sizing rule

    info = json.loads(run_cli(cli, "info", "--json", str(tmp_path / "py.bbf")).stdout)
    assert info["promised_fpr"] == 0.01 and info["capacity"] == 1_000_000
    # 400,000 new keys and 100,000 repeats: 1e6 keys in all, as promised.
    day = np.concatenate([keys[600_000:1_000_000], keys[:100_000]])
    stats = dedup_stats(cli, write_u64(tmp_path / "day.u64", day), "-o", str(tmp_path / "out"),
                        "--filter", str(tmp_path / "py.bbf"), "--on-full", "error")
    assert stats["promised_fpr"] == 0.01 and stats["generations"] == 1, stats
    # Past the capacity it grows (the 600,000 keys Python inserted count, unsaved count or not).
    stats = dedup_stats(cli, write_u64(tmp_path / "more.u64", keys[1_000_000:]), "-o",
                        str(tmp_path / "out2"), "--filter", str(tmp_path / "py.bbf"))
    assert stats["generations"] == 2, stats


def test_update_and_truth_as_a_set():
    g = bulkbloom.GrownFilter(1_000, 0.01)
    assert not g
    g.update([1, 2, 3], np.array([4, 5], dtype=np.uint64), (k for k in ["a", "b"]))
    assert g and all(k in g for k in [1, 2, 3, 4, 5, "a", "b"])
