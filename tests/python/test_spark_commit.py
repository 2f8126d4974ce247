"""bulkbloom.spark.dedup_and_write commits the filter only after the output: a write that fails
changes nothing, and a rerun after the driver is killed anywhere writes the output the run would
have written, with the filter as one uninterrupted run leaves it. Skipped only where Java is
absent."""

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SMALL_SPARK, local_spark

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java (Spark needs Java 17 or newer): apt-get install openjdk-17-jre-headless",
                allow_module_level=True)

from pyspark.sql import functions as F  # noqa: E402

import bulkbloom  # noqa: E402
from bulkbloom import spark as bbspark  # noqa: E402

ROWS = 20_000


@pytest.fixture(scope="module")
def spark():
    session = local_spark("local[2]", "bulkbloom-commit-tests")
    yield session
    session.stop()


def write_dump(path: Path, seed: int, old: np.ndarray = None) -> np.ndarray:
    """A dump of ROWS (event_id, seq, payload) records in 3 Parquet files, a quarter of them
    repeats (of `old` keys too); returns its keys."""
    rng = np.random.default_rng(seed)
    fresh = rng.integers(0, 2**63, size=ROWS * 3 // 4, dtype=np.int64)
    pool = fresh if old is None else np.concatenate([fresh, old])
    keys = np.concatenate([fresh, rng.choice(pool, ROWS - len(fresh))])
    rng.shuffle(keys)
    seq = np.arange(seed * ROWS, (seed + 1) * ROWS, dtype=np.int64)
    table = pa.table({"event_id": keys, "seq": seq, "payload": [f"p{s}" for s in seq]})
    path.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(ROWS), 3)):
        pq.write_table(table.take(rows), path / f"part-{part}.parquet")
    return keys


def records(spark, path: Path) -> list:
    table = spark.read.parquet(str(path)).toArrow().sort_by("seq")
    return list(zip(*(table.column(name).to_pylist() for name in ("event_id", "seq", "payload"))))


def listing(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None
            for p in sorted(path.rglob("*"))}


def entries(path: Path) -> list:
    """The filter directory's entries, a generation's directory without its run's suffix."""
    return sorted(re.sub(r"^(gen-\d+)-[0-9a-f]+$", r"\1", p.name) for p in path.iterdir())


def pending(path: Path) -> list:
    return list(path.glob("PENDING-*.json"))


def shards(path: Path) -> list:
    state = bbspark.open_filter(path)
    return [state.shard_path(i).read_bytes() for i in range(state.num_shards)]


@pytest.fixture
def two_days(spark, tmp_path):
    """Day 1 written through the filter, and day 2's input; with what an uninterrupted day 2
    writes and leaves in a copy of the filter."""
    day1 = write_dump(tmp_path / "in1", 1)
    write_dump(tmp_path / "in2", 2, old=day1)
    path = tmp_path / "filter"
    options = dict(key="event_id", order="seq", num_shards=3)
    bbspark.dedup_and_write(spark.read.parquet(str(tmp_path / "in1")), path=tmp_path / "out1",
                            filter=path, capacity=2 * ROWS, fpr=0.05, **options)
    shutil.copytree(path, tmp_path / "reference")
    bbspark.dedup_and_write(spark.read.parquet(str(tmp_path / "in2")), path=tmp_path / "ref2",
                            filter=tmp_path / "reference", **options)
    expected = records(spark, tmp_path / "ref2")
    assert 0 < len(expected) < ROWS * 3 // 4
    return path, options, expected, shards(tmp_path / "reference")


def test_dedup_refuses_a_carried_filter(spark, tmp_path):
    df = spark.createDataFrame([(1,)], ["event_id"])
    with pytest.raises(ValueError, match="dedup_and_write"):
        bbspark.dedup(df, "event_id", filter=tmp_path / "filter")
    assert not (tmp_path / "filter").exists()


def test_a_failing_write_changes_nothing_and_a_rerun_writes_the_uninterrupted_output(
        spark, tmp_path, two_days):
    path, options, expected, expected_shards = two_days
    before = listing(path)

    @F.udf("string")
    def fail_on_one_row(payload):
        if payload == f"p{2 * ROWS + 777}":
            raise RuntimeError("the write fails on one row")
        return payload

    day2 = spark.read.parquet(str(tmp_path / "in2"))
    failing = day2.withColumn("payload", fail_on_one_row("payload"))
    with pytest.raises(Exception, match="the write fails on one row"):
        bbspark.dedup_and_write(failing, path=tmp_path / "out2", filter=path, **options)
    assert listing(path) == before
    assert not (tmp_path / "out2").exists()
    # An output that is there is refused before anything runs.
    (tmp_path / "out2").mkdir()
    with pytest.raises(FileExistsError, match="mode='overwrite'"):
        bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, **options)
    assert listing(path) == before

    bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, mode="overwrite",
                            **options)
    assert records(spark, tmp_path / "out2") == expected
    assert shards(path) == expected_shards
    assert entries(path) == ["gen-000001", "gen-000002", "manifests"]


def test_a_rerun_of_a_committed_run_changes_nothing(spark, tmp_path, two_days):
    """A driver that dies after the commit, before it removed PENDING, or a job run twice: the
    rerun recognises its run in the current generation and writes nothing."""
    path, options, expected, expected_shards = two_days
    day2 = spark.read.parquet(str(tmp_path / "in2"))

    def die_after_the_commit(step):
        if step == "committed":
            raise KeyboardInterrupt("the driver stops after the commit")

    with pytest.raises(KeyboardInterrupt):
        bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path,
                                _on_step=die_after_the_commit, **options)
    assert pending(path)
    after = listing(path)
    output = listing(tmp_path / "out2")
    for mode in ("error", "overwrite"):
        state = bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, mode=mode,
                                        **options)
        assert state.number == 2
        assert listing(tmp_path / "out2") == output
    assert listing(path) == {name: data for name, data in after.items()
                             if not name.startswith("PENDING-")}
    assert records(spark, tmp_path / "out2") == expected
    # Without the output, the rerun cannot write it again from a filter that holds its keys.
    shutil.rmtree(tmp_path / "out2")
    with pytest.raises(RuntimeError, match="already holds this run's keys"):
        bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, **options)



def test_a_run_is_recognised_after_other_runs_committed(spark, tmp_path):
    """A driver that dies after its commit and is retried once another job has committed, or a
    scheduler's backfill of a day done before: the rerun finds its run among those the filter
    recalls and writes nothing (with mode='overwrite', the run over a filter holding its keys
    would replace its output with nearly nothing); another run to such an output is refused."""
    for day in (1, 2, 3):
        write_dump(tmp_path / f"in{day}", day)
    days = [spark.read.parquet(str(tmp_path / f"in{day}")) for day in (1, 2, 3)]
    path = tmp_path / "filter"
    options = dict(key="event_id", order="seq", num_shards=3, filter=path)
    bbspark.dedup_and_write(days[0], path=tmp_path / "out1", capacity=4 * ROWS, fpr=0.01,
                            **options)

    def die_after_the_commit(step):
        if step == "committed":
            raise KeyboardInterrupt("the driver stops after the commit")

    with pytest.raises(KeyboardInterrupt):
        bbspark.dedup_and_write(days[1], path=tmp_path / "out2", _on_step=die_after_the_commit,
                                **options)
    bbspark.dedup_and_write(days[2], path=tmp_path / "out3", **options)
    assert not pending(path)
    after = listing(path)
    outputs = [listing(tmp_path / f"out{day}") for day in (1, 2)]
    for mode in ("error", "overwrite"):
        for day in (1, 2):
            state = bbspark.dedup_and_write(days[day - 1], path=tmp_path / f"out{day}",
                                            mode=mode, **options)
            assert state.number == 3
            assert listing(tmp_path / f"out{day}") == outputs[day - 1]
    assert listing(path) == after
    with pytest.raises(FileExistsError, match="the run that committed .* generation 2, "):
        bbspark.dedup_and_write(days[2], path=tmp_path / "out2", mode="overwrite", **options)
    assert listing(tmp_path / "out2") == outputs[1]
    shutil.rmtree(tmp_path / "out1")
    with pytest.raises(RuntimeError, match="generation 1 already holds this run's keys .*"
                       "generations up to 3 were committed since"):
        bbspark.dedup_and_write(days[0], path=tmp_path / "out1", **options)
    assert listing(path) == after
    # force=True runs it again: its keys are in the filter, so it writes (nearly) nothing.
    state = bbspark.dedup_and_write(days[0], path=tmp_path / "out1", force=True, **options)
    assert state.number == 4 and len(records(spark, tmp_path / "out1")) < ROWS // 100
    # Once a later run replaced a run's output (force=True), a rerun of that run is one that
    # would replace the later run's output, not one already done.
    bbspark.dedup_and_write(days[2], path=tmp_path / "out2", mode="overwrite", force=True,
                            **options)
    with pytest.raises(FileExistsError, match="the run that committed .* generation 5, "):
        bbspark.dedup_and_write(days[1], path=tmp_path / "out2", mode="overwrite", **options)

DRIVER = textwrap.dedent("""
    import os, signal, sys, time
    from pyspark.sql import SparkSession, functions as F
    from bulkbloom import spark as bbspark

    source, out, filter_dir, kill_at, marker = sys.argv[1:]
    builder = SparkSession.builder.master("local[2]")
    for name, value in {config}.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    df = spark.read.parquet(source)
    if kill_at == "write":
        @F.udf("string")
        def stall(payload):
            # Only the write reads the payload (routing reads the key, the order and row ids):
            # one of its tasks says so and waits to be killed with the whole driver.
            if payload.endswith("0077"):
                open(marker, "w").close()
                time.sleep(120)
            return payload
        df = df.withColumn("payload", stall("payload"))

    def on_step(step):
        if step == kill_at:
            os.killpg(0, signal.SIGKILL)

    bbspark.dedup_and_write(df, "event_id", out, filter=filter_dir, order="seq", num_shards=3,
                            _on_step=on_step)
""")


@pytest.mark.parametrize("kill_at", ["write", "written"])
def test_a_rerun_after_the_driver_is_killed_writes_the_uninterrupted_output(
        spark, tmp_path, two_days, kill_at):
    """The driver (its Python, JVM and workers) killed with SIGKILL during the output's write,
    or after the output's commit before the filter's: the filter is as it was, the earlier
    generation still there, and the same job run again writes the uninterrupted output."""
    path, options, expected, expected_shards = two_days
    before = listing(path)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(config=SMALL_SPARK))
    marker = tmp_path / "in-the-write"
    out = tmp_path / "out2"
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "in2"), str(out), str(path), kill_at,
         str(marker)],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        if kill_at == "write":
            deadline = time.monotonic() + 300
            while not marker.exists() and driver.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert marker.exists(), driver.stderr.read()[-4000:] if driver.poll() else "timeout"
            os.killpg(driver.pid, signal.SIGKILL)
        assert driver.wait(timeout=300) == -signal.SIGKILL, driver.stderr.read()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    # What the manifests name is untouched; the crashed run's staged generation 2 is there.
    assert {name: data for name, data in listing(path).items()
            if not name.startswith(("PENDING-", "gen-000002-"))} == before
    assert pending(path) and out.exists()
    assert len(list(path.glob("gen-000002-*"))) == 1

    bbspark.dedup_and_write(spark.read.parquet(str(tmp_path / "in2")), path=out, filter=path,
                            **options)
    assert records(spark, out) == expected
    assert shards(path) == expected_shards
    # The crashed run's staged generation and PENDING went with the rerun's commit.
    assert entries(path) == ["gen-000001", "gen-000002", "manifests"]


@pytest.mark.parametrize("left", [b"", b'{\n "format": "bulkbloom-sp', b'{\n "format": 1,\n',
                                  b'{\n "fpr": 0.', b'{\n "x": nu', b'{\n "layout": {"a": 1}'])
def test_a_manifest_cut_short_by_a_killed_driver_blocks_commits_for_an_hour_then_goes(
        spark, tmp_path, two_days, left):
    """On HDFS a manifest is visible from its creation: a driver killed while writing it leaves
    it empty or cut short, under the next commit's name. Readers read the commit before it; a
    run that would commit is refused, naming it, until it is an hour old, then removes it."""
    path, options, expected, expected_shards = two_days
    (path / "manifests" / "000002.json").write_bytes(left)
    before = listing(path)
    assert bbspark.open_filter(path).number == 1
    day2 = spark.read.parquet(str(tmp_path / "in2"))
    with pytest.raises(bulkbloom.FormatError, match=r"000002.json is incomplete .* written 0 min"):
        bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, **options)
    assert listing(path) == before and not (tmp_path / "out2").exists()
    hours_ago = time.time() - 2 * 3600
    os.utime(path / "manifests" / "000002.json", (hours_ago, hours_ago))
    state = bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, **options)
    assert state.number == 2
    assert records(spark, tmp_path / "out2") == expected
    assert shards(path) == expected_shards
    # Set aside, not removed: a committed manifest damaged later looks the same.
    aside = list((path / "manifests").glob("000002.json.cut-short-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == left


def test_a_damaged_manifest_is_not_taken_for_one_cut_short(spark, tmp_path, two_days):
    """A whole manifest damaged since its commit may hold keys: it stays an error, however old."""
    path, options, _, _ = two_days
    (path / "manifests" / "000002.json").write_bytes(b'{"format": "other"}\n')
    hours_ago = time.time() - 2 * 3600
    os.utime(path / "manifests" / "000002.json", (hours_ago, hours_ago))
    for call in (lambda: bbspark.open_filter(path),
                 lambda: bbspark.dedup_and_write(spark.read.parquet(str(tmp_path / "in2")),
                                                 path=tmp_path / "out2", filter=path,
                                                 **options)):
        with pytest.raises(bulkbloom.FormatError, match="000002.json is not a version-2"):
            call()
    assert (path / "manifests" / "000002.json").exists()


def test_a_local_generations_directory_is_made_durable(tmp_path, monkeypatch):
    """mkdirs fsyncs each directory it may have created into its parent, up to the filter's root:
    a power loss must not keep a manifest and lose the directory of the shards it names."""
    from bulkbloom.spark import _store

    synced = []
    monkeypatch.setattr(_store, "_fsync_dir", synced.append)
    root = tmp_path / "filter"
    _store._LocalStore(root).mkdirs("gen-000001-abc/sub")
    assert synced == [root / "gen-000001-abc", root, tmp_path]
    synced.clear()
    _store._LocalStore(root).mkdirs("gen-000002-def")  # only what it makes
    assert synced == [root]


def test_cores_that_change_between_the_routing_and_the_write_change_nothing(
        spark, tmp_path, two_days):
    """Spark cuts files into input partitions by a size it computes from the cores it has when a
    query is planned; the routing and the write number rows by partition alike. Executors that
    join between the two (an autoscaling cluster) must not move rows between partitions: the
    output is the one the run gives with its cores unchanged."""
    path, options, expected, expected_shards = two_days
    key = "spark.sql.leafNodeDefaultParallelism"
    conf = {"spark.sql.files.openCostInBytes": "1024", "spark.sql.files.maxPartitionBytes": "1m"}
    for name, value in conf.items():
        spark.conf.set(name, value)

    def more_cores(step):
        if step == "staged":
            spark.conf.set(key, "13")

    try:
        spark.conf.set(key, "2")
        day2 = spark.read.parquet(str(tmp_path / "in2"))
        bbspark.dedup_and_write(day2, path=tmp_path / "out2", filter=path, _on_step=more_cores,
                                **options)
        assert records(spark, tmp_path / "out2") == expected
        assert shards(path) == expected_shards
        assert spark.conf.get("spark.sql.files.minPartitionNum", None) is None
    finally:
        for name in (key, *conf):
            spark.conf.unset(name)


def test_dedups_dataframe_read_after_the_cores_changed_is_the_same(spark, tmp_path):
    """dedup() returns a DataFrame that reads the input again at each action: it cuts the files as
    the routing did, whatever cores the cluster has by then."""
    write_dump(tmp_path / "in", 3)
    key = "spark.sql.leafNodeDefaultParallelism"
    conf = {"spark.sql.files.openCostInBytes": "1024", "spark.sql.files.maxPartitionBytes": "1m",
            key: "2"}
    try:
        for name, value in conf.items():
            spark.conf.set(name, value)
        df = spark.read.parquet(str(tmp_path / "in"))
        once = sorted(bbspark.dedup(df, "event_id", order="seq").collect())
        spark.conf.unset("spark.sql.files.minPartitionNum")
        kept = bbspark.dedup(df, "event_id", order="seq")
        spark.conf.set(key, "13")
        assert sorted(kept.collect()) == once
    finally:
        for name in (*conf, "spark.sql.files.minPartitionNum"):
            spark.conf.unset(name)


def test_an_input_rewritten_under_its_name_is_not_taken_for_the_committed_run(
        spark, tmp_path, two_days):
    """A feed that rewrites the same files each day: the second day is another input, not a rerun
    of the first (which would write nothing and report success)."""
    path, options, _, _ = two_days
    shutil.rmtree(tmp_path / "in1")
    write_dump(tmp_path / "in1", 9)  # the same file names, other rows
    with pytest.raises(FileExistsError, match="is the output of the run that committed"):
        bbspark.dedup_and_write(spark.read.parquet(str(tmp_path / "in1")),
                                path=tmp_path / "out1", filter=path, mode="overwrite", **options)


def test_inputs_in_a_folder_whose_name_is_escaped_in_a_uri(spark, tmp_path):
    """inputFiles() gives URIs (a space as %20): a rerun of a committed run on such files is
    still recognised, and nothing fails listing them."""
    write_dump(tmp_path / "day one", 4)
    options = dict(key="event_id", order="seq", num_shards=3, filter=tmp_path / "filter")
    df = spark.read.parquet(str(tmp_path / "day one"))
    first = bbspark.dedup_and_write(df, path=tmp_path / "out", **options)
    output = listing(tmp_path / "out")
    again = bbspark.dedup_and_write(df, path=tmp_path / "out", mode="overwrite", **options)
    assert again.number == first.number and listing(tmp_path / "out") == output


def test_a_run_committed_by_an_older_bulkbloom_is_still_recognised(spark, tmp_path, two_days):
    """Its record hashed the input's file names alone: the rerun after an upgrade is the same
    run, not another one refused for writing to that run's output."""
    import hashlib
    import json

    path, options, _, _ = two_days
    manifest_path = path / "manifests" / "000001.json"
    manifest = json.loads(manifest_path.read_bytes())
    df = spark.read.parquet(str(tmp_path / "in1"))
    names = "\n".join(sorted(df.inputFiles())).encode()
    manifest["run"] = {k: v for k, v in manifest["run"].items() if k != "inputs_by"}
    manifest["run"]["inputs"] = hashlib.sha256(names).hexdigest()
    manifest_path.write_bytes(json.dumps(manifest, indent=1).encode() + b"\n")
    output = listing(tmp_path / "out1")
    state = bbspark.dedup_and_write(df, path=tmp_path / "out1", filter=path, **options)
    assert state.number == 1 and listing(tmp_path / "out1") == output
