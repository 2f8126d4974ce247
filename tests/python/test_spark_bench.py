"""bench/spark/run_bench.py's expected false drops, without Spark: a window run's is the library's
own figure, which the manifest records, never the one-filter model of the window's layout (#34:
32,072 expected where 83 were measured); and the spread a run's false drops have about it."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import bulkbloom

pytest.importorskip("pyspark")

from bulkbloom.spark import _store  # noqa: E402
from bulkbloom.spark._windows import _prepare_window_shard, _WindowSizing  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("run_bench", REPO / "bench/spark/run_bench.py")
run_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_bench)

ROWS, DISTINCT, SHARDS, TIME = 40_000, 36_000, 3, 1_700_000_000


def keys() -> np.ndarray:
    rng = np.random.default_rng(34)
    firsts = rng.integers(0, 2**63, size=DISTINCT, dtype=np.uint64)
    return rng.permutation(np.concatenate([firsts, rng.choice(firsts, ROWS - DISTINCT)]))


def committed(path: Path, shards: list, layout: bulkbloom.Layout, window) -> _store.ShardedFilter:
    """`shards` (after their run) committed as a new sharded filter directory at `path`, with the
    rows their tasks hand in (bulkbloom.spark._plan._decide_shards)."""
    store = _store._store_of(path)
    number, directory = _store._new_generation(None)
    store.mkdirs(directory)
    rows = []
    for index, shard in enumerate(shards):
        attempt = store.local / directory / f"shard-{index:05d}.attempt"
        shard.save(attempt)
        rows.append({
            "shard": index, "shard_file": str(attempt), "shard_bytes": None,
            "filter_keys": shard.filter_keys() if window is not None else [],
            "expected_false_drops": shard.expected_false_drops if window is not None else None,
        })
    staged = _store._stage(store, None, None, directory, number, rows, layout, window,
                           None if window is None else TIME, SHARDS,
                           {"keys": "integer", "capacity": None, "fpr": 0.001, "dropped": 0})
    _store._publish(staged)
    return _store.open_filter(path)


def test_a_window_runs_expected_false_drops_are_its_shards_own(tmp_path):
    # A new window as dedup_and_write makes one: sized from the run's rows per period, each shard
    # then sizing its generation for every row of the run.
    config = bulkbloom.WindowConfig.for_event_time(ROWS / 86_400, 86_400, 0.001).shardable_by(
        SHARDS)
    shards = [bulkbloom.WindowShard(config, index, SHARDS, backend="cpu")
              for index in range(SHARDS)]
    all_keys = keys()
    shard_of = bulkbloom.shard_of(config.generation, all_keys, SHARDS)
    for index, shard in enumerate(shards):
        _prepare_window_shard(shard, _WindowSizing(None, ROWS))
        part = all_keys[shard_of == index]
        shard.insert_if_absent(part, np.full(len(part), TIME, dtype=np.int64))
    own = sum(shard.expected_false_drops for shard in shards)
    state = committed(tmp_path / "window", shards, config.generation, config)
    assert state.expected_false_drops == pytest.approx(own)
    assert run_bench.expected_false_drops(state, DISTINCT) == pytest.approx(own)
    # The one-filter model takes the layout of one generation, sized for a period's rows, as if
    # it held every key: far more (32,072 against 90 at 5M rows).
    assert run_bench.filter_expected_false_drops(state.layout, DISTINCT) > 10 * own


def test_a_filter_runs_expected_false_drops_are_the_model(tmp_path):
    layout = bulkbloom.Layout.for_capacity(ROWS, 0.001)
    shards = [bulkbloom.FilterShard(layout, index, SHARDS, backend="cpu")
              for index in range(SHARDS)]
    state = committed(tmp_path / "filter", shards, layout, None)
    assert state.expected_false_drops is None
    assert run_bench.expected_false_drops(state, DISTINCT) == pytest.approx(
        run_bench.filter_expected_false_drops(layout, DISTINCT))


def test_a_runs_false_drops_spread_about_the_model_by_the_root_of_it():
    # 200 runs of DISTINCT keys each, as many dumps: the counts centre on the model's integral
    # and spread by about sqrt(expected), so the sigmas run_bench reports have mean 0 and a
    # deviation a little under 1 (0.88 here; a Poisson count's would be 1).
    layout = bulkbloom.Layout.for_capacity(ROWS, 0.02)
    expected = run_bench.filter_expected_false_drops(layout, DISTINCT)
    rng = np.random.default_rng(340)
    sigmas = []
    for _ in range(200):
        firsts = rng.integers(0, 2**63, size=DISTINCT, dtype=np.uint64)
        dedup = bulkbloom.Filter.from_layout(layout.shape, layout.num_blocks, layout.seed,
                                             layout.hash, layout.index)
        drops = DISTINCT - int(np.count_nonzero(dedup.insert_if_absent(firsts)))
        sigmas.append(run_bench.false_drops_sigmas(drops, expected))
    assert 60 < expected < 90
    # Each bound is 5 of its own spreads away: 1/sqrt(200) for the mean, 0.05 for the deviation.
    print(f"expected {expected:.1f}: sigmas' mean {np.mean(sigmas):+.3f}, "
          f"deviation {np.std(sigmas):.3f}")
    assert abs(np.mean(sigmas)) < 0.36
    assert 0.7 < np.std(sigmas) < 1.25
