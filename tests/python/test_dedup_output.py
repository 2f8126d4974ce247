"""bulkbloom.dedup(..., output=): the rows written to a Parquet file as the command line's `-o`
writes its output: the inputs fixed at the call, an output that would replace an input or be
read as one refused before anything is read, the file committed by a rename (an output there
before stays as it was when a run fails) and a carried filter saved only after it."""

import os
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bulkbloom
from conftest import run_cli


@pytest.fixture
def inputs(tmp_path):
    """A directory of two Parquet files, 1,000 rows (key, row) whose keys repeat."""
    table = pa.table({"key": [f"k{i % 700}" for i in range(1000)], "row": list(range(1000))})
    directory = tmp_path / "in"
    directory.mkdir()
    pq.write_table(table.slice(0, 500), directory / "a.parquet")
    pq.write_table(table.slice(500), directory / "b.parquet")
    return directory


def listing(directory):
    return sorted(os.listdir(directory))


def test_writes_the_kept_rows_and_leaves_no_temporary_file(tmp_path, inputs):
    out = tmp_path / "out" / "kept.parquet"
    out.parent.mkdir()
    assert bulkbloom.dedup(inputs, "key", capacity=10_000, output=out) is None
    assert pq.read_table(out).column("row").to_pylist() == list(range(700))
    assert listing(out.parent) == ["kept.parquet"]
    bulkbloom.dedup(inputs, "key", capacity=10_000, output=out, dropped=True)
    assert pq.read_table(out).column("row").to_pylist() == list(range(700, 1000))


def test_an_output_in_a_directory_it_reads_is_refused(tmp_path, inputs):
    before = {name: (inputs / name).read_bytes() for name in listing(inputs)}
    with pytest.raises(ValueError, match=r"out.parquet' is in the input directory .*in'"):
        bulkbloom.dedup(inputs, "key", capacity=10_000, output=inputs / "out.parquet")
    # Also named through a link to the directory, or with the directory in a list.
    (tmp_path / "alias").symlink_to(inputs)
    with pytest.raises(ValueError, match="is in the input directory"):
        bulkbloom.dedup([inputs], "key", capacity=10_000, output=tmp_path / "alias/o.parquet")
    assert {name: (inputs / name).read_bytes() for name in listing(inputs)} == before
    # A name the directory's listing does not take is not read by a later run: written.
    bulkbloom.dedup(inputs, "key", capacity=10_000, output=inputs / "kept.arrow-parquet")
    assert pq.read_table(inputs / "kept.arrow-parquet").num_rows == 700
    bulkbloom.dedup(inputs, "key", capacity=10_000, output=inputs / "sub.parquet.d")
    assert listing(inputs) == ["a.parquet", "b.parquet", "kept.arrow-parquet", "sub.parquet.d"]


@pytest.mark.parametrize("how", ["same path", "symlink to the input", "input is a symlink",
                                 "hard link", "open file", "listed twice"])
def test_an_output_that_is_an_input_is_refused_before_anything_is_read(tmp_path, inputs, how):
    a = inputs / "a.parquet"
    before = a.read_bytes()
    source, output = [inputs / "b.parquet", a], a
    if how == "symlink to the input":
        output = tmp_path / "link.parquet"
        output.symlink_to(a)
    elif how == "input is a symlink":
        source = [tmp_path / "link.parquet"]
        source[0].symlink_to(a)
    elif how == "hard link":
        output = tmp_path / "hard.parquet"
        os.link(a, output)
    elif how == "open file":
        source = [open(a, "rb")]
    elif how == "listed twice":
        source = [a, inputs / "b.parquet", a]
    with pytest.raises(ValueError, match="parquet' is both the input .*parquet'>? and the output: "
                                         "writing one would destroy the other"):
        bulkbloom.dedup(source, "key", capacity=10_000, output=output)
    if how == "open file":
        source[0].close()
    assert a.read_bytes() == before
    assert listing(inputs) == ["a.parquet", "b.parquet"]
    assert listing(tmp_path) == sorted(["in", *([] if output == a else [output.name]),
                                        *(["link.parquet"] if "input is" in how else [])])


def test_a_filter_file_that_is_an_input_or_the_output_is_refused(tmp_path, inputs):
    a = inputs / "a.parquet"
    with pytest.raises(ValueError, match="a.parquet' is both the input .* and the filter file"):
        bulkbloom.dedup(inputs, "key", capacity=10_000, filter=a)
    with pytest.raises(ValueError, match="o.parquet' is both the output and the filter file"):
        bulkbloom.dedup(inputs, "key", capacity=10, filter=tmp_path / "o.parquet",
                        output=tmp_path / "o.parquet")
    with pytest.raises(ValueError, match="is a directory"):
        bulkbloom.dedup(inputs, "key", capacity=10, output=tmp_path)
    assert listing(tmp_path) == ["in"]


def test_an_input_listed_twice_is_read_twice_as_the_cli_reads_it(tmp_path, inputs):
    a, b = inputs / "a.parquet", inputs / "b.parquet"
    out = tmp_path / "twice.parquet"
    bulkbloom.dedup([a, b, a], "key", capacity=10_000, output=out)
    assert pq.read_table(out).column("row").to_pylist() == list(range(700))


def test_the_directory_is_listed_at_the_call(tmp_path, inputs):
    # A file that arrives in the directory while its stream is read is not read.
    reader = bulkbloom.dedup(inputs, "key", capacity=10_000)
    pq.write_table(pa.table({"key": ["new"], "row": [5000]}), inputs / "c.parquet")
    assert reader.read_all().column("row").to_pylist() == list(range(700))


def test_a_failed_run_leaves_the_output_and_the_filter_as_they_were(tmp_path, inputs):
    out, carried = tmp_path / "out.parquet", tmp_path / "seen.bbf"
    bulkbloom.dedup(inputs / "a.parquet", "key", capacity=10_000, filter=carried, output=out)
    out_before, filter_before = out.read_bytes(), carried.read_bytes()
    # The second file's second batch has a null key: the run stops after writing some rows.
    bad = pa.table({"key": ["x"] * 2000 + [None], "row": list(range(2001))})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="row 2500: the key column 'key' is null"):
        bulkbloom.dedup([inputs / "b.parquet", tmp_path / "bad.parquet"], "key", filter=carried,
                        output=out, force=True)
    assert (out.read_bytes(), carried.read_bytes()) == (out_before, filter_before)
    assert listing(tmp_path) == ["bad.parquet", "in", "out.parquet", "seen.bbf", "seen.bbf.lock"]


def test_an_existing_output_is_replaced_with_force_and_the_filter_saved_after_it(
        tmp_path, inputs, monkeypatch):
    out, carried = tmp_path / "out.parquet", tmp_path / "seen.bbf"
    out.write_bytes(b"an older output")
    # It may be a committed run's output, whose keys the state holds: replaced only when told.
    with pytest.raises(FileExistsError, match="out.parquet' exists: .* force=True"):
        bulkbloom.dedup(inputs, "key", capacity=10_000, filter=carried, output=out)
    assert out.read_bytes() == b"an older output" and not carried.exists()
    saved_after = []
    real_save = bulkbloom.GrownFilter.save

    def save(self, path):
        saved_after.append(out.read_bytes()[:4])  # the output is in place when the filter saves
        real_save(self, path)

    monkeypatch.setattr(bulkbloom.GrownFilter, "save", save)
    bulkbloom.dedup(inputs, "key", capacity=10_000, filter=carried, output=out, force=True)
    assert saved_after == [b"PAR1"]
    assert pq.read_table(out).column("row").to_pylist() == list(range(700))
    assert bulkbloom.load(carried).contains(pa.array(["k0", "k699"])).all()


def test_a_carried_state_needs_the_output_and_is_held_under_the_clis_lock(tmp_path, inputs):
    """Rows returned are written by the caller after the stream is read: a state saved before
    them would lose them when that write fails, so a carried path needs output=. The state is
    the CLI's to share: its lock keeps two runs from saving over each other's keys."""
    import fcntl

    out, carried = tmp_path / "out.parquet", tmp_path / "seen.bbf"
    with pytest.raises(ValueError, match="pass output="):
        bulkbloom.dedup(inputs, "key", capacity=10_000, filter=carried)
    with open(tmp_path / "seen.bbf.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(BlockingIOError, match="seen.bbf is held by another run"):
            bulkbloom.dedup(inputs, "key", capacity=10_000, filter=carried, output=out)
    assert listing(tmp_path) == ["in", "seen.bbf.lock"]
    # Through a symbolic link: the state and its lock are the real file's.
    (tmp_path / "real").mkdir()
    (tmp_path / "link.bbf").symlink_to(tmp_path / "real" / "seen.bbf")
    bulkbloom.dedup(inputs / "a.parquet", "key", capacity=10_000, filter=tmp_path / "link.bbf",
                    output=out)
    assert listing(tmp_path / "real") == ["seen.bbf", "seen.bbf.lock"]
    assert (tmp_path / "link.bbf").is_symlink()
    os.link(tmp_path / "real" / "seen.bbf", tmp_path / "other-name.bbf")
    with pytest.raises(ValueError, match="other hard links"):
        bulkbloom.dedup(inputs, "key", filter=tmp_path / "link.bbf", output=out, force=True)


def test_a_carried_state_is_the_clis_both_ways_and_grows_as_it_does(cli, tmp_path):
    """The CLI's --filter and dedup(filter=path) take turns on one state, file or directory:
    each run drops what any run before took; a run past the capacity grows the filter, as the
    CLI grows it, instead of passing its rate; a plain Filter passed counts its keys."""
    keys = [f"key{i}" for i in range(6000)]
    for name in ("seen.bbf", "seen.d/"):
        state = f"{tmp_path}/{name}"  # a state directory's trailing "/" kept
        (tmp_path / "day1.csv").write_text("".join(f"{k}\n" for k in keys[:2000]))
        run_cli(cli, "dedup", "-f", "csv:1", str(tmp_path / "day1.csv"), "-o",
                str(tmp_path / "o1.csv"), "--filter", state, "--capacity", "2500", "--fpr",
                "0.001", "--stats", "none")
        day2 = pa.table({"key": keys[1000:4000]})  # 1000 repeats of day 1, 2000 new
        out2 = tmp_path / f"o2-{name.strip('/')}.parquet"
        bulkbloom.dedup(day2, "key", filter=state, output=out2)
        assert pq.read_table(out2).column("key").to_pylist() == keys[2000:4000]
        grown = bulkbloom.load(state)
        assert isinstance(grown, bulkbloom.GrownFilter) and len(grown.generations) == 2
        assert grown.keys_inserted == 4000 and grown.current_fpr() <= 0.001
        (tmp_path / "day3.csv").write_text("".join(f"{k}\n" for k in keys[3000:6000]))
        run_cli(cli, "dedup", "-f", "csv:1", str(tmp_path / "day3.csv"), "-o",
                str(tmp_path / "o3.csv"), "--filter", state, "--stats", "none")
        assert (tmp_path / "o3.csv").read_text() == "".join(f"{k}\n" for k in keys[4000:6000])
    assert "MANIFEST" in os.listdir(tmp_path / "seen.d")
    # Keys hashed the other way (integers against strings) are refused, in both directions.
    ints = tmp_path / "ints.bbf"
    (tmp_path / "ints.txt").write_text("1\n2\n")
    run_cli(cli, "dedup", "-f", "dec", str(tmp_path / "ints.txt"), "-o", str(tmp_path / "oi"),
            "--filter", str(ints), "--capacity", "100", "--stats", "none")
    with pytest.raises(ValueError, match="keys read as dec .* the key column strings or bytes"):
        bulkbloom.dedup(pa.table({"key": ["1"]}), "key", filter=ints,
                        output=tmp_path / "o4.parquet")
    bulkbloom.dedup(pa.table({"key": [1, 3]}), "key", filter=ints, output=tmp_path / "o4.parquet")
    assert pq.read_table(tmp_path / "o4.parquet").column("key").to_pylist() == [3]
    made = tmp_path / "made.bbf"  # a new state records its keys' kind for the CLI
    bulkbloom.dedup(pa.table({"key": ["1"]}), "key", filter=made, capacity=100,
                    output=tmp_path / "o5.parquet")
    result = subprocess.run([str(cli), "dedup", "-f", "dec", str(tmp_path / "ints.txt"), "-o",
                             str(tmp_path / "o5"), "--filter", str(made), "--stats", "none"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "holds lines keys" in result.stderr, result.stderr
    (tmp_path / "stray.d").mkdir()
    (tmp_path / "stray.d" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no committed state"):
        bulkbloom.dedup(day2, "key", capacity=10, filter=tmp_path / "stray.d",
                        output=tmp_path / "o6.parquet")
    counted = bulkbloom.Filter(10_000, 0.001)
    bulkbloom.dedup(pa.table({"key": keys[:10] * 3}), "key", filter=counted).read_all()
    assert counted.keys_inserted == 10


def test_the_cli_refuses_and_keeps_the_same(cli, tmp_path):
    """The command line's `-o` under the same cases: an output that is an input (by any name)
    refused before anything is read, an input given twice read twice, an output there before
    kept when the run fails."""
    (tmp_path / "in.csv").write_text("a,1\nb,2\na,3\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "in.csv")
    for output in ("in.csv", "link.csv"):
        result = subprocess.run(
            [str(cli), "dedup", "-f", "csv:1", str(tmp_path / "in.csv"), "-o",
             str(tmp_path / output), "--capacity", "100"], capture_output=True, text=True)
        assert result.returncode == 2
        assert "is both the input and the output: writing one would destroy the other" in (
            result.stderr)
    assert (tmp_path / "in.csv").read_text() == "a,1\nb,2\na,3\n"
    run_cli(cli, "dedup", "-f", "csv:1", str(tmp_path / "in.csv"), str(tmp_path / "in.csv"),
            "-o", str(tmp_path / "out.csv"), "--capacity", "100", "--stats", "none")
    assert (tmp_path / "out.csv").read_text() == "a,1\nb,2\n"


def test_temporary_outputs_of_dead_runs_are_removed_as_the_cli_removes_them(tmp_path, inputs):
    """A run killed with SIGKILL leaves its temporary file; the next run for the same output
    removes those whose process is gone (the CLI's names, so either removes the other's)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = tmp_path / f".out.parquet.bulkbloom-{gone.stdout.strip()}-abc123"
    alive = tmp_path / f".out.parquet.bulkbloom-{os.getpid()}-abc123"
    other = tmp_path / f".other.parquet.bulkbloom-{gone.stdout.strip()}-abc123"
    for path in (dead, alive, other):
        path.write_bytes(b"half")
    bulkbloom.dedup(inputs, "key", capacity=10_000, output=tmp_path / "out.parquet")
    assert listing(tmp_path) == sorted(["in", "out.parquet", alive.name, other.name])


def test_temporary_outputs_are_judged_by_their_lock_not_only_their_pid(tmp_path, inputs):
    """A run locks its temporary output until the rename; an older unlocked one is removed
    though its name's pid is alive (a zombie, or a pid a restarted container gave again), as the
    CLI removes it, and a locked one is kept."""
    import fcntl

    hour_ago = time.time() - 3600
    stale = tmp_path / f".out.parquet.bulkbloom-{os.getpid()}-stale1"
    held = tmp_path / f".out.parquet.bulkbloom-{os.getpid()}-held01"
    for path in (stale, held):
        path.write_bytes(b"half")
        os.utime(path, (hour_ago, hour_ago))
    seen_locked = []
    table = pq.read_table(inputs)

    def batches():  # looks at the run's own temporary output while it is being written
        (own,) = [p for p in tmp_path.iterdir()
                  if p.name.startswith(".out.parquet.bulkbloom-") and p not in (stale, held)]
        with open(own, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen_locked.append(False)
            except BlockingIOError:
                seen_locked.append(True)
        yield from table.to_batches()

    with open(held, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        source = pa.RecordBatchReader.from_batches(table.schema, batches())
        bulkbloom.dedup(source, "key", capacity=10_000, output=tmp_path / "out.parquet")
        assert seen_locked == [True]
        assert listing(tmp_path) == sorted(["in", "out.parquet", held.name])
