"""bulkbloom.spark keeps its filter directory on any Hadoop filesystem, through the driver JVM's
org.apache.hadoop.fs.FileSystem: the same directory used through two URI schemes (a viewfs: mount
of a local directory stands in for HDFS or S3A: Spark's own Hadoop filesystem, no cluster), a
commit by a manifest created only if absent, so that two writers cannot both commit, and a
failure at any step of the driver's writes leaves the committed state whole. Skipped only where
Java is absent."""

import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bulkbloom
from conftest import local_spark

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java (Spark needs Java 17 or newer): apt-get install openjdk-17-jre-headless",
                allow_module_level=True)

from bulkbloom import spark as bbspark  # noqa: E402
from bulkbloom.spark import _store  # noqa: E402

ROWS = 6_000
OPTIONS = dict(key="event_id", order="seq", num_shards=2)


@pytest.fixture(scope="module")
def spark():
    session = local_spark("local[2]", "bulkbloom-fs-tests")
    yield session
    session.stop()


def mounted(spark, directory: Path) -> str:
    """A viewfs: URI of the local `directory` (a mount table of its own, since Hadoop caches a
    filesystem by scheme and authority)."""
    table = f"bb{uuid.uuid4().hex[:12]}"
    spark.sparkContext._jsc.hadoopConfiguration().set(
        f"fs.viewfs.mounttable.{table}.link./data", directory.resolve().as_uri())
    return f"viewfs://{table}/data"


def write_dump(path: Path, seed: int, old: np.ndarray = None) -> np.ndarray:
    """ROWS (event_id, seq) records in 2 Parquet files, a quarter of them repeats (of `old`
    keys too); returns the keys."""
    rng = np.random.default_rng(seed)
    fresh = rng.integers(0, 2**63, size=ROWS * 3 // 4, dtype=np.int64)
    pool = fresh if old is None else np.concatenate([fresh, old])
    keys = np.concatenate([fresh, rng.choice(pool, ROWS - len(fresh))])
    rng.shuffle(keys)
    table = pa.table({"event_id": keys, "seq": np.arange(seed * ROWS, (seed + 1) * ROWS)})
    path.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(ROWS), 2)):
        pq.write_table(table.take(rows), path / f"part-{part}.parquet")
    return keys


def records(spark, path) -> list:
    table = spark.read.parquet(str(path)).toArrow().sort_by("seq")
    return list(zip(table.column("event_id").to_pylist(), table.column("seq").to_pylist()))


def shard_bytes(spark, path) -> list:
    state = bbspark.open_filter(path, spark)
    return [state.load(i).bits() for i in range(state.num_shards)]


def entries(path: Path) -> list:
    """The filter directory's entries, a generation's directory without its run's suffix."""
    return sorted(re.sub(r"^(gen-\d+)-[0-9a-f]+$", r"\1", p.name) for p in path.iterdir()
                  if not p.name.startswith("."))  # LocalFileSystem's .crc files


@pytest.fixture(scope="module")
def days(spark, tmp_path_factory):
    """Two dumps, and what two uninterrupted days write and leave in a local filter."""
    root = tmp_path_factory.mktemp("days")
    write_dump(root / "in2", 2, old=write_dump(root / "in1", 1))
    reference = root / "reference"
    for day in (1, 2):
        bbspark.dedup_and_write(spark.read.parquet(str(root / f"in{day}")), path=root / f"ref{day}",
                                filter=reference, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
    return root, [records(spark, root / f"ref{day}") for day in (1, 2)], shard_bytes(
        spark, reference)


def test_one_directory_through_two_uri_schemes_is_the_local_runs(spark, tmp_path, days):
    """Day 1 through the local path, day 2 through viewfs: (whose executors never open the
    directory: Spark reads them the base shards, the driver writes what they hand in): the
    outputs and the filter are the all-local runs'."""
    root, expected, expected_shards = days
    local = tmp_path / "filter"
    local.mkdir()
    uris = {"local": str(local), "viewfs": mounted(spark, local)}
    for day, scheme in enumerate(["local", "viewfs"], start=1):
        out = tmp_path / f"out{day}"
        state = bbspark.dedup_and_write(
            spark.read.parquet(str(root / f"in{day}")), path=out, filter=uris[scheme],
            capacity=4 * ROWS, fpr=0.05, **OPTIONS)
        assert state.number == day and (state.store.local is None) == (scheme == "viewfs")
        assert records(spark, out) == expected[day - 1], day
    assert shard_bytes(spark, uris["viewfs"]) == expected_shards
    assert shard_bytes(spark, local) == expected_shards
    assert entries(local) == ["gen-000001", "gen-000002", "manifests"]
    assert entries(local / "manifests") == ["000001.json", "000002.json"]


def test_a_path_is_resolved_against_the_default_filesystem(spark, tmp_path):
    """A path without a scheme is on fs.defaultFS, as Spark resolves the paths it reads; a file:
    default filesystem makes it a local directory."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = conf.get("fs.defaultFS")
    uri = mounted(spark, tmp_path)
    try:
        conf.set("fs.defaultFS", uri.rsplit("/", 1)[0] + "/")
        store = _store._store_of("/data/filter", spark)
        assert store.local is None and store.uri == f"{uri}/filter"
    finally:
        conf.set("fs.defaultFS", before)
    assert _store._store_of("relative/filter", spark).local == Path.cwd() / "relative/filter"


@pytest.mark.parametrize("scheme", ["local", "viewfs"])
def test_of_two_manifests_of_one_name_exactly_one_is_created(spark, tmp_path, scheme):
    store = _store._store_of(tmp_path if scheme == "local" else mounted(spark, tmp_path), spark)
    assert (store.local is None) == (scheme == "viewfs")
    store.write("manifests/000001.json", b"first\n", exclusive=True)
    with pytest.raises(FileExistsError):
        store.write("manifests/000001.json", b"second\n", exclusive=True)
    assert store.read("manifests/000001.json") == b"first\n"


def test_a_commit_that_cannot_be_confirmed_is_left_for_the_rerun(spark, tmp_path, days,
                                                                  monkeypatch):
    """The manifest's create lands but reports an error (a lost reply), and reading the state
    back to see whether it committed fails too: the run raises, removing nothing (neither the
    output nor the generation the manifest names), as after a crash; the rerun finds the run
    committed and the output in place."""
    root, expected, _ = days
    path = tmp_path / "filter"
    day = [dict(path=tmp_path / f"out{n}", filter=path, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
           for n in (1, 2)]
    bbspark.dedup_and_write(spark.read.parquet(str(root / "in1")), **day[0])
    write = _store._LocalStore.write

    def create_then_fail(self, name, data, exclusive=False):
        write(self, name, data, exclusive)
        if name == _store._manifest_name(2):
            raise OSError("injected: the manifest's create lost its reply")

    def read_back_fails(*args, **kwargs):
        raise OSError("injected: reading the state back failed")

    monkeypatch.setattr(_store._LocalStore, "write", create_then_fail)
    monkeypatch.setattr(_store, "_open", read_back_fails)
    with pytest.raises(OSError, match="reading the state back failed"):
        bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")), **day[1])
    monkeypatch.undo()
    assert records(spark, tmp_path / "out2") == expected[1]
    state = bbspark.open_filter(path)
    assert state.number == 2 and all(Path(state.shard_path(s)).exists() for s in range(2))
    rerun = bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")), **day[1])
    assert rerun.number == 2 and records(spark, tmp_path / "out2") == expected[1]


def test_a_retried_create_that_had_landed_commits(spark, tmp_path, days, monkeypatch):
    """The manifest's exclusive create lands, is retried (a lost reply on NFS, an object store's
    conditional put) and the retry reports that it exists: the manifest is this run's own, so the
    run is committed, not undone under a conflict it caused itself."""
    root, expected, _ = days
    path = tmp_path / "filter"
    options = dict(filter=path, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
    bbspark.dedup_and_write(spark.read.parquet(str(root / "in1")), path=tmp_path / "out1",
                            **options)
    write = _store._LocalStore.write

    def create_then_retry(self, name, data, exclusive=False):
        write(self, name, data, exclusive)
        if name == _store._manifest_name(2):
            write(self, name, data, exclusive)  # FileExistsError

    monkeypatch.setattr(_store._LocalStore, "write", create_then_retry)
    state = bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")),
                                    path=tmp_path / "out2", **options)
    monkeypatch.undo()
    assert state.number == 2 and bbspark.open_filter(path).number == 2
    assert all(Path(state.shard_path(s)).exists() for s in range(2))
    assert records(spark, tmp_path / "out2") == expected[1]
    assert not list(path.glob("PENDING-*"))


def test_a_run_that_three_commits_overtook_says_so(spark, tmp_path, days):
    """Run B commits three times while run A runs: B's clean-ups remove A's staged objects and,
    by the third, the manifest numbered as A's generation too. A still says that another job
    committed, and leaves nothing."""
    root, _, _ = days
    path = tmp_path / "filter"
    options = dict(filter=path, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
    bbspark.dedup_and_write(spark.read.parquet(str(root / "in1")), path=tmp_path / "out1",
                            **options)

    def b_commits_three_times(step):
        if step == "staged":
            for n in range(3):
                bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")),
                                        path=tmp_path / f"b{n}", **options)

    with pytest.raises(bbspark.CommitConflictError, match="another job committed generation 2"):
        bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")), path=tmp_path / "a",
                                _on_step=b_commits_three_times, **options)
    assert not (tmp_path / "a").exists()
    assert bbspark.open_filter(path).number == 4
    assert not list(path.glob("PENDING-*"))


def test_a_refused_commit_undoes_the_run_while_the_winners_manifest_is_unreadable(
        spark, tmp_path, days, monkeypatch):
    """On HDFS another run's manifest is visible, empty, from its creation: a run whose own create
    is refused then cannot read who committed, but the refusal says it was another run, so the
    run's output, staged objects and PENDING go."""
    root, _, _ = days
    path = tmp_path / "filter"
    options = dict(filter=path, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
    bbspark.dedup_and_write(spark.read.parquet(str(root / "in1")), path=tmp_path / "out1",
                            **options)
    before = {p.name for p in path.iterdir()}
    write = _store._LocalStore.write

    def another_is_creating_it(self, name, data, exclusive=False):
        if name == _store._manifest_name(2):
            write(self, name, b"")
            raise FileExistsError(name)
        write(self, name, data, exclusive)

    monkeypatch.setattr(_store._LocalStore, "write", another_is_creating_it)
    with pytest.raises(bbspark.CommitConflictError, match="another job committed generation 2"):
        bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")), path=tmp_path / "a",
                                **options)
    assert not (tmp_path / "a").exists()
    assert {p.name for p in path.iterdir()} == before


def test_a_build_whose_staged_files_another_commit_removed_says_so(spark, tmp_path, days,
                                                                   monkeypatch):
    """Run B commits after run A made its work directory and before A's shard tasks write in it:
    B's commit removes that directory (A's generation number is the one B took), and A fails
    saying that another job committed, not with a missing file of its own."""
    from bulkbloom.spark import _api

    root, _, _ = days
    path = tmp_path / "filter"
    bbspark.build(spark.read.parquet(str(root / "in1")), "event_id", path, capacity=4 * ROWS,
                  num_shards=2)
    decide = _api._decide

    def b_commits_first(*args, **kwargs):
        monkeypatch.setattr(_api, "_decide", decide)
        bbspark.build(spark.read.parquet(str(root / "in2")), "event_id", path,
                      capacity=4 * ROWS, num_shards=2)
        return decide(*args, **kwargs)

    monkeypatch.setattr(_api, "_decide", b_commits_first)
    with pytest.raises(bbspark.CommitConflictError, match="another job committed generation 2"):
        bbspark.build(spark.read.parquet(str(root / "in1")), "event_id", path, capacity=4 * ROWS,
                      num_shards=2)
    assert bbspark.open_filter(path).number == 2


@pytest.mark.parametrize("b_commits_at", ["staged", "written"])
@pytest.mark.parametrize("a_writes", ["a", "b"])
def test_two_writers_cannot_both_commit(spark, tmp_path, days, a_writes, b_commits_at):
    """Run A, before its output's write or between it and its commit, sees run B (another dump,
    its own output, or the same job started twice: A's output) start from the same state and
    commit: A is refused, saying so, and leaves nothing, neither output nor objects; B's commit
    stands, with its output."""
    root, expected, _ = days
    path = tmp_path / "filter"
    bbspark.dedup_and_write(spark.read.parquet(str(root / "in1")), path=tmp_path / "out1",
                            filter=path, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
    before = {p.name for p in path.iterdir()}

    def b_commits_first(step):
        if step == b_commits_at:
            bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")), path=tmp_path / "b",
                                    filter=path, **OPTIONS)

    with pytest.raises(bbspark.CommitConflictError, match="another job committed generation 2"):
        bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")),
                                path=tmp_path / a_writes, filter=path,
                                _on_step=b_commits_first, **OPTIONS)
    assert not (tmp_path / "a").exists()
    state = bbspark.open_filter(path)
    assert state.number == 2 and state.manifest["run"]["output"].endswith("/b")
    assert records(spark, tmp_path / "b") == expected[1]
    # B's generation, B's cleanup; A's staged generation and PENDING are gone.
    assert {p.name for p in path.iterdir()} == before | {state.generation}


def test_the_output_of_the_committed_run_is_never_replaced(spark, tmp_path, days, caplog):
    """docs/DESIGN.md §9: a rerun can never destroy the output the last committed run wrote.
    The same job through a symbolic link to the output's folder is that run (nothing to do);
    another dump to that output is refused in any mode (its keys would all be dropped by a
    filter that holds them, or the day replaced), unless force=True, as the CLI's --force.
    A capacity or rate given to a carried filter is ignored, with the CLI's warning."""
    root, expected, _ = days
    path, out = tmp_path / "filter", tmp_path / "out"
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)

    def day(number, where, **options):
        return bbspark.dedup_and_write(spark.read.parquet(str(root / f"in{number}")),
                                       path=where, filter=path, **OPTIONS, **options)

    day(1, out, capacity=4 * ROWS, fpr=0.05)
    assert day(1, tmp_path / "link" / "out", mode="overwrite").number == 1
    with pytest.raises(FileExistsError, match="the output of the run that committed"):
        day(2, out, mode="overwrite")
    assert bbspark.open_filter(path).number == 1 and records(spark, out) == expected[0]
    # A run that fails while another run of the same job writes its output (whose PENDING
    # names it) leaves that output to it.
    other = tmp_path / "out2"

    def another_run_writes_it(step):
        if step == "written":
            (path / "PENDING-other.json").write_text(json.dumps(
                {"output": f"file:{other.resolve()}", "base": 1, "generation": "gen-000002-0"}))
            raise RuntimeError("this run fails")

    with pytest.raises(RuntimeError, match="this run fails"):
        day(2, other, _on_step=another_run_writes_it)
    assert other.exists()
    (path / "PENDING-other.json").unlink()
    with caplog.at_level(logging.WARNING, logger="bulkbloom.spark"):
        assert day(2, out, mode="overwrite", force=True, capacity=ROWS, fpr=0.5).number == 2
    assert f"capacity={ROWS}, fpr=0.5 ignored" in caplog.text
    assert records(spark, out) == expected[1]


def test_a_directory_that_is_not_a_filter_or_is_damaged_is_refused_as_it_is(spark, tmp_path):
    """Before any job runs (but the count of an empty input), with an error naming the file,
    and nothing in the directory changed: a file, another tool's directory (the CLI's state
    directory, anything not empty), a manifest or PENDING object that is not one, a generation
    whose shard file was truncated, replaced by another shard's or removed, a new filter sized
    for an input of no rows, and an output inside the filter directory or holding it (an
    overwrite would remove the filter)."""
    df = spark.createDataFrame([(1,), (2,), (1,)], ["event_id"])
    with pytest.raises(ValueError, match="the input has no rows"):
        bbspark.dedup_and_write(df.limit(0), "event_id", tmp_path / "out",
                                filter=tmp_path / "empty")
    assert not any(tmp_path.iterdir())
    tool = tmp_path / "tool"
    tool.mkdir()
    (tool / "MANIFEST").write_text("the CLI's\n")
    (tool / "tmp-notes").write_text("mine\n")
    (tmp_path / "filter.bbf").write_bytes(b"BBF")
    for where, error in ((tool, r"holds no sharded filter .*\(MANIFEST, tmp-notes\)"),
                         (tmp_path / "filter.bbf", "is a file")):
        before = listing(tmp_path)
        with pytest.raises(bulkbloom.FormatError, match=error):
            bbspark.dedup_and_write(df, "event_id", tmp_path / "out", filter=where)
        with pytest.raises(bulkbloom.FormatError, match=error):
            bbspark.build(df, "event_id", where, capacity=10)
        assert listing(tmp_path) == before
    path = tmp_path / "filter"
    bbspark.build(df, "event_id", path, capacity=100, num_shards=2)
    before = listing(tmp_path)
    for out in (tmp_path, path, path / "out"):
        with pytest.raises(ValueError, match="one inside the other"):
            bbspark.dedup_and_write(df, "event_id", out, filter=path, mode="overwrite")
    assert listing(tmp_path) == before
    manifest = path / "manifests" / "000001.json"
    good = manifest.read_text()
    damaged = {"[]": "not a version-2", json.dumps({**json.loads(good), "shards": []}):
               "damaged: it names 0 shards of 2"}
    for text, error in damaged.items():
        manifest.write_text(text)
        with pytest.raises(bulkbloom.FormatError, match=f"000001.json (is )?{error}"):
            bbspark.open_filter(path, spark)
    manifest.write_text(good)
    (path / "PENDING-0.json").write_text("[]")
    with pytest.raises(bulkbloom.FormatError, match="PENDING-0.json is not a PENDING"):
        bbspark.dedup_and_write(df, "event_id", tmp_path / "out", filter=path)
    (path / "PENDING-0.json").unlink()
    shard = Path(bbspark.open_filter(path, spark).shard_path(1))
    before = listing(tmp_path)
    bits = shard.read_bytes()
    for damage, error in ((bits[:100], f"{shard}: truncated"),
                          (Path(bbspark.open_filter(path, spark).shard_path(0)).read_bytes(),
                           f"{shard} is shard 0 of 2 .* the manifest says shard 1")):
        shard.write_bytes(damage)
        with pytest.raises(bulkbloom.FormatError, match=error):
            bbspark.dedup_and_write(df, "event_id", tmp_path / "out", filter=path)
        shard.write_bytes(bits)
        assert listing(tmp_path) == before
    shard.unlink()
    before = listing(tmp_path)
    with pytest.raises(bulkbloom.FormatError, match=f"{shard}, shard 1 .* is missing"):
        bbspark.dedup_and_write(df, "event_id", tmp_path / "out", filter=path)
    assert listing(tmp_path) == before


def listing(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None
            for p in sorted(path.rglob("*"))}


def walk_faults(monkeypatch, run, check):
    """Fails the k-th fault point of `run()` for k = 1, 2, ... (checking the directory with
    `check()` after each), until a run reaches no k-th point; returns the points' names."""
    names = []
    for k in range(1, 100):
        reached = []

        def fault_point(what):
            reached.append(what)
            if len(reached) == k:
                raise OSError(f"injected fault at point {k} ({what})")

        monkeypatch.setattr(_store, "_fault_point", fault_point)
        try:
            run()
        except Exception as error:
            assert f"injected fault at point {k}" in str(error), error
            names.append(reached[-1])
            check()
            continue
        finally:
            monkeypatch.undo()
        return names
    raise AssertionError("the run never finished")


@pytest.mark.parametrize("scheme", ["local", "viewfs"])
def test_a_failure_at_any_write_leaves_the_committed_state(spark, tmp_path, monkeypatch, scheme):
    """build() over a committed filter, failed at each step of its writes in turn (create, write,
    fsync or close, rename or link, the manifest): the directory reads as it was, every time; the
    run that then succeeds commits the new filter."""
    local = tmp_path / "filter"
    local.mkdir()
    path = str(local) if scheme == "local" else mounted(spark, local)
    rng = np.random.default_rng(5)
    first, second = (spark.createDataFrame(pa.table({"event_id": rng.integers(0, 2**62, 500)})
                                           .to_pandas()) for _ in range(2))
    bbspark.build(first, "event_id", path, capacity=1_000, num_shards=2)
    committed = shard_bytes(spark, path)

    def check():
        state = bbspark.open_filter(path, spark)
        assert state.number == 1 and shard_bytes(spark, path) == committed
        assert entries(local) == ["gen-000001", "manifests"]

    names = walk_faults(
        monkeypatch, lambda: bbspark.build(second, "event_id", path, capacity=1_000, num_shards=2),
        check)
    expected = {"local": ["rename"] * 2 + ["manifest", "create", "write", "fsync", "link"],
                "viewfs": ["create", "write", "close"] * 2 + ["manifest", "create", "write",
                                                              "close"]}[scheme]
    assert names == expected
    state = bbspark.open_filter(path, spark)
    assert state.number == 2 and shard_bytes(spark, path) != committed
    assert entries(local) == ["gen-000001", "gen-000002", "manifests"]


def test_a_version_1_directory_is_read_and_migrated_on_its_first_commit(spark, tmp_path, days,
                                                                       caplog):
    """A directory the previous version wrote (CURRENT naming gen-000001/, which holds its
    manifest and shards) is read as it is; day 2 over it writes the uninterrupted output and
    filter, and leaves a version-2 directory."""
    root, expected, expected_shards = days
    path = tmp_path / "filter"
    bbspark.dedup_and_write(spark.read.parquet(str(root / "in1")), path=tmp_path / "out1",
                            filter=path, capacity=4 * ROWS, fpr=0.05, **OPTIONS)
    # Rewritten as version 1 wrote it.
    state = bbspark.open_filter(path)
    manifest = dict(state.manifest, version=1)
    for kind in ("shards", "drops"):
        manifest[kind] = [name.split("/")[-1] for name in manifest[kind]]
    for name in ("directory", "base", "writer", "dropped"):
        del manifest[name]
    legacy = path / "gen-000001"
    state.directory.rename(legacy)
    (legacy / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(path / "manifests")
    (path / "CURRENT").write_text("gen-000001\n")
    (path / "LOCK").touch()
    assert bbspark.open_filter(path).number == 1

    with caplog.at_level(logging.WARNING, logger="bulkbloom.spark"):
        bbspark.dedup_and_write(spark.read.parquet(str(root / "in2")), path=tmp_path / "out2",
                                filter=path, **OPTIONS)
    assert "version-1 filter directory" in caplog.text
    assert records(spark, tmp_path / "out2") == expected[1]
    assert shard_bytes(spark, path) == expected_shards
    assert entries(path) == ["gen-000001", "gen-000002", "manifests"]


def test_a_failed_runs_directory_goes_though_late_tasks_write_in_it(tmp_path):
    """A task attempt still running after its job failed may write into the run's directory while
    the driver removes it (the directory is removed file by file): the directory must still go,
    and once gone, no task writes can bring it back (tasks write only into an existing one)."""
    import threading

    store = _store._LocalStore(tmp_path / "filter")
    store.mkdirs("gen-000002-late")
    work = tmp_path / "filter" / "gen-000002-late"
    for n in range(2_000):
        (work / f"shard-{n:05d}.bbf").write_bytes(b"x")
    started = threading.Event()

    def late_tasks():
        # Stragglers hand in their files a few milliseconds apart, while the removal runs.
        started.wait()
        for n in range(10):
            try:
                with open(work / f"drops-{n:05d}.late.parquet", "wb") as out:
                    out.write(b"y")
            except FileNotFoundError:
                return  # the directory is gone: a task's write fails, as in _write_drops
            time.sleep(0.002)

    writer = threading.Thread(target=late_tasks)
    writer.start()
    started.set()
    store.delete("gen-000002-late")
    writer.join()
    assert not work.exists()
