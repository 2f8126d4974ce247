"""Turns the key batches users hold into the two layouts the C++ core takes, without a Python loop.

A batch becomes one or more *pieces*: a contiguous uint64 array (integer keys; int64 and smaller
signed keys are taken as their two's-complement 64-bit pattern), or Arrow-style byte strings
(offsets + data, hashed as bytes like the command line's ``lines`` keys). A contiguous,
aligned, native-endian 64-bit integer array and the buffers of an Arrow integer, string or binary
array are used in place; other layouts are converted once, by numpy or pyarrow. Arrow columns
of other producers (the PyCapsule interface) are read by _core.ArrowChunk / ArrowStream through
the C data interface; fixed-size binary and view arrays become ArrowBytesPiece pieces, whose
keys the core reads in the producer's buffers.
"""

from __future__ import annotations

import array as _array
import sys
from typing import (
    Any,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    Union,
)

import numpy as np

from . import _core


# What a batch of keys may be, for type checkers (what each means: bulkbloom's "Keys").
class ArrowArrayExporter(Protocol):
    """An Arrow array of the PyCapsule interface: pyarrow, nanoarrow, a record batch."""

    def __arrow_c_array__(self, requested_schema: Any = None, /) -> Tuple[object, object]: ...


class ArrowStreamExporter(Protocol):
    """An Arrow stream of the PyCapsule interface: polars Series, DuckDB results, pandas >= 3."""

    def __arrow_c_stream__(self, requested_schema: Any = None, /) -> object: ...


class DLPackExporter(Protocol):
    def __dlpack__(self, *args: Any, **kwargs: Any) -> object: ...


class ArrayConvertible(Protocol):
    """What numpy.asarray reads: a pandas Series or Index, ..."""

    def __array__(self) -> Any: ...


Keys = Union[
    np.ndarray,
    ArrowArrayExporter,
    ArrowStreamExporter,
    DLPackExporter,
    ArrayConvertible,
    memoryview,
    "_array.array[int]",
    List[int],
    List[str],
    List[bytes],
    Tuple[int, ...],
    Tuple[str, ...],
    Tuple[bytes, ...],
]

MASK64 = (1 << 64) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


class U64Piece(NamedTuple):
    keys: np.ndarray  # uint64, 1-D, C-contiguous


class BytesPiece(NamedTuple):
    offsets: np.ndarray  # int32 or int64, one more than the keys
    data: np.ndarray  # uint8


class ArrowBytesPiece(NamedTuple):
    """The byte-string keys of an Arrow fixed-size binary or view array (string_view, what
    polars holds), read by the core where the array holds them."""

    keys: Any  # _core.ArrowByteKeys, which keeps its _core.ArrowChunk alive


class ListSlice(NamedTuple):
    """Keys [begin, end) of a list or tuple of str (`encode`) or bytes: made a BytesPiece by
    resolved() only when its turn comes, so that the bytes of one slice exist at a time, not a
    copy of the whole list beside it."""

    keys: Sequence[Any]
    begin: int
    end: int
    encode: bool


class StreamRest:
    """The chunks of an Arrow stream past the first READ_AHEAD_KEYS keys: read by resolved() one
    at a time, each when its turn comes, so that a stream whose producer makes its batches as it
    is read (a DuckDB query, a dataset scan) is never held whole. `ahead` holds the chunks read
    before (_core.ArrowChunk; resolved() drops each once used), `start` is the position of the
    stream's next key in the batch. Only calls that need not know the batch's length first take
    one (key_pieces' `streamed`)."""

    __slots__ = ("ahead", "stream", "start")

    def __init__(self, ahead: List[Any], stream: Any, start: int) -> None:
        self.ahead = ahead
        self.stream = stream
        self.start = start


#: A stream of at most this many keys is read whole, and checked for nulls, before any key is
#: used; past them, a stream is read chunk by chunk as its keys are used (StreamRest).
READ_AHEAD_KEYS = 1 << 16

Piece = Union[U64Piece, BytesPiece, ArrowBytesPiece, ListSlice, StreamRest]


def piece_length(piece: Piece) -> int:
    if isinstance(piece, U64Piece):
        return len(piece.keys)
    if isinstance(piece, ArrowBytesPiece):
        return len(piece.keys)
    if isinstance(piece, ListSlice):
        return piece.end - piece.begin
    if isinstance(piece, StreamRest):
        raise TypeError("the length of a stream is known only once it is read")
    return len(piece.offsets) - 1


def known_length(pieces: List[Piece]) -> bool:
    """Whether the batch's length is known before its keys are used (no StreamRest)."""
    return not any(isinstance(piece, StreamRest) for piece in pieces)


def resolved(pieces: List[Piece]) -> Iterator[Union[U64Piece, BytesPiece, ArrowBytesPiece]]:
    """The pieces as the core's calls take them, each made when the loop reaches it."""
    for piece in pieces:
        if isinstance(piece, ListSlice):
            part = piece.keys[piece.begin : piece.end]
            yield _joined_bytes([str.encode(k, "utf-8") for k in part] if piece.encode else part)
        elif isinstance(piece, StreamRest):
            yield from _stream_pieces(piece)
        else:
            yield piece


def _stream_pieces(rest: StreamRest) -> Iterator[Union[U64Piece, BytesPiece, ArrowBytesPiece]]:
    """The pieces of a stream's chunks, the ones read ahead then the rest of the stream, each
    released once used (a null past the read-ahead: ValueError, the keys before it applied)."""
    while rest.ahead:
        yield _chunk_piece(rest.ahead.pop(0))
    for chunk in rest.stream:
        first = chunk.first_null()
        if first is not None:
            raise StreamNullError(rest.start + first, rest.start)
        rest.start += len(chunk)
        piece = _chunk_piece(chunk)
        del chunk
        yield piece


def bytes_args(piece: Union[BytesPiece, ArrowBytesPiece]) -> Tuple[Any, Any]:
    """The (offsets, data) arguments of the core's byte-string calls for a piece."""
    if isinstance(piece, ArrowBytesPiece):
        return piece.keys, None
    return piece.offsets, piece.data


def key_size(piece: Union[BytesPiece, ArrowBytesPiece], at: int) -> int:
    """The length in bytes of key `at` of a byte-string piece."""
    if isinstance(piece, ArrowBytesPiece):
        return len(piece.keys.key(at))
    return int(piece.offsets[at + 1]) - int(piece.offsets[at])


def _pyarrow() -> Any:
    # Only an already imported pyarrow can have made the argument, so never import it here.
    return sys.modules.get("pyarrow")


def key_pieces(keys: Any, streamed: bool = False) -> List[Piece]:
    """The pieces of a batch of keys, in order. `streamed`: an Arrow stream (PyCapsule) longer
    than READ_AHEAD_KEYS keys may end in a StreamRest, read as the call goes."""
    if isinstance(keys, np.ndarray):
        return [_numpy_piece(keys)]
    pa = _pyarrow()
    if _is_pandas(keys):
        if keys.dtype == object:  # Python objects: read as an object array is
            return [_object_piece(np.asarray(keys))]
        if pa is None and _has_arrow_capsule(keys):  # pandas >= 3 exports Arrow without pyarrow
            return _capsule_pieces(keys, streamed=streamed)
        pa = pa or _import_pyarrow("a pandas batch of keys")
        # pandas' own arrays (nullable Int64, str, categorical) become Arrow arrays in C (in
        # place where pyarrow holds them already): NA and NaN become nulls, named by position.
        keys = pa.array(keys, from_pandas=True)
    if pa is not None:
        if isinstance(keys, pa.ChunkedArray):
            return _chunk_pieces(pa, keys.chunks)
        if isinstance(keys, pa.Array):
            return _chunk_pieces(pa, [keys])
    if _has_arrow_capsule(keys):
        return _capsule_pieces(keys, streamed=streamed)
    if isinstance(keys, (str, bytes, bytearray)) or _is_byte_buffer(keys):
        raise TypeError(
            "a bulk call takes an array of keys, not a single "
            f"{type(keys).__name__}: use add() / `in`, or pass [key]"
        )
    if hasattr(keys, "__dlpack__"):
        try:
            array = np.from_dlpack(keys)
        except (BufferError, RuntimeError, TypeError) as error:
            raise ValueError(f"keys must be in host memory: {error}") from None
        return [_numpy_piece(array)]
    if isinstance(keys, (list, tuple)):
        return _sequence_pieces(keys)
    try:
        view = memoryview(keys)
    except TypeError:
        view = None
    array = np.asarray(view if view is not None else keys)
    if array.ndim == 0 and hasattr(keys, "__iter__"):
        # A set, dict, generator, ...: numpy would take it for one object.
        raise TypeError(
            f"a bulk call takes a sequence of keys (array, list, Arrow array), not a "
            f"{type(keys).__name__}: pass list(keys), or update() to insert any iterable"
        )
    if array.ndim == 0:
        raise TypeError(
            "keys must be a batch (array, list, Arrow array), not a single "
            f"{type(keys).__name__}: use add() / `in` for one key"
        )
    return [_numpy_piece(array)]


# The struct formats of one-byte items: a buffer of them (memoryview(b"abc"), array('B'))
# is bytes-like, one key, as bytes and bytearray are; a buffer of wider integers is a batch.
_BYTE_FORMATS = frozenset(("B", "b", "c", "@B", "@b", "@c", "=B", "=b", "<B", ">B", "!B"))


def _is_byte_buffer(value: Any) -> bool:
    """True for a non-numpy object whose buffer holds one-byte items (numpy arrays of uint8 /
    int8 stay batches of small integers: their dtype says so)."""
    if isinstance(value, np.ndarray):
        return False
    try:
        view = memoryview(value)
    except TypeError:
        return False
    return view.format in _BYTE_FORMATS


def _has_arrow_capsule(keys: Any) -> bool:
    return hasattr(keys, "__arrow_c_stream__") or hasattr(keys, "__arrow_c_array__")


def _capsule_pieces(keys: Any, start: int = 0, streamed: bool = False) -> List[Piece]:
    """The pieces of an Arrow PyCapsule producer's column (polars, DuckDB, nanoarrow, pandas),
    read in place chunk by chunk, whose first key is key `start` of the batch. Every chunk is
    checked for nulls before any key is used; `streamed`, only those of the first
    READ_AHEAD_KEYS keys of a stream, the rest as they are read (StreamRest)."""
    if hasattr(keys, "__arrow_c_stream__"):
        stream = _core.ArrowStream(keys.__arrow_c_stream__())
        chunks = []
        held = 0
        for chunk in stream:
            chunks.append(chunk)
            held += len(chunk)
            if streamed and held > READ_AHEAD_KEYS:
                _check_nulls(chunks, start)
                return [StreamRest(chunks, stream, start + held)]
    else:
        chunks = [_core.ArrowChunk.from_capsules(*keys.__arrow_c_array__())]
    _check_nulls(chunks, start)
    return [_chunk_piece(chunk) for chunk in chunks]


def _check_nulls(chunks: List[Any], start: int) -> None:
    """ValueError naming the first null of `chunks` (_core.ArrowChunk), the first of which is at
    position `start` of the batch."""
    for chunk in chunks:
        first = chunk.first_null()
        if first is not None:
            raise null_error(start + first)
        start += len(chunk)


def _chunk_piece(chunk: Any) -> Piece:
    """The piece of a _core.ArrowChunk, whose nulls were checked."""
    if chunk.layout == "integers":
        return _numpy_piece(chunk.integers())
    if chunk.layout == "offsets":
        return BytesPiece(*chunk.offsets_and_data())
    return ArrowBytesPiece(chunk.byte_keys())


def _is_pandas(keys: Any) -> bool:
    """A pandas Series, Index or extension array (numpy would turn nullable integers into
    floats)."""
    return type(keys).__module__.startswith("pandas.") and hasattr(keys, "dtype")


def _import_pyarrow(what: str) -> Any:
    try:
        import pyarrow
    except ImportError:
        raise TypeError(
            f"{what} needs pyarrow to be read without a Python loop; pass a str/bytes/integer "
            "numpy array, or install pyarrow"
        ) from None
    return pyarrow


def _chunk_pieces(pa: Any, chunks: Any) -> List[Piece]:
    """The pieces of Arrow arrays that follow each other in one batch; a null is named by its
    position in the whole batch."""
    pieces = []
    start = 0
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_decode()
        kind = chunk.type
        if pa.types.is_fixed_size_binary(kind) or str(kind) in ("string_view", "binary_view") or (
            isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.uuid"
        ):
            # The core reads these in place (a uuid as its 16 bytes, as Parquet stores it;
            # pyarrow would copy a view array whole to cast it).
            pieces.extend(_capsule_pieces(chunk, start))
        else:
            pieces.append(_arrow_piece(pa, chunk, start))
        start += len(chunk)
    return pieces


def null_error(first: int) -> ValueError:
    """The error for keys with nulls (Arrow nulls, pandas NA / NaN, numpy NA)."""
    return ValueError(
        f"nulls/NA in the keys at position {first}: a key must have a value; drop or fill them "
        "first"
    )


class StreamNullError(ValueError):
    """A null among an Arrow stream's keys past the first READ_AHEAD_KEYS, found once the keys of
    the batches before it were used: ``applied`` keys (positions 0 to applied - 1) are in the
    filter, and ``flags`` holds their answers (a bool array of that length; None for ``insert``),
    so that a caller carries on from ``applied`` instead of repeating them, which would find them
    present. ``position`` is the null's."""

    def __init__(self, position: int, applied: int) -> None:
        super().__init__(
            f"nulls/NA in the keys at position {position}: a key must have a value; drop or fill "
            f"them first. The stream was read as it was used: its first {applied} keys were "
            "applied (their answers are this error's flags)"
        )
        self.position = position
        self.applied = applied
        self.flags: Optional[np.ndarray] = None


def _sequence_pieces(keys: Sequence[Any]) -> List[Piece]:
    """The pieces of a list or tuple: of str or bytes keys, slices of ``chunk_keys`` keys made
    bytes one at a time."""
    # Every key's type is checked first (map runs in C), so that a wrong one is an error before
    # any key is used.
    kinds = set(map(type, keys))
    # Subclasses too: numpy's str_ and bytes_ are str and bytes.
    text = bool(kinds) and all(issubclass(k, str) for k in kinds)
    if text or (kinds and all(issubclass(k, (bytes, bytearray)) for k in kinds)):
        step = _core.chunk_keys
        return [ListSlice(keys, at, min(at + step, len(keys)), text)
                for at in range(0, len(keys), step)]
    return [_sequence_piece(keys, kinds)]


def _sequence_piece(keys: Sequence[Any], kinds: Optional[Set[type]] = None) -> Piece:
    # A list is Python objects already; its types are checked once (map runs in C) so that numpy
    # never turns a mix of ints and strs into strs.
    kinds = set(map(type, keys)) if kinds is None else kinds
    if not kinds:
        return U64Piece(np.zeros(0, dtype=np.uint64))
    # Subclasses too: numpy's str_ and bytes_ are str and bytes.
    if all(issubclass(k, str) for k in kinds):
        return _joined_bytes([str.encode(k, "utf-8") for k in keys])
    if all(issubclass(k, (bytes, bytearray)) for k in kinds):
        return _joined_bytes(list(keys))
    if all(issubclass(k, (bytes, bytearray, memoryview)) for k in kinds):
        return _joined_bytes([scalar_key(k) for k in keys])  # checks each view's item format
    if _all_ints(kinds):
        try:
            return _numpy_piece(np.asarray(keys))
        except (OverflowError, TypeError):
            return _int_patterns(keys)
    names = ", ".join(sorted(k.__name__ for k in kinds))
    raise TypeError(f"keys must all be int, or all str, or all bytes; got {names}")


def _all_ints(kinds: set) -> bool:
    return all(
        issubclass(k, (int, np.integer)) and not issubclass(k, (bool, np.bool_)) for k in kinds
    )


def _int_patterns(keys: Any) -> U64Piece:
    """Each int's 64-bit pattern, one by one: for ints numpy or Arrow cannot hold in one integer
    type (beyond int64 beside negative ones)."""
    return U64Piece(np.array([scalar_key(k) for k in keys], dtype=np.uint64))


def _joined_bytes(keys: Sequence[Any]) -> BytesPiece:
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)), out=offsets[1:])
    return BytesPiece(offsets, np.frombuffer(b"".join(keys), dtype=np.uint8))


def _numpy_piece(array: np.ndarray) -> Piece:
    if array.ndim != 1:
        raise ValueError(f"keys must be a 1-D array, not {array.ndim}-D of shape {array.shape}")
    if len(array) == 0:
        return U64Piece(np.zeros(0, dtype=np.uint64))
    kind = array.dtype.kind
    if kind in "iu":
        if array.dtype.itemsize != 8:
            # Widening keeps each key's value: a signed key sign-extends, as its int64 would.
            array = array.astype(np.int64 if kind == "i" else np.uint64)
        elif not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        if not (array.flags.c_contiguous and array.flags.aligned):
            array = np.ascontiguousarray(array)
            if not array.flags.aligned:
                array = array.copy()
        return U64Piece(array.view(np.uint64))
    if kind == "S":
        return _fixed_width_bytes(array)
    if kind == "U":
        return _fixed_width_bytes(np.char.encode(array, "utf-8"))
    if kind == "O":
        return _object_piece(array)
    if kind == "T":  # numpy 2's variable-width StringDType
        pa = _pyarrow()
        if pa is None:
            return _sequence_piece(array.tolist())
        return _arrow_piece(pa, pa.array(array))
    raise TypeError(
        f"keys must be integers, str or bytes; got an array of {array.dtype} "
        "(convert floats or bools explicitly)"
    )


def _fixed_width_bytes(array: np.ndarray) -> BytesPiece:
    # numpy's fixed-width bytes end at the first trailing NUL; the key is what Python sees.
    width = array.dtype.itemsize
    lengths = np.char.str_len(array).astype(np.int64)
    offsets = np.zeros(len(array) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if width == 0 or len(array) == 0:
        return BytesPiece(offsets, np.zeros(0, dtype=np.uint8))
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(len(array), width)
    keep = np.arange(width) < lengths[:, None]
    return BytesPiece(offsets, raw[keep])


def _object_piece(array: np.ndarray) -> Piece:
    pa = _pyarrow() or _import_pyarrow("an object array of keys")
    try:
        # from_pandas: NaN, like None and pandas' NA, is a missing key (a null), not a float.
        converted = pa.array(array, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
        # Arrow reads Python ints as int64.
        if _all_ints(set(map(type, array))):
            return _int_patterns(array)
        raise TypeError(f"keys must all be int, str or bytes: {error}") from None
    return _arrow_piece(pa, converted)


def _arrow_piece(pa: Any, array: Any, start: int = 0) -> Piece:
    """The piece of one Arrow array, whose first key is key `start` of the batch."""
    kind = array.type
    if array.null_count:
        first = int(np.flatnonzero(np.asarray(array.is_null()))[0])
        raise null_error(start + first)
    if pa.types.is_integer(kind):
        if kind.bit_width != 64:
            signed = pa.types.is_signed_integer(kind)
            return _numpy_piece(array.to_numpy().astype(np.int64 if signed else np.uint64))
        values = array.buffers()[1]
        keys = np.frombuffer(values, dtype=np.uint64, count=len(array), offset=array.offset * 8)
        return _numpy_piece(keys)
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return _arrow_bytes(array, np.int32)
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return _arrow_bytes(array, np.int64)
    raise TypeError(
        f"keys must be an Arrow integer, string or binary array (or fixed-size binary, uuid), "
        f"not {kind}"
    )


def _arrow_bytes(array: Any, offset_type: Any) -> BytesPiece:
    _, offsets_buffer, data_buffer = array.buffers()[:3]
    if offsets_buffer is None:  # an empty array may carry no offsets
        return BytesPiece(np.zeros(1, dtype=offset_type), np.zeros(0, dtype=np.uint8))
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    data = (
        np.zeros(0, dtype=np.uint8)
        if data_buffer is None
        else np.frombuffer(data_buffer, dtype=np.uint8)
    )
    return BytesPiece(offsets, data)


def scalar_key(key: Any) -> Union[int, bytes]:
    """One key: an int as its 64-bit pattern, or str / bytes as bytes."""
    if isinstance(key, (bool, np.bool_)):
        raise TypeError("a key must be an int, str or bytes, not bool")
    if isinstance(key, (int, np.integer)):
        value = int(key)
        if not -(1 << 63) <= value <= MASK64:
            raise ValueError(f"integer key {value} does not fit in 64 bits")
        return value & MASK64
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    if isinstance(key, memoryview):
        if key.format not in _BYTE_FORMATS:
            raise TypeError(
                f"a memoryview of {key.format!r} items is a batch of integer keys, not one "
                "key: use insert() / contains()"
            )
        return key.tobytes()
    raise TypeError(f"a key must be an int, str or bytes, not {type(key).__name__}")


def bytes_piece(key: bytes) -> BytesPiece:
    return BytesPiece(
        np.array([0, len(key)], dtype=np.int64), np.frombuffer(key, dtype=np.uint8)
    )


def event_times(times: Any, count: int, name: str = "times") -> Optional[np.ndarray]:
    """Event times (or a window shard's clocks), `name` in messages, as a contiguous int64 array of
    `count` values."""
    if times is None:
        return None
    pa = _pyarrow()
    if pa is not None and isinstance(times, (pa.Array, pa.ChunkedArray)):
        if times.null_count:
            first = int(np.flatnonzero(np.asarray(times.is_null()))[0])
            raise ValueError(f"{name}[{first}] is null: every record needs a time")
    array = _times_array(times)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, not {array.ndim}-D")
    if len(array) != count:
        raise ValueError(f"{len(array)} {name} for {count} keys")
    return _int64_times(array, name, lambda i: f"{name}[{i}]")


def event_time(time: Any) -> int:
    """One time, read as event_times() reads each of its values."""
    if np.ndim(time) != 0:
        raise TypeError(f"time must be one integer or datetime64, not an array of {np.shape(time)}")
    return int(_int64_times(_times_array([time]), "time", lambda i: "time")[0])


def _times_array(times: Any) -> np.ndarray:
    if isinstance(times, (list, tuple)) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in times
    ):
        # Python ints stay exact as objects; numpy would make floats of ints past 2**63 beside
        # negative ones.
        return np.array(times, dtype=object)
    return np.asarray(times)


def _int64_times(array: np.ndarray, name: str, where: Any) -> np.ndarray:
    """A 1-D array of times as int64 (datetime64 in seconds), the window's clock type. An integer
    outside int64 or a NaT would otherwise wrap around to another time: ValueError names the first,
    `where(i)` its position."""
    kind = array.dtype.kind
    if kind == "O":
        for i, value in enumerate(array):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(
                    f"{name}: expected integers or datetime64, not {type(value).__name__}"
                )
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValueError(f"{where(i)} = {value} is outside int64, the clock's range")
        return array.astype(np.int64)
    if kind == "M":
        missing = np.flatnonzero(np.isnat(array))
        if len(missing):
            raise ValueError(f"{where(missing[0])} is NaT: every record needs a time")
        return np.ascontiguousarray(array.astype("datetime64[s]").view(np.int64))
    if kind == "u":
        past = np.flatnonzero(array > INT64_MAX)
        if len(past):
            raise ValueError(
                f"{where(past[0])} = {int(array[past[0]])} is outside int64, the clock's range"
            )
    elif kind != "i":
        raise TypeError(f"{name}: expected integers or datetime64, not {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)
