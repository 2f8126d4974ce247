"""bulkbloom: blocked Bloom filters for billions of keys, on numpy and Arrow batches at C++ speed.

>>> import numpy as np, bulkbloom
>>> f = bulkbloom.Filter(1_000_000, 0.001)
>>> ids = np.array([7, 42, 7, 99, 42], dtype=np.uint64)
>>> ids[f.insert_if_absent(ids)]
array([ 7, 42, 99], dtype=uint64)

Keys
    A bulk call (``insert``, ``contains``, ``insert_if_absent``) takes a batch: a 1-D numpy
    integer array (``uint64`` and ``int64`` used in place; a negative ``int64`` key is its
    two's-complement 64-bit pattern, so ``-1`` and ``2**64 - 1`` are one key), any object with
    the buffer protocol of integers or ``__dlpack__`` (host memory), a pyarrow integer, string, binary or
    fixed-size binary array or chunked array (its buffers used in place; a ``uuid`` array's keys
    are its 16 bytes, as Parquet stores them), a pandas Series (nullable ``Int64``, ``str``,
    categorical: through Arrow), any object with the Arrow PyCapsule interface
    (``__arrow_c_array__`` / ``__arrow_c_stream__``: polars Series, DuckDB results, nanoarrow,
    pandas >= 3; a one-column table) read in place chunk by chunk (string and binary views, what
    polars holds, included), a numpy ``str`` / ``bytes`` / ``StringDType`` array, or a list
    or tuple (all ints, all ``str`` or all ``bytes`` / ``bytearray``); ``update`` also takes any
    iterable. A null, NA or NaN among the keys is a ``ValueError`` naming its position. A buffer of single bytes (``bytes``, ``bytearray``, ``memoryview(b"abc")``) is
    one key everywhere, like ``bytes``: ``add`` and ``in`` take it, a bulk call wants a list.
    Integer keys are hashed as their 8 little-endian bytes; ``str`` keys as their UTF-8 bytes and
    ``bytes`` keys as they are, exactly like the command line's ``dec`` and ``lines`` keys, so a
    filter built here has the bits of the one ``bulkbloom build`` makes of the same keys.

Shards
    A filter can be cut into S block ranges that live in different processes (DESIGN §9):
    ``shard_of(layout, keys, S)`` routes each key to its shard, a ``FilterShard`` (or, of a
    sliding window, a ``WindowShard``) answers for the keys it owns, and ``split``, ``concat`` and
    ``reshard`` copy bytes between one filter or window and S shards. The shards' bytes, concatenated, are byte for byte the one filter built from the same
    keys, so every answer is the same (``split`` says where ``keys_inserted`` and ``metadata``
    go). ``bulkbloom.spark`` builds on them.

Threads
    Bulk calls release the GIL and are cut into chunks of ``chunk_keys`` keys; a call on a filter
    waits for another thread's call on the same filter to finish its chunk. Ctrl-C
    (KeyboardInterrupt) is honoured between chunks: the chunks done stay applied, none is left
    half done.

Errors
    ``ValueError`` for bad parameters and malformed batches, ``TypeError`` for keys of the wrong
    type, ``FormatError`` for a damaged or foreign file, ``IoError`` (an ``OSError``, with
    ``errno`` and ``filename``) when the operating system fails a call, ``BackendUnavailable``
    for a backend this build or machine lacks, ``MemoryError`` when the filter's memory cannot be
    had. Where Python's own ``OSError`` would be a ``FileNotFoundError``, ``PermissionError`` and
    so on, the ``IoError`` raised is one too (``IoError.FileNotFoundError``, ...).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _core, _keys
from ._core import BackendUnavailable, Error, FormatError, IoError
from ._dedup import dedup

__all__ = [
    "Filter",
    "GrownFilter",
    "WindowedFilter",
    "Layout",
    "WindowConfig",
    "FilterShard",
    "WindowShard",
    "shard_of",
    "split",
    "concat",
    "reshard",
    "load",
    "Error",
    "FormatError",
    "IoError",
    "BackendUnavailable",
    "available_implementations",
    "chunk_keys",
    "dedup",
]
__version__ = "0.1.0"

# IoError's subclass for each OSError subclass Python picks by errno: the core raises
# IoError.FileNotFoundError for a missing file. Class attributes named by their qualified names,
# so that pickle finds them in any process.
for _kind in (
    BlockingIOError, ChildProcessError, ConnectionError, BrokenPipeError, ConnectionAbortedError,
    ConnectionRefusedError, ConnectionResetError, FileExistsError, FileNotFoundError,
    InterruptedError, IsADirectoryError, NotADirectoryError, PermissionError, ProcessLookupError,
    TimeoutError,
):
    setattr(IoError, _kind.__name__, type(_kind.__name__, (IoError, _kind), {
        "__module__": __name__,
        "__qualname__": f"IoError.{_kind.__name__}",
        "__doc__": f"An IoError that Python's own OSError would raise as {_kind.__name__}.",
    }))
del _kind

#: Keys per chunk of a bulk call (the GIL is released per chunk; Ctrl-C is seen between chunks).
chunk_keys: int = _core.chunk_keys

PathLike = Union[str, "os.PathLike[str]"]
#: What a bulk call takes: see "Keys" in the module's documentation.
Keys = _keys.Keys


def available_implementations() -> list[str]:
    """Names of every CPU implementation this build can run on this machine, best first."""
    return _core.available_implementations()


class Layout(NamedTuple):
    """A filter's bit layout: block shape, block count, key hash, seed and block index
    (DESIGN §1)."""

    shape: str
    num_blocks: int
    hash: str
    seed: int
    index: str
    size_bytes: int
    description: str

    def __str__(self) -> str:
        return self.description

    @classmethod
    def for_capacity(cls, capacity: int, fpr: float = 0.001) -> "Layout":
        """The layout ``Filter(capacity, fpr)`` has, without allocating the filter."""
        return cls(**_core.layout_for_capacity(_count(capacity, "capacity"), float(fpr)))

    @classmethod
    def of(
        cls, shape: str, num_blocks: int, seed: int = 0, hash: str = "xxh64",
        index: str = "high32",
    ) -> "Layout":
        """An explicit layout (arguments as for ``Filter.from_layout``), checked."""
        return cls(
            **_core.layout_of(shape, _count(num_blocks, "num_blocks"), hash, _count(seed, "seed"),
                              index)
        )


class WindowConfig(NamedTuple):
    """A window's clock, length T, generations G, lateness L and the layout of each generation."""

    clock: str
    window: int
    generations: int
    lateness: int
    period: int
    forget_after: int
    memory_bytes: int
    generation: Layout
    description: str
    #: The promised false-positive rate (0.0: not known, a window from a version 1 file).
    fpr: float = 0.0
    #: Every generation's block count is a multiple of it: S window shards size their
    #: generations per period when S divides it (``shardable_by``; docs/WINDOW.md).
    block_multiple: int = 1

    def __str__(self) -> str:
        return self.description

    @classmethod
    def of(
        cls, clock: str, window: int, generation: Layout, *, generations: int = 4,
        lateness: int = 0, fpr: float = 0.0, block_multiple: int = 1,
    ) -> "WindowConfig":
        """An explicit configuration (arguments as for the ``WindowedFilter`` constructor, the
        generation's layout as a ``Layout``; ``fpr`` the promise, 0.0 when not known;
        ``block_multiple`` a divisor of the generation's block count), checked."""
        return cls._from_dict(
            _core.window_config_of(
                clock, _count(window, "window"), _count(generations, "generations"),
                _count(lateness, "lateness"), *_layout_args(generation), float(fpr),
                _count(block_multiple, "block_multiple"), 0,
            )
        )

    def shardable_by(self, num_shards: int) -> "WindowConfig":
        """This configuration with ``block_multiple`` a multiple of ``num_shards`` too and the
        generation's block count rounded up to it, so that ``num_shards`` window shards of it
        size their generations per period (with a promise, ``fpr``)."""
        return type(self)._from_dict(
            _core.window_config_of(
                self.clock, self.window, self.generations, self.lateness,
                *_layout_args(self.generation), float(self.fpr), self.block_multiple,
                _shard_count(num_shards),
            )
        )

    @classmethod
    def for_event_time(
        cls, records_per_unit: float, window: int, fpr: float = 0.001, *, generations: int = 4,
        lateness: int = 0,
    ) -> "WindowConfig":
        """The configuration ``WindowedFilter.for_event_time`` has, without allocating it."""
        return cls._from_dict(
            _core.window_config_for_event_time(
                float(records_per_unit), _count(window, "window"), float(fpr),
                _count(generations, "generations"), _count(lateness, "lateness"),
            )
        )

    @classmethod
    def _from_dict(cls, values: dict) -> "WindowConfig":
        values["generation"] = Layout(**values["generation"])
        return cls(**values)


def _flags(count: int) -> np.ndarray:
    return np.empty(count, dtype=np.bool_)


def _run_pieces(pieces: list, out: Optional[np.ndarray], on_u64: Any, on_bytes: Any) -> int:
    """Runs a bulk call piece by piece, each writing its slice of `out`; sums what they return."""
    total = 0
    start = 0
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        args = () if out is None else (out[start : start + length].view(np.uint8),)
        if isinstance(piece, _keys.U64Piece):
            result = on_u64(piece.keys, *args)
        else:
            result = on_bytes(*_keys.bytes_args(piece), *args)
        total += result or 0
        start += length
    return total


class _Saved:
    """What filters and windows share: the C++ object, and the caller's ``keys_inserted`` counter
    and ``metadata`` bytes that files store beside the bits."""

    __slots__ = ("_core", "_keys_inserted", "_metadata", "__weakref__")

    _core: Any

    # Both are checked when set, not first at save(), where the mistake would be far from its cause.
    @property
    def keys_inserted(self) -> int:
        """The caller's key counter that files store beside the bits, in [0, 2**64)."""
        return self._keys_inserted

    @keys_inserted.setter
    def keys_inserted(self, value: int) -> None:
        self._keys_inserted = _count(value, "keys_inserted")

    @property
    def metadata(self) -> bytes:
        """The caller's bytes that files store beside the bits (any bytes-like value is copied)."""
        return self._metadata

    @metadata.setter
    def metadata(self, value: Any) -> None:
        if isinstance(value, str):
            raise TypeError("metadata must be bytes, not str: encode it")
        try:
            self._metadata = bytes(memoryview(value))
        except TypeError:
            raise TypeError(f"metadata must be bytes, not {type(value).__name__}") from None

    @classmethod
    def _wrap(cls, core: Any, keys_inserted: int = 0, metadata: bytes = b"") -> Any:
        self = cls.__new__(cls)
        self._core = core
        self.keys_inserted = keys_inserted
        self.metadata = metadata
        return self

    @property
    def implementation(self) -> str:
        """The running implementation, e.g. ``"cpu/AVX3_ZEN4"``, ``"cpu/scalar"``, ``"cuda/sm_90"``."""
        return self._core.implementation

    def save(self, path: PathLike) -> None:
        """Writes it (with ``keys_inserted`` and ``metadata``) to ``path`` in the project's file
        format, atomically: a crash leaves the old file or the new one."""
        self._core.save(os.fspath(path), self.keys_inserted, self.metadata)


class _BulkCalls(_Saved):
    """The batch calls of filters and shards."""

    __slots__ = ()

    def _pieces_to_write(self, keys: Keys) -> list:
        """The pieces of a batch that insert or insert_if_absent is given."""
        return _keys.key_pieces(keys)

    def insert(self, keys: Keys) -> None:
        """Inserts every key of a batch."""
        _run_pieces(self._pieces_to_write(keys), None, self._core.insert, self._core.insert_bytes)

    def contains(self, keys: Keys) -> np.ndarray:
        """A bool array: True where the key may be present (never False for an inserted key)."""
        pieces = _keys.key_pieces(keys)
        out = _flags(sum(map(_keys.piece_length, pieces)))
        _run_pieces(pieces, out, self._core.contains, self._core.contains_bytes)
        return out

    def insert_if_absent(self, keys: Keys) -> np.ndarray:
        """The dedup primitive: inserts each key and returns a bool array, True where the key was
        absent before (counting earlier keys of the batch), exactly as the loop
        ``new = key not in f; f.add(key)`` would. A repeated key is reported new at most once.
        ``keys[f.insert_if_absent(keys)]`` is the batch without its repeats."""
        pieces = self._pieces_to_write(keys)
        out = _flags(sum(map(_keys.piece_length, pieces)))
        _run_pieces(
            pieces, out, self._core.insert_if_absent, self._core.insert_if_absent_bytes
        )
        return out


class Filter(_BulkCalls):
    """A blocked Bloom filter over 64-bit integer or byte-string keys.

    ``Filter(capacity, fpr)`` is sized as ``bulkbloom build --capacity capacity --fpr fpr`` sizes
    a filter: the smallest (over all block shapes) whose modelled false-positive rate after
    ``capacity`` distinct keys is at most three quarters of ``fpr``, the rest kept for the
    generations the command line adds should it outgrow that (``GrownFilter``). Its ``metadata``
    starts as the sizing record the command line writes (docs/FORMAT.md), so that
    ``bulkbloom dedup --filter`` holds the saved filter to ``fpr`` at ``capacity`` keys; keep it
    in front of bytes of your own (``f.metadata += b"..."``). A key that was inserted is always
    reported present; one that was not is reported present with at most about ``fpr``.

    ``backend`` is ``"auto"`` (CUDA when built and a GPU is present, else the CPU), ``"cpu"`` or
    ``"cuda"``; ``implementation`` forces one (``"cpu/scalar"``, ``"cpu/AVX2"``, ...; empty: the
    best, or the environment variable ``BULKBLOOM_IMPL``); ``threads`` is the worker count of
    bulk calls (0: the library's default, one per hardware thread where that measured faster).
    Every choice gives the same answers and bytes.

    ``keys_inserted`` and ``metadata`` are the caller's counter and bytes that ``save()`` stores
    with the bits (the command line stores the number of distinct keys it inserted) and that
    ``load()`` gives back; the filter itself does not change them.
    """

    __slots__ = ()

    def __init__(
        self,
        capacity: int,
        fpr: float = 0.001,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        capacity = _count(capacity, "capacity")
        sized = _core.promised_layout(capacity, float(fpr))
        self._core = _core.Filter(
            sized["shape"], sized["num_blocks"], sized["hash"], sized["seed"], sized["index"],
            *_options(backend, implementation, threads),
        )
        self.keys_inserted = 0
        self.metadata = _core.sizing_record(capacity, float(fpr), "")

    @classmethod
    def from_layout(
        cls,
        shape: str,
        num_blocks: int,
        seed: int = 0,
        hash: str = "xxh64",
        index: str = "high32",
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> "Filter":
        """An empty filter of an explicit layout: ``shape`` is ``"sb256"`` (Parquet's split
        block), ``"sb256x4"``, ``"sb512"`` or ``"sb512x16"``; ``hash`` is ``"xxh64"`` or
        ``"identity"`` (keys that are already uniform 64-bit hashes); ``index`` is ``"high32"``
        (Parquet's block index) or ``"full64"`` (even block loads beyond ~10^8 blocks)."""
        core = _core.Filter(
            shape, _count(num_blocks, "num_blocks"), hash, _count(seed, "seed"), index,
            *_options(backend, implementation, threads),
        )
        return cls._wrap(core)

    # -- what it is ---------------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """The filter's layout."""
        return Layout(**self._core.layout)

    @property
    def threads(self) -> int:
        """Worker threads used by bulk calls."""
        return self._core.threads

    def __repr__(self) -> str:
        return f"<bulkbloom.Filter {self.layout.description} on {self.implementation}>"

    # -- single keys --------------------------------------------------------------------------

    def add(self, key: Union[int, str, bytes]) -> None:
        """Inserts one key (an int in [-2**63, 2**64), a str or bytes)."""
        value = _keys.scalar_key(key)
        if isinstance(value, int):
            self._core.insert_one(value)
        else:
            piece = _keys.bytes_piece(value)
            self._core.insert_bytes(piece.offsets, piece.data)

    def __contains__(self, key: Union[int, str, bytes]) -> bool:
        value = _keys.scalar_key(key)
        if isinstance(value, int):
            return self._core.contains_one(value)
        piece = _keys.bytes_piece(value)
        out = _flags(1)
        self._core.contains_bytes(piece.offsets, piece.data, out.view(np.uint8))
        return bool(out[0])

    # -- batches: insert, contains, insert_if_absent (_BulkCalls) ----------------------------------

    def update(self, *iterables: Iterable[Any]) -> None:
        """Inserts the keys of each argument: a batch as insert() takes, or any iterable of keys
        (read in batches of ``chunk_keys``)."""
        for keys in iterables:
            if _is_batch(keys):
                self.insert(keys)
                continue
            iterator = iter(keys)
            while batch := list(itertools.islice(iterator, chunk_keys)):
                self.insert(batch)

    # -- set operations -----------------------------------------------------------------------

    def __ior__(self, other: "Filter") -> "Filter":
        self._core.merge(_same_kind(other, "|="))
        return self

    def __or__(self, other: "Filter") -> "Filter":
        result = self.copy()
        result |= other
        return result

    def __iand__(self, other: "Filter") -> "Filter":
        self._core.intersect(_same_kind(other, "&="))
        return self

    def __and__(self, other: "Filter") -> "Filter":
        result = self.copy()
        result &= other
        return result

    # Set conventions, as rbloom and Python's set keep them where a Bloom filter can. No len():
    # a Bloom filter cannot count its keys (estimated_count() estimates them from the bits,
    # keys_inserted is the caller's own counter), so it does not pretend to be Sized.

    def __bool__(self) -> bool:
        """False for an empty filter (no bit set), as for an empty set."""
        return self._core.popcount() != 0

    def __eq__(self, other: object) -> bool:
        """Same layout and bits (``keys_inserted`` and ``metadata`` are not compared): true for
        two filters of one layout given the same keys, in any order and batches."""
        if not isinstance(other, Filter):
            return NotImplemented
        return self.layout == other.layout and self._core.same_bits(other._core)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a set

    def issubset(self, other: "Filter") -> bool:
        """True if every bit set here is set in ``other`` (of the same layout, else
        ``ValueError``): always when ``other`` holds every key this one holds, and by chance
        sometimes otherwise, as a key's false positive."""
        return self._core.bits_within(_same_kind(other, "issubset"))

    def issuperset(self, other: "Filter") -> bool:
        """``other.issubset(self)``."""
        return _same_kind(other, "issuperset").bits_within(self._core)

    def __le__(self, other: "Filter") -> bool:
        return self.issubset(other) if isinstance(other, Filter) else NotImplemented

    def __ge__(self, other: "Filter") -> bool:
        return self.issuperset(other) if isinstance(other, Filter) else NotImplemented

    def copy(self) -> "Filter":
        """An independent copy (same layout, bits, backend and options)."""
        return Filter._wrap(self._core.copy(), self.keys_inserted, self.metadata)

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> "Filter":
        return self.copy()

    def clear(self) -> None:
        """Clears every bit."""
        self._core.clear()

    # -- what it holds ------------------------------------------------------------------------

    def estimated_count(self) -> float:
        """Estimated number of distinct keys inserted, from the fraction of set bits."""
        return self._core.estimated_count()

    def current_fpr(self) -> float:
        """The false-positive rate as the filter is now (from the bits of each block)."""
        return self._core.current_fpr()

    def expected_fpr(self, n: int) -> float:
        """The modelled false-positive rate after ``n`` distinct keys."""
        return self._core.expected_fpr(_count(n, "n"))

    def popcount(self) -> int:
        """Number of set bits."""
        return self._core.popcount()

    # -- persistence --------------------------------------------------------------------------

    @classmethod
    def load(
        cls, path: PathLike, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "Filter":
        """Reads and fully verifies a filter file (``FormatError`` if it is damaged)."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.Filter.load(os.fspath(path), *options))

    @classmethod
    def map(
        cls, path: PathLike, *, verify: bool = True, implementation: str = "", threads: int = 0
    ) -> "Filter":
        """Maps a filter file into memory without copying it (pages are read on first touch).
        Inserts change only this process's copy of the touched pages, never the file.
        ``verify=False`` skips reading every page for the checksum. A file shorter than its
        header says is a ``FormatError`` here; but a file truncated *in place* while mapped
        is undefined: the next read of a page past its new end kills the process with SIGBUS
        (no check per call can close that race). Replace a mapped file as ``save()`` does,
        by writing another and renaming it over the path: the mapping keeps the old bytes."""
        options = _map_options(verify, implementation, threads)
        return cls._wrap(*_core.Filter.map(os.fspath(path), *options))

    def to_bytes(self) -> bytes:
        """The bytes ``save()`` would write."""
        return self._core.to_file_bytes(self.keys_inserted, self.metadata)

    @classmethod
    def from_bytes(
        cls, data: Any, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "Filter":
        """A filter from the bytes of a filter file (any buffer: bytes, memoryview, numpy)."""
        image = _byte_buffer(data)
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.Filter.from_file_bytes(image, *options))

    def __reduce__(self) -> tuple:
        # Through the file format: a pickled filter answers identically in any process.
        return (Filter.from_bytes, (self.to_bytes(),))

    def to_parquet_bytes(self) -> bytes:
        """The Parquet split-block Bloom filter of this filter (Thrift header + bitset), for an
        ``sb256``, ``xxh64``, seed-0 filter with the ``high32`` block index, which is how
        Parquet readers place keys (``ValueError`` otherwise)."""
        return self._core.to_parquet()

    @classmethod
    def from_parquet_bytes(
        cls, data: Any, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "Filter":
        """A filter from a Parquet split-block Bloom filter (header followed by the bitset)."""
        options = _options(backend, implementation, threads)
        core = _core.Filter.from_parquet(_byte_buffer(data), *options)
        return cls._wrap(core)


class GrownFilter(_BulkCalls):
    """A filter that grows instead of passing its false-positive rate, as the command line's
    ``dedup --filter`` does: generations, oldest first, each sized for the load it was added for;
    a key is present when some generation may hold it. ``GrownFilter(capacity, fpr)`` starts as
    ``Filter(capacity, fpr)`` does; ``insert_if_absent`` adds a generation before a batch whose
    new keys could pass ``fpr`` (docs/FORMAT.md, "Carried filters").

    ``load`` reads what the command line writes with ``--filter`` (a grown filter file, or a
    filter file while it has one generation; a filter without a sizing record is taken as
    promising ``default_fpr``); ``save`` writes the same, with ``metadata`` (the caller's bytes,
    after the sizing record). ``keys_inserted`` is the keys its generations took.
    """

    __slots__ = ()

    def __init__(
        self,
        capacity: int,
        fpr: float = 0.001,
        *,
        key_format: str = "",
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        self._core = _core.GrownFilter.for_capacity(
            _count(capacity, "capacity"), float(fpr), _text(key_format, "key_format"),
            *_options(backend, implementation, threads),
        )
        self.metadata = b""

    @classmethod
    def _wrap(cls, core: Any, metadata: bytes = b"") -> "GrownFilter":  # type: ignore[override]
        self = cls.__new__(cls)
        self._core = core
        self.metadata = metadata
        return self

    @property
    def keys_inserted(self) -> int:  # type: ignore[override]
        """Keys the generations took (the saved count; the filter keeps it)."""
        return self._core.keys_inserted

    @property
    def promised_fpr(self) -> float:
        """The rate the filter never passes."""
        return self._core.promised_fpr

    @property
    def capacity(self) -> int:
        """Keys the first generation is sized for."""
        return self._core.capacity

    @property
    def key_format(self) -> str:
        """How its keys were read (the command line's ``--format``; empty: unknown)."""
        return self._core.key_format

    @property
    def generations(self) -> list[dict]:
        """Each generation, oldest first: ``layout`` (a Layout), ``capacity``, ``target_fpr``,
        ``keys``."""
        return [dict(g, layout=Layout(**g["layout"])) for g in self._core.generations]

    def __repr__(self) -> str:
        return (f"<bulkbloom.GrownFilter of {len(self.generations)} generation(s), promising "
                f"{self.promised_fpr:g}>")

    def insert(self, keys: Keys) -> None:
        """Inserts every key of a batch (``insert_if_absent`` without its answers)."""
        self.insert_if_absent(keys)

    def add(self, key: Union[int, str, bytes]) -> None:
        """Inserts one key (an int in [-2**63, 2**64), a str or bytes)."""
        self.insert([_keys.scalar_key(key)])

    def __contains__(self, key: Union[int, str, bytes]) -> bool:
        return bool(self.contains([_keys.scalar_key(key)])[0])

    def current_fpr(self) -> float:
        """The false-positive rate now, from the bits of every generation."""
        return self._core.current_fpr()

    @classmethod
    def load(
        cls, path: PathLike, *, default_fpr: float = 0.001, backend: str = "auto",
        implementation: str = "", threads: int = 0,
    ) -> "GrownFilter":
        """Reads and fully verifies a grown filter file or a filter file."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.GrownFilter.load(os.fspath(path), float(default_fpr), *options))

    def save(self, path: PathLike) -> None:
        """Writes it (with ``metadata``) to ``path`` atomically, as the command line does."""
        self._core.save(os.fspath(path), self.metadata)

    def to_bytes(self) -> bytes:
        """The bytes ``save()`` would write."""
        return self._core.to_file_bytes(self.metadata)

    @classmethod
    def from_bytes(
        cls, data: Any, *, default_fpr: float = 0.001, backend: str = "auto",
        implementation: str = "", threads: int = 0,
    ) -> "GrownFilter":
        """A grown filter from the bytes of its file (any buffer)."""
        options = _options(backend, implementation, threads)
        image = _byte_buffer(data)
        return cls._wrap(*_core.GrownFilter.from_file_bytes(image, float(default_fpr), *options))

    def __reduce__(self) -> tuple:
        return (GrownFilter.from_bytes, (self.to_bytes(),))


class _WindowState(_Saved):
    """What windows and window shards share: the configuration, the clock and reads."""

    __slots__ = ()

    @property
    def config(self) -> WindowConfig:
        """The (whole) window's configuration."""
        values = self._core.config
        values["generation"] = Layout(**values["generation"])
        return WindowConfig(**values)

    @property
    def records_seen(self) -> int:
        """Records processed so far (new and dropped); a window shard on event time counts its
        own, on the records clock the whole window's as far as it knows."""
        return self._core.records_seen

    @property
    def clock_time(self) -> Optional[int]:
        """Event-time clock: the largest time seen, or None before the first record."""
        return self._core.clock_time

    @property
    def rotations(self) -> int:
        """Periods the clock has moved on since it started. Each clears a generation, but a jump
        of G or more periods clears all G once and still counts every period."""
        return self._core.rotations

    def contains(self, keys: Keys) -> np.ndarray:
        """A bool array: True where some generation may hold the key. A pure read."""
        pieces = _keys.key_pieces(keys)
        out = _flags(sum(map(_keys.piece_length, pieces)))
        _run_pieces(pieces, out, self._core.contains, self._core.contains_bytes)
        return out

    def advance_to(self, time: Any) -> None:
        """Event-time clock: moves the clock to ``time`` with no record (an idle source's
        progress), rotating as due; ``time`` is read as ``insert_if_absent`` reads each record's
        (an integer, or a datetime64 taken in seconds). Earlier times change nothing. (A window
        shard on the records clock takes the whole window's record count.)"""
        self._core.advance_to(_keys.event_time(time))

    def current_fpr(self) -> float:
        """The false-positive rate as it is now (of a shard: of its blocks)."""
        return self._core.current_fpr()

    def set_sizing(self, min_keys: int = 0, max_keys: int = 0) -> None:
        """Sizes the generations started from now on for the most keys a generation took in
        its period, at least ``min_keys`` (and the configuration's size), at most ``max_keys``
        (0: no bound). Give ``min_keys`` when a batch of more keys than before is coming (e.g. a
        larger day): a newest generation sized for fewer is sealed and a larger one takes the
        rest of its period. docs/WINDOW.md, "Sizing per period". A window shard takes the whole
        window's keys: give every shard what the single window would be given."""
        self._core.set_sizing(_count(min_keys, "min_keys"), _count(max_keys, "max_keys"))

    @property
    def overfull_generations(self) -> int:
        """Generations that took more keys in their period than they were sized for, since
        this object was made or loaded: until they leave the window, its rate is past
        ``config.fpr`` (a shard's: counted in the whole window's keys as it knows them)."""
        return self._core.overfull_generations

    @property
    def expected_false_drops(self) -> float:
        """Never-seen keys expected to have been reported seen by this object's
        ``insert_if_absent`` calls, summed at the window's rate as each record came (a shard's:
        its records, at its blocks' rate)."""
        return self._core.expected_false_drops

    @property
    def memory_bytes(self) -> int:
        """Bytes of all generations as they are now (they grow with the periods' keys)."""
        return self._core.memory_bytes


def _timed_dedup(
    core: Any, pieces: list, times: Any, name: str, hashes: bool = False
) -> np.ndarray:
    """insert_if_absent of a window or window shard, piece by piece, with each record's time
    (`times`, the argument `name`); `hashes`: the pieces are the keys' 64-bit hashes
    (insert_hashes_if_absent)."""
    count = sum(map(_keys.piece_length, pieces))
    all_times = _keys.event_times(times, count, name)
    out = _flags(count)
    start = 0
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        piece_times = None if all_times is None else all_times[start : start + length]
        flags = out[start : start + length].view(np.uint8)
        if isinstance(piece, _keys.U64Piece):
            insert = core.insert_hashes_if_absent if hashes else core.insert_if_absent
            insert(piece.keys, piece_times, flags)
        elif hashes:
            raise TypeError("hashes must be 64-bit integers, not byte strings")
        else:
            core.insert_if_absent_bytes(*_keys.bytes_args(piece), piece_times, flags)
        start += length
    return out


class WindowedFilter(_WindowState):
    """Sliding-window dedup: a record is dropped if its key arrived within the last ``window``
    clock units, and forgotten some time after (``config.forget_after``), in bounded memory.

    A ring of ``generations`` filters; every record, new or dropped, is inserted into the newest
    and the oldest is cleared each ``config.period`` (docs/WINDOW.md has the exact rules). The
    clock is ``"records"`` (the count of records processed) or ``"event_time"`` (the records' own
    integer times: pass ``times`` to ``insert_if_absent``). Build one with ``for_records`` or
    ``for_event_time`` (sized from a false-positive rate), or explicitly with the constructor.
    """

    __slots__ = ()

    def __init__(
        self,
        clock: str,
        window: int,
        shape: str,
        num_blocks: int,
        *,
        generations: int = 4,
        lateness: int = 0,
        seed: int = 0,
        hash: str = "xxh64",
        index: str = "high32",
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        self._core = _core.WindowedFilter(
            clock, _count(window, "window"), _count(generations, "generations"),
            _count(lateness, "lateness"), shape, _count(num_blocks, "num_blocks"), hash,
            _count(seed, "seed"), index, *_options(backend, implementation, threads),
        )
        self.keys_inserted = 0
        self.metadata = b""

    @classmethod
    def for_records(
        cls,
        window_records: int,
        fpr: float = 0.001,
        *,
        generations: int = 4,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """A window over the last ``window_records`` records whose false-positive rate stays at
        or under ``fpr`` when full."""
        core = _core.WindowedFilter.for_records(
            _count(window_records, "window_records"), float(fpr),
            _count(generations, "generations"), *_options(backend, implementation, threads),
        )
        return cls._wrap(core)

    @classmethod
    def for_event_time(
        cls,
        records_per_unit: float,
        window: int,
        fpr: float = 0.001,
        *,
        generations: int = 4,
        lateness: int = 0,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """An event-time window of length ``window`` (any unit, e.g. seconds) for at most
        ``records_per_unit`` records per unit, at false-positive rate ``fpr``; records may trail
        the largest time seen by up to ``lateness``."""
        core = _core.WindowedFilter.for_event_time(
            float(records_per_unit), _count(window, "window"), float(fpr),
            _count(generations, "generations"), _count(lateness, "lateness"),
            *_options(backend, implementation, threads),
        )
        return cls._wrap(core)

    @classmethod
    def from_config(
        cls, config: WindowConfig, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> "WindowedFilter":
        """An empty window of ``config`` as it stands: promise and block multiple included
        (e.g. ``WindowConfig.for_event_time(...).shardable_by(7)``)."""
        if not isinstance(config, WindowConfig):
            raise TypeError(f"config must be a bulkbloom.WindowConfig, not {type(config).__name__}")
        return cls._wrap(
            _core.window_of_config(
                config.clock, config.window, config.generations, config.lateness,
                *_layout_args(config.generation), float(config.fpr), config.block_multiple,
                *_options(backend, implementation, threads),
            )
        )

    def __repr__(self) -> str:
        return f"<bulkbloom.WindowedFilter {self.config.description} on {self.implementation}>"

    def insert_if_absent(self, keys: Keys, times: Any = None) -> np.ndarray:
        """Dedups a batch in order: True where no generation held the key. Every key is inserted
        into the newest generation. ``times`` (event-time windows only, required there) gives each
        record's time: integers, or datetime64 (taken in seconds); ``ValueError`` names a null,
        NaT or integer outside int64 (the clock's range)."""
        return _timed_dedup(self._core, _keys.key_pieces(keys), times, "times")

    def __contains__(self, key: Union[int, str, bytes]) -> bool:
        value = _keys.scalar_key(key)
        batch = (
            _keys.U64Piece(np.array([value], dtype=np.uint64))
            if isinstance(value, int)
            else _keys.bytes_piece(value)
        )
        out = _flags(1)
        _run_pieces([batch], out, self._core.contains, self._core.contains_bytes)
        return bool(out[0])

    def expected_fpr(self, keys_per_generation: int) -> float:
        """The modelled false-positive rate when each generation holds this many keys."""
        return self._core.expected_fpr(_count(keys_per_generation, "keys_per_generation"))

    @classmethod
    def load(
        cls, path: PathLike, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "WindowedFilter":
        """Reads and fully verifies a window file."""
        return cls._wrap(
            *_core.WindowedFilter.load(os.fspath(path), *_options(backend, implementation, threads))
        )

    def to_bytes(self) -> bytes:
        """The bytes ``save()`` would write."""
        return _core.window_to_file_bytes(self._core, self.keys_inserted, self.metadata)

    @classmethod
    def from_bytes(
        cls, data: Any, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "WindowedFilter":
        """A window from the bytes of a window file (any buffer)."""
        image = _byte_buffer(data)
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.window_from_file_bytes(image, *options))

    def __reduce__(self) -> tuple:
        # Through the file format, clock and all: a pickled window answers identically anywhere.
        return (WindowedFilter.from_bytes, (self.to_bytes(),))

    def save_checkpoint(self, directory: PathLike) -> None:
        """Saves a checkpoint into ``directory`` (created if missing): the window,
        ``keys_inserted`` and ``metadata`` (e.g. a source offset) in one atomically written
        file, so they always belong to the same moment."""
        self._core.save_checkpoint(os.fspath(directory), self.keys_inserted, self.metadata)

    @classmethod
    def load_checkpoint(
        cls,
        directory: PathLike,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> Optional["WindowedFilter"]:
        """The latest checkpoint in ``directory``, or None if none was ever completed there (or
        ``directory`` does not exist); resuming from it and replaying the records after it gives
        the answers an uninterrupted run would have given. ``NotADirectoryError`` if
        ``directory`` is a file."""
        options = _options(backend, implementation, threads)
        found = _core.WindowedFilter.load_checkpoint(os.fspath(directory), *options)
        return None if found is None else cls._wrap(*found)


LayoutLike = Union[Layout, "Filter", "FilterShard"]


def _layout_args(layout: Any) -> tuple:
    """(shape, num_blocks, hash, seed, index) of a Layout, or of a Filter's or shard's layout."""
    if isinstance(layout, (Filter, FilterShard)):
        layout = layout.layout
    if not isinstance(layout, Layout):
        raise TypeError(
            f"layout must be a bulkbloom.Layout, Filter or FilterShard, not {type(layout).__name__}"
        )
    return (layout.shape, layout.num_blocks, layout.hash, layout.seed, layout.index)


def _shard_count(num_shards: Any) -> int:
    value = _count(num_shards, "num_shards")
    if not 1 <= value < 2**32:
        raise ValueError(f"num_shards must be in [1, 2**32), not {value}")
    return value


def shard_of(layout: LayoutLike, keys: Keys, num_shards: int) -> np.ndarray:
    """The shard of ``num_shards`` shards of ``layout`` that owns each key, as a uint32 array.

    ``layout`` is a ``Layout`` (or a ``Filter`` or ``FilterShard``, meaning its layout); keys
    are any batch the bulk calls take. The shard of a key is
    ``((block + 1) * num_shards - 1) // num_blocks`` of the key's block (docs/DESIGN.md §9), so
    an engine without this package can compute it too. ``ValueError`` unless
    ``1 <= num_shards <= num_blocks``."""
    return _owners(_layout_args(layout), _keys.key_pieces(keys), _shard_count(num_shards))


def _owners(layout_args: tuple, pieces: list, num_shards: int) -> np.ndarray:
    """shard_of for the pieces of a batch."""
    out = np.empty(sum(map(_keys.piece_length, pieces)), dtype=np.uint32)
    start = 0
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        part = out[start : start + length]
        if isinstance(piece, _keys.U64Piece):
            _core.shard_of(*layout_args, piece.keys, num_shards, part)
        else:
            _core.shard_of_bytes(*layout_args, *_keys.bytes_args(piece), num_shards, part)
        start += length
    return out


class _ShardPlace:
    """Where a shard lies in the whole filter or window."""

    __slots__ = ()
    _core: Any

    @property
    def index(self) -> int:
        """Which shard this is, in ``[0, num_shards)``."""
        return self._core.index

    @property
    def num_shards(self) -> int:
        """How many shards the whole filter or window is cut into."""
        return self._core.num_shards

    @property
    def blocks(self) -> tuple[int, int]:
        """The blocks ``[begin, end)`` of the whole layout (of each generation, for a window) this
        shard holds."""
        return self._core.blocks

    def _check_owned(self, layout: Layout, pieces: list) -> None:
        """Raises ValueError, naming the key as the library does, if a key of `pieces` belongs to
        another shard. The library checks each core call before applying it, but a batch of
        several pieces, or of more than ``chunk_keys`` keys, is applied in several calls: checked
        only there, a foreign key in a later call would leave the earlier calls applied and be
        reported at its position in its own call."""
        if len(pieces) == 1 and _keys.piece_length(pieces[0]) <= chunk_keys:
            return
        owners = _owners(_layout_args(layout), pieces, self.num_shards)
        foreign = np.flatnonzero(owners != self.index)
        if len(foreign) == 0:
            return
        position = int(foreign[0])
        owner = int(owners[position])
        # The owner's blocks by DESIGN §9's formula (shard_blocks in C++).
        owner_blocks = _blocks_text(
            owner * layout.num_blocks // self.num_shards,
            (owner + 1) * layout.num_blocks // self.num_shards,
        )
        raise ValueError(
            f"{_describe_key(pieces, position)} belongs to shard {owner} of {self.num_shards} "
            f"(blocks {owner_blocks}), not to shard {self.index} (blocks "
            f"{_blocks_text(*self.blocks)}) of {layout.description}; route keys with shard_of()"
        )


def _describe_key(pieces: list, position: int) -> str:
    """The key at `position` of a batch, named as the library's messages name it."""
    at = position
    for piece in _keys.resolved(pieces):
        length = _keys.piece_length(piece)
        if at < length:
            break
        at -= length
    if isinstance(piece, _keys.U64Piece):
        return f"key {int(piece.keys[at])} at position {position}"
    return f"the byte key at position {position} ({_keys.key_size(piece, at)} bytes)"


def _blocks_text(begin: int, end: int) -> str:
    return f"[{begin}, {end})"


class FilterShard(_BulkCalls, _ShardPlace):
    """Shard ``index`` of ``num_shards`` of a filter's layout: the bits of its block range
    (``blocks``) and nothing else.

    Its bulk calls take only keys it owns (route them with ``shard_of``): a batch holding a key of
    another shard raises ``ValueError`` naming the key, its shard and both block ranges, before
    anything is changed. Answers and bytes are exactly those of the same blocks of one whole
    filter given the same keys in the same order. ``save()`` writes the filter file format with the
    whole layout and the shard's place in the header; ``FilterShard.load`` / ``map`` read it (a
    whole filter's file reads as shard 0 of 1). Pickles through its layout, place and bytes.
    """

    __slots__ = ()

    def __init__(
        self,
        layout: LayoutLike,
        index: int,
        num_shards: int,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        self._core = _core.FilterShard(
            *_layout_args(layout), _count(index, "index"), _shard_count(num_shards),
            *_options(backend, implementation, threads),
        )
        self.keys_inserted = 0
        self.metadata = b""

    @property
    def layout(self) -> Layout:
        """The layout of the whole filter this shard is part of."""
        return Layout(**self._core.layout)

    @property
    def size_bytes(self) -> int:
        """Size of the shard's bits in bytes."""
        return self._core.size_bytes

    def _pieces_to_write(self, keys: Keys) -> list:
        pieces = _keys.key_pieces(keys)
        self._check_owned(self.layout, pieces)
        return pieces

    def __repr__(self) -> str:
        begin, end = self.blocks
        return (
            f"<bulkbloom.FilterShard {self.index} of {self.num_shards}, blocks [{begin}, {end}) "
            f"of {self.layout.description} on {self.implementation}>"
        )

    def clear(self) -> None:
        """Clears every bit."""
        self._core.clear()

    def popcount(self) -> int:
        """Number of set bits."""
        return self._core.popcount()

    def bits(self) -> bytes:
        """A copy of the shard's bytes: exactly its blocks' bytes of the whole filter."""
        return self._core.bits()

    @classmethod
    def load(
        cls, path: PathLike, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "FilterShard":
        """Reads and fully verifies a shard file (``FormatError`` if it is damaged)."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.FilterShard.load(os.fspath(path), *options))

    @classmethod
    def map(
        cls, path: PathLike, *, verify: bool = True, implementation: str = "", threads: int = 0
    ) -> "FilterShard":
        """Maps a shard file without copying it, as ``Filter.map`` does."""
        options = _map_options(verify, implementation, threads)
        return cls._wrap(*_core.FilterShard.map(os.fspath(path), *options))

    def to_bytes(self) -> bytes:
        """The bytes ``save()`` would write."""
        return self._core.to_file_bytes(self.keys_inserted, self.metadata)

    @classmethod
    def from_bytes(
        cls, data: Any, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "FilterShard":
        """A shard from the bytes of a shard file (any buffer: bytes, memoryview, numpy); a whole
        filter's bytes read as shard 0 of 1."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.FilterShard.from_file_bytes(_byte_buffer(data), *options))

    @classmethod
    def _from_bits(
        cls, layout: tuple, index: int, num_shards: int, bits: bytes, keys_inserted: int,
        metadata: bytes,
    ) -> "FilterShard":
        # bulkbloom.spark: the same blocks under another layout of the same size.
        shard = cls(Layout(*layout), index, num_shards)
        shard._core.set_bits(_byte_buffer(bits))
        shard.keys_inserted = keys_inserted
        shard.metadata = metadata
        return shard

    def __reduce__(self) -> tuple:
        # Through the file format, as every kind pickles.
        return (FilterShard.from_bytes, (self.to_bytes(),))


class WindowShard(_WindowState, _ShardPlace):
    """Shard ``index`` of ``num_shards`` of a sliding window (``WindowedFilter``): its block
    range of every generation. A shard cannot see the whole window's clock, so the caller gives
    it: ``insert_if_absent(keys, clocks)`` takes, for each record, the single window's clock at
    that record (event time: the running maximum of all times so far, or a daily dump's own time
    when all its records carry it; records clock: the record's position in the whole stream), and
    ``advance_to(clock)`` moves every shard, including those that got no record, to the whole
    window's clock after each batch. Then every flag, and ``concat``'s bytes, are the single
    window's (docs/WINDOW.md, "Shards"). Pickles through its file bytes."""

    __slots__ = ()

    def __init__(
        self,
        config: WindowConfig,
        index: int,
        num_shards: int,
        *,
        backend: str = "auto",
        implementation: str = "",
        threads: int = 0,
    ) -> None:
        if not isinstance(config, WindowConfig):
            raise TypeError(f"config must be a bulkbloom.WindowConfig, not {type(config).__name__}")
        self._core = _core.WindowShard(
            config.clock, config.window, config.generations, config.lateness,
            *_layout_args(config.generation), _count(index, "index"), _shard_count(num_shards),
            *_options(backend, implementation, threads), float(config.fpr), config.block_multiple,
        )
        self.keys_inserted = 0
        self.metadata = b""

    @property
    def sizes_per_period(self) -> bool:
        """Whether the shard sizes its generations per period: the window's promise is known
        and ``num_shards`` divides ``config.block_multiple`` (docs/WINDOW.md, "Sizing
        shards"); otherwise every generation keeps the configured size."""
        return bool(self._core.sizes_per_period)

    def filter_keys(self) -> list[int]:
        """The keys each filter of the shard's blocks took (its own), oldest generation first,
        a generation's sealed filters before the one taking its keys."""
        return list(self._core.filter_keys())

    def filter_blocks(self) -> list[int]:
        """The whole window's block count of each filter, in ``filter_keys()`` order."""
        return list(self._core.filter_blocks())

    def set_window_keys(self, keys: Sequence[int]) -> None:
        """The whole window's keys in each filter (the sum of every shard's ``filter_keys()``),
        from which the shard sizes its next generations: given to every shard whenever the
        clock is about to enter a new period, the shards choose the single window's sizes.
        ``ValueError`` unless there is one count per filter."""
        self._core.set_window_keys([_count(k, "keys") for k in keys])



    def __repr__(self) -> str:
        begin, end = self.blocks
        return (
            f"<bulkbloom.WindowShard {self.index} of {self.num_shards}, blocks [{begin}, {end}) "
            f"of {self.config.description} on {self.implementation}>"
        )

    def insert_if_absent(self, keys: Keys, clocks: Any) -> np.ndarray:
        """Dedups a batch in order: True where no generation held the key; every key goes into
        the newest generation. ``clocks``: the single window's clock at each record (integers,
        or datetime64 taken in seconds)."""
        if clocks is None:
            raise TypeError("insert_if_absent needs the window's clock at each record")
        pieces = _keys.key_pieces(keys)
        self._check_owned(self.config.generation, pieces)
        return _timed_dedup(self._core, pieces, clocks, "clocks")

    def insert_hashes_if_absent(self, hashes: Keys, clocks: Any) -> np.ndarray:
        """``insert_if_absent`` for keys hashed elsewhere: ``hashes`` holds each key's 64-bit
        hash under ``config.generation``'s hash and seed (the hash ``shard_of`` routes by), as
        64-bit integers (signed ones as their bit pattern), e.g. Spark's ``xxhash64`` of the
        keys for a window with seed 42. The flags and the state are exactly the keys'."""
        if clocks is None:
            raise TypeError("insert_hashes_if_absent needs the window's clock at each record")
        pieces = _keys.key_pieces(hashes)
        generation = self.config.generation
        self._check_owned(Layout.of(generation.shape, generation.num_blocks, generation.seed,
                                    "identity", generation.index), pieces)
        return _timed_dedup(self._core, pieces, clocks, "clocks", hashes=True)

    @classmethod
    def load(
        cls, path: PathLike, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "WindowShard":
        """Reads and fully verifies a window shard file (a whole window's is shard 0 of 1)."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.WindowShard.load(os.fspath(path), *options))

    def to_bytes(self) -> bytes:
        """The bytes ``save()`` would write."""
        return self._core.to_file_bytes(self.keys_inserted, self.metadata)

    @classmethod
    def from_bytes(
        cls, data: Any, *, backend: str = "auto", implementation: str = "", threads: int = 0
    ) -> "WindowShard":
        """A window shard from the bytes of its file (any buffer)."""
        image = _byte_buffer(data)
        options = _options(backend, implementation, threads)
        return cls._wrap(*_core.WindowShard.from_file_bytes(image, *options))

    def __reduce__(self) -> tuple:
        return (WindowShard.from_bytes, (self.to_bytes(),))


Shards = Union[list[FilterShard], list[WindowShard]]


def split(filter: Union[Filter, WindowedFilter], num_shards: int) -> Shards:
    """A filter cut into ``num_shards`` FilterShards, or a window into WindowShards, each a
    copy of its blocks (and a window's clock): byte-exact. Every shard gets the filter's
    ``metadata``; shard 0 its ``keys_inserted`` and the others 0, so that the shards' counts add
    up to it as the counts of shards that each count the keys they took do (``concat`` adds
    them)."""
    count = _shard_count(num_shards)
    if isinstance(filter, Filter):
        shards: list = [FilterShard._wrap(core) for core in _core.split(filter._core, count)]
    elif isinstance(filter, WindowedFilter):
        cores = _core.split_window(filter._core, count, "auto", "", 0)
        shards = [WindowShard._wrap(core) for core in cores]
    else:
        raise TypeError(
            f"split needs a bulkbloom.Filter or WindowedFilter, not {type(filter).__name__}"
        )
    _hand_out(shards, filter.keys_inserted, filter.metadata)
    return shards


def _hand_out(shards: list, keys_inserted: int, metadata: bytes) -> None:
    """Gives the shards of a whole its keys_inserted and metadata, as split() says."""
    for shard in shards:
        shard.metadata = metadata
    shards[0].keys_inserted = keys_inserted


def _whole_state(shards: list) -> tuple[int, bytes]:
    """The keys_inserted and metadata of the whole of `shards`, as concat() says."""
    kinds_of_metadata = {shard.metadata for shard in shards}
    metadata = kinds_of_metadata.pop() if len(kinds_of_metadata) == 1 else b""
    return sum(shard.keys_inserted for shard in shards), metadata


def _shard_cores(shards: list, operation: str) -> tuple[bool, list]:
    """(whether they are window shards, their cores); all of one kind."""
    kinds = set(map(type, shards))
    if not (kinds <= {FilterShard} or kinds <= {WindowShard}):
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise TypeError(
            f"{operation} needs bulkbloom.FilterShard or WindowShard objects of one kind, not "
            f"{names}"
        )
    return kinds == {WindowShard}, [shard._core for shard in shards]


def concat(shards: Iterable[Any]) -> Union[Filter, WindowedFilter]:
    """The whole filter (or window) from all its shards, given in any order: byte for byte the
    one they were cut from. ``ValueError`` unless they are exactly shards 0..S-1 of one layout
    (or window configuration and clock) and S. Its ``keys_inserted`` is the sum of the shards',
    its ``metadata`` theirs if all hold the same bytes, else empty (a whole has one; per-shard
    bytes, such as each shard's source offset, have no single value): ``concat(split(f, S))``
    has ``f``'s."""
    shards = list(shards)
    windows, cores = _shard_cores(shards, "concat")
    if windows:
        return WindowedFilter._wrap(_core.concat_window(cores), *_whole_state(shards))
    return Filter._wrap(_core.concat(cores), *_whole_state(shards))


def reshard(shards: Iterable[Any], num_shards: int) -> Shards:
    """The same filter (or window) cut into ``num_shards`` shards instead: a copy of bytes, no
    key is rehashed and no answer changes. ``shards`` as for ``concat``; ``keys_inserted`` and
    ``metadata`` are ``split(concat(shards), num_shards)``'s."""
    shards = list(shards)
    windows, cores = _shard_cores(shards, "reshard")
    if windows:
        result: list = [
            WindowShard._wrap(c) for c in _core.reshard_window(cores, _shard_count(num_shards))
        ]
    else:
        result = [FilterShard._wrap(c) for c in _core.reshard(cores, _shard_count(num_shards))]
    _hand_out(result, *_whole_state(shards))
    return result


def load(
    path: PathLike, *, backend: str = "auto", implementation: str = "", threads: int = 0
) -> Union[Filter, GrownFilter, WindowedFilter, FilterShard, WindowShard]:
    """Opens any file bulkbloom writes as the object of its kind: a filter file as a ``Filter``,
    a grown filter file (``bulkbloom dedup --filter`` once it grew) as a ``GrownFilter``, a
    window file as a ``WindowedFilter``, a shard's file as a ``FilterShard`` or ``WindowShard``.
    ``FormatError`` for a file of none of these kinds."""
    kind = _core.file_kind(os.fspath(path))
    options = dict(backend=backend, implementation=implementation, threads=threads)
    if kind == "filter":
        return Filter.load(path, **options)
    if kind == "filter shard":
        return FilterShard.load(path, **options)
    if kind == "grown filter":
        return GrownFilter.load(path, **options)
    if kind == "window":
        # One reader for both: a whole window's file reads as shard 0 of 1.
        shard = WindowShard.load(path, **options)
        return concat([shard]) if shard.num_shards == 1 else shard
    raise FormatError(f"{os.fspath(path)}: not a file bulkbloom writes (its first bytes are no "
                      "bulkbloom magic)")


def _count(value: Any, name: str, bits: int = 64) -> int:
    """`value` as an int in [0, 2**bits)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float)):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{name} must be a whole number, not {value}")
        value = int(value)
    if not 0 <= int(value) < 1 << bits:
        raise ValueError(f"{name} must be in [0, 2**{bits}), not {value}")
    return int(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _options(backend: Any, implementation: Any, threads: Any) -> tuple[str, str, int]:
    """The backend, implementation and threads keywords, checked here: the core would only say
    that its arguments are incompatible."""
    return (
        _text(backend, "backend"), _text(implementation, "implementation"),
        _count(threads, "threads", bits=32),
    )


def _map_options(verify: Any, implementation: Any, threads: Any) -> tuple[bool, str, int]:
    """The keywords of a map() call, checked as _options() checks them."""
    if not isinstance(verify, (bool, np.bool_)):
        raise TypeError(f"verify must be a bool, not {type(verify).__name__}")
    return (bool(verify), *_options("cpu", implementation, threads)[1:])


def _same_kind(other: Any, operation: str) -> Any:
    if not isinstance(other, Filter):
        raise TypeError(f"{operation} needs a bulkbloom.Filter, not {type(other).__name__}")
    return other._core


def _byte_buffer(data: Any) -> np.ndarray:
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"expected bytes or a buffer, not {type(data).__name__}") from None
    return np.frombuffer(view.cast("B") if view.format != "B" else view, dtype=np.uint8)


def _is_batch(keys: Any) -> bool:
    if isinstance(keys, np.ndarray) or hasattr(keys, "__dlpack__"):
        return True
    if _keys._has_arrow_capsule(keys):
        return True
    pa = _keys._pyarrow()
    return pa is not None and isinstance(keys, (pa.Array, pa.ChunkedArray))
