"""What every class of the package shares: the layout record, argument checks, the caller's
counters and metadata, and the bulk calls over a batch's pieces."""

from __future__ import annotations

import os
from typing import Any, ClassVar, NamedTuple, Optional, Type, TypeVar, Union

import numpy as np

from . import _core, _keys

PathLike = Union[str, "os.PathLike[str]"]
#: What a bulk call takes: see "Keys" in the package's documentation.
Keys = _keys.Keys


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
        """The smallest layout whose modelled false-positive rate after ``capacity`` distinct keys
        is at most ``fpr`` (a filter full at ``fpr`` itself; ``promising`` gives the layout of
        ``Filter(capacity, fpr)``)."""
        return cls(**_core.layout_for_capacity(_count(capacity, "capacity"), float(fpr)))

    @classmethod
    def promising(cls, capacity: int, fpr: float = 0.001) -> "Layout":
        """The layout ``Filter(capacity, fpr)`` has, and the command line's ``--capacity
        capacity --fpr fpr``, without allocating the filter: ``for_capacity`` at the first
        generation's target, three quarters of ``fpr`` (docs/FORMAT.md, "Growth")."""
        return cls(**_core.promised_layout(_count(capacity, "capacity"), float(fpr)))

    def expected_fpr(self, n: int) -> float:
        """The modelled false-positive rate after ``n`` distinct keys."""
        return _core.layout_expected_fpr(self.shape, self.num_blocks, self.hash, self.seed,
                                         self.index, _count(n, "n"))

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



def _layout_args(layout: Any) -> tuple:
    """(shape, num_blocks, hash, seed, index) of a Layout, or of the layout of an object that has
    one (a Filter or FilterShard)."""
    if not isinstance(layout, Layout):
        layout = getattr(layout, "layout", layout)
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


def _run_flagged(pieces: list, on_u64: Any, on_bytes: Any) -> np.ndarray:
    """A bulk call that answers a flag per key, over a batch's pieces: the flags of a batch whose
    length is known are written in place; of a stream read as it goes, piece by piece, each
    piece's kept packed 8 to a byte until the length is known (so that the flags are not held
    twice, as parts and joined), then unpacked into one array."""
    if _keys.known_length(pieces):
        out = _flags(sum(map(_keys.piece_length, pieces)))
        _run_pieces(pieces, out, on_u64, on_bytes)
        return out
    flags: list = []  # each piece's flags; once there are two, each packed, with its count
    try:
        for piece in _keys.resolved(pieces):
            part = _flags(_keys.piece_length(piece))
            _run_pieces([piece], part, on_u64, on_bytes)
            if len(flags) == 1:
                flags[0] = (np.packbits(flags[0]), len(flags[0]))
            flags.append((np.packbits(part), len(part)) if flags else part)
    except _keys.StreamNullError as error:
        # The keys before the null were used: their answers go with the error, not lost.
        error.flags = _joined_flags(flags)
        raise
    return _joined_flags(flags)


def _joined_flags(flags: list) -> np.ndarray:
    """One array of _run_flagged's pieces' flags (the first as it is, or each packed)."""
    if len(flags) <= 1:  # one piece's flags are the answer as they are
        return flags[0] if flags else _flags(0)
    out = _flags(sum(count for _, count in flags))
    start = 0
    for bits, count in flags:
        out[start : start + count] = np.unpackbits(bits, count=count).view(np.bool_)
        start += count
    return out


_SavedT = TypeVar("_SavedT", bound="_Saved")


class _Saved:
    """What filters and windows share: the C++ object, the caller's ``keys_inserted`` counter
    and ``metadata`` bytes that files store beside the bits, and saving, file bytes and pickling
    through the file format. Each public class names its C++ binding class in ``_core_type``,
    whose ``from_file_bytes`` reads what its objects' ``to_file_bytes`` writes."""

    __slots__ = ("_core", "_keys_inserted", "_metadata", "__weakref__")

    _core: Any
    _core_type: ClassVar[Any]

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
        """The running implementation, e.g. ``"cpu/AVX3_DL"``, ``"cpu/scalar"``, ``"cuda/sm_90"``."""
        return self._core.implementation

    def _file_state(self) -> tuple[Any, ...]:
        """What the file stores beside the bits: the arguments of the core's save and
        to_file_bytes after the path."""
        return (self.keys_inserted, self.metadata)

    def save(self, path: PathLike) -> None:
        """Writes it (with ``keys_inserted`` and ``metadata``) to ``path`` in the project's file
        format, atomically: a crash leaves the old file or the new one. A symbolic link is
        followed: the file it names is replaced and the link kept, as the command line does."""
        # The new file is renamed over the old one: over the link itself, it would replace the
        # link and leave the file it names as it was.
        self._core.save(os.path.realpath(os.fspath(path)), *self._file_state())

    @classmethod
    def load(
        cls: Type[_SavedT], path: PathLike, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> _SavedT:
        """Reads and fully verifies the file ``save()`` wrote (``FormatError`` if it is damaged);
        a shard class reads a whole filter's or window's file as its shard 0 of 1."""
        options = _options(backend, implementation, threads)
        return cls._wrap(*cls._core_type.load(os.fspath(path), *options))  # type: ignore[no-any-return]

    def to_bytes(self) -> bytes:
        """The bytes ``save()`` would write."""
        return self._core.to_file_bytes(*self._file_state())

    @classmethod
    def from_bytes(
        cls: Type[_SavedT], data: Any, *, backend: str = "auto", implementation: str = "",
        threads: int = 0,
    ) -> _SavedT:
        """An object from the bytes of its file, as ``save()`` or ``to_bytes()`` wrote them (any
        buffer: bytes, memoryview, numpy); a shard class reads a whole filter's or window's bytes
        as its shard 0 of 1."""
        image = _byte_buffer(data)
        options = _options(backend, implementation, threads)
        return cls._wrap(*cls._core_type.from_file_bytes(image, *options))  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        # Through the file format: a pickled object answers identically in any process. The
        # target is the package's class (bulkbloom.NAME.from_bytes), also for a caller's
        # subclass, as pickles have named it from the start: they load wherever the package does.
        owner: Any = next(kind for kind in type(self).__mro__ if "_core_type" in vars(kind))
        return (owner.from_bytes, (self.to_bytes(),))


class _BulkCalls(_Saved):
    """The batch calls of filters and shards."""

    __slots__ = ()

    def _pieces_to_write(self, keys: Keys) -> list:
        """The pieces of a batch that insert or insert_if_absent is given: an Arrow stream read
        as the call goes (a shard checks every key's owner first, so reads its batch whole)."""
        return _keys.key_pieces(keys, streamed=True)

    def insert(self, keys: Keys) -> None:
        """Inserts every key of a batch."""
        _run_pieces(self._pieces_to_write(keys), None, self._core.insert, self._core.insert_bytes)

    def contains(self, keys: Keys) -> np.ndarray:
        """A bool array: True where the key may be present (never False for an inserted key)."""
        return _run_flagged(_keys.key_pieces(keys, streamed=True), self._core.contains,
                            self._core.contains_bytes)

    def insert_if_absent(self, keys: Keys) -> np.ndarray:
        """The dedup primitive: inserts each key and returns a bool array, True where the key was
        absent before (counting earlier keys of the batch), exactly as the loop
        ``new = key not in f; f.add(key)`` would. A repeated key is reported new at most once.
        ``keys[f.insert_if_absent(keys)]`` is the batch without its repeats."""
        return _run_flagged(self._pieces_to_write(keys), self._core.insert_if_absent,
                            self._core.insert_if_absent_bytes)



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
