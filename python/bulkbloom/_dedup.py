"""bulkbloom.dedup: each key's first row of an Arrow record-batch stream, batch by batch, in the
memory of the filter and a batch or two."""

from __future__ import annotations

import fcntl
import os
import secrets
from typing import Any, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _core, _keys

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
    output: Optional[PathLike] = None,
    force: bool = False,
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

    ``filter`` is what remembers the keys: a ``Filter`` or ``WindowedFilter`` (its
    ``keys_inserted`` counts the keys it took as new; a window's ``time`` names the column of
    each row's event time for an event-time window), a ``GrownFilter``, or the path of the state
    carried across runs, as the command line's ``--filter`` is (then ``output=`` is needed,
    below): a filter or window file, or a state directory (an existing directory, or a new one
    named by a ``str`` ending in ``/``: a ``pathlib.Path`` drops it), loaded if it exists (a
    filter as the ``GrownFilter`` it grows into, one without a sizing record taken as promising
    ``fpr``, as the command line carries it), else made as ``GrownFilter(capacity, fpr)``
    recording its keys' kind as the command line's ``u64`` (an integer column) or ``lines``
    (strings, bytes), which hash as they do; a state whose keys hash the other way is refused.
    It is held under the command line's lock (``NAME.lock`` beside the real path: a run
    holding it, or another such call, makes this one raise ``BlockingIOError`` before anything
    is read), and saved once the output is committed, keeping the command line's record of its
    runs (so that their reruns stay recognised) and adding none of its own. Without
    ``filter``, a new ``Filter(capacity, fpr)``; ``capacity`` is then needed, since a stream
    does not say its length.

    ``dropped=True`` gives the other rows instead: each key's repeats (and, at the filter's
    false-positive rate, a first sighting taken for one).

    The Parquet files a directory holds are listed once, at the call: files written there later
    are not read. ``output=`` writes the rows to that Parquet file instead of returning them
    (and returns None), as the command line's ``-o`` does: under a temporary name beside it
    (``.NAME.bulkbloom-PID-XXXXXX``), flushed, then renamed over ``output`` (an ``output`` that
    exists stays as it was until then; a run that fails removes its temporary file, and one
    killed leaves it for the next run to that output, or the CLI's, to remove), and only then
    is a ``filter`` path saved: a run that fails or is killed anywhere leaves the state as it
    was. A carried state needs ``output=``: rows returned are written by the caller after the
    stream was read, so the state would be saved before them, and a failed write would lose
    them for good; to write them yourself, pass ``GrownFilter.load(PATH)`` (or
    ``WindowedFilter.load``; ``load_dir`` for a directory) and ``save()`` it once they are
    written, one run at a time (that takes no lock). It keeps no record of the runs it
    committed, as the command line does, so it cannot tell a rerun of a committed run (whose
    keys the state holds: its rows would all be dropped) from a rerun after a crash between the
    output and the state: with a ``filter`` path, an ``output`` that exists is refused unless
    ``force=True`` (which nothing else reads). Before reading anything it refuses
    (``ValueError`` naming the paths) an ``output`` or ``filter`` file that is one of the input
    files under any name (a symbolic or hard link too), a ``filter`` state file with another
    hard link (the command line refuses it too), and an ``output`` ending in ``.parquet`` in a
    directory it reads, where the next run over that directory would read it as input.
    """
    pa = _keys._import_pyarrow("bulkbloom.dedup")
    files: List[Any] = []
    directories: List[PathLike] = []
    is_stream = hasattr(source, "__arrow_c_stream__")
    if not is_stream:
        listed = _parquet_files(source)
        if listed is None:
            raise TypeError(
                f"dedup reads an Arrow stream of record batches (__arrow_c_stream__) or Parquet "
                f"files, not a {type(source).__name__}"
            )
        files, directories = listed
    _check_written_paths(files, directories, output, filter)  # before any file is opened
    if not isinstance(filter, (str, os.PathLike)):
        reader = _reader(pa, source, is_stream, files)
        return _dedup(pa, reader, key, filter, capacity, fpr, time, dropped, output)
    if output is None:
        raise ValueError(
            f"filter={os.fspath(filter)!r} carries a state across runs, which is saved after the "
            "rows are committed: pass output= (a Parquet file), or bulkbloom.load() the state, "
            "pass that, and save() it once the rows are written"
        )
    with _Carried(filter) as carried:
        if os.path.lexists(output) and not force:
            raise FileExistsError(
                f"{os.fspath(output)!r} exists: it may be the output of a run committed to "
                f"{os.fspath(filter)!r}, whose keys it holds (run again, nearly every row would "
                "be dropped), or of a run that failed before saving it; pass force=True to "
                "replace it (or write each run to a name of its own)"
            )
        reader = _reader(pa, source, is_stream, files)
        key_type = reader.schema.field(_column_index(reader.schema, key, "key")).type
        # Integers hash as 64-bit values (the command line's u64, dec and hex keys), strings and
        # bytes as their bytes (its lines, csv:N and tsv:N).
        target = carried.load(capacity, fpr, integer_keys=pa.types.is_integer(key_type))
        _dedup(pa, reader, key, target, capacity, fpr, time, dropped, output)
        carried.save(target)
    return None


def _reader(pa: Any, source: Any, is_stream: bool, files: List[Any]) -> Any:
    return pa.RecordBatchReader.from_stream(source) if is_stream else _parquet_reader(pa, files)


def _dedup(pa: Any, reader: Any, key: str, target: Any, capacity: Optional[int], fpr: float,
           time: Optional[str], dropped: bool, output: Optional[PathLike]) -> Any:
    """dedup() of `reader` into `target` (None: a new Filter), which it does not save."""
    from . import Filter  # the package imports this module

    schema = reader.schema
    key_column = _column_index(schema, key, "key")
    time_column = None if time is None else _column_index(schema, time, "time")
    if target is None:
        if capacity is None:
            raise ValueError(
                "dedup needs capacity= (or filter=): a stream does not say its length")
        target = Filter(capacity, fpr)
    windowed = hasattr(target, "config")  # a WindowedFilter
    # Their keys_inserted is the caller's counter, which a saved state keeps (a GrownFilter
    # counts its own).
    counted = isinstance(target, Filter) or windowed
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
            if counted:
                target.keys_inserted += int(np.count_nonzero(new))
            rows_before += batch.num_rows
            chosen = ~new if dropped else new
            kept = batch.filter(pa.array(chosen)) if chosen.any() else None
            # The input batch is not held while the consumer handles the kept rows.
            del batch, keys
            if kept is not None:
                yield kept

    result = pa.RecordBatchReader.from_batches(schema, batches())
    if output is None:
        return result
    _write_parquet(result, output)
    return None


def _parquet_files(source: Any) -> Optional[Tuple[List[Any], List[PathLike]]]:
    """The Parquet files ``source`` names, in reading order, and the directories it names; None
    if it names no Parquet."""
    items = list(source) if isinstance(source, (list, tuple)) else [source]
    if not items or not all(_is_parquet_item(item) for item in items):
        return None
    files: List[Any] = []
    directories: List[PathLike] = []
    for item in items:
        if isinstance(item, (str, os.PathLike)) and os.path.isdir(item):
            found = sorted(
                os.path.join(item, name) for name in os.listdir(item) if name.endswith(".parquet")
            )
            if not found:
                raise ValueError(f"no .parquet file in the directory {os.fspath(item)!r}")
            files += found
            directories.append(item)
        else:
            files.append(item)
    return files, directories


def _identity(item: Any) -> Optional[Tuple[Any, ...]]:
    """What makes two names, or an open file and a name, the same file: its device and inode
    if it exists, else its absolute path with links resolved (the CLI's rule)."""
    try:
        if isinstance(item, (str, os.PathLike)):
            st = os.stat(item)
        else:
            st = os.fstat(item.fileno())
    except (OSError, AttributeError, ValueError):  # not there yet, or a file without a descriptor
        if isinstance(item, (str, os.PathLike)):
            return ("path", os.path.realpath(item))
        return None
    return ("inode", st.st_dev, st.st_ino)


def _check_written_paths(
    files: List[Any], directories: List[PathLike], output: Optional[PathLike], filter: Any
) -> None:
    """Raises ValueError when what dedup writes would replace an input or be read as one."""
    written = [("output", output)] if output is not None else []
    if isinstance(filter, (str, os.PathLike)):
        written.append(("filter file", filter))
    inputs = [(file, _identity(file)) for file in files]
    for role, path in written:
        same = _identity(path)
        for file, identity in inputs:
            if identity is not None and identity == same:
                raise ValueError(
                    f"{os.fspath(path)!r} is both the input {_name(file)} and the {role}: "
                    f"writing one would destroy the other"
                )
    if output is not None:
        if os.path.isdir(output):
            raise ValueError(f"the output {os.fspath(output)!r} is a directory: name a file")
        if os.fspath(output).endswith(".parquet"):
            parent = os.path.realpath(os.path.dirname(os.path.abspath(output)))
            for directory in directories:
                if os.path.realpath(directory) == parent:
                    raise ValueError(
                        f"the output {os.fspath(output)!r} is in the input directory "
                        f"{os.fspath(directory)!r}, whose .parquet files dedup reads: a run over "
                        f"it would read this output as input; write it elsewhere"
                    )
        for role, path in written[1:]:
            if _identity(path) == _identity(output):
                raise ValueError(
                    f"{os.fspath(path)!r} is both the output and the {role}: writing one would "
                    f"destroy the other"
                )


def _write_parquet(reader: Any, output: PathLike) -> None:
    """Writes the batches of ``reader`` to the Parquet file ``output``, atomically: under a
    temporary name in its directory, flushed, renamed into place, the directory flushed; a
    failure removes the temporary file and leaves ``output`` as it was."""
    import pyarrow.parquet as pq

    path = os.path.abspath(output)
    directory = os.path.dirname(path)
    # The CLI's temporary names and rule, from the C++ core: each of the two removes the other's.
    _core.remove_dead_temporary_outputs(path)
    stem = _core.temporary_output_stem(path)
    while True:  # created as creat() would create the file: mode 0666 less the umask
        staged = f"{stem}{os.getpid()}-{secrets.token_hex(3)}"
        try:
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
    # Locked until the rename, as the CLI locks its own: the lock, not the pid, tells other runs
    # the file is in use (through a second descriptor, as the first is closed before the rename).
    lock = os.dup(fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a filesystem without locks: others judge the file by its pid alone
        pass
    try:
        with open(fd, "wb") as file:
            with pq.ParquetWriter(file, reader.schema) as writer:
                for batch in reader:
                    writer.write_batch(batch)
            file.flush()
            os.fsync(file.fileno())
        os.replace(staged, path)
    except BaseException:
        os.unlink(staged)
        raise
    finally:
        os.close(lock)
    directory_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


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


# The command line's formats whose keys are integers (RecordFormat::integer_keys).
_INTEGER_FORMATS = ("u64", "dec", "hex")


def _held_key_format(state: Any) -> str:
    """The command line's format name a carried state's keys were read with ("": unknown): a
    grown filter's sizing record, or a window's metadata line "bulkbloom-window-keys FORMAT"."""
    if hasattr(state, "key_format"):
        return str(state.key_format)
    first = bytes(state.metadata).split(b"\n", 1)[0]
    prefix = b"bulkbloom-window-keys "
    return first[len(prefix):].decode(errors="replace") if first.startswith(prefix) else ""


class _Carried:
    """The state at a ``filter=`` path, held under the command line's lock (docs/FORMAT.md,
    "Locks and debris"): ``NAME.lock`` beside the real path, an exclusive ``flock`` from before
    the state is read until it is saved."""

    def __init__(self, path: PathLike) -> None:
        text = os.fspath(path)
        # A state directory: one that exists, or a new one named with a trailing "/".
        self.directory = text.endswith("/") or os.path.isdir(text)
        self.path = os.path.realpath(text)
        if self.directory and os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"filter={text!r} names a state directory, but {self.path!r} is a "
                             "file")
        self.lock_path = self.path + ".lock"
        self.lock_fd = -1

    def __enter__(self) -> "_Carried":
        # 0666 less the umask, as the command line creates it: a group's runs share the lock.
        self.lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.lock_fd)
            raise BlockingIOError(
                f"{self.path} is held by another run ({self.lock_path} is locked: the command "
                "line's dedup --filter, or another bulkbloom.dedup): run one at a time"
            ) from None
        except BaseException:
            os.close(self.lock_fd)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        os.close(self.lock_fd)  # releases the lock; the lock file stays, as the CLI's does

    def load(self, capacity: Optional[int], fpr: float, integer_keys: bool) -> Any:
        """The state as the command line carries it (a filter file as the GrownFilter it grows
        into; one without a sizing record taken as promising `fpr`, as the command line takes
        it), or a new GrownFilter(capacity, fpr) recording its keys' kind. A state whose keys
        hash the other way (integers against strings) is refused."""
        from . import GrownFilter, WindowedFilter

        state = None
        if self.directory and os.path.isdir(self.path) and os.listdir(self.path):
            if not os.path.exists(os.path.join(self.path, "MANIFEST")):
                raise ValueError(
                    f"{self.path} holds no committed state (no MANIFEST: a killed first commit's "
                    "files, or other files); a bulkbloom dedup --filter run removes the former")
            kind = _core.state_kind(self.path)
            if kind == "window shard":
                raise ValueError(f"{self.path} holds a window shard, not a state dedup carries")
            state = (WindowedFilter.load_dir(self.path) if kind == "window" else
                     GrownFilter.load_dir(self.path))
        elif not self.directory and os.path.lexists(self.path):
            if os.stat(self.path).st_nlink > 1:
                raise ValueError(
                    f"{self.path} has other hard links: saved by a rename, the other names would "
                    "keep the old state (the command line refuses it too); remove them or make "
                    "them symbolic links")
            kind = _core.file_kind(self.path)
            if kind not in ("filter", "grown filter", "window"):
                raise ValueError(f"{self.path} holds a {kind}, not a state dedup carries (a "
                                 "filter, grown filter or window)")
            state = (WindowedFilter.load(self.path) if kind == "window" else
                     GrownFilter.load(self.path, default_fpr=fpr))
        if state is None:
            if capacity is None:
                raise ValueError(f"{self.path} does not exist yet: pass capacity= (the keys it "
                                 "will hold over the runs it is carried through)")
            return GrownFilter(capacity, fpr, key_format="u64" if integer_keys else "lines")
        held = _held_key_format(state)
        if held and (held in _INTEGER_FORMATS) != integer_keys:
            kinds = {True: "integers", False: "strings or bytes"}
            raise ValueError(
                f"{self.path} holds keys read as {held} ({kinds[held in _INTEGER_FORMATS]}), the "
                f"key column {kinds[integer_keys]}: they hash differently, so every repeat would "
                "look new")
        return state

    def save(self, state: Any) -> None:
        if self.directory:
            state.save_dir(self.path)
        else:
            state.save(self.path)

