"""The Python package gives what the C++ library, through the command-line tool, gives on the same
keys: the same file bytes, the same dedup output, the same window answers."""

import numpy as np
import pyarrow as pa
import pytest

import bulkbloom
from conftest import run_cli, write_rfc4180_csv

CAPACITY = 100_000


def cli_build(cli, tmp_path, keys_file, *format_args):
    """The file `bulkbloom build` writes, and the filter it holds."""
    out = tmp_path / "cli.bbf"
    run_cli(cli, "build", str(keys_file), "-o", str(out), "--capacity", str(CAPACITY),
            *format_args)
    return out.read_bytes(), bulkbloom.Filter.load(out)


def same_layout(cli_filter, **options):
    """An empty Filter(CAPACITY): sized as the CLI sizes a filter for --capacity CAPACITY."""
    f = bulkbloom.Filter(CAPACITY, **options)
    assert f.layout == cli_filter.layout
    return f


def saved_bytes(tmp_path, f, name="py.bbf"):
    path = tmp_path / name
    f.save(path)
    return path.read_bytes()


def test_u64_build_file_is_byte_for_byte_the_clis(cli, tmp_path, keys):
    keys_file = tmp_path / "keys.u64"
    keys.astype("<u8").tofile(keys_file)
    expected, cli_filter = cli_build(cli, tmp_path, keys_file)
    metadata = cli_filter.metadata

    f = same_layout(cli_filter)
    f.keys_inserted = int(f.insert_if_absent(keys).sum())  # the CLI saves its distinct-key count
    f.metadata = metadata  # and its sizing, in its own encoding
    assert saved_bytes(tmp_path, f) == expected
    assert f.to_bytes() == expected

    # Every way in gives the same bits: insert(), int64 views, Arrow, every implementation.
    for implementation in bulkbloom.available_implementations():
        for threads in (1, 2):
            g = same_layout(cli_filter, implementation=implementation, threads=threads)
            g.insert(keys.view(np.int64))
            g.keys_inserted, g.metadata = f.keys_inserted, metadata
            assert g.to_bytes() == expected, (implementation, threads)
    h = same_layout(cli_filter)
    h.insert(pa.chunked_array([pa.array(keys[:1000]), pa.array(keys[1000:])]))
    h.keys_inserted, h.metadata = f.keys_inserted, metadata
    assert h.to_bytes() == expected

    loaded = bulkbloom.Filter.load(tmp_path / "cli.bbf")
    assert loaded.keys_inserted == f.keys_inserted
    assert loaded.contains(keys).all()


def test_lines_keys_hash_as_bytes_like_the_cli(cli, tmp_path):
    rng = np.random.default_rng(5)
    words = [f"user-{i}-{'é' * (i % 3)}" for i in rng.integers(0, 30_000, size=40_000)]
    words += ["x", "tab\there"]  # (an empty line is no key: see the csv test for "")
    keys_file = tmp_path / "keys.txt"
    keys_file.write_bytes(("\n".join(words) + "\n").encode())
    expected, cli_filter = cli_build(cli, tmp_path, keys_file, "-f", "lines")
    metadata = cli_filter.metadata

    distinct = len(set(words))
    batches = {
        "list of str": words,
        "numpy str": np.array(words),
        "numpy bytes": np.array([w.encode() for w in words]),
        "object array": np.array(words, dtype=object),
        "arrow string": pa.array(words),
        "arrow large_string": pa.array(words, type=pa.large_string()),
        "arrow binary": pa.array([w.encode() for w in words], type=pa.binary()),
        "arrow large_binary": pa.array([w.encode() for w in words], type=pa.large_binary()),
        "arrow string_view": pa.array(words, type=pa.string_view()),
        "arrow dictionary": pa.array(words).dictionary_encode(),
        "arrow chunked, sliced": pa.chunked_array(
            [pa.array(["pad"] + words[:7])[1:], pa.array(words[7:] + ["pad"])[:-1]]
        ),
    }
    for name, batch in batches.items():
        f = same_layout(cli_filter)
        is_new = f.insert_if_absent(batch)
        assert int(is_new.sum()) == distinct, name
        f.keys_inserted, f.metadata = distinct, metadata
        assert f.to_bytes() == expected, name
    single = same_layout(cli_filter)
    for w in set(words):
        single.add(w)
    single.keys_inserted, single.metadata = distinct, metadata
    assert single.to_bytes() == expected
    assert all(w in single for w in words[:100]) and all(w.encode() in single for w in words[:100])


def test_csv_keys_are_the_keys_pyarrow_reads(cli, tmp_path):
    """csv:N is RFC 4180, as pyarrow reads it (with newlines_in_values): quoted fields with line
    breaks, commas and doubled quotes before, in and after the key column give the CLI the keys
    pyarrow gives the Python package, so both set the same bits."""
    from pyarrow import csv as pacsv

    source = tmp_path / "in.csv"
    write_rfc4180_csv(source)
    expected, cli_filter = cli_build(cli, tmp_path, source, "-f", "csv:2")

    table = pacsv.read_csv(source, read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                           parse_options=pacsv.ParseOptions(newlines_in_values=True),
                           convert_options=pacsv.ConvertOptions(column_types={"f1": pa.binary()}))
    keys = table.column("f1")
    assert {b'q"q', b"two\nlines", b"cr\r\nlf", b"", b'"'} <= set(keys.to_pylist())
    f = same_layout(cli_filter)
    f.keys_inserted = int(f.insert_if_absent(keys).sum())
    f.metadata = cli_filter.metadata
    assert f.keys_inserted == cli_filter.keys_inserted
    assert f.to_bytes() == expected


def test_negative_dec_keys_are_pythons_negative_ints(cli, tmp_path):
    """dec reads -1 as the Python package takes the int -1: its two's-complement pattern."""
    values = [-1, -(2**63), 5, -42]
    source = tmp_path / "keys.dec"
    source.write_text("".join(f"{v}\n" for v in values))
    expected, cli_filter = cli_build(cli, tmp_path, source, "-f", "dec")
    f = same_layout(cli_filter)
    f.keys_inserted = int(f.insert_if_absent(values).sum())
    f.metadata = cli_filter.metadata
    assert f.to_bytes() == expected
    assert (2**64 - 1) in f and (2**63) in f


def test_dedup_output_is_the_clis(cli, tmp_path, keys):
    keys_file = tmp_path / "keys.u64"
    keys.astype("<u8").tofile(keys_file)
    run_cli(cli, "dedup", str(keys_file), "-o", str(tmp_path / "unique.u64"),
            "--capacity", str(CAPACITY))
    f = same_layout(cli_build(cli, tmp_path, keys_file)[1])  # dedup sizes as build does
    unique = keys[f.insert_if_absent(keys)]
    assert unique.astype("<u8").tobytes() == (tmp_path / "unique.u64").read_bytes()
    # No repeat gets through; only false positives are dropped, at about the modelled rate.
    assert len(np.unique(unique)) == len(unique)
    assert len(np.unique(keys)) - len(unique) <= 20


def test_record_window_output_is_the_clis(cli, tmp_path):
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 3_000, size=60_000, dtype=np.uint64)
    keys_file = tmp_path / "keys.u64"
    keys.astype("<u8").tofile(keys_file)
    run_cli(cli, "dedup", str(keys_file), "-o", str(tmp_path / "unique.u64"),
            "--window-records", "2000", "--generations", "3", "--fpr", "0.01")
    w = bulkbloom.WindowedFilter.for_records(2000, 0.01, generations=3)
    unique = keys[w.insert_if_absent(keys)]
    assert unique.astype("<u8").tobytes() == (tmp_path / "unique.u64").read_bytes()
    assert w.records_seen == len(keys)


def test_event_time_window_output_is_the_clis(cli, tmp_path):
    rng = np.random.default_rng(8)
    count = 30_000
    keys = rng.integers(0, 2_000, size=count, dtype=np.uint64)
    times = np.sort(rng.integers(0, 40 * 3600, size=count))
    times[::50] -= 60  # some records come a minute late
    csv = tmp_path / "events.csv"
    csv.write_text("".join(f"{k},{t}\n" for k, t in zip(keys.tolist(), times.tolist())))
    run_cli(cli, "dedup", "-f", "csv:1", str(csv), "-o", str(tmp_path / "unique.csv"),
            "--window", "6h", "--time-field", "2", "--lateness", "2m", "--capacity", "20000")
    cli_unique = [int(line.split(",")[0]) for line in (tmp_path / "unique.csv").read_text().split()]
    # The CLI's sizing: --capacity records within one window.
    w = bulkbloom.WindowedFilter.for_event_time(20000 / (6 * 3600), 6 * 3600, 0.001,
                                                generations=4, lateness=120)
    python_unique = keys[w.insert_if_absent(keys, times)].tolist()
    assert python_unique == cli_unique
    assert w.clock_time == int(times.max())


def test_parquet_bytes_round_trip(tmp_path):
    f = bulkbloom.Filter.from_layout("sb256", 1000)
    f.insert(np.arange(5000, dtype=np.uint64))
    parquet = f.to_parquet_bytes()
    g = bulkbloom.Filter.from_parquet_bytes(parquet)
    assert g.layout == f.layout
    assert g.to_bytes() == f.to_bytes()
    with pytest.raises(ValueError):
        bulkbloom.Filter(1000).to_parquet_bytes()  # sb512: not a Parquet filter
    with pytest.raises(ValueError, match="high32"):
        # Parquet readers place keys with high32, so a full64 filter is not theirs either.
        bulkbloom.Filter.from_layout("sb256", 1000, index="full64").to_parquet_bytes()
    with pytest.raises(bulkbloom.FormatError):
        bulkbloom.Filter.from_parquet_bytes(parquet[:10])


def test_num_blocks_reproduces_a_layout_made_elsewhere(cli, tmp_path, keys):
    """`--shape S --num-blocks B --seed N --index I` gives the CLI exactly a layout another tool
    chose (a Spark filter directory's: seed 42, blocks sized for its row count), so the same keys
    give the same bits."""
    elsewhere = bulkbloom.Filter.from_layout("sb512", 12_345, seed=42, hash="xxh64", index="full64")
    elsewhere.insert(keys)
    keys_file = tmp_path / "keys.u64"
    keys.astype("<u8").tofile(keys_file)
    _, cli_filter = cli_build(cli, tmp_path, keys_file, "--shape", "sb512", "--num-blocks",
                              "12345", "--seed", "42", "--index", "full64")
    assert cli_filter.layout == elsewhere.layout
    assert cli_filter == elsewhere  # same layout, same bits
