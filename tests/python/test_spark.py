"""bulkbloom.spark on a local Spark keeps exactly the records `bulkbloom dedup` keeps, with the same
filter layout and order, for any shard count and core count, also across dumps with a carried
filter, through task retries and failed jobs. Skipped only where Java is absent."""

import fcntl
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom
from conftest import run_cli

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java (Spark needs Java 17 or newer): apt-get install openjdk-17-jre-headless",
                allow_module_level=True)

from pyspark import TaskContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from bulkbloom import spark as bbspark  # noqa: E402

RECORDS = 24_000
FPR = 0.2  # so that false drops are many, and an answer out of order shows


@pytest.fixture(scope="module", params=["local[1,4]", "local[2,4]"])
def spark(request):
    """One Spark per core count (local[N,F]: N cores, a task may fail F - 1 times), one at a time."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(request.param)
        .appName("bulkbloom-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "3")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def dump(seed: int, count: int = RECORDS, old: np.ndarray = None) -> np.ndarray:
    """Keys with a quarter repeats (and, given `old`, some keys of an earlier dump)."""
    rng = np.random.default_rng(seed)
    fresh = rng.integers(0, 2**64, size=count * 3 // 4, dtype=np.uint64)
    repeats = rng.choice(fresh if old is None else np.concatenate([fresh, old]), count - len(fresh))
    keys = np.concatenate([fresh, repeats])
    rng.shuffle(keys)
    return keys


def frame(spark, keys: np.ndarray, first_seq: int = 0, shuffled: bool = False):
    """(event_id, seq, payload) records of `keys` in order, seq numbering them from first_seq;
    shuffled: the rows in another order, so that only `order="seq"` gives theirs."""
    seq = np.arange(first_seq, first_seq + len(keys), dtype=np.int64)
    table = pa.table({
        "event_id": keys.view(np.int64),
        "seq": seq,
        "payload": [f"p{s}" for s in seq],
    })
    if shuffled:
        table = table.take(np.random.default_rng(7).permutation(len(keys)))
    return spark.createDataFrame(table.to_pandas())


def cli_dedup(cli, tmp_path, name, keys, *args):
    """The keys `bulkbloom dedup` keeps, in order."""
    source = tmp_path / f"{name}.u64"
    out = tmp_path / f"{name}.out.u64"
    keys.astype("<u8").tofile(source)
    run_cli(cli, "dedup", str(source), "-o", str(out), "--stats", "none", *args)
    return np.fromfile(out, dtype="<u8")


def kept_records(keys: np.ndarray, kept_keys: np.ndarray, first_seq: int = 0) -> np.ndarray:
    """The seq of each kept key: a key is kept, if at all, at its first occurrence."""
    unique, first = np.unique(keys, return_index=True)
    at = np.searchsorted(unique, kept_keys)
    assert (unique[at] == kept_keys).all()
    return first[at] + first_seq


def spark_kept(df) -> tuple:
    table = df.toArrow().sort_by("seq")
    return (table.column("event_id").to_numpy().view(np.uint64), table.column("seq").to_numpy(),
            table.column("payload").to_pylist())


def assert_same_records(df, keys, cli_kept, first_seq=0):
    expected_seq = kept_records(keys, cli_kept, first_seq)
    got_keys, got_seq, payload = spark_kept(df)
    np.testing.assert_array_equal(got_keys, cli_kept)
    np.testing.assert_array_equal(got_seq, expected_seq)
    assert payload == [f"p{s}" for s in expected_seq]


def shards_filter(path) -> bulkbloom.Filter:
    state = bbspark.open_filter(path)
    return bulkbloom.concat(state.load(i) for i in range(state.num_shards))


def listing(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None
            for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("num_shards", [1, 3, 7])
def test_dedup_keeps_what_the_cli_keeps(spark, cli, tmp_path, num_shards):
    keys = dump(1)
    expected = cli_dedup(cli, tmp_path, "cli", keys, "--capacity", str(RECORDS), "--fpr", str(FPR),
                         "--filter", str(tmp_path / "cli.bbf"))
    layout = bulkbloom.Filter.load(tmp_path / "cli.bbf").layout
    assert RECORDS * 3 // 4 - len(expected) > 20  # false drops, which the order decides

    df = frame(spark, keys, shuffled=True)
    unique = bbspark.dedup(df, "event_id", order="seq", layout=layout, num_shards=num_shards,
                           filter=tmp_path / "f")
    assert unique.columns == df.columns
    assert_same_records(unique, keys, expected)
    state = bbspark.open_filter(tmp_path / "f")
    assert state.num_shards == num_shards and state.layout == layout
    # The input's own order when no order is given (createDataFrame keeps it).
    in_order = bbspark.dedup(frame(spark, keys), "event_id", layout=layout, num_shards=num_shards)
    assert_same_records(in_order, keys, expected)


def test_string_keys_as_the_clis_text_keys(spark, cli, tmp_path):
    rng = np.random.default_rng(11)
    words = np.array([f"user-{i}" for i in rng.integers(0, 12_000, size=RECORDS)])
    source = tmp_path / "words.csv"
    source.write_text("".join(f"{w},{i}\n" for i, w in enumerate(words)))
    run_cli(cli, "dedup", "-f", "csv:1", str(source), "-o", str(tmp_path / "out.csv"),
            "--capacity", str(RECORDS), "--fpr", str(FPR), "--filter", str(tmp_path / "F.bbf"))
    expected = [line.split(",") for line in (tmp_path / "out.csv").read_text().splitlines()]
    layout = bulkbloom.Filter.load(tmp_path / "F.bbf").layout

    df = spark.createDataFrame(pa.table({"word": words, "seq": np.arange(RECORDS)}).to_pandas())
    unique = bbspark.dedup(df, "word", layout=layout, num_shards=3).toArrow().sort_by("seq")
    assert list(zip(unique.column("word").to_pylist(), unique.column("seq").to_pylist())) == [
        (w, int(s)) for w, s in expected
    ]


def cli_two_dumps(cli, tmp_path, first, second):
    """What `bulkbloom dedup --filter F` keeps of two dumps, and F after both."""
    cli_filter = tmp_path / "cli.bbf"
    cli_args = ("--fpr", str(FPR), "--filter", str(cli_filter))
    # Sized for both dumps' records, so that it never grows a second generation.
    kept_first = cli_dedup(cli, tmp_path, "d1", first, "--capacity", str(2 * RECORDS), *cli_args)
    kept_second = cli_dedup(cli, tmp_path, "d2", second, *cli_args)
    return kept_first, kept_second, bulkbloom.Filter.load(cli_filter)


def test_a_carried_filter_is_the_clis_across_two_dumps(spark, cli, tmp_path):
    first = dump(2)
    second = dump(3, old=first)
    kept_first, kept_second, cli_bits = cli_two_dumps(cli, tmp_path, first, second)

    path = tmp_path / "filter"
    df1 = frame(spark, first)
    assert_same_records(bbspark.dedup(df1, "event_id", filter=path, layout=cli_bits.layout,
                                      num_shards=3), first, kept_first)
    df2 = frame(spark, second, first_seq=RECORDS)
    assert_same_records(bbspark.dedup(df2, "event_id", filter=path), second, kept_second,
                        RECORDS)
    ours = shards_filter(path)
    ours.keys_inserted, ours.metadata = cli_bits.keys_inserted, cli_bits.metadata
    assert ours.to_bytes() == cli_bits.to_bytes()
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "LOCK", "gen-000001",
                                                      "gen-000002"]


def test_a_retried_task_gives_the_exact_result(spark, cli, tmp_path):
    first = dump(4)
    second = dump(5, old=first)
    _, kept_second, cli_bits = cli_two_dumps(cli, tmp_path, first, second)

    def fail_first_attempt():
        # After the attempt saved its shard: the retry must start from the shard as it was.
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("the first attempt of every shard task fails")

    path = tmp_path / "filter"
    bbspark.dedup(frame(spark, first), "event_id", filter=path, layout=cli_bits.layout,
                  num_shards=3)
    unique = bbspark.dedup(frame(spark, second, RECORDS), "event_id", filter=path,
                           _on_task=fail_first_attempt)
    assert_same_records(unique, second, kept_second, RECORDS)
    state = bbspark.open_filter(path)
    assert sorted(p.name for p in state.directory.iterdir()) == sorted(
        ["manifest.json"] + [f"shard-{i:05d}.bbf" for i in range(3)]
        + [f"drops-{i:05d}.npy" for i in range(3)]
    )
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "LOCK", "gen-000001",
                                                      "gen-000002"]


def test_a_failed_job_leaves_the_filter_as_it_was(spark, tmp_path):
    def always_fail():
        raise RuntimeError("every attempt fails")

    path = tmp_path / "filter"
    first = dump(6)
    bbspark.dedup(frame(spark, first), "event_id", filter=path, capacity=RECORDS, num_shards=3)
    before = listing(path)
    with pytest.raises(Exception, match="every attempt fails"):
        bbspark.dedup(frame(spark, dump(7)), "event_id", filter=path, _on_task=always_fail)
    assert listing(path) == before


def test_a_second_job_on_a_held_filter_stops(spark, tmp_path):
    path = tmp_path / "filter"
    path.mkdir()
    with open(path / "LOCK", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another job"):
            bbspark.dedup(frame(spark, dump(8, 100)), "event_id", filter=path, capacity=100)
    assert not (path / "CURRENT").exists()


def test_build_and_query(spark, tmp_path):
    keys = dump(9)
    probes = dump(10, old=keys)
    path = bbspark.build(frame(spark, keys), "event_id", tmp_path / "built", capacity=RECORDS,
                         fpr=0.01, num_shards=7)
    whole = bulkbloom.Filter.from_layout(*bulkbloom.Layout.for_capacity(RECORDS, 0.01)[:2])
    whole.insert(keys)
    ours = shards_filter(path)
    ours.keys_inserted = whole.keys_inserted = 0
    assert ours.to_bytes() == whole.to_bytes()

    answered = bbspark.query(frame(spark, probes), "event_id", path).toArrow().sort_by("seq")
    np.testing.assert_array_equal(answered.column("maybe_present").to_numpy(),
                                  whole.contains(probes))
    with pytest.raises(ValueError, match="integer keys"):
        bbspark.query(spark.createDataFrame([("a",)], ["word"]), "word", path)


def test_the_default_shards_bound_the_rows_of_a_shard(spark, tmp_path):
    # 17M rows asked for, in a filter far below 128 MiB, on 3 cores: 5 shards of at most 4M.
    path = bbspark.build(frame(spark, dump(13, 100)), "event_id", tmp_path / "many",
                         capacity=17_000_000, fpr=FPR)
    assert bbspark.open_filter(path).num_shards == 5


def test_a_window_carried_across_dumps_is_the_clis(spark, cli, tmp_path):
    start = 1_700_000_000
    rng = np.random.default_rng(12)
    cli_window = tmp_path / "cli.bbw"
    path = tmp_path / "window"
    seq = 0
    # Daily dumps under a 36 h window: a key comes back within it (dropped) or after it
    # (kept again); the last dump is so small that most of the 7 shards get no record, and
    # their clocks must still move.
    for day, count in enumerate([6_000, 6_000, 6_000, 3]):
        time = start + day * 86_400
        keys = [str(k) for k in rng.integers(0, 9_000, size=count)]
        source = tmp_path / f"day{day}.csv"
        source.write_text("".join(f"{k},{seq + i},{time}\n" for i, k in enumerate(keys)))
        out = tmp_path / f"day{day}.out.csv"
        sizing = ("--capacity", "12000", "--fpr", str(FPR)) if day == 0 else ()
        run_cli(cli, "dedup", "-f", "csv:1", str(source), "-o", str(out), "--window", "36h",
                "--time-field", "3", "--filter", str(cli_window), "--stats", "none", *sizing)
        expected = [(k, int(s)) for k, s, _ in
                    (line.split(",") for line in out.read_text().splitlines())]
        config = bulkbloom.WindowedFilter.load(cli_window).config

        df = spark.createDataFrame(
            pa.table({"word": keys, "seq": np.arange(seq, seq + count)}).to_pandas())
        unique = bbspark.dedup(df, "word", filter=path, time=time, num_shards=7,
                               window_config=config if day == 0 else None,
                               window=None if day == 0 else 36 * 3600)
        got = unique.toArrow().sort_by("seq")
        assert list(zip(got.column("word").to_pylist(), got.column("seq").to_pylist())) == \
            expected, day
        seq += count
    state = bbspark.open_filter(path)
    assert state.window == config
    ours = bulkbloom.concat(state.load(i) for i in range(7))
    theirs = bulkbloom.WindowedFilter.load(cli_window)
    ours.keys_inserted, ours.metadata = theirs.keys_inserted, theirs.metadata
    ours.save(tmp_path / "ours.bbw")
    assert (tmp_path / "ours.bbw").read_bytes() == cli_window.read_bytes()
