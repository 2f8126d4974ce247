"""bulkbloom.spark checks its input instead of trusting it: an input that would read differently
the second time is checkpointed (or refused), and what it cannot dedup is said up front. Skipped
only where Java is absent."""

import logging
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bulkbloom
from conftest import local_spark, run_cli

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java (Spark needs Java 17 or newer): apt-get install openjdk-17-jre-headless",
                allow_module_level=True)

from pyspark.sql import functions as F  # noqa: E402

from bulkbloom import spark as bbspark  # noqa: E402

ROWS = 20_000
FPR = 0.2  # so that false drops are many, and an answer out of order shows


@pytest.fixture(scope="module")
def spark():
    session = local_spark("local[2]", "bulkbloom-input-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """ROWS (event_id, seq) records in 4 Parquet files, a quarter of them repeats; their keys."""
    rng = np.random.default_rng(21)
    fresh = rng.integers(0, 2**63, size=ROWS * 3 // 4, dtype=np.int64)
    keys = np.concatenate([fresh, rng.choice(fresh, ROWS - len(fresh))])
    rng.shuffle(keys)
    table = pa.table({"event_id": keys, "seq": np.arange(ROWS, dtype=np.int64)})
    path = tmp_path_factory.mktemp("dump")
    for part, rows in enumerate(np.array_split(np.arange(ROWS), 4)):
        pq.write_table(table.take(rows), path / f"part-{part}.parquet")
    return path, keys


def cli_kept_seq(cli, tmp_path, keys, *args):
    """The seq (position) of each record `bulkbloom dedup` keeps of `keys`, and its layout."""
    source, out = tmp_path / "keys.u64", tmp_path / "kept.u64"
    keys.astype("<i8").tofile(source)
    run_cli(cli, "dedup", str(source), "-o", str(out), "--stats", "none", "--filter",
            str(tmp_path / "cli.bbf"), *args)
    kept = np.fromfile(out, dtype="<i8")
    unique, first = np.unique(keys, return_index=True)
    return sorted(first[np.searchsorted(unique, kept)].tolist()), \
        bulkbloom.Filter.load(tmp_path / "cli.bbf").layout


def kept_seq(df) -> list:
    return sorted(df.select("seq").toArrow().column(0).to_pylist())


def test_an_input_that_reads_differently_is_checkpointed(spark, cli, tmp_path, dump, caplog):
    """Row ids number the routing's read and the filtering's alike only when both read the same
    rows in the same partitions and order. After repartition(8) or a shuffle by rand() they did
    not: repeats were kept and first occurrences dropped, with a plausible row count."""
    path, keys = dump
    expected, layout = cli_kept_seq(cli, tmp_path, keys, "--capacity", str(ROWS), "--fpr",
                                    str(FPR), "--seed", str(bbspark.SPARK_SEED))
    df = spark.read.parquet(str(path))
    with caplog.at_level(logging.WARNING, logger="bulkbloom.spark"):
        unique = bbspark.dedup(df, "event_id", order="seq", layout=layout, fpr=FPR)
        assert kept_seq(unique) == expected
        assert not caplog.records  # a file source is read alike each time
        for unstable in (df.repartition(8),
                         df.withColumn("r", F.rand()).repartition(8, "r").drop("r")):
            unique = bbspark.dedup(unstable, "event_id", order="seq", layout=layout, fpr=FPR,
                                   num_shards=3)
            assert kept_seq(unique) == expected
            assert "local checkpoint" in caplog.records[-1].getMessage()
    with pytest.raises(ValueError, match="a shuffle"):
        bbspark.dedup(df.repartition(8), "event_id", unstable_input="error")
    with pytest.raises(ValueError, match="non-deterministic expression.*rand"):
        bbspark.dedup(df.withColumn("r", F.rand()), "event_id", unstable_input="error")


@pytest.mark.parametrize("seed", [bbspark.SPARK_SEED, 0], ids=["sql-routing", "arrow-routing"])
def test_null_keys_follow_the_nulls_policy(spark, seed):
    """Null keys are no key: kept, dropped, or (the default) an error naming the column that
    stops the job as it reads them, not a stack trace after the shuffle."""
    rows = [("a", 0), (None, 1), ("a", 2), (None, 3), ("b", 4), ("b", 5), (None, 6)]
    df = spark.createDataFrame(rows, "word string, seq long")
    layout = bulkbloom.Layout.of("sb512", 64, seed)
    for nulls, expected in (("keep", [0, 1, 3, 4, 6]), ("drop", [0, 4])):
        unique = bbspark.dedup(df, "word", order="seq", layout=layout, num_shards=2, nulls=nulls)
        assert kept_seq(unique) == expected, nulls
    with pytest.raises(Exception, match="key column 'word' is null in a record; pass nulls="):
        bbspark.dedup(df, "word", order="seq", layout=layout, num_shards=2)
    with pytest.raises(ValueError, match="nulls 'skip' is not"):
        bbspark.dedup(df, "word", nulls="skip")


def test_a_descending_order_keeps_the_last_occurrence(spark, cli, tmp_path, dump):
    """order=F.col("seq").desc() keeps what the CLI keeps of the records read last to first."""
    path, keys = dump
    reversed_kept, layout = cli_kept_seq(cli, tmp_path, keys[::-1].copy(), "--capacity",
                                         str(ROWS), "--fpr", str(FPR), "--seed",
                                         str(bbspark.SPARK_SEED))
    expected = sorted(ROWS - 1 - position for position in reversed_kept)
    df = spark.read.parquet(str(path))
    unique = bbspark.dedup(df, "event_id", order=F.col("seq").desc(), layout=layout, fpr=FPR,
                           num_shards=3)
    assert kept_seq(unique) == expected


def test_a_spark_connect_session_is_refused_up_front(tmp_path):
    """Spark Connect's client has no driver JVM (its plans, its filesystems) to work with."""
    from pyspark.errors import PySparkAttributeError

    class ConnectSession:  # as pyspark.sql.connect.session.SparkSession answers
        def __getattr__(self, name):
            raise PySparkAttributeError(errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED",
                                        messageParameters={"attr_name": name})

    class ConnectFrame:
        sparkSession = ConnectSession()

    calls = [lambda: bbspark.dedup(ConnectFrame(), "key"),
             lambda: bbspark.dedup_and_write(ConnectFrame(), "key", tmp_path / "out",
                                             filter=tmp_path / "filter"),
             lambda: bbspark.build(ConnectFrame(), "key", tmp_path / "built")]
    for call in calls:
        with pytest.raises(RuntimeError, match="this is a Spark Connect session"):
            call()
    assert not any(tmp_path.iterdir())


def test_a_filter_uri_is_a_hadoop_filesystems_not_a_local_path(spark, tmp_path, monkeypatch):
    """hdfs:// or s3a:// is not taken for a relative path (./s3a:/...) and committed there: it is
    Hadoop's, which says what it lacks (here: the S3A jars, a namenode) before anything runs."""
    monkeypatch.chdir(tmp_path)
    df = spark.createDataFrame([(1,)], ["key"])
    for uri, error in (("s3a://bucket/filters/events", "S3AFileSystem not found"),
                       ("hdfs:///filters/events", "HDFS")):
        with pytest.raises(Exception, match=error):
            bbspark.dedup_and_write(df, "key", tmp_path / "out", filter=uri)
        with pytest.raises(Exception, match=error):
            bbspark.open_filter(uri, spark)
    assert not any(tmp_path.iterdir())
    # A file: URI is the local path.
    bbspark.build(df, "key", f"file://{tmp_path}/built", capacity=10)
    assert bbspark.open_filter(tmp_path / "built").num_shards >= 1
