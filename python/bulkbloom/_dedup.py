"""bulkbloom.dedup: each key's first row of an Arrow record-batch stream, batch by batch, in the
memory of the filter and a batch or two."""

from __future__ import annotations

import os
from typing import Any, Iterator, List, Optional, Union

import numpy as np

from . import _keys

PathLike = Union[str, "os.PathLike[str]"]

# A Parquet source is read a batch of about PARQUET_BATCH_BYTES at a time through buffers of
# PARQUET_BUFFER_BYTES, so that its memory is a few batches and buffers whatever the sizes of its
# files, row groups and column chunks (pyarrow reads a whole column chunk at once by default, and
# a dataset scan reads row groups ahead). Batches are a power of two of rows, so that they divide
# the row groups pyarrow writes (1Mi rows).
PARQUET_BATCH_BYTES = 32 << 20
PARQUET_BUFFER_BYTES = 1 << 20


def dedup(
    source: Any,
    key: str,
    *,
    filter: Any = None,
    capacity: Optional[int] = None,
    fpr: float = 0.001,
    time: Optional[str] = None,
    dropped: bool = False,
) -> Any:
    """The rows of ``source`` whose ``key`` no earlier row had, in stream order, as a
    ``pyarrow.RecordBatchReader`` that reads ``source`` as it is read (pass it to polars,
    DuckDB, ``pyarrow.parquet.write_table``... or iterate its batches).

    ``source`` is anything with ``__arrow_c_stream__`` that streams record batches: a pyarrow
    Table or RecordBatchReader, a DuckDB relation, a polars DataFrame. Or Parquet: the path of a
    Parquet file, of a directory (its ``*.parquet`` files, in name order), an open binary
    Parquet file, or a list of these, read in order a batch of about 32 MB at a time through
    small buffers (memory: the filter and a few batches, whatever the size of the files and
    their row groups; a ``pyarrow.dataset`` scan reads whole row groups, some ahead, and holds
    several times more). ``key`` names its key column; its values are hashed as
    ``Filter.insert_if_absent`` hashes them (a string column as its UTF-8 bytes, which is how
    the command line's ``-f csv:N`` hashes a field: read such keys as strings, not integers, to
    keep the CLI's rows). A null key is a ``ValueError`` naming its row.

    ``filter`` is what remembers the keys: a ``Filter``, a ``WindowedFilter`` (its sliding
    window; ``time`` names the column of each row's event time for an event-time window), or
    the path of a filter file carried across runs, as the command line's ``--filter`` is: loaded
    if it exists, else made as ``Filter(capacity, fpr)``, and saved (atomically) only once the
    whole stream was read, so that a run stopped early leaves the file as it was. Without
    ``filter``, a new ``Filter(capacity, fpr)``; ``capacity`` is then needed, since a stream
    does not say its length.

    ``dropped=True`` gives the other rows instead: each key's repeats (and, at the filter's
    false-positive rate, a first sighting taken for one).
    """
    pa = _keys._import_pyarrow("bulkbloom.dedup")
    if hasattr(source, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(source)
    else:
        files = _parquet_files(source)
        if files is None:
            raise TypeError(
                f"dedup reads an Arrow stream of record batches (__arrow_c_stream__) or Parquet "
                f"files, not a {type(source).__name__}"
            )
        reader = _parquet_reader(pa, files)
    schema = reader.schema
    key_column = _column_index(schema, key, "key")
    time_column = None if time is None else _column_index(schema, time, "time")
    target, save_to = _target(filter, capacity, fpr)
    windowed = hasattr(target, "config")  # a WindowedFilter
    if time is not None and not windowed:
        raise ValueError("time= needs filter= to be an event-time WindowedFilter")

    def batches() -> Iterator[Any]:
        rows_before = 0
        for batch in reader:
            keys = batch.column(key_column)
            if keys.null_count:
                first = int(np.flatnonzero(np.asarray(keys.is_null()))[0])
                raise ValueError(f"row {rows_before + first}: the key column {key!r} is null")
            if windowed:
                times = None if time_column is None else batch.column(time_column)
                new = target.insert_if_absent(keys, times)
            else:
                new = target.insert_if_absent(keys)
            rows_before += batch.num_rows
            chosen = ~new if dropped else new
            kept = batch.filter(pa.array(chosen)) if chosen.any() else None
            # The input batch is not held while the consumer handles the kept rows.
            del batch, keys
            if kept is not None:
                yield kept
        if save_to is not None:
            target.save(save_to)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _parquet_files(source: Any) -> Optional[List[Any]]:
    """The Parquet files ``source`` names, in reading order, or None if it names none."""
    items = list(source) if isinstance(source, (list, tuple)) else [source]
    if not items or not all(_is_parquet_item(item) for item in items):
        return None
    files: List[Any] = []
    for item in items:
        if isinstance(item, (str, os.PathLike)) and os.path.isdir(item):
            found = sorted(
                os.path.join(item, name) for name in os.listdir(item) if name.endswith(".parquet")
            )
            if not found:
                raise ValueError(f"no .parquet file in the directory {os.fspath(item)!r}")
            files += found
        else:
            files.append(item)
    return files


def _is_parquet_item(item: Any) -> bool:
    return isinstance(item, (str, os.PathLike)) or (hasattr(item, "read") and hasattr(item, "seek"))


def _parquet_reader(pa: Any, files: List[Any]) -> Any:
    import pyarrow.parquet as pq

    def open_file(file: Any) -> Any:
        # Unbuffered (buffer_size=0), pyarrow reads each column chunk whole; pre_buffer reads a
        # row group's chunks ahead.
        return pq.ParquetFile(file, buffer_size=PARQUET_BUFFER_BYTES, pre_buffer=False)

    first = open_file(files[0])
    schema = first.schema_arrow

    def batches() -> Iterator[Any]:
        opened: Any = first
        for i, file in enumerate(files):
            opened = opened if i == 0 else open_file(file)
            with opened:
                if not opened.schema_arrow.equals(schema):
                    raise ValueError(
                        f"the Parquet file {_name(file)} has the columns {opened.schema_arrow}, "
                        f"not those of {_name(files[0])}: {schema}"
                    )
                yield from opened.iter_batches(batch_size=_batch_rows(opened.metadata))

    return pa.RecordBatchReader.from_batches(schema, batches())


def _batch_rows(metadata: Any) -> int:
    """The power of two of rows closest under PARQUET_BATCH_BYTES of the file's rows in Arrow
    (their uncompressed size), between 1Ki and 1Mi rows."""
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    row_bytes = sum(group.total_byte_size for group in groups) / max(1, metadata.num_rows)
    rows = int(PARQUET_BATCH_BYTES // max(1.0, row_bytes))
    return 1 << min(20, max(10, rows.bit_length() - 1))


def _name(file: Any) -> str:
    return repr(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else repr(file)


def _column_index(schema: Any, name: str, what: str) -> int:
    index = schema.get_field_index(name)
    if index < 0:
        raise ValueError(
            f"{what} column {name!r} is not in the stream (its columns: {', '.join(schema.names)})"
        )
    return int(index)


def _target(filter: Any, capacity: Optional[int], fpr: float) -> tuple:
    """The filter or window that remembers the keys, and the path to save it to at the end."""
    from . import Filter  # the package imports this module

    if filter is not None and not isinstance(filter, (str, os.PathLike)):
        return filter, None
    if filter is not None and os.path.exists(filter):
        return Filter.load(filter), filter
    if capacity is None:
        raise ValueError("dedup needs capacity= (or filter=): a stream does not say its length")
    return Filter(capacity, fpr), filter
